"""``hpkctl selftest``'s "exec and logs" row without a cluster, and the exec client's reading of the
exit code (the row with a running cluster is proven end to end in
tests/kubelet/test_kubelet_controllers_slurm.py::test_selftest_runs_exec_and_logs_through_the_running_cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from hpkctl.controlplane.selftestexec import exec_and_logs
from hpkctl.jobs import Slurm
from hpkctl.kube.podexec import exit_code
from hpkctl.local.selftest import SKIP
from hpkctl.sites import load_site
from hpkctl.sites.schema import SiteProfile


class NoJobs:
    """Slurm with no job of the user: what ``squeue --me`` says once the cluster's jobs ended."""

    def user_jobs(self) -> list[Any]:
        return []


def _profile(tmp_path: Path) -> SiteProfile:
    p = load_site("ci")
    return p.model_copy(update={"controlplane": p.controlplane.model_copy(update={"state_dir": str(tmp_path / "cp")})})


def test_the_row_skips_when_no_cluster_of_the_profile_runs(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    for endpoint in (False, True):  # never started; started once, its endpoint left behind after it stopped
        if endpoint:
            (tmp_path / "cp").mkdir()
            (tmp_path / "cp" / "endpoint").write_text(json.dumps({"server": "https://127.0.0.1:9", "slurm_job_id": "7"}))
        res = exec_and_logs(profile, cast(Slurm, NoJobs()), site="ci", python="python3", work_dir=tmp_path / "st")
        assert (res.case, res.result, res.detail) == ("exec and logs", SKIP,
                                                      "no cluster of this profile runs (hpkctl start --site ci)")
        assert not (tmp_path / "st").exists()


def test_the_exit_code_comes_from_the_error_channels_status() -> None:
    assert exit_code({"status": "Success"}) == (0, "")
    assert exit_code({"status": "Failure", "reason": "NonZeroExitCode", "message": "command terminated with exit code 3",
                      "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}) == (3, "")
    assert exit_code({"status": "Failure", "message": "container c is not running"}) == (-1, "container c is not running")

"""``hpkctl status`` without a name lists the runs that wait or run and those that ended within the
hour; ``--all`` every run; a name its run, however old (hpkctl.local.listing)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from hpkctl.cli import main
from hpkctl.local.listing import RECENT_SECONDS, ended_at, is_listed, print_runs
from hpkctl.pod import paths as f
from hpkctl.pod.status import ContainerStatus, PodStatus
from hpkctl.provider.runrecords import RunRecord, create_record
from hpkctl.provider.workloads import ArrayStatus, IndexStatus
from hpkctl.sites.schema import SiteProfile

NOW = 1_800_000_000.0
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}}


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(phase: str, finished: float | None = None) -> PodStatus:
    c = ContainerStatus(name="c", init=False, state="terminated" if finished else "running",
                        finished_at=_stamp(finished) if finished else None)
    return PodStatus(phase, "", "", None, None, None, None, containers=[c])


def test_a_run_that_waits_or_runs_is_listed_however_old() -> None:
    assert is_listed(_pod("Running"), submitted=0.0, now=NOW)
    assert is_listed(_pod("Pending"), submitted=0.0, now=NOW)
    assert is_listed(PodStatus("Unknown", "RecordMissing", "", None, None, None, None), submitted=0.0, now=NOW)


def test_a_finished_run_is_listed_for_an_hour_after_its_last_container_ended() -> None:
    assert is_listed(_pod("Succeeded", NOW - RECENT_SECONDS + 60), submitted=0.0, now=NOW)
    assert not is_listed(_pod("Failed", NOW - RECENT_SECONDS - 60), submitted=0.0, now=NOW)
    # a run that ended before a container ran (refused, cancelled in the queue): its submission time
    never_ran = PodStatus("Failed", "Cancelled", "", None, None, None, None)
    assert ended_at(never_ran, NOW - 10) == NOW - 10
    assert is_listed(never_ran, submitted=NOW - 10, now=NOW)
    assert not is_listed(never_ran, submitted=NOW - 2 * RECENT_SECONDS, now=NOW)


def test_a_finished_workload_is_listed_while_any_of_its_pods_ended_within_the_hour() -> None:
    def job(*ends: float) -> ArrayStatus:
        return ArrayStatus("Job", "Complete", "", "", 0, len(ends), 0,
                           [IndexStatus(i, f"j-{i}", f"7_{i}", 1, "Succeeded", _pod("Succeeded", e))
                            for i, e in enumerate(ends)])

    assert is_listed(job(NOW - 3 * RECENT_SECONDS, NOW - 60), submitted=0.0, now=NOW)
    assert not is_listed(job(NOW - 3 * RECENT_SECONDS, NOW - 2 * RECENT_SECONDS), submitted=0.0, now=NOW)


def test_the_table_says_how_many_it_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    print_runs([], namespace="default", left_out=2)
    assert capsys.readouterr().out == (
        "no runs that wait, run or just ended in namespace default\n"
        "(2 finished runs in namespace default that ended over an hour ago not shown: "
        "'hpkctl status --all' lists them, 'hpkctl delete NAME' forgets one)\n")
    print_runs([], namespace=None, left_out=0)
    assert capsys.readouterr().out == "no runs\n"


def _run(profile: SiteProfile, tmp: Path, name: str, *, job: str, ended: float | None) -> None:
    """A run's record and pod directory: running (``ended`` None) or ended then with exit code 0."""
    d = tmp / "pods" / name
    for sub in ("job", "status", "logs"):
        (d / sub).mkdir(parents=True)
    (d / "job" / "pod.json").write_text(json.dumps(POD | {"metadata": {"name": name, "namespace": "default"}}))
    (d / "status" / f.JOB_STARTED).write_text(_stamp(time.time() - 3 * RECENT_SECONDS) + "\n")
    (d / "status" / f"c.{f.STARTED}").write_text(_stamp(time.time() - 3 * RECENT_SECONDS) + "\n")
    if ended is not None:
        (d / "status" / f"c.{f.EXITCODE}").write_text("0\n")
        (d / "status" / f"c.{f.FINISHED}").write_text(_stamp(ended) + "\n")
        (d / "status" / f.POD_DONE).write_text("0\n")
    create_record(profile, RunRecord(name=name, namespace="default", uid=f"uid-{name}", job_id=job,
                                     pod_dir=str(d), site="t", submitted=time.time() - 3 * RECENT_SECONDS))


def test_status_lists_live_and_recent_runs_all_lists_every_one_a_name_its_own(
        fp: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile_file = tmp_path / "t.toml"
    profile_file.write_text(f'[slurm]\nbin_dir = "/fake/bin"\nuse_sacct = "no"\n'
                            f'[pods]\nstate_dir = "{tmp_path / "state"}"\n')
    profile = SiteProfile.model_validate({"name": "t", "slurm": {"bin_dir": "/fake/bin", "use_sacct": "no"},
                                         "pods": {"state_dir": str(tmp_path / "state")}})
    _run(profile, tmp_path, "live", job="11", ended=None)
    _run(profile, tmp_path, "recent", job="12", ended=time.time() - 600)
    _run(profile, tmp_path, "old", job="13", ended=time.time() - 2 * RECENT_SECONDS)
    fp.keep_last_process(True)
    fp.register(["/fake/bin/squeue", fp.any()], stdout="11|RUNNING|c1|2026-11-26T10:00:00|N/A|None\n")
    fp.register(["/fake/bin/scontrol", fp.any()], stdout="")

    def status(*args: str) -> list[str]:
        assert main(["status", "--site", str(profile_file), *args]) == 0
        return capsys.readouterr().out.splitlines()

    out = status()
    assert [line.split()[0] for line in out[1:-1]] == ["live", "recent"], out
    assert out[-1].startswith("(1 finished run in namespace default that ended over an hour ago not shown"), out
    assert [line.split()[0] for line in status("--all")[1:]] == ["live", "old", "recent"]
    assert status("old")[1].split()[:4] == ["old", "0/1", "13", "Succeeded"]
    assert [r["name"] for r in json.loads("\n".join(status("--json")))] == ["live", "recent"]
    assert [r["name"] for r in json.loads("\n".join(status("-A", "--all", "--json")))] == ["live", "old", "recent"]

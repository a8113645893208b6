"""``hpkctl status`` of many runs: one odd record shows its own problem, the others their status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hpkctl.jobs import JobInfo, SlurmError
from hpkctl.provider.runstatus import STATUS_UNREADABLE, run_statuses
from hpkctl.provider.runrecords import RunRecord

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}}


class OddSlurm:
    """squeue fails whenever job ``odd`` is among the ids asked about (as a real Slurm error would)."""

    def __init__(self, odd: str) -> None:
        self.odd = odd
        self.calls: list[list[str]] = []

    def query(self, ids: list[str]) -> dict[str, JobInfo]:
        self.calls.append(list(ids))
        if self.odd in ids:
            raise SlurmError("squeue failed: exit status 1", hint="run it by hand to see more")
        return {j: JobInfo(job_id=j, state="RUNNING") for j in ids}

    def finals(self, ids: list[str]) -> dict[str, JobInfo | None]:
        return {}


def _record(tmp_path: Path, name: str, job_id: str) -> RunRecord:
    pod_dir = tmp_path / name
    for sub in ("job", "status", "logs"):
        (pod_dir / sub).mkdir(parents=True)
    (pod_dir / "job" / "pod.json").write_text(json.dumps(POD))
    (pod_dir / "status" / "job.started").write_text("2026-01-01T00:00:00Z\n")
    return RunRecord(name=name, namespace="default", uid=f"uid-{name}", job_id=job_id, pod_dir=str(pod_dir),
                     site="t", submitted=0, state="submitted")


def test_one_odd_record_shows_its_problem_and_the_others_their_status(tmp_path: Path) -> None:
    records = [_record(tmp_path, "a", "11"), _record(tmp_path, "b", "12"), _record(tmp_path, "c", "13")]
    slurm: Any = OddSlurm("12")
    got = run_statuses(slurm, records, {})
    assert [s.reason == STATUS_UNREADABLE for s in got] == [False, True, False]
    assert got[1].phase == "Unknown" and got[0].job is not None and got[0].job.state == "RUNNING"
    assert "squeue failed" in got[1].message and "hpkctl delete b -n default" in got[1].message
    assert slurm.calls[0] == ["11", "12", "13"]  # one squeue for all first


def test_one_squeue_for_all_when_nothing_is_odd(tmp_path: Path) -> None:
    records = [_record(tmp_path, "a", "11"), _record(tmp_path, "b", "12")]
    slurm: Any = OddSlurm("99")
    got = run_statuses(slurm, records, {})
    assert [s.job.state if s.job else None for s in got] == ["RUNNING", "RUNNING"]
    assert slurm.calls == [["11", "12"]]


def test_slurm_unreachable_is_raised_not_asked_per_record(tmp_path: Path) -> None:
    import pytest

    from hpkctl.jobs import SlurmUnavailable

    class Down(OddSlurm):
        def query(self, ids: list[str]) -> dict[str, JobInfo]:
            self.calls.append(list(ids))
            raise SlurmUnavailable("squeue cannot reach Slurm: connection refused")

    slurm: Any = Down("x")
    with pytest.raises(SlurmUnavailable):
        run_statuses(slurm, [_record(tmp_path, "a", "11"), _record(tmp_path, "b", "12")], {})
    assert len(slurm.calls) == 1


def test_status_of_three_runs_is_one_squeue(fp, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``hpkctl status -A`` with N runs asks Slurm once, not N times (issue 21.1): through the provider's
    ``pod_statuses`` (as cmd_status calls it), the real ``Slurm`` faked by pytest-subprocess, three pods
    and a pilot pod (a step: nothing to ask) cost exactly one squeue and no sacct/scontrol (no job left
    the queue)."""
    from dataclasses import replace

    from hpkctl.jobs import Slurm
    from hpkctl.provider import PodRef
    from hpkctl.provider.pilotpod import run_provider
    from hpkctl.sites.schema import SiteProfile

    profile = SiteProfile.model_validate({"name": "t", "slurm": {"bin_dir": "/fake/bin", "use_sacct": "no"},
                                         "pods": {"state_dir": str(tmp_path / "state")}})
    records = [_record(tmp_path, n, j) for n, j in (("a", "11"), ("b", "12"), ("c", "13"))]
    records.append(replace(_record(tmp_path, "d", ""), allocation="77"))
    fp.register(["/fake/bin/squeue", fp.any()],
                stdout="".join(f"{j}|RUNNING|c1|2026-11-26T10:00:00|N/A|None\n" for j in ("11", "12", "13")))
    provider = run_provider(Slurm(profile.slurm), profile, pilot=False)
    for r in records:
        provider.know(r)
    got = provider.pod_statuses([PodRef(r.uid, r.namespace, r.name) for r in records])
    assert [got[r.uid].phase for r in records] == ["Pending"] * 4, got  # started jobs, no container started yet
    assert [got[r.uid].job.state if got[r.uid].job else None for r in records] == ["RUNNING"] * 3 + [None]
    assert fp.call_count(["/fake/bin/squeue", fp.any()]) == 1
    assert fp.call_count(["/fake/bin/scontrol", fp.any()]) == 0 and fp.call_count(["/fake/bin/sacct", fp.any()]) == 0

"""A workload's logs while ``hpkctl run`` follows it: prefixed as ``kubectl logs -f --prefix``, read
incrementally, and only for pods that run (the file reads stay those of the running elements)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs import JobInfo
from hpkctl.local.arrayfollow import ArrayLogs
from hpkctl.local.arrays import ArrayStatus, IndexStatus, Member, WorkloadFile
from hpkctl.pod.status import PodStatus

POD = {"spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "work"}]}}


def _info(tmp_path: Path, n: int) -> WorkloadFile:
    pods = []
    for i in range(n):
        d = tmp_path / f"p{i}"
        (d / "job").mkdir(parents=True)
        (d / "logs").mkdir()
        (d / "job" / "pod.json").write_text(json.dumps(POD))
        pods.append(Member(name=f"w-{i}", uid=f"u{i}", dir=str(d)))
    return WorkloadFile(kind="Job", name="w", namespace="default", count=n, indexed=True, retries=True, pods=pods)


def _status(states: list[tuple[str | None, str | None]]) -> ArrayStatus:
    """Per index (when the pod started, its element's Slurm state)."""
    indexes = [IndexStatus(index=i, name=f"w-{i}", job_id=f"9_{i}", attempts=1, result=None,
                           pod=PodStatus("Running" if started else "Pending", "", "", None, None, None, started, [],
                                         JobInfo(job_id=f"9_{i}", state=state) if state else None))
               for i, (started, state) in enumerate(states)]
    return ArrayStatus(kind="Job", phase="Running", reason="", message="", active=1, succeeded=0, failed=0,
                       indexes=indexes)


def _rec(tmp_path: Path) -> Any:
    from hpkctl.provider.runrecords import RunRecord

    return RunRecord(name="w", namespace="default", uid="u", job_id="9", pod_dir=str(tmp_path), site="ci",
                     submitted=0.0, kind="Job")


def _provider(tmp_path: Path) -> Any:
    """hpkctl run's provider (its logs are the pods' files; no Slurm command is run here)."""
    from hpkctl.provider.pilotpod import run_provider
    from hpkctl.sites.schema import SiteProfile
    from tests.support.kubelet_fakes import FakeSlurm

    profile = SiteProfile.model_validate({"name": "t", "pods": {"state_dir": str(tmp_path / "state")}})
    return run_provider(FakeSlurm(), profile, pilot=False)  # type: ignore[arg-type]


def test_running_pods_logs_are_prefixed_read_once_and_pending_pods_are_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = _info(tmp_path, 3)
    out = io.StringIO()
    logs = ArrayLogs(_provider(tmp_path), _rec(tmp_path), info, out)
    log0 = tmp_path / "p0" / "logs" / "work.log"
    (tmp_path / "p0" / "logs" / "init.log").write_text("prepared\n")
    log0.write_text("first\npart")
    (tmp_path / "p2" / "logs" / "work.log").write_text("not started: never read\n")
    opened: list[str] = []
    real_open = open

    def spy(path, *a, **kw):  # type: ignore[no-untyped-def]
        opened.append(str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr("builtins.open", spy)
    running = _status([("2026-01-01T00:00:00Z", "RUNNING"), (None, "PENDING"), (None, "PENDING")])
    logs.pump(running)
    assert out.getvalue() == "[pod/w-0/init] prepared\n[pod/w-0/work] first\n"
    assert all("/p0/" in p for p in opened), opened  # the pending pods' directories are not touched
    with real_open(log0, "a") as fh:
        fh.write("ial\nsecond\n")
    logs.pump(running)
    assert out.getvalue().splitlines()[2:] == ["[pod/w-0/work] partial", "[pod/w-0/work] second"]
    ended = _status([("2026-01-01T00:00:00Z", "COMPLETED"), (None, "PENDING"), (None, "PENDING")])
    logs.pump(ended)  # a last read, then never again
    opened.clear()
    logs.pump(ended)
    assert opened == []


def test_a_log_moved_away_by_a_restart_is_read_to_its_end_first(tmp_path: Path) -> None:
    from hpkctl.local.follow import LogTail

    log = tmp_path / "c.log"
    log.write_text("one\ntw")
    out = io.StringIO()
    tail = LogTail(lambda n: tmp_path / f"{n}.log", ["c"], out, prefixed=set())
    tail.pump()
    assert out.getvalue() == "one\n"
    with open(log, "a") as fh:
        fh.write("o\nlast words")  # written just before the restart, not yet read
    log.rename(tmp_path / "c.previous.log")
    log.write_text("second run\n\nend")
    tail.pump()
    assert out.getvalue() == "one\ntwo\nlast words\nsecond run\n\n"
    tail.pump(final=True)
    assert out.getvalue().endswith("second run\n\nend\n") and tail.open == {}


def test_following_asks_slurm_once_per_slurm_poll_and_settles_quickly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget of one squeue per ``slurm_poll`` holds for a workload too; once the files say it
    finished, Slurm is asked sooner for its elements' end, so ``run`` returns within seconds."""
    from hpkctl.local import arrayfollow

    now = [0.0]
    asks: list[float] = []
    finished_at, ended_at = 25.0, 26.0  # the files say Complete; Slurm then reports the element ended

    def status(fresh: bool) -> ArrayStatus:
        if fresh:  # the provider asks Slurm now (one squeue for every element)
            asks.append(now[0])
            job[0] = JobInfo(job_id="9_0", state="COMPLETED" if now[0] >= ended_at else "RUNNING")
        st = _status([("2026-01-01T00:00:00Z", job[0].state)])
        if now[0] >= finished_at:
            st.phase, st.indexes[0].result = "Complete", "Succeeded"
        return st

    job = [JobInfo(job_id="9_0", state="PENDING")]
    info = _info(tmp_path, 1)
    monkeypatch.setattr(arrayfollow.WorkloadFile, "read", staticmethod(lambda _d: info))
    rec = _rec(tmp_path)

    class Provider:  # the provider's answer; Slurm's budget within it is tests/local/test_runner_units.py's
        def pod_statuses(self, refs: Any, *, fresh: bool = True, now: float | None = None) -> dict[str, ArrayStatus]:
            return {"u": status(fresh)}

    def sleep(seconds: float) -> None:
        now[0] += seconds

    st = arrayfollow.follow_array(Provider(), rec, out=io.StringIO(), slurm_poll=10.0,  # type: ignore[arg-type]
                                  sleep=sleep, clock=lambda: now[0])
    assert st.phase == "Complete"
    before = [t for t in asks if t < finished_at]
    # one squeue per slurm_poll while it runs
    assert len(before) == 3 and all(b - a >= 10.0 for a, b in zip(before, before[1:])), asks
    assert ended_at <= now[0] <= ended_at + 5, (now[0], asks)  # then a few quick asks, not another 10 s

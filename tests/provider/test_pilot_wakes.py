"""The pilot provider's wake-ups of pods waiting for room (found in review): the pod that becomes the longest
waiting when the one before it is placed is woken (its next create asks each WAIT_FOR_ROOM, not WAIT_BEHIND);
a freed room wakes a waiting pod it fits, not a bigger one at the head; a pod's room freed once wakes once."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs.alloc import AllocationInfo, NodeShare
from hpkctl.pilot.plan import Held
from hpkctl.provider import Outcome, PodInputs, PodRef, Watched, pilotpod
from tests.provider.test_pilot_dead_allocation import ALLOC, Slurm, _provider
from tests.support.kubelet_fakes import _pod
from tests.support.waiting import wait_for


def test_the_pod_that_becomes_the_longest_waiting_is_woken_to_ask_each_second(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    states = {ALLOC: "PENDING", "42": "PENDING"}

    class Started(Slurm):
        def query(self, ids: Any) -> Any:
            from hpkctl.jobs import JobInfo
            self.jobs = {j: JobInfo(j, s) for j, s in states.items()}
            return super(Slurm, self).query(ids)

        def allocation(self, job_id: str) -> AllocationInfo:
            return AllocationInfo(job_id, states[job_id], {"vm": NodeShare(1, 2048)}, end=time.time() + 3600)

    started = Started()
    provider.slurm = provider.pool.slurm = started
    provider.pool._helds = {ALLOC: Held(ALLOC, "PENDING"), "42": Held("42", "PENDING")}
    woken: list[str] = []
    b, c = _pod("b", "u-2"), _pod("c", "u-3")
    r = [provider.create(p, PodInputs(ready=woken.append)) for p in (b, c)]
    assert [(x.outcome, x.retry_after) for x in r] == [(Outcome.RETRY, pilotpod.WAIT_FOR_ROOM),
                                                       (Outcome.RETRY, pilotpod.WAIT_BEHIND)]
    states[ALLOC] = "RUNNING"
    provider.pool.refresh(max_age=0)
    assert provider.create(b, PodInputs(ready=woken.append)).outcome is Outcome.SUBMITTED
    assert woken == ["u-3"], "c waits longest now: its retry must not stay WAIT_BEHIND (10 s) away"
    out = provider.create(c, PodInputs(ready=woken.append))  # the woken create: no room yet, asks each second
    assert (out.outcome, out.retry_after) == (Outcome.RETRY, pilotpod.WAIT_FOR_ROOM)
    states["42"] = "RUNNING"  # the second allocation starts: room for c at its next create
    provider.pool.refresh(max_age=0)
    assert provider.create(c, PodInputs(ready=woken.append)).outcome is Outcome.SUBMITTED


def _sized(name: str, uid: str, cpu: str) -> dict[str, Any]:
    p = _pod(name, uid)
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "100Mi"},
                                               "limits": {"cpu": cpu, "memory": "100Mi"}}
    return p


def test_a_freed_room_wakes_a_head_that_does_not_fit_and_not_the_pod_that_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider, slurm, steps = _provider(tmp_path, monkeypatch)

    class Two(Slurm):
        def allocation(self, job_id: str) -> AllocationInfo:
            return AllocationInfo(job_id, self.state, {"vm": NodeShare(2, 4096)}, end=time.time() + 3600)

    two = Two()
    provider.slurm = provider.pool.slurm = two
    provider.pool._helds = {ALLOC: Held(ALLOC, "PENDING")}
    provider.pool.refresh(max_age=0)
    a1, a2 = _sized("a1", "u-1", "1"), _sized("a2", "u-2", "1")
    assert provider.create(a1, PodInputs()).outcome is Outcome.SUBMITTED
    assert provider.create(a2, PodInputs()).outcome is Outcome.SUBMITTED
    woken: list[str] = []
    big, small = _sized("big", "u-3", "2"), _sized("small", "u-4", "1")
    r = [provider.create(p, PodInputs(ready=woken.append)) for p in (big, small)]
    (tmp_path / "pods" / "u-1" / "status").mkdir(exist_ok=True)
    (tmp_path / "pods" / "u-1" / "status" / "pod.done").write_text("0\n")
    provider.statuses([Watched(PodRef.of(a1), a1, ALLOC), Watched(PodRef.of(a2), a2, ALLOC)])
    out = provider.create(big, PodInputs(ready=woken.append))
    for s in steps:
        s.ended.set()
    assert "u-4" in woken, "one CPU free, small fits, but only big (which does not) was woken; small asks in 10 s"


def test_deleting_a_pod_whose_room_a_round_freed_wakes_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    a = _pod("a", "u-1")
    assert provider.create(a, PodInputs()).outcome is Outcome.SUBMITTED
    woken: list[str] = []
    assert provider.create(_pod("b", "u-2"), PodInputs(ready=woken.append)).outcome is Outcome.RETRY
    status = tmp_path / "pods" / "u-1" / "status"
    status.mkdir(exist_ok=True)
    (status / "job.id").write_text(f"{ALLOC}.0\n")
    (status / "pod.done").write_text("0\n")
    provider.statuses([Watched(PodRef.of(a), a, ALLOC)])
    steps[0].ended.set()
    def reaped() -> bool:
        with provider._plock:
            return "u-1" not in provider._book.pods

    wait_for("the step's thread to reap its srun", reaped, timeout=30, every=0.01)
    provider.delete(PodRef.of(a), grace=0, pod=a)
    assert woken == ["u-2"], "the delete of a pod whose room was freed already woke the waiting pod a second time"


def test_a_wake_asks_whether_pods_fit_only_until_enough_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pool.fits is a placement: a backlog's wake asked it of all WAKE_SCAN waiting pods to wake one
    (bench/run pilot: ~35 placements per pod placed). Now the first ``n`` that fit are woken and no more asked."""
    provider, _, _ = _provider(tmp_path, monkeypatch)
    woken: list[str] = []
    waiting = [(f"u-{i}", object(), woken.append) for i in range(pilotpod.WAKE_SCAN)]
    monkeypatch.setattr(provider._book, "first_waiting", lambda n: waiting[:n])
    asked: list[object] = []

    def fits(need: object) -> bool:
        asked.append(need)
        return need is not waiting[0][1]  # the head does not fit; every pod behind it does

    monkeypatch.setattr(provider.pool, "fits", fits)
    provider._wake(2)
    assert woken == ["u-1", "u-2"] and len(asked) == 3

"""A pilot allocation that ends while every allocation runs (the books then asked about once per
[kubelet] slurm_poll only) takes no new pod once the kubelet has seen it end: not after its status
round's squeue saw it gone, not after a step's srun in it ended without its pod's last word. Before,
the pool's books kept it up to slurm_poll, each pod woken into it failed, and a backlog drained into it.

The pool is the real :class:`~hpkctl.pilot.pool.Pool` on a fake Slurm whose answers the test sets:
its books ask Slurm, or not, as they would on a cluster."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs import JobInfo
from hpkctl.jobs.alloc import AllocationInfo, NodeShare
from hpkctl.pilot.plan import Held
from hpkctl.provider import Outcome, PodInputs, PodRef, Watched
from hpkctl.provider import pilotpod
from hpkctl.provider.records import Records
from hpkctl.sites import load_site
from tests.support.kubelet_fakes import FakeSlurm, _pod

ALLOC = "41"


class Slurm(FakeSlurm):
    """Allocation 41, one CPU on node vm, running until the test ends it; a requested one is 42."""

    def __init__(self) -> None:
        super().__init__()
        self.state = "RUNNING"
        self.held = 0  # allocations requested (sbatch of the holder)

    def query(self, ids: Iterable[str]) -> dict[str, JobInfo]:
        self.jobs = {ALLOC: JobInfo(ALLOC, self.state)}
        return super().query(ids)

    def allocation(self, job_id: str) -> AllocationInfo:
        return AllocationInfo(job_id, self.state, {"vm": NodeShare(1, 2048)}, end=time.time() + 3600)

    def steps(self) -> list[Any]:
        return []

    def hold(self, *a: Any, **kw: Any) -> str:
        self.held += 1
        return "42"


class Step:
    """An srun that runs until the test ends it."""

    def __init__(self) -> None:
        self.ended = threading.Event()

    def wait_changes(self, changed: Callable[[], None]) -> int:
        self.ended.wait()
        return 1

    def poll(self) -> int | None:
        return 1 if self.ended.is_set() else None


def _provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Slurm, list[Step]]:
    """A pilot provider holding allocation 41 (running, its node known: the books settled), and the
    steps it starts."""
    from hpkctl.provider import pilotpod

    profile = load_site("ci")
    profile = profile.model_copy(update={
        "pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)}),
        "pilot": profile.pilot.model_copy(update={"max_allocations": 1})})
    slurm = Slurm()
    provider = pilotpod.PilotPodProvider(slurm=slurm, profile=profile, records=Records(tmp_path / "kubelet"),  # type: ignore[arg-type]
                                         node="n", state_dir=tmp_path)
    provider.pool._helds[ALLOC] = Held(ALLOC, "PENDING")  # requested earlier
    provider.pool.refresh()  # it runs: its node's share from scontrol
    assert provider.pool.settled()
    steps: list[Step] = []
    monkeypatch.setattr(pilotpod, "start_pod_step", lambda *a, **k: steps.append(Step()) or steps[-1])
    return provider, slurm, steps


def test_an_allocation_a_status_round_saw_end_gets_no_new_pod(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    a = _pod("a", "u-1")
    assert provider.create(a, PodInputs()).outcome is Outcome.SUBMITTED
    slurm.state = "CANCELLED"  # scancel of the allocation; its step's srun has not ended yet
    asked = len(slurm.queries)
    provider.statuses([Watched(PodRef.of(a), a, ALLOC)])
    assert len(slurm.queries) == asked + 1  # the round's squeue, the pool's books younger than slurm_poll
    assert provider.pool.helds() == []
    assert provider.create(_pod("b", "u-2"), PodInputs()).outcome is Outcome.RETRY
    assert len(steps) == 1  # no step started in the dead allocation
    assert slurm.held == 1  # one requested in its place (max_allocations = 1)
    steps[0].ended.set()


@pytest.mark.parametrize("termed", [False, True])
def test_a_pod_woken_when_a_step_dies_with_its_allocation_is_not_placed_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, termed: bool) -> None:
    """The step's srun ends with its allocation, before the pod's script wrote pod.done (killed), or
    after it did (Slurm's TERM: the script ends the pod as for a time limit, with pod.terminating)."""
    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    assert provider.create(_pod("a", "u-1"), PodInputs()).outcome is Outcome.SUBMITTED
    woken = threading.Event()
    b = _pod("b", "u-2")
    assert provider.create(b, PodInputs(ready=lambda uid: woken.set())).outcome is Outcome.RETRY  # full
    slurm.state = "CANCELLED" if termed else "NODE_FAIL"
    if termed:
        (tmp_path / "pods" / "u-1" / "status").mkdir(exist_ok=True)  # the pod's script makes it
        for name in ("pod.terminating", "pod.done"):
            (tmp_path / "pods" / "u-1" / "status" / name).write_text("143\n")
    steps[0].ended.set()
    assert woken.wait(30), "the waiting pod was not woken when the step's srun ended"
    assert provider.pool.helds() == []  # the reaper asked Slurm before waking it
    assert provider.create(b, PodInputs()).outcome is Outcome.RETRY
    assert len(steps) == 1


def test_a_step_that_finished_costs_no_squeue_when_its_srun_ends(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The normal case keeps its saving: a pod that wrote pod.done leaves the books as they are."""
    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    assert provider.create(_pod("a", "u-1"), PodInputs()).outcome is Outcome.SUBMITTED
    woken = threading.Event()
    assert provider.create(_pod("b", "u-2"), PodInputs(ready=lambda uid: woken.set())).outcome is Outcome.RETRY
    (tmp_path / "pods" / "u-1" / "status").mkdir(exist_ok=True)  # the pod's script makes it
    (tmp_path / "pods" / "u-1" / "status" / "pod.done").write_text("0\n")
    asked = len(slurm.queries)
    steps[0].ended.set()
    assert woken.wait(30), "the waiting pod was not woken when the step's srun ended"
    assert len(slurm.queries) == asked
    assert provider.create(_pod("b", "u-2"), PodInputs()).outcome is Outcome.SUBMITTED
    steps[1].ended.set()


def test_a_pod_the_kubelet_gave_up_on_waits_for_room_no_more(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Its need is no longer planned for, the pod behind it is woken (it waits longest now: it asks
    each WAIT_FOR_ROOM, not WAIT_BEHIND), and the room freed next wakes it too."""
    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    assert provider.create(_pod("a", "u-1"), PodInputs()).outcome is Outcome.SUBMITTED
    woken: list[str] = []
    retries = [provider.create(_pod(name, uid), PodInputs(ready=woken.append))
               for name, uid in (("b", "u-2"), ("c", "u-3"))]
    assert [(c.outcome, c.retry_after) for c in retries] == [(Outcome.RETRY, pilotpod.WAIT_FOR_ROOM),
                                                             (Outcome.RETRY, pilotpod.WAIT_BEHIND)]
    provider.give_up(PodRef.of(_pod("b", "u-2")))
    with provider._plock:
        assert [n.uid for n in provider._book.waiting()] == ["u-3"]
    assert woken == ["u-3"]
    assert provider.create(_pod("c", "u-3"), PodInputs(ready=woken.append)).retry_after == pilotpod.WAIT_FOR_ROOM
    provider._wake(1)
    assert woken == ["u-3", "u-3"]
    steps[0].ended.set()


@pytest.mark.parametrize("fails", ["write_pod_dir", "_save"])
def test_a_pod_whose_directory_fails_to_write_gives_its_room_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  fails: str) -> None:
    """create books the room, then writes the record and the pod directory (a planted symlink, a name
    too long): when either raises, the booking is given back, so the kubelet's retry finds its room and,
    once the kubelet gives up on the pod, another takes it. Before, the pod's own ghost filled it."""
    from hpkctl.errors import PodError
    from hpkctl.provider import pilotpod

    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    failures = [PodError("CreateContainerConfigError", "planted symlink")]

    def flaky(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any, **kw: Any) -> Any:
            if failures:
                raise failures.pop()
            return real(*a, **kw)
        return call

    if fails == "_save":
        monkeypatch.setattr(provider, "_save", flaky(provider._save))
    else:
        monkeypatch.setattr(pilotpod, "write_pod_dir", flaky(pilotpod.write_pod_dir))
    a = _pod("a", "u-1")
    with pytest.raises(PodError):
        provider.create(a, PodInputs())
    assert [list(h.pods) for h in provider.pool.helds()] == [[]]
    assert provider.create(a, PodInputs()).outcome is Outcome.SUBMITTED  # the kubelet's retry
    assert len(steps) == 1
    steps[0].ended.set()


def test_a_pod_given_up_after_its_directory_failed_leaves_its_room_to_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpkctl.errors import PodError
    from hpkctl.provider import pilotpod

    provider, slurm, steps = _provider(tmp_path, monkeypatch)

    def broken(*a: Any, **kw: Any) -> None:
        raise PodError("CreateContainerConfigError", "planted symlink")

    monkeypatch.setattr(pilotpod, "write_pod_dir", broken)
    a = _pod("a", "u-1")
    for _ in range(2):  # the first try and the kubelet's retry both fail, neither waits for room
        with pytest.raises(PodError):
            provider.create(a, PodInputs())
    provider.give_up(PodRef.of(a))
    monkeypatch.undo()
    monkeypatch.setattr(pilotpod, "start_pod_step", lambda *a, **k: steps.append(Step()) or steps[-1])
    assert provider.create(_pod("b", "u-2"), PodInputs()).outcome is Outcome.SUBMITTED
    assert len(steps) == 1
    steps[0].ended.set()


class LateReaper(Step):
    """An srun that has exited (``poll`` sees it) while its thread has not returned from its wait yet."""

    def __init__(self) -> None:
        super().__init__()
        self.exited = threading.Event()

    def poll(self) -> int | None:
        return 1 if self.exited.is_set() else None


def test_a_step_a_status_round_reaps_first_is_checked_for_a_dead_allocation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The round finds the srun ended before its thread does: it asks Slurm about the allocation
    before it wakes the pod behind (else that pod is placed in the dead allocation) and logs the end."""
    from hpkctl.provider import pilotpod

    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    monkeypatch.setattr(pilotpod, "start_pod_step", lambda *a, **k: steps.append(LateReaper()) or steps[-1])
    a = _pod("a", "u-1")
    assert provider.create(a, PodInputs()).outcome is Outcome.SUBMITTED
    woken = threading.Event()
    b = _pod("b", "u-2")
    assert provider.create(b, PodInputs(ready=lambda uid: woken.set())).outcome is Outcome.RETRY  # full
    provider.statuses([Watched(PodRef.of(a), a, ALLOC)])  # a round while 41 runs: the books are fresh
    slurm.state = "CANCELLED"  # 41 scancelled: a's step dies without pod.done
    steps[0].exited.set()
    with caplog.at_level("INFO", logger="hpkctl.provider.pilotpod"):
        provider.statuses([Watched(PodRef.of(a), a, ALLOC)])
    assert woken.is_set()
    assert [h.job_id for h in provider.pool.helds()] == ["42"]  # 41 gone (asked before the wake), 42 requested
    assert "the step of pod uid u-1 ended" in caplog.text
    assert provider.create(b, PodInputs()).outcome is Outcome.RETRY
    assert len(steps) == 1
    steps[0].ended.set()


@pytest.mark.parametrize("cpus", [2, 1])
def test_the_pod_placed_first_in_an_allocation_that_started_wakes_the_pod_behind_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpus: int) -> None:
    """While an allocation is pending only the pod that waited longest asks again each WAIT_FOR_ROOM
    (the others each WAIT_BEHIND: a backlog of N asked N times a second); once it is placed, the pod
    behind it is woken at once: it fits too (an allocation that starts has room for several), or, when it
    does not, it now waits longest and its create (no room) asks again each WAIT_FOR_ROOM, not WAIT_BEHIND."""
    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    monkeypatch.setattr(pilotpod, "WAIT_FOR_ROOM", 0.0)  # each retry asks Slurm (the books are not trusted)

    class Started(Slurm):
        def allocation(self, job_id: str) -> AllocationInfo:
            return AllocationInfo(job_id, self.state, {"vm": NodeShare(cpus, 2048)}, end=time.time() + 3600)

    started = Started()
    started.state = "PENDING"
    provider.slurm = provider.pool.slurm = started
    provider.pool._helds = {ALLOC: Held(ALLOC, "PENDING")}
    woken: list[str] = []
    pods = [_pod("b", "u-2"), _pod("c", "u-3")]
    retries = [provider.create(p, PodInputs(ready=woken.append)) for p in pods]
    assert [(c.outcome, c.retry_after) for c in retries] == [(Outcome.RETRY, 0.0), (Outcome.RETRY, pilotpod.WAIT_BEHIND)]
    assert woken == []
    started.state = "RUNNING"
    assert provider.create(pods[0], PodInputs(ready=woken.append)).outcome is Outcome.SUBMITTED
    assert woken == ["u-3"]
    again = provider.create(pods[1], PodInputs(ready=woken.append))
    assert (again.outcome, again.retry_after) == ((Outcome.SUBMITTED, 0.0) if cpus == 2 else (Outcome.RETRY, 0.0))
    assert len(steps) == cpus
    for step in steps:
        step.ended.set()


def test_a_pod_that_ends_wakes_one_waiting_pod_whoever_frees_its_room_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A status round that reads pod.done frees the pod's room and wakes the pod waiting longest; when its
    srun then ends, the room is free already: no second wake (a create that would find no room)."""
    provider, slurm, steps = _provider(tmp_path, monkeypatch)
    a = _pod("a", "u-1")
    assert provider.create(a, PodInputs()).outcome is Outcome.SUBMITTED
    woken: list[str] = []
    for name, uid in (("b", "u-2"), ("c", "u-3")):
        assert provider.create(_pod(name, uid), PodInputs(ready=woken.append)).outcome is Outcome.RETRY
    status = tmp_path / "pods" / "u-1" / "status"  # the job makes it
    status.mkdir(exist_ok=True)
    (status / "pod.done").write_text("0\n")  # the pod's script's last word
    reports = provider.statuses([Watched(PodRef.of(a), a, ALLOC)])
    assert [r.final for r in reports] == [True] and woken == ["u-2"]
    steps[0].ended.set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # its thread reaps the srun
        with provider._plock:
            if "u-1" not in provider._book.pods:
                break
        time.sleep(0.01)
    with provider._plock:
        assert "u-1" not in provider._book.pods, "the step's thread did not reap its srun"
    assert woken == ["u-2"]

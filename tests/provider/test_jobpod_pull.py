"""The job-per-pod provider keeps a pod's render while its images are pulled (issue 21.2): the create
that follows the pull's end neither renders again nor reads the pod's ConfigMaps, Secrets or tokens
a second time; a delete or a give-up drops what was kept."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hpkctl.provider import Outcome, PodInputs, PodRef
from hpkctl.provider import jobpod as jobpod_mod
from hpkctl.provider.jobpod import JobPodProvider
from hpkctl.provider.records import Records
from hpkctl.sites import load_site
from tests.support.kubelet_fakes import FakeSlurm, _pod


class Puller:
    """Pulls that end when the test says so."""

    def __init__(self) -> None:
        self.done = False

    def ensure(self, images: list[Any], *, when_done: Callable[[], None]) -> list[Any]:
        return [] if self.done else [object()]

    def forget(self, images: list[Any]) -> None:
        pass


def count_renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The uid of each pod the provider renders, in order."""
    renders: list[str] = []
    real = jobpod_mod.render_pod

    def counting(pod: Any, *a: Any, **kw: Any) -> Any:
        renders.append(pod["metadata"]["uid"])
        return real(pod, *a, **kw)

    monkeypatch.setattr(jobpod_mod, "render_pod", counting)
    return renders


def test_a_pod_parked_for_its_pull_is_rendered_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = load_site("ci")
    profile = profile.model_copy(update={
        "pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)}),
        "apptainer": profile.apptainer.model_copy(update={"pull": "submit"})})
    slurm = FakeSlurm()
    provider = JobPodProvider(slurm=slurm, profile=profile, records=Records(tmp_path / "kubelet"))  # type: ignore[arg-type]
    provider.puller = Puller()  # type: ignore[assignment]
    renders = count_renders(monkeypatch)
    pod = _pod()
    assert provider.create(pod, PodInputs()).outcome is Outcome.PULLING
    assert provider.create(pod, PodInputs()).outcome is Outcome.PULLING  # still pulling: the same render
    provider.puller.done = True  # type: ignore[attr-defined]
    created = provider.create(pod, PodInputs())
    assert created.outcome is Outcome.SUBMITTED and slurm.submitted == 1
    assert renders == ["u-1"]
    # a pod deleted (or given up) while parked leaves nothing kept behind
    other = _pod("q", "u-2")
    provider.puller.done = False  # type: ignore[attr-defined]
    assert provider.create(other, PodInputs()).outcome is Outcome.PULLING
    provider.give_up(PodRef.of(other))
    assert "u-2" not in provider._parked


def test_a_pilot_pod_waiting_for_room_is_rendered_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pilot mode: a pod that waits (RETRY) for an allocation with room keeps its render too."""
    provider = _pilot_provider(tmp_path)

    class FullPool:
        rules = provider.pool.rules

        def settled(self) -> bool:
            return False  # an allocation is pending: the books are asked about as often as its start matters
        ticks = 0

        def place(self, need: Any) -> None:
            return None  # no allocation has room (one is being requested)

        def refresh(self, *, max_age: float = 0.0) -> None:
            pass

        def tick(self, pending: Any) -> None:
            self.ticks += 1

        def done(self, uid: str) -> None:
            pass

    provider.pool = FullPool()  # type: ignore[assignment]
    renders = count_renders(monkeypatch)
    monkeypatch.setattr("hpkctl.provider.pilotpod.WAIT_FOR_ROOM", 3600.0)  # the retries come within it
    pod = _pod()
    for _ in range(3):
        assert provider.create(pod, PodInputs()).outcome is Outcome.RETRY
    # it ticked when it began to wait; its retries within WAIT_FOR_ROOM of that tick do not
    assert renders == ["u-1"] and provider.pool.ticks == 1  # type: ignore[attr-defined]
    provider.give_up(PodRef.of(pod))
    assert "u-1" not in provider._parked


def test_pilot_pods_waiting_for_room_are_woken_when_a_step_ends(tmp_path: Path) -> None:
    """A pod that waits for room (RETRY) is re-queued through its ``inputs.ready`` as soon as a status
    round frees a step's room, the longest waiting first, one per freed step; not after WAIT_FOR_ROOM."""
    provider = _pilot_provider(tmp_path)

    class FullPool:
        rules = provider.pool.rules

        def settled(self) -> bool:
            return False  # an allocation is pending: the books are asked about as often as its start matters
        freed: list[str] = []

        def place(self, need: Any) -> None:
            return None

        def refresh(self, *, max_age: float = 0.0) -> None:
            pass

        def tick(self, pending: Any) -> None:
            pass

        def done(self, uid: str) -> bool:
            self.freed.append(uid)
            return True  # the step held its room

        def fits(self, need: Any) -> bool:
            return bool(self.freed)  # the freed room fits any of them

        def clock(self) -> float:
            return time.monotonic()

    class Ended:  # the srun of a step that has ended
        def poll(self) -> int:
            return 0

    provider.pool = FullPool()  # type: ignore[assignment]
    woken: list[str] = []
    for name, uid in (("a", "u-1"), ("b", "u-2"), ("c", "u-3")):
        assert provider.create(_pod(name, uid), PodInputs(ready=woken.append)).outcome is Outcome.RETRY
    provider.statuses([])
    assert woken == []  # nothing freed: they wait for their retry
    with provider._plock:
        provider._book.pod("running").step = Ended()  # type: ignore[assignment]
    provider.statuses([])
    assert provider.pool.freed == ["running"] and woken == ["u-1"]  # type: ignore[attr-defined]


def test_a_pilot_step_that_ends_frees_its_room_and_wakes_a_waiting_pod_without_a_status_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The srun of a step is waited for on a thread of its own: when it ends, its room is free and the
    pod that waited longest is re-queued at once, not at the next status round (up to status_poll
    later: bench/run pilot's backlog left each slot idle that long). A pod being deleted is left to
    its delete."""
    from hpkctl.provider import pilotpod

    provider = _pilot_provider(tmp_path)

    class OneSlot:  # an allocation with room for one pod
        rules = provider.pool.rules
        clock = staticmethod(time.time)

        def settled(self) -> bool:
            return False  # an allocation is pending: the books are asked about as often as its start matters
        taken: str | None = None
        freed: list[str] = []

        def place(self, need: Any) -> tuple[str, str] | None:
            if self.taken is not None:
                return None
            self.taken = need.uid
            return ("41", "vm")

        def refresh(self, *, max_age: float = 0.0) -> list[str]:
            return []

        def tick(self, pending: Any) -> None:
            pass

        def done(self, uid: str) -> bool:
            self.freed.append(uid)
            held = self.taken == uid
            if held:
                self.taken = None
            return held

        def fits(self, need: Any) -> bool:
            return self.taken is None

    class Step:  # an srun that runs until the test ends it
        def __init__(self) -> None:
            self.ended = threading.Event()

        def wait(self, timeout: float | None = None) -> int:
            self.ended.wait()
            return 0

        def wait_changes(self, changed: Callable[[], None]) -> int:
            changed()  # the pod's script said it wrote a status change (its first)
            return self.wait()

        def poll(self) -> int | None:
            return 0 if self.ended.is_set() else None

    steps: list[Step] = []
    notified: list[bool] = []
    monkeypatch.setattr(pilotpod, "start_pod_step",
                        lambda *a, notify=False: notified.append(notify) or steps.append(Step()) or steps[-1])
    provider.pool = OneSlot()  # type: ignore[assignment]
    woken, announced = threading.Event(), threading.Event()
    provider.changed = announced.set  # the kubelet's status loop: a round at once
    assert provider.create(_pod("a", "u-1"), PodInputs()).outcome is Outcome.SUBMITTED
    assert notified == [True]  # the step's srun passes on what its script announces
    assert announced.wait(30), "the step's announced status change did not reach the kubelet's status loop"
    assert provider.create(_pod("b", "u-2"), PodInputs(ready=lambda uid: woken.set())).outcome is Outcome.RETRY
    assert not woken.is_set()
    steps[0].ended.set()
    assert woken.wait(30), "the waiting pod was not woken when the step's srun ended"
    assert provider.pool.freed == ["u-1"]  # type: ignore[attr-defined]
    cancels: list[tuple[str, str | None]] = []
    provider.slurm.cancel_step = lambda step, signal=None: cancels.append((step, signal))
    status = tmp_path / "pods" / "u-1" / "status"  # the finished pod's files: its step, its end
    status.mkdir(exist_ok=True)  # made by the pod's script (write_pod_dir leaves it to the job)
    (status / "job.id").write_text("41.3\n")
    (status / "pod.done").write_text("0\n")
    gone = provider.delete(PodRef.of(_pod("a", "u-1")), grace=0, pod=_pod("a", "u-1"))
    assert gone.done and cancels == []  # its step ended with its srun: nothing to cancel
    assert provider.create(_pod("b", "u-2"), PodInputs()).outcome is Outcome.SUBMITTED
    provider.delete(PodRef.of(_pod("b", "u-2")), grace=0, pod=_pod("b", "u-2"))  # its delete owns the step now
    steps[1].ended.set()
    deadline = time.monotonic() + 30
    while any(t.name == "pilot-step-b" for t in threading.enumerate()) and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    assert "u-2" not in provider.pool.freed  # type: ignore[attr-defined]


def test_an_idle_pilot_kubelet_never_places_a_pod_in_an_allocation_that_ended(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle pilot kubelet runs no status rounds, so its books can still hold an allocation that
    released itself meanwhile; a new pod's create asks Slurm first (at most one squeue a second for all
    pods) and waits for room instead of starting a step in the dead allocation, which failed the pod."""
    from hpkctl.provider import pilotpod

    provider = _pilot_provider(tmp_path)

    class StaleBooks:  # allocation 41 released itself; the books know it once they ask Slurm
        rules = provider.pool.rules
        # seconds since the books last asked Slurm (an idle kubelet runs no status rounds): just over a status
        # round's answer, so a create that trusts books older than slurm_poll places the pod in the dead 41
        age = provider.profile.kubelet.slurm_poll + 0.5

        def settled(self) -> bool:
            return True  # as far as the books know, 41 runs with its nodes known
        asked = False

        def refresh(self, *, max_age: float = 0.0) -> list[str]:
            self.asked = self.asked or max_age <= 0 or self.age >= max_age  # as Pool.refresh: only books too old
            return []

        def place(self, need: Any) -> tuple[str, str] | None:
            return None if self.asked else ("41", "vm")

        def tick(self, pending: Any) -> None:
            pass

        def done(self, uid: str) -> None:
            pass

    started: list[Any] = []
    monkeypatch.setattr(pilotpod, "start_pod_step", lambda *a, **k: started.append(a))
    provider.pool = StaleBooks()  # type: ignore[assignment]
    assert provider.create(_pod("late", "u-1"), PodInputs()).outcome is Outcome.RETRY
    assert started == []


@pytest.mark.parametrize("room", [True, False])
def test_a_pilot_pod_soon_after_another_costs_no_squeue_unless_it_finds_no_room(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, room: bool) -> None:
    """Books younger than [kubelet] slurm_poll (what a status round's answer may be) are trusted for a
    pod that fits: its step is its one Slurm call. A pod that finds no room asks Slurm once they are
    over WAIT_FOR_ROOM old (an allocation may have started meanwhile)."""
    from hpkctl.provider import pilotpod

    provider = _pilot_provider(tmp_path)
    age = (pilotpod.WAIT_FOR_ROOM + provider.profile.kubelet.slurm_poll) / 2  # between the two

    class Books:
        rules = provider.pool.rules

        def settled(self) -> bool:
            return False  # an allocation is pending: the books are asked about as often as its start matters
        asked = 0

        def refresh(self, *, max_age: float = 0.0) -> list[str]:
            self.asked += age >= max_age
            return []

        def place(self, need: Any) -> tuple[str, str] | None:
            return ("41", "vm") if room else None

        def tick(self, pending: Any) -> None:
            pass

        def done(self, uid: str) -> None:
            pass

    monkeypatch.setattr(pilotpod, "start_pod_step", lambda *a, **k: None)
    provider.pool = Books()  # type: ignore[assignment]
    outcome = provider.create(_pod("next", "u-1"), PodInputs()).outcome
    assert (outcome, provider.pool.asked) == ((Outcome.SUBMITTED, 0) if room else (Outcome.RETRY, 1))  # type: ignore[attr-defined]


def test_rounds_a_step_starts_ask_slurm_about_the_allocations_once_per_status_poll(tmp_path: Path) -> None:
    """A pilot kubelet's status rounds also start when a step announces a change (many a second in a
    backlog): the allocations' squeue stays one per [kubelet] status_poll, as when rounds only ticked
    (bench/run pilot: 3.4 squeue per pod in a backlog before, 0.4 with rounds on the clock)."""
    provider = _pilot_provider(tmp_path)

    class Books:
        rules = provider.pool.rules

        def settled(self) -> bool:
            return False  # an allocation is pending: the books are asked about as often as its start matters
        ages: list[float] = []

        def refresh(self, *, max_age: float = 0.0) -> list[str]:
            self.ages.append(max_age)
            return []

        def tick(self, pending: Any) -> None:
            pass

        def done(self, uid: str) -> None:
            pass

    provider.pool = Books()  # type: ignore[assignment]
    for _ in range(3):
        provider.statuses([])
    assert Books.ages == [provider.profile.kubelet.status_poll] * 3


@pytest.mark.parametrize("where", ["statuses", "create"])
def test_with_every_allocation_running_the_books_are_asked_about_once_per_slurm_poll(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """No allocation pending: Slurm can tell the books only of an unexpected end, which the status
    rounds' squeue finds once per [kubelet] slurm_poll; asking each status_poll (or, for a pod that
    found no room, each WAIT_FOR_ROOM) was most of a busy pilot kubelet's squeue calls."""
    from hpkctl.provider import pilotpod

    provider = _pilot_provider(tmp_path)
    slurm_poll = provider.profile.kubelet.slurm_poll
    assert slurm_poll > max(provider.profile.kubelet.status_poll, pilotpod.WAIT_FOR_ROOM)

    class Running:
        rules = provider.pool.rules
        ages: list[float] = []

        def settled(self) -> bool:
            return True

        def refresh(self, *, max_age: float = 0.0) -> list[str]:
            self.ages.append(max_age)
            return []

        def place(self, need: Any) -> None:
            return None  # full: the pod waits for room

        def tick(self, pending: Any) -> None:
            pass

        def done(self, uid: str) -> None:
            pass

    provider.pool = Running()  # type: ignore[assignment]
    if where == "statuses":
        provider.statuses([])
    else:
        assert provider.create(_pod("next", "u-1"), PodInputs()).outcome is Outcome.RETRY
    assert Running.ages and set(Running.ages) == {slurm_poll}


def _pilot_provider(tmp_path: Path) -> Any:
    """A pilot provider of the ci profile with its state under ``tmp_path``, on a fake Slurm."""
    from hpkctl.provider.pilotpod import PilotPodProvider

    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)})})
    return PilotPodProvider(slurm=FakeSlurm(), profile=profile, records=Records(tmp_path / "kubelet"),  # type: ignore[arg-type]
                            node="n", state_dir=tmp_path)


def test_an_sbatch_answer_cut_off_is_asked_again_not_failed(tmp_path: Path) -> None:
    """sbatch killed or cut off mid-request (SubmitUnclear) is a timeout's twin: the job may exist, so the pod
    waits and its next create looks for it by uid; it is neither failed nor submitted again at once."""
    from hpkctl.jobs import SubmitUnclear

    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)})})

    class CutOff(FakeSlurm):
        def submit(self, *a: Any, **kw: Any) -> str:
            self.submitted += 1
            raise SubmitUnclear("sbatch's answer was cut off (exit status -9): the job may exist")

    slurm = CutOff()
    provider = JobPodProvider(slurm=slurm, profile=profile, records=Records(tmp_path / "kubelet"))  # type: ignore[arg-type]
    created = provider.create(_pod(), PodInputs())
    assert created.outcome is Outcome.RETRY and created.retry_after == 5.0 and slurm.submitted == 1

"""The pilot pool's books against a fake Slurm: how often a refresh asks Slurm, and a refresh that
meets an allocation released meanwhile by another thread (the kubelet's workers place pods and
refresh while its status loop ticks)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs import JobInfo, UserJob
from hpkctl.pilot.plan import Need
from hpkctl.pilot.pool import Pool
from hpkctl.sites import load_site


class FakeSlurm:
    def __init__(self) -> None:
        self.queries = 0
        self.during_query: list[Pool] = []  # pools to release while a query runs

    def query(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        self.queries += 1
        for pool in self.during_query:
            pool.release_all()
        return {j: JobInfo(j, "RUNNING") for j in job_ids}

    def allocation(self, job_id: str) -> None:
        return None  # its nodes not known yet: the books keep what they had

    def cancel(self, job_id: str) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pool(tmp_path: Path, slurm: FakeSlurm, clock: Clock) -> Pool:
    pool = Pool(slurm, load_site("ci"), owner="kubelet", node="n", state_dir=tmp_path, clock=clock)  # type: ignore[arg-type]
    pool.assign("u-1", Need(uid="u-1", cpus=1, memory_mb=100), "41", "vm")
    return pool


def test_pods_waiting_for_room_share_one_squeue_a_second(tmp_path: Path) -> None:
    slurm, clock = FakeSlurm(), Clock()
    pool = _pool(tmp_path, slurm, clock)
    for _ in range(50):  # fifty pods waiting for room, each asking within the same second
        pool.refresh(max_age=1.0)
    assert slurm.queries == 1
    clock.now += 1.0
    pool.refresh(max_age=1.0)
    assert slurm.queries == 2
    pool.refresh()  # the status round's refresh always asks
    assert slurm.queries == 3


def test_an_allocation_released_while_slurm_is_asked_stays_released(tmp_path: Path) -> None:
    slurm, clock = FakeSlurm(), Clock()
    pool = _pool(tmp_path, slurm, clock)
    slurm.during_query.append(pool)
    assert pool.refresh() == []  # no KeyError: the allocation left the books meanwhile
    assert pool.helds() == []


class Owners(FakeSlurm):
    """This user's jobs: one allocation of a pool's, the rest of Slurm as FakeSlurm."""

    def __init__(self, comment: str) -> None:
        super().__init__()
        self.comment = comment
        self.cancelled: list[str] = []

    def user_jobs(self) -> list[UserJob]:
        return [UserJob("77", "RUNNING", self.comment)]

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


def test_an_owner_adopts_and_releases_only_the_allocations_of_its_own_state_directory(tmp_path: Path) -> None:
    """Two kubelets (or runs) of one node name with state directories of their own (two clusters of one
    user, two profiles) hold allocations apart: the other's is neither adopted nor, idle on its books,
    released (that killed the other's pods), nor cancelled by ``release_all`` (``hpkctl stop --all``).
    Owners of one state directory still find theirs. Before, the comment named only owner and node."""
    ours, theirs = tmp_path / "a", tmp_path / "b"
    profile = load_site("ci")
    slurm, clock = Owners(Pool(FakeSlurm(), profile, owner="kubelet", node="n", state_dir=theirs).comment), Clock()  # type: ignore[arg-type]
    pool = Pool(slurm, profile, owner="kubelet", node="n", state_dir=ours, clock=clock)  # type: ignore[arg-type]
    assert pool.adopt() == [] and pool.helds() == []
    clock.now += 10 * profile.pilot.idle_release
    pool.tick([])
    pool.release_all()
    assert slurm.cancelled == []
    same = Pool(slurm, profile, owner="kubelet", node="n", state_dir=theirs, clock=clock)  # type: ignore[arg-type]
    assert same.adopt() == ["77"]
    assert Pool(slurm, profile, owner="run", node="n", state_dir=theirs).adopt() == []  # type: ignore[arg-type]


def test_pods_that_arrive_together_request_one_allocation_not_one_each(tmp_path: Path) -> None:
    """Two workers tick at once (two pods created together, no room): the second tick decides after
    the first one's allocation is on the books, so max_allocations = 1 holds one, not two. The fake
    sbatch starts the second tick on another thread and gives it a second to finish first, which it
    could only do by deciding on books without the first one's request."""
    profile = load_site("ci")
    profile = profile.model_copy(update={"pilot": profile.pilot.model_copy(update={"max_allocations": 1})})
    holds: list[str] = []

    class Slurm(FakeSlurm):
        def hold(self, script: Path, *, args: list[str], script_args: list[str]) -> str:
            holds.append(str(len(holds) + 1))
            if len(holds) == 1:
                second = threading.Thread(target=pool.tick, args=([Need("u-b", 1, 100)],))
                second.start()
                second.join(timeout=1.0)
                seconds.append(second)
            return holds[-1]

    seconds: list[threading.Thread] = []
    pool = Pool(Slurm(), profile, owner="kubelet", node="n", state_dir=tmp_path, clock=Clock())  # type: ignore[arg-type]
    pool.tick([Need("u-a", 1, 100)])
    seconds[0].join(timeout=30)
    assert not seconds[0].is_alive()
    assert holds == ["1"], holds
    assert [h.job_id for h in pool.helds()] == ["1"]


class Takeover(FakeSlurm):
    """Slurm through a renewal: allocations by id with a state and an end, as the test sets them."""

    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, str] = {}
        self.ends: dict[str, float] = {}

    def query(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        self.queries += 1
        return {j: JobInfo(j, self.states[j]) for j in job_ids if self.states.get(j, "GONE") != "GONE"}

    def allocation(self, job_id: str) -> Any:
        from hpkctl.jobs.alloc import AllocationInfo, NodeShare

        return AllocationInfo(job_id, self.states[job_id], {"vm": NodeShare(2, 512)}, self.ends[job_id])

    def hold(self, script: Path, *, args: list[str], script_args: list[str]) -> str:
        job = str(41 + len(self.states))
        self.states[job] = "PENDING"
        return job


@pytest.mark.parametrize("first_released_itself", [False, True])
def test_a_successor_takes_over_the_books_of_an_allocation_reaching_its_end(tmp_path: Path,
                                                                           first_released_itself: bool) -> None:
    """The renewal driven step by step (a fake Slurm and clock, no sleeps): a successor is requested
    once while the first allocation holds a pod and has less than 2 x renewal_margin left, and only
    once while it waits in Slurm's queue; a pod placed in the first's last margin goes to the
    successor; the first, empty and too short, is released. When Slurm says the first ended while the
    successor still waits (its holder released itself: no step for 2 x idle_release, as a test's pod
    that ended but stayed on the books made it in a full run), the books drop it and name its pods lost,
    and the successor takes over all the same: the books are never read for an allocation they lost."""
    profile = load_site("ci")
    margin = 28
    profile = profile.model_copy(update={"pilot": profile.pilot.model_copy(update={
        "cpus": 2, "memory": "512M", "time_limit": "1", "renewal_margin": margin, "max_allocations": 2})})
    slurm, clock = Takeover(), Clock()
    pool = Pool(slurm, profile, owner="kubelet", node="n", state_dir=tmp_path, clock=clock)  # type: ignore[arg-type]
    assert pool.tick([Need("p1", 1, 100)]).request == 1
    [first] = [h.job_id for h in pool.helds()]
    slurm.states[first], slurm.ends[first] = "RUNNING", clock.now + 60
    pool.refresh()
    assert pool.place(Need("p1", 1, 100)) == (first, "vm")
    clock.now += 10  # 50 s left, under 2 x margin: a successor
    decision = pool.tick([])
    assert (decision.request, decision.successor) == (1, True)
    successor = next(h.job_id for h in pool.helds() if h.job_id != first)
    clock.now += 25  # the successor waits in Slurm's queue: not requested again
    assert pool.tick([]).request == 0
    if first_released_itself:
        slurm.states[first] = "GONE"
        assert pool.refresh() == ["p1"]  # the pod booked there is lost with it
        assert [h.job_id for h in pool.helds()] == [successor]
    slurm.states[successor], slurm.ends[successor] = "RUNNING", clock.now + 60
    pool.refresh()
    assert pool.where("p1") == (None if first_released_itself else (first, "vm"))
    assert pool.place(Need("p2", 1, 100)) == (successor, "vm")  # 25 s left in the first: under the margin
    pool.done("p1")
    assert pool.tick([]).release == (() if first_released_itself else (first,))
    assert [h.job_id for h in pool.helds()] == [successor]


def test_the_books_are_settled_once_every_allocation_runs_with_its_nodes_known(tmp_path: Path) -> None:
    from hpkctl.jobs.alloc import NodeShare
    from hpkctl.pilot.plan import Held

    pool = Pool(FakeSlurm(), load_site("ci"), owner="kubelet", node="n", state_dir=tmp_path, clock=Clock())  # type: ignore[arg-type]
    assert pool.settled()  # nothing held: nothing to wait for
    pool._helds["41"] = Held("41", "RUNNING")
    assert not pool.settled()  # running, its nodes not known yet (scontrol show job -d to come)
    pool._helds["41"].nodes = {"vm": NodeShare(4, 1024)}
    assert pool.settled()
    pool._helds["42"] = Held("42", "PENDING")  # requested: a pod may be waiting for it to start
    assert not pool.settled()


class Gate(FakeSlurm):
    """A squeue that answers once the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.asking, self.gate = threading.Event(), threading.Event()

    def query(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        self.asking.set()
        assert self.gate.wait(30)
        return super().query(job_ids)


class CountingLock:
    """The pool's refresh lock, counting the callers that came to it."""

    def __init__(self) -> None:
        self.lock, self.callers, self.came = threading.Lock(), 0, threading.Condition()

    def __enter__(self) -> None:
        with self.came:
            self.callers += 1
            self.came.notify_all()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_steps_that_end_together_share_the_squeue_in_flight(tmp_path: Path) -> None:
    """Sixteen steps' threads that refresh after their srun ended while one refresh's squeue runs wait for
    its answer (asked after they ended) instead of each sending their own (16 squeue calls before)."""
    slurm, clock = Gate(), Clock()
    pool = _pool(tmp_path, slurm, clock)
    lock = CountingLock()
    pool._refreshing = lock  # type: ignore[assignment]
    ended = clock.now - 1.0  # the steps ended; the first refresh asks at clock.now, after that
    threads = [threading.Thread(target=pool.refresh, kwargs={"max_age": clock.now - ended}) for _ in range(16)]
    threads[0].start()
    assert slurm.asking.wait(30)
    for t in threads[1:]:
        t.start()
    with lock.came:
        assert lock.came.wait_for(lambda: lock.callers == 16, timeout=30), lock.callers
    slurm.gate.set()
    for t in threads:
        t.join(30)
    assert slurm.queries == 1
    pool.refresh()  # max_age 0: an answer asked before the call never serves it
    assert slurm.queries == 2


def test_fits_says_whether_a_need_has_room_and_books_nothing(tmp_path: Path) -> None:
    """The pilot provider wakes the pod behind a placed one only when it fits: ``fits`` asks the same
    placement as ``place`` without booking the room."""
    from hpkctl.jobs.alloc import NodeShare

    pool = _pool(tmp_path, FakeSlurm(), Clock())
    held = pool._helds["41"]
    held.nodes, held.end = {"vm": NodeShare(2, 1000)}, None  # running, 2 CPUs; u-1 holds one
    one = Need(uid="u-2", cpus=1, memory_mb=100)
    assert pool.fits(one) and pool.fits(one)  # asked twice: nothing booked
    assert not pool.fits(Need(uid="u-3", cpus=2, memory_mb=100))
    assert pool.place(one) == ("41", "vm")
    assert not pool.fits(Need(uid="u-3", cpus=1, memory_mb=100))

"""The pilot pool's books against a fake Slurm: how often a refresh asks Slurm, and a refresh that
meets an allocation released meanwhile by another thread (the kubelet's workers place pods and
refresh while its status loop ticks)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hpkctl.jobs import JobInfo
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

"""ci/test's pytest-xdist workers (``-n 3 --dist loadgroup``): the ``slurm`` tests run on two lanes at
once, each lane on one worker, a module at a time, and the rest beside them, a whole module at a time.

Why: the Slurm tests mostly wait (for jobs, a kubelet, a time limit), so two lanes of them and the
CPU-bound rest (translation, golden scripts, mypy) fill each other's waits. A module's tests stay
together so that its module fixtures start once.

The lanes, explicitly (:func:`group_of`):

* ``slurm-b``: the modules of :data:`SECOND_LANE`. Each owns what it touches: its jobs, steps and
  pilot allocations are found by its own pod uids, job ids, unique names or its own state directory
  (a pilot allocation's comment names its owner's state directory), never by counting the jobs of
  user hpk; it uses only the single-node cluster.
* ``slurm``: every other ``slurm`` test, in file order: a new Slurm module lands here until it has
  been checked against those rules. The 3-node cluster's tests (``MULTI_CONF``, ``ci-multi``: whole
  nodes, two-node allocations) are all here, so they never wait for each other's nodes.
* Capacity: the single node has 16 CPUs, and a module of either lane needs at most 8 at once (its
  pods, a cluster's two jobs, its pilot allocations), so the two lanes fit side by side. A module
  that may need more (many pods at once: a burst of 50, a module's pods created in one go, pilot
  allocations of 12 CPUs) is marked ``whole_node`` and runs while no test of the other lane runs:
  every ``slurm`` module holds a lock on the file ``$HPK_XDIST_GROUPS.lock`` from its first test's
  setup to its last test's teardown, shared, or exclusive for ``whole_node``; an exclusive waiter goes
  first, and consecutive ``whole_node`` modules keep it (:class:`NodeLock`). Exclusivity is this
  lock, never the order. The ``whole_node`` modules are consecutive in the ``slurm`` lane's file
  order (tests/kubelet), so the other lane waits for them once.

How: pytest-xdist's own loadgroup reads ``xdist_group`` marks by renaming ``item._nodeid``, which
pytest 9.2 no longer reads, so every test landed anywhere. Instead each worker writes the group of
every test it collected to the file named by ``$HPK_XDIST_GROUPS`` (the controller makes it before it
starts the workers), and the controller's scheduler (xdist's LoadScopeScheduling, one scope per group)
reads it once all workers have collected. The Slurm lanes are handed out first, so their waits
overlap the rest from the start.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ENV = "HPK_XDIST_GROUPS"
LANES = ("slurm", "slurm-b")
#: the second Slurm lane's modules (see the module docstring for what each must satisfy)
SECOND_LANE = frozenset({
    "tests/controlplane/test_controlplane_start_slurm.py",
    "tests/integration/test_lifecycle_slurm.py",
    "tests/integration/test_run_fidelity_slurm.py",
    "tests/integration/test_run_lifecycle.py",
    "tests/integration/test_workloads_slurm.py",
    "tests/kubelet/test_kubelet_daemon_slurm.py",
    "tests/kubelet/test_kubelet_pilot_slurm.py",
    "tests/kubelet/test_kubelet_pull_slurm.py",
    "tests/kubelet/test_kubelet_security_slurm.py",
})


def group_of(item: pytest.Item) -> str:
    """The Slurm lane of a ``slurm`` test, else its module's path."""
    module = item.nodeid.partition("::")[0]
    if item.get_closest_marker("slurm") is None:
        return module
    return LANES[1] if module in SECOND_LANE else LANES[0]


def wanted(config: pytest.Config) -> bool:
    """Whether this is the controller of an ``--dist loadgroup`` run (not a worker, not a plain run)."""
    return not hasattr(config, "workerinput") and config.getoption("dist", "no") == "loadgroup"


def make_file() -> None:
    """In the controller, before the workers start (they inherit the environment)."""
    fd, path = tempfile.mkstemp(prefix="hpk-xdist-groups-", suffix=".json")
    os.close(fd)
    os.environ[ENV] = path


def remove_file() -> None:
    path = os.environ.pop(ENV, "")
    if path:
        for p in (path, f"{path}.lock", f"{path}.turn"):
            Path(p).unlink(missing_ok=True)


def write(items: Sequence[pytest.Item]) -> None:
    """In a worker: every collected test's group (both workers write the same, each atomically)."""
    path = os.environ.get(ENV)
    if not path:
        return
    tmp = Path(f"{path}.{os.getpid()}")
    tmp.write_text(json.dumps({item.nodeid: group_of(item) for item in items}))
    os.replace(tmp, path)


class NodeLock:
    """A readers-writer lock between the workers (``flock``): ``slurm`` modules share it, a
    ``whole_node`` module holds it alone. A writer takes the turnstile first and keeps it while it
    waits, so no new reader slips in before it (writers are not starved)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None
        self.module = ""
        self.exclusive = False

    def enter(self, module: str, *, exclusive: bool) -> None:
        if self.fd is not None:
            if exclusive == self.exclusive:
                self.module = module  # the same module, or the next whole_node one: kept
                return
            self.leave()
        turn = os.open(f"{self.path}.turn", os.O_RDWR | os.O_CREAT, 0o600)
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(turn, fcntl.LOCK_EX)  # a writer holds it until it has the lock
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            os.close(turn)  # closing releases the turnstile
        self.fd, self.module, self.exclusive = fd, module, exclusive

    def leave(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock
            self.fd, self.module = None, ""


_lock: NodeLock | None = None


def _module(item: pytest.Item | None) -> str:
    return item.nodeid.partition("::")[0] if item is not None else ""


def enter(item: pytest.Item) -> None:
    """Before a ``slurm`` test's setup, in a worker: take the lock for its module (once per module)."""
    global _lock
    path = os.environ.get(ENV)
    if not path or not hasattr(item.config, "workerinput") or item.get_closest_marker("slurm") is None:
        return
    if _lock is None:
        _lock = NodeLock(path)
    _lock.enter(_module(item), exclusive=_whole_node(item))


def _whole_node(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("whole_node") is not None


def leave(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After a test's teardown: give the lock back once the next test is of another module (its module
    fixtures, torn down with this test, have ended), unless both need the whole node."""
    if _lock is None or not _lock.module or _module(nextitem) == _lock.module:
        return
    if not (_lock.exclusive and _whole_node(nextitem)):
        _lock.leave()


def scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduling with the groups the workers wrote as scopes, the Slurm lanes first."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # first asked in schedule(), once every worker has collected
                self.groups = json.loads(Path(os.environ[ENV]).read_text())
            return self.groups.get(nodeid) or nodeid.partition("::")[0]

        def _assign_work_unit(self, node: Any) -> None:
            for lane in reversed(LANES):  # each lane to a worker of its own before any other module
                if lane in self.workqueue:
                    self.workqueue.move_to_end(lane, last=False)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)

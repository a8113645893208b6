"""ci/test's two pytest-xdist workers (``-n 2 --dist loadgroup``): every ``slurm`` test runs on one
worker, in file order, and the rest runs beside it, a whole module at a time.

Why: the Slurm tests mostly wait (for jobs, a kubelet, a time limit) and share state that one run at
a time must own: the single-node Slurm's capacity, the jobs they count in squeue, ~hpk/.hpk. The other
tests are CPU-bound (translation, golden scripts, mypy) or start their own stand-in servers on free
ports, so they fill the waits. A module's tests stay together so that its module fixtures start once.

How: pytest-xdist's own loadgroup reads ``xdist_group`` marks by renaming ``item._nodeid``, which
pytest 9.2 no longer reads, so every test landed anywhere. Instead each worker writes the group of
every test it collected to the file named by ``$HPK_XDIST_GROUPS`` (the controller makes it before it
starts the workers), and the controller's scheduler (xdist's LoadScopeScheduling, one scope per group)
reads it once all workers have collected.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ENV = "HPK_XDIST_GROUPS"


def group_of(item: pytest.Item) -> str:
    """``slurm`` for a test that uses the real Slurm, else its module's path."""
    return "slurm" if item.get_closest_marker("slurm") is not None else item.nodeid.partition("::")[0]


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
        Path(path).unlink(missing_ok=True)


def write(items: Sequence[pytest.Item]) -> None:
    """In a worker: every collected test's group (both workers write the same, each atomically)."""
    path = os.environ.get(ENV)
    if not path:
        return
    tmp = Path(f"{path}.{os.getpid()}")
    tmp.write_text(json.dumps({item.nodeid: group_of(item) for item in items}))
    os.replace(tmp, path)


def scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduling with the groups the workers wrote as scopes."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # first asked in schedule(), once every worker has collected
                self.groups = json.loads(Path(os.environ[ENV]).read_text())
            return self.groups.get(nodeid) or nodeid.partition("::")[0]

    return GroupScheduling(config, log)

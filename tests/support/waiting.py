"""Waiting on another thread, process or job: a condition with a deadline, never a fixed sleep.

A fixed ``time.sleep(n)`` before an assertion is a race: on a loaded machine ``n`` is too short and
the test fails, on an idle one it wastes time. :func:`wait_for` polls the condition instead, first
often (a thread answers in milliseconds), then at most every ``every`` seconds (a kubectl or squeue
call costs a process), and fails naming what it waited for and the last answer it got.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
#: how long a wait may run on while Slurm keeps the awaited job pending for capacity, and its step
QUEUED_LIMIT = 600.0
QUEUED_STEP = 10.0


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float = 60, every: float = 0.3,
             queued: Callable[[], str] | None = None, queued_limit: float = QUEUED_LIMIT) -> T:
    """``probe()``'s first true answer; ``AssertionError`` if none came within ``timeout`` seconds.

    ``queued`` (for a wait on a pod's Slurm job): asked once the deadline has passed, it names the jobs
    Slurm keeps pending for capacity (reason ``Resources``/``Priority``: the shared node is full of other
    users' jobs), and while it does the deadline moves on by :data:`QUEUED_STEP`, up to ``queued_limit``
    seconds in all. Time in Slurm's queue is the node's load, not the component under test; the
    failure says which jobs waited."""
    start = time.monotonic()
    deadline = start + timeout
    pause = min(0.01, every)
    last: T | None = None
    waited = ""
    while True:
        last = probe()
        if last:
            return last
        now = time.monotonic()
        if now >= deadline:
            why = queued() if queued is not None else ""
            if why and now - start < queued_limit:
                waited, deadline = why, now + QUEUED_STEP
                continue
            extra = f" (queued for capacity at some point: {waited})" if waited else ""
            raise AssertionError(f"timed out after {now - start:.0f} s waiting for {what}{extra}; last: {last!r}")
        time.sleep(pause)
        pause = min(pause * 2, every)


def wait_rewritten(what: str, path: Path, *, timeout: float = 60) -> None:
    """Until ``path`` exists and has then been written again (its mtime changed): for a file a loop
    rewrites each round, e.g. a probe's try output (``run/<c>.<kind>.probe``, rewritten as each try
    starts), a second round has begun, so the first one ended."""
    first = wait_for(f"{what} (a first time)", lambda: path.exists() and path.stat().st_mtime_ns, timeout=timeout)
    wait_for(f"{what} (again)", lambda: path.stat().st_mtime_ns != first, timeout=timeout)

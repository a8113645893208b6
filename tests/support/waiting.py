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


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float = 60, every: float = 0.3) -> T:
    """``probe()``'s first true answer; ``AssertionError`` if none came within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = min(0.01, every)
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last: {last!r}")
        time.sleep(pause)
        pause = min(pause * 2, every)


def wait_rewritten(what: str, path: Path, *, timeout: float = 60) -> None:
    """Until ``path`` exists and has then been written again (its mtime changed): for a file a loop
    rewrites each round, e.g. a probe's try output (``run/<c>.<kind>.probe``, rewritten as each try
    starts), a second round has begun, so the first one ended."""
    first = wait_for(f"{what} (a first time)", lambda: path.exists() and path.stat().st_mtime_ns, timeout=timeout)
    wait_for(f"{what} (again)", lambda: path.stat().st_mtime_ns != first, timeout=timeout)

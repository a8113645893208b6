"""The one polling helper: every "ask again until done" loop in hpkctl goes through here.

Slurm is polled with growing intervals (0.5, 1, 2, 4, 8 s, the last repeating), as submitit does:
a short job is noticed quickly, a long one costs slurmctld one call every few seconds. Local files
are cheap and are read at a fixed, short interval; :class:`Schedule` lets such a loop ask Slurm only
when its own back-off says so. ``sleep`` and ``clock`` are parameters so tests never wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

DEFAULT_BACKOFF: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)


class Schedule:
    """A polling schedule (not a failure back-off: that is :class:`hpkctl.backoff.Backoff`): growing
    intervals, the last one repeating. ``due()`` says whether the next call is due now."""

    def __init__(self, intervals: Sequence[float] = DEFAULT_BACKOFF, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not intervals:
            raise ValueError("a back-off needs at least one interval")
        self._intervals = tuple(intervals)
        self._clock = clock
        self._attempt = 0
        self._next = float("-inf")

    def interval(self) -> float:
        """The wait after the current attempt."""
        return self._intervals[min(self._attempt, len(self._intervals) - 1)]

    def advance(self) -> float:
        """Count one attempt; return the wait before the next."""
        wait = self.interval()
        self._attempt += 1
        self._next = self._clock() + wait
        return wait

    def due(self) -> bool:
        """True (and one attempt counted) when the back-off allows a call now."""
        if self._clock() < self._next:
            return False
        self.advance()
        return True


def poll(step: Callable[[], T | None], *, every: float | Sequence[float] = DEFAULT_BACKOFF,
         timeout: float | None = None, what: str = "the condition",
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> T:
    """Call ``step`` until it returns something other than ``None``; return that.

    ``every`` is a fixed interval or a back-off sequence. Raises ``TimeoutError`` naming ``what``
    when ``timeout`` seconds pass first (``step`` always runs at least once).
    """
    backoff = Schedule((every,) if isinstance(every, (int, float)) else every, clock=clock)
    deadline = None if timeout is None else clock() + timeout
    while True:
        result = step()
        if result is not None:
            return result
        if deadline is not None and clock() >= deadline:
            raise TimeoutError(f"{what}: not reached after {timeout:g} s")
        sleep(backoff.advance())

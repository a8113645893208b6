"""The one back-off of hpkctl: exponential, capped, with jitter.

Every "that failed, try again later" goes through :class:`Backoff`: the pod reflectors' re-watch,
the kubelet's per-pod retries (a refused status patch, an unreachable API server or slurmctld, a
missing ConfigMap), the node status loop and the scheduler's unschedulable pods. Each delay is drawn
from [d/2, d] of the current step d, so that many clients cut off together do not come back
together. ``rng`` is a parameter so tests get the same draws every time.

(:class:`hpkctl.jobs.poll.Schedule`, the growing intervals at which a job is asked whether it
ended, is a polling schedule, not a back-off: a job that has not ended yet is not a failure.)
"""

from __future__ import annotations

import random


class Backoff:
    """``initial`` seconds, doubling per failure up to ``cap``; :meth:`reset` after a success."""

    def __init__(self, *, initial: float = 0.8, cap: float = 30.0, rng: random.Random | None = None) -> None:
        if initial <= 0 or cap < initial:
            raise ValueError(f"Backoff needs 0 < initial <= cap, got initial={initial}, cap={cap}")
        self.initial = initial
        self.cap = cap
        self.failures = 0
        self._rng = rng or random.Random()

    def step(self) -> float:
        """The current step d, before jitter (the longest the next delay can be)."""
        return float(min(self.cap, self.initial * 2.0 ** min(self.failures, 30)))

    def next(self) -> float:
        """Count one failure; the delay before the next attempt, in [d/2, d]."""
        d = self.step()
        self.failures += 1
        return d * (0.5 + self._rng.random() / 2)

    def reset(self) -> None:
        self.failures = 0

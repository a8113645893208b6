"""What the pilot provider (:mod:`hpkctl.provider.pilotpod`) knows of each pod besides its record, and
the queue of the pods waiting for room, longest waiting first.

The queue is an ordered dict of uids, so the pods to wake when room frees are its first few, and the
needs a tick plans for come in waiting order: no sort or scan of every pod per freed room or per
retry (a backlog of N pods made each of those O(N), and the retries O(N^2) a second). Not locked
itself: the provider holds its lock around every call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from hpkctl.jobs.steps import StepProcess
from hpkctl.pilot.plan import Need


@dataclass
class PilotPod:
    """One pod: the room it waits for, the srun of its step, and how far its delete has got."""

    waiting: Need | None = None  # booked nowhere yet: create is asked again once an allocation has room
    wake: Callable[[str], None] | None = None  # the front end's inputs.ready: re-queue it now, room freed
    step: StepProcess | None = None  # the srun of its step, while this process started it
    deleting: bool = False  # a delete has begun (the status rounds leave it to the delete)
    term_sent: float | None = None  # monotonic time the step's task got TERM (the stop sequence began)
    cancelled: float | None = None  # monotonic time the step was cancelled (the delete's last part)


class PilotBook:
    """Every pod's :class:`PilotPod` by uid, and the uids waiting for room in the order they began."""

    def __init__(self) -> None:
        self.pods: dict[str, PilotPod] = {}
        self._queue: dict[str, None] = {}  # insertion order: the order the pods began to wait
        self.ticked = 0.0  # monotonic time of the last tick for the waiting pods (the provider's)

    def pod(self, uid: str) -> PilotPod:
        """The pod's state, made on first use."""
        return self.pods.setdefault(uid, PilotPod())

    def wait(self, uid: str, need: Need, wake: Callable[[str], None] | None) -> bool:
        """The pod waits for room for ``need``; True when it began to wait now (it was not waiting)."""
        state = self.pod(uid)
        began = state.waiting is None
        if began:
            self._queue[uid] = None
        state.waiting, state.wake = need, wake
        return began

    def stop_waiting(self, uid: str) -> PilotPod:
        """The pod waits no more (placed, or being deleted); its state."""
        state = self.pod(uid)
        state.waiting, state.wake = None, None
        self._queue.pop(uid, None)
        return state

    def drop(self, uid: str) -> bool:
        """Forget the pod (its step ended, or its delete is done); True when it was waiting for room."""
        self.pods.pop(uid, None)
        waited = uid in self._queue
        self._queue.pop(uid, None)
        return waited

    def wait_turn(self, uid: str, need: Need, wake: Callable[[str], None] | None, *, now: float,
                  every: float) -> tuple[list[Need], bool]:
        """Pod ``uid`` found no room for ``need`` and waits (``wake`` re-queues it): the waiting pods'
        needs when a tick for them is due (the pod began to wait now, or no tick came within ``every``
        seconds; else []), and whether it is the pod that has waited longest."""
        due = self.wait(uid, need, wake) or now - self.ticked >= every
        if due:
            self.ticked = now
        return self.waiting() if due else [], next(iter(self._queue), None) == uid

    def head(self) -> tuple[str, Need, Callable[[str], None]] | None:
        """The pod that has waited longest, its need and its wake-up (None: none waits, or it has none)."""
        return next(iter(self.first_waiting(1)), None)

    def waiting(self) -> list[Need]:
        """The needs of the waiting pods, longest waiting first."""
        return [need for uid in self._queue if (need := self.pods[uid].waiting) is not None]

    def first_waiting(self, scan: int) -> list[tuple[str, Need, Callable[[str], None]]]:
        """The (at most ``scan``) pods that have waited longest, with their need and wake-up: the caller picks
        the ones a freed room fits, outside the lock (the pool's own lock is not taken under this one)."""
        return [(uid, state.waiting, state.wake) for uid in itertools.islice(self._queue, scan)
                if (state := self.pods[uid]).waiting is not None and state.wake is not None]

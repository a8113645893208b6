"""The one work queue of the kubelet and the scheduler: a bounded pool of workers fed by keys (pod
uids), with one entry per key.

- A key is never worked on by two workers at once; a key added while it is being worked on is
  worked on again afterwards (nothing is lost).
- Every add carries a deadline (now, or now + a delay: a back-off, a grace-period re-check); a key
  has one entry, and of two deadlines for it the earlier wins. So a watch event queues a pod at once
  even while it waits out a back-off (the pod's own gate then decides whether there is anything to
  do), and a hundred re-adds of a pod cost one run.
- Keys run in deadline order, each once its deadline has come; of the keys due, the ones ``urgent``
  says are urgent when they are added first (the kubelet's pods still to be submitted: their
  ``sbatch`` does not wait behind other pods' status patches, as in the real kubelet, whose pod
  workers are per pod and whose status manager writes on its own). The head start is bounded: once a
  key has been due for ``URGENT_LEAD`` seconds, the queue takes such keys and urgent ones in turn, so
  urgent keys that come back again and again (a pilot pod waiting for room, an sbatch retried) never
  starve status work and deletes, and a backlog slower than the lead (a loaded machine) never stops
  submitting while the status work that piled up meanwhile is sent (it went all first before: 200 pods
  on a loaded machine sent no sbatch for 6 s, 8 workers patching statuses).

The same shape as client-go's rate-limited workqueue, which virtual-kubelet uses; threads, because
the work is blocking calls (sbatch, the API client).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("hpkctl.workqueue")

_IDLE_WAIT = 1.0  # seconds a worker sleeps with nothing queued before it looks again (stop() wakes it)
URGENT_LEAD = 5.0  # seconds urgent keys may keep a due key waiting (a burst of 200 creates takes ~4-5 s here)


class WorkQueue:
    def __init__(self, handler: Callable[[str], None], *, workers: int, name: str = "pod",
                 clock: Callable[[], float] = time.monotonic, urgent: Callable[[str], bool] | None = None) -> None:
        self.handler = handler
        self.clock = clock
        self.urgent = urgent  # called with the queue's lock held: it must not add keys itself
        self._hot: list[tuple[float, int, str]] = []  # the urgent keys' entries, taken before _heap's
        self._cv = threading.Condition()
        self._due: dict[str, float] = {}  # key -> its one deadline (keys not being worked on)
        self._heap: list[tuple[float, int, str]] = []  # (deadline, seq, key); stale entries skipped
        self._active: set[str] = set()
        self._again: dict[str, float] = {}  # keys added while being worked on -> their earliest deadline
        self._seq = 0
        self._aged_turn = False  # with aged keys and urgent ones due, whose turn the next take is
        self._stopped = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
                         for i in range(workers)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def add(self, key: str) -> None:
        """Work on ``key`` as soon as a worker is free."""
        self.add_after(key, 0.0)

    def add_after(self, key: str, delay: float) -> None:
        """Work on ``key`` after ``delay`` seconds, unless it is already due earlier."""
        with self._cv:
            self._schedule(key, self.clock() + max(0.0, delay))

    def _schedule(self, key: str, when: float) -> None:
        """With the lock held: the earlier of ``when`` and the key's deadline wins."""
        if key in self._active:
            self._again[key] = min(when, self._again.get(key, when))
            return
        due = self._due.get(key)
        if due is not None and due <= when:
            return
        self._due[key] = when
        self._seq += 1
        heap = self._hot if self.urgent is not None and self.urgent(key) else self._heap
        heapq.heappush(heap, (when, self._seq, key))
        self._cv.notify()

    def _next(self, now: float) -> tuple[str | None, float | None]:
        """With the lock held: a key due at ``now`` (urgent ones first), taken off the queue; else
        None and the earliest deadline queued (None: nothing queued)."""
        for heap in (self._hot, self._heap):
            while heap and self._due.get(heap[0][2]) != heap[0][0]:
                heapq.heappop(heap)  # replaced by an earlier deadline, or taken already
        aged = bool(self._heap) and self._heap[0][0] <= now - URGENT_LEAD
        if aged and self._hot and self._hot[0][0] <= now:
            self._aged_turn = not self._aged_turn  # both waiting: in turn
            aged = self._aged_turn
        for heap in (self._heap, self._hot) if aged else (self._hot, self._heap):
            if heap and heap[0][0] <= now:
                _, _, key = heapq.heappop(heap)
                del self._due[key]
                return key, None
        return None, min((h[0][0] for h in (self._hot, self._heap) if h), default=None)

    def due(self, key: str) -> float | None:
        """The key's deadline (clock seconds), None when it is not queued."""
        with self._cv:
            return self._due.get(key, self._again.get(key))

    def urgent_pending(self) -> bool:
        """Whether an urgent key is due now and waits for a worker (the kubelet: a pod due to be submitted;
        not one being worked on, nor one in a back-off)."""
        if self.urgent is None:
            return False
        with self._cv:
            now = self.clock()
            return any(self._due.get(k) == when <= now for when, _, k in self._hot)

    def stop(self, *, timeout: float = 5.0) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))

    def idle(self) -> bool:
        """Nothing being worked on and nothing due now (keys waiting for a later deadline may be queued)."""
        with self._cv:
            now = self.clock()
            return not self._active and not any(when <= now for when in self._due.values())

    def drain(self, *, limit: int = 10000) -> int:
        """Work off every key due now on the calling thread, the keys they queue for now included;
        the number of runs. For a queue whose workers were not started (tests, one-thread callers)."""
        runs = 0
        while runs < limit:
            with self._cv:
                key, _ = self._next(self.clock())
            if key is None:
                return runs
            self.handler(key)
            runs += 1
        return runs

    def _take(self) -> str | None:
        """With the lock held: the next due key, waiting for it; None once stopped."""
        while not self._stopped:
            now = self.clock()
            key, next_due = self._next(now)
            if key is not None:
                return key
            self._cv.wait(_IDLE_WAIT if next_due is None else min(next_due - now, _IDLE_WAIT))
        return None

    def _work(self) -> None:
        while True:
            with self._cv:
                key = self._take()
                if key is None:
                    return
                self._active.add(key)
            try:
                self.handler(key)
            except Exception:  # noqa: BLE001 - a bad pod never takes a worker down
                log.exception("handling %s failed", key)
            finally:
                with self._cv:
                    self._active.discard(key)
                    if key in self._again:
                        self._schedule(key, self._again.pop(key))

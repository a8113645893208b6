"""A bounded pool of workers fed by keys (pod uids): one key is never worked on by two workers at
once, a key added while it is being worked on is worked on again afterwards (nothing is lost),
and a key can be re-added after a delay (back-off, grace-period deadlines).

The same shape as client-go's workqueue, which virtual-kubelet uses; threads, because the work is
blocking calls (sbatch, the API client).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger("hpkctl.workqueue")


class WorkQueue:
    def __init__(self, handler: Callable[[str], None], *, workers: int, name: str = "pod") -> None:
        self.handler = handler
        self._cv = threading.Condition()
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._delayed: list[tuple[float, int, str]] = []
        self._seq = 0
        self._stopped = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
                         for i in range(workers)]
        self._timer = threading.Thread(target=self._tick, name=f"{name}-delays", daemon=True)

    def start(self) -> None:
        for t in self._threads:
            t.start()
        self._timer.start()

    def add(self, key: str) -> None:
        with self._cv:
            self._enqueue(key)

    def _enqueue(self, key: str) -> None:
        """With the lock held: queue ``key`` once, or mark it to run again after the worker holding it."""
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)
            self._cv.notify_all()

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cv:
            self._seq += 1
            heapq.heappush(self._delayed, (time.monotonic() + delay, self._seq, key))
            self._cv.notify_all()

    def stop(self, *, timeout: float = 5.0) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads + [self._timer]:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))

    def idle(self) -> bool:
        with self._cv:
            return not (self._queue or self._active)

    def _tick(self) -> None:
        with self._cv:
            while not self._stopped:
                now = time.monotonic()
                while self._delayed and self._delayed[0][0] <= now:
                    _, _, key = heapq.heappop(self._delayed)
                    self._enqueue(key)
                wait = self._delayed[0][0] - now if self._delayed else 1.0
                self._cv.wait(min(max(wait, 0.01), 1.0))

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._stopped:
                    self._cv.wait()
                if self._stopped:
                    return
                key = self._queue.popleft()
                self._queued.discard(key)
                self._active.add(key)
            try:
                self.handler(key)
            except Exception:  # noqa: BLE001 - a bad pod never takes a worker down
                log.exception("handling %s failed", key)
            finally:
                with self._cv:
                    self._active.discard(key)
                    if key in self._dirty:
                        self._dirty.discard(key)
                        self._enqueue(key)

"""The status loop's pause between rounds, cut short when a pod says it changed.

In pilot mode the kubelet holds each pod's ``srun``, and a pod's script writes a line on its step's
output after each status change (``HPK_NOTIFY``, :meth:`hpkctl.jobs.steps.StepProcess.wait_changes`):
the provider then :meth:`Wake.poke`\\ s the loop, whose next round reads the change log at once instead
of up to ``[kubelet] status_poll`` later (bench/run pilot: "c.started -> phase Running seen" was
0.27 s median at status_poll 0.5 s). A round stays what it was, one readdir of the change log and the
files of the pods that changed, and rounds stay ``least`` apart however many pods poke; the files
remain the record (a restarted kubelet, or a pod whose srun it does not hold, is seen by the rounds
every ``status_poll`` as before).
"""

from __future__ import annotations

import threading
import time

LEAST = 0.02  # seconds between the starts of two rounds, however many pods poke


class Wake:
    def __init__(self, stop: threading.Event, *, least: float = LEAST) -> None:
        self._stop = stop
        self._poked = threading.Event()
        self.least = least
        self.pokes = 0  # how many times a pod said it changed (tests, bench)

    def poke(self) -> None:
        """A pod wrote a status change (any thread): the next round starts now, or ``least`` after
        the last one began."""
        self.pokes += 1
        self._poked.set()

    def begin(self) -> float:
        """A round begins: pokes from now on count for the next one. Its start (monotonic)."""
        self._poked.clear()
        return time.monotonic()

    def pause(self, every: float, began: float) -> None:
        """Until ``every`` seconds after the round that ``began``, a poke, or stop; at least ``least``
        after it began."""
        first = began + self.least - time.monotonic()
        if first > 0 and self._stop.wait(first):
            return
        left = began + every - time.monotonic()
        if left > 0 and not self._stop.is_set():
            self._poked.wait(left)

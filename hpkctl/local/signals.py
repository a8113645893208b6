"""SIGINT, SIGTERM and SIGHUP during ``hpkctl run``: stop following and cancel the job, exactly once.

The first of these signals raises :class:`Interrupted` (a ``KeyboardInterrupt``) in the main
thread, so whatever was running unwinds and the caller cancels the job. Every later signal is
only counted: ``timeout`` sends its signal to the child and then to the whole process group
(twice for us), ``runuser`` sends SIGTERM and, two seconds later, SIGKILL; a second signal must
not interrupt the cancel it caused.

Inside :meth:`Interrupts.deferred` (``sbatch`` until the run record holds the job id) a signal
is only remembered and raised when the block ends: killing ``sbatch`` half-way, or dying before
the job id is written down, is how a job ends up that nobody can see.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """hpkctl got SIGINT, SIGTERM or SIGHUP; ``signum`` says which (exit status ``128 + signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class Interrupts:
    """The handlers for :data:`SIGNALS`; ``install()`` once, in the main thread."""

    def __init__(self) -> None:
        self.received: list[int] = []  # every signal, in order
        self.raised = False
        self._deferring = 0
        self._previous: dict[int, Any] = {}

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None

    def install(self) -> Interrupts:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if not self.raised and not self._deferring:
            self.raised = True
            raise Interrupted(signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` now for a signal that came while deferred (once)."""
        if self.received and not self.raised and not self._deferring:
            self.raised = True
            raise Interrupted(self.received[0])

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Signals in this block are remembered, and raised when it ends (also when it fails)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        self.check()

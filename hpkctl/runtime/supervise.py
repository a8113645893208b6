"""Long-running child processes of the control-plane job: start, watch, stop in reverse order.

Each child gets its own session (a Ctrl-C in the terminal or a signal to the bootstrap's process group
does not reach it, so the bootstrap alone decides the order of shutdown), its stdout and stderr in one
log file (the previous run's kept as ``NAME.log.1``), and SIGTERM should the bootstrap die without
stopping it (``PR_SET_PDEATHSIG``). Stopping is SIGTERM, a bounded wait, then SIGKILL.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("hpkctl.supervise")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


@dataclass
class Child:
    """One started process: its name (``etcd``), command line, log file and start time."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]
    started: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        """Its exit status once it ended (``-N`` for signal N), else None."""
        return self.popen.poll()

    def stop(self, timeout: float) -> int:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; its exit status."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) did not stop within %.0f s of SIGTERM: SIGKILL", self.name, self.pid, timeout)
                self.popen.kill()
        return self.popen.wait()

    def tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of its log (for error messages)."""
        try:
            with open(self.log, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 64 * 1024))
                text = fh.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def describe_status(status: int) -> str:
    """``exit status 2`` or ``killed by SIGKILL`` for a Popen returncode."""
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


def rotate(path: Path) -> None:
    """Keep the previous run's log as ``NAME.log.1`` (one generation)."""
    if path.exists():
        os.replace(path, path.with_name(path.name + ".1"))


class Supervisor:
    """Starts children in order and stops them in reverse order."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def start(self, name: str, argv: Sequence[str], *, log_file: Path, env: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> Child:
        """Start ``argv`` with stdin from /dev/null and its output to ``log_file``. Raises ``OSError``
        (e.g. FileNotFoundError) when it cannot be started at all."""
        rotate(log_file)
        fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            popen = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                     env=dict(env) if env is not None else None, cwd=cwd,
                                     start_new_session=True, preexec_fn=_die_with_parent, close_fds=True)
        finally:
            os.close(fd)
        child = Child(name, list(argv), log_file, popen)
        self.children.append(child)
        log.info("%s: started (pid %d), log %s", name, child.pid, log_file)
        return child

    def exited(self) -> Child | None:
        """The first child (in start order) that has ended, else None."""
        return next((c for c in self.children if c.poll() is not None), None)

    def stop_all(self, timeout: float) -> list[tuple[str, int]]:
        """Stop every child, last started first; ``(name, exit status)`` in stop order."""
        done = []
        for child in reversed(self.children):
            running = child.poll() is None
            if running:
                log.info("%s: stopping (pid %d)", child.name, child.pid)
            status = child.stop(timeout)
            if running:
                log.info("%s: stopped (%s)", child.name, describe_status(status))
            done.append((child.name, status))
        self.children.clear()
        return done


__all__ = ["Child", "Supervisor", "describe_status", "rotate"]

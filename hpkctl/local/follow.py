"""Following a run: its containers' logs and its progress, until the pod ends, through its provider.

The pod's status is the provider's (``pod_statuses``), read every ``FILE_POLL`` seconds (one pod: a
handful of metadata operations); Slurm is asked once at the start (a job Slurm will never start is
pending for that reason at once) and then every ``slurm_poll`` seconds (``[kubelet] slurm_poll``,
10 s: the provider keeps Slurm's answer that long), only for what the files cannot say: pending and
why, or the job killed by Slurm. When the status says the pod is done, ``settle`` asks a few times
more, with back-off, for Slurm's final state (TIMEOUT, OOM). The logs are the files the provider names
(``log_file``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO, TextIO

from hpkctl.jobs import TERMINAL_STATES, SlurmError
from hpkctl.jobs.poll import Schedule, poll
from hpkctl.local.runs import NeverStarts
from hpkctl.pod.status import PodStatus, containers_of, restart_policies
from hpkctl.provider import Failure, PodProvider, PodRef
from hpkctl.provider.runrecords import RunRecord

FILE_POLL = 0.2
SLURM_POLL = 10.0  # [kubelet] slurm_poll's default: at most one squeue per 10 s while following
SETTLE_POLL = (0.5, 1.0, 2.0)
SETTLE_TIMEOUT = 5.0


class LogTail:
    """Follows the containers' log files (and their replacements after a restart).

    Each line goes out as it is, or ``[LABEL] line``: ``labels`` maps a container to its label
    (``pod/NAME/CONTAINER`` for a workload's pods, as ``kubectl logs -f --prefix``); without it the
    containers in ``prefixed`` (default: all) are labelled with their name.

    A file stays open while it is followed: when a restart moves it away (to ``<c>.previous.log``,
    or a retried Job pod's ``attempts/N/``) and a new one takes its name, the rest of the old one is
    still read through the open file first, so no line written just before the restart is lost."""

    def __init__(self, log_file: Callable[[str], Path | None], names: list[str], out: TextIO, *,
                 prefixed: set[str] | None = None, labels: Mapping[str, str] | None = None) -> None:
        self.log_file = log_file  # container -> its current log, None before it has one (the provider's)
        self.names = names
        self.open: dict[str, BinaryIO] = {}
        chosen = set(names) if prefixed is None else prefixed
        self.labels = dict(labels) if labels is not None else {n: n for n in names if n in chosen}
        self.out = out
        self.partial = dict.fromkeys(names, b"")

    def pump(self, *, final: bool = False) -> None:
        """Print the lines written since the last call; ``final``: also an unfinished last line, and
        close the files."""
        for name in self.names:
            fh = self.open.get(name)
            if fh is not None:
                self._emit(name, fh.read())
            path = self.log_file(name)
            try:
                current = os.stat(path).st_ino if path is not None else None
            except FileNotFoundError:
                current = None
            if current is not None and (fh is None or os.fstat(fh.fileno()).st_ino != current):
                if fh is not None:  # the old run's file was read to its end above
                    self._emit(name, b"", flush=True)
                    fh.close()
                try:
                    assert path is not None
                    fh = self.open[name] = open(path, "rb")  # noqa: SIM115 (kept open on purpose)
                except FileNotFoundError:
                    self.open.pop(name, None)
                    continue
                self._emit(name, fh.read())
            if final:
                self._emit(name, b"", flush=True)
                if name in self.open:
                    self.open.pop(name).close()
        self.out.flush()

    def _emit(self, name: str, data: bytes, *, flush: bool = False) -> None:
        lines = (self.partial[name] + data).split(b"\n")
        self.partial[name] = b"" if flush else lines.pop()
        for line in lines if not flush else [x for x in lines if x]:
            text = line.decode("utf-8", "replace")
            self.out.write(f"[{self.labels[name]}] {text}\n" if name in self.labels else f"{text}\n")


def describe(st: PodStatus, *, with_message: bool | None = None) -> str:
    """``Phase (Reason): message``; by default without the message while running (it only says "running")."""
    base = st.phase + (f" ({st.reason})" if st.reason and st.reason != st.phase else "")
    if with_message is None:
        with_message = st.phase != "Running"
    return f"{base}: {st.message}" if st.message and with_message else base


def result_line(rec: RunRecord, st: PodStatus) -> str:
    where = f"pilot allocation {rec.allocation}" if rec.allocation else f"Slurm job {rec.job_id}"
    return f"pod {rec.namespace}/{rec.name} ({where}): {describe(st, with_message=True)}"


def _ref(rec: RunRecord) -> PodRef:
    return PodRef(rec.uid, rec.namespace, rec.name)


def _status(provider: PodProvider, rec: RunRecord, *, fresh: bool, now: float | None = None) -> PodStatus:
    st = provider.pod_statuses([_ref(rec)], fresh=fresh, now=now)[rec.uid]
    assert isinstance(st, PodStatus), "a workload is followed by hpkctl.local.arrayfollow"
    return st


def follow_run(provider: PodProvider, rec: RunRecord, *, out: TextIO, log_out: TextIO, quiet: bool = False,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> PodStatus:
    """Stream logs and progress until the pod finishes; return its final status.

    ``provider`` knows ``rec`` (``know``). ``NeverStarts`` when Slurm keeps the job pending for a
    reason waiting cannot clear (the caller deletes the pod)."""
    pod = rec.pod()
    ref = _ref(rec)
    containers = containers_of(pod)
    names = [n for n, _ in containers]
    mains = [n for n, init in containers if not init]
    # One main container: its output unprefixed (like kubectl logs); otherwise "[name] line".
    prefixed = {n for n, init in containers if init or len(mains) > 1}
    tail = LogTail(lambda n: provider.log_file(rec.uid, n), names, log_out, prefixed=prefixed)
    state = {"line": ""}

    def step() -> PodStatus | None:
        try:
            st: PodStatus | None = _status(provider, rec, fresh=False, now=clock())
        except SlurmError as exc:  # a busy or restarting slurmctld: keep following the files
            print(f"hpkctl: warning: cannot ask Slurm about job {rec.job_id} ({exc.message}); retrying", file=out)
            st = None
        tail.pump()
        if st is None:
            return None
        if st.finished and (st.job is None or st.job.state != "COMPLETING"):
            final = settle(provider, rec, sleep=sleep, clock=clock)  # TIMEOUT/OOM reported as such
            tail.pump(final=True)
            return final
        problem = provider.unstartable(ref, pod, now=clock())
        if isinstance(problem, Failure):
            if problem.message.startswith("lowering"):
                print(f"hpkctl: warning: {problem.message}", file=out)
            raise NeverStarts(rec, st)
        if problem is not None:
            print(f"hpkctl: warning: {problem.message}", file=out)
        line = describe(st)
        if not quiet and line != state["line"]:
            extra = f" on {st.node}" if st.phase == "Running" and st.node else ""
            print(f"pod {rec.namespace}/{rec.name} (Slurm job {rec.job_id}): {line}{extra}", file=out)
            state["line"] = line
        return None

    return poll(step, every=FILE_POLL, sleep=sleep, clock=clock)


def settle(provider: PodProvider, rec: RunRecord, *, sleep: Callable[[float], None] = time.sleep,
           clock: Callable[[], float] = time.monotonic) -> PodStatus:
    """The job's final status, waiting briefly for Slurm to record it (COMPLETING → final)."""
    last: list[PodStatus] = []

    def step() -> PodStatus | None:
        st = _status(provider, rec, fresh=True)
        last[:] = [st]
        return st if st.job is not None and st.job.state in TERMINAL_STATES else None

    try:
        return poll(step, every=SETTLE_POLL, timeout=SETTLE_TIMEOUT, sleep=sleep, clock=clock)
    except TimeoutError:
        return last[0]


def follow_logs(provider: PodProvider, rec: RunRecord, container: str, *, out: TextIO, slurm_poll: float = SLURM_POLL,
                sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
    """``logs -f``: print the container's log as it grows, across restarts, until it will not run again
    (the provider says its log is complete, or the pod's status, with Slurm asked every
    ``slurm_poll``, says it finished)."""
    tail = LogTail(lambda n: provider.log_file(rec.uid, n), [container], out, prefixed=set())
    policy = restart_policies(rec.pod()).get(container, "Never")
    ask = Schedule((slurm_poll,), clock=clock)

    def step() -> bool | None:
        tail.pump()
        if provider.log_complete(rec.uid, container, policy=policy) or ask.due() and _status(
                provider, rec, fresh=True).finished:
            tail.pump(final=True)
            return True
        return None

    poll(step, every=FILE_POLL, sleep=sleep, clock=clock)

"""Following a run: its containers' logs and its progress, until the pod ends.

The run's own files are read every ``FILE_POLL`` seconds (one pod: a handful of metadata
operations); Slurm is asked once at the start (a job Slurm will never start is pending for that
reason at once) and then every ``slurm_poll`` seconds (``[kubelet] slurm_poll``, 10 s), only for
what the files cannot say: pending and why, or the job killed by Slurm. When the files say the pod
is done, ``settle`` asks a few times more, with back-off, for Slurm's final state (TIMEOUT, OOM).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO, TextIO

from hpkctl.jobs import TERMINAL_STATES, JobInfo, Slurm, SlurmError
from hpkctl.jobs.poll import Schedule, poll
from hpkctl.provider.runrecords import RunRecord
from hpkctl.local.runs import NeverStarts, pod_status
from hpkctl.pod.lifecycle import grace_period
from hpkctl.provider.slurmjobs import (LOWERED_GRACE, deadline_limit, ended, lower_to_partition, lowered_note,
                                       never_starts)
from hpkctl.pod import paths as f
from hpkctl.pod.status import PodStatus, container_done, containers_of, read_pod_status, restart_policies

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

    def __init__(self, logs_dir: Path, names: list[str], out: TextIO, *, prefixed: set[str] | None = None,
                 labels: Mapping[str, str] | None = None) -> None:
        self.files = {n: logs_dir / f"{n}.log" for n in names}
        self.open: dict[str, BinaryIO] = {}
        chosen = set(names) if prefixed is None else prefixed
        self.labels = dict(labels) if labels is not None else {n: n for n in names if n in chosen}
        self.out = out
        self.partial = dict.fromkeys(names, b"")

    def pump(self, *, final: bool = False) -> None:
        """Print the lines written since the last call; ``final``: also an unfinished last line, and
        close the files."""
        for name, path in self.files.items():
            fh = self.open.get(name)
            if fh is not None:
                self._emit(name, fh.read())
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
            if current is not None and (fh is None or os.fstat(fh.fileno()).st_ino != current):
                if fh is not None:  # the old run's file was read to its end above
                    self._emit(name, b"", flush=True)
                    fh.close()
                try:
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


def follow_run(slurm: Slurm, rec: RunRecord, *, out: TextIO, log_out: TextIO, quiet: bool = False,
               slurm_poll: float = SLURM_POLL, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> PodStatus:
    """Stream logs and progress until the pod finishes; return its final status.

    ``NeverStarts`` when Slurm keeps the job pending for a reason waiting cannot clear (the caller
    cancels it)."""
    pod = rec.pod()
    spec = pod.get("spec") or {}
    grace = grace_period(spec)
    containers = containers_of(pod)
    names = [n for n, _ in containers]
    mains = [n for n, init in containers if not init]
    # One main container: its output unprefixed (like kubectl logs); otherwise "[name] line".
    prefixed = {n for n, init in containers if init or len(mains) > 1}
    tail = LogTail(rec.dir.logs_dir, names, log_out, prefixed=prefixed)
    ask = Schedule((slurm_poll,), clock=clock)
    state: dict[str, object] = {"job": None, "asked": False, "line": ""}

    def step() -> PodStatus | None:
        if ask.due():
            try:
                state["job"], state["asked"] = slurm.query([rec.job_id]).get(rec.job_id), True
            except SlurmError as exc:  # a busy or restarting slurmctld: keep following the files
                print(f"hpkctl: warning: cannot ask Slurm about job {rec.job_id} ({exc.message}); retrying",
                      file=out)
        job = state["job"] if isinstance(state["job"], JobInfo) else None
        tail.pump()
        files_done = rec.dir.exists(f.POD_DONE)
        if files_done and (job is None or job.state != "COMPLETING") or state["asked"] and ended(job):
            final = settle(slurm, rec, sleep=sleep, clock=clock)  # TIMEOUT/OOM reported as such
            tail.pump(final=True)
            return final
        st = read_pod_status(rec.dir.root, containers, job, job_known=bool(state["asked"]))
        if never_starts(job):
            lowered = state.get("lowered")
            deadline = deadline_limit(job, spec)
            if isinstance(lowered, (int, float)) and clock() - lowered < LOWERED_GRACE:
                pass  # Slurm has not looked at the lowered limit yet
            elif deadline and lowered is None:
                state["lowered"] = clock()
                try:
                    limit = lower_to_partition(slurm, rec.job_id, deadline)
                except SlurmError as exc:
                    print(f"hpkctl: warning: lowering job {rec.job_id}'s time limit failed: {exc.message}", file=out)
                    raise NeverStarts(rec, st) from None
                if not limit:
                    raise NeverStarts(rec, st)
                print(f"hpkctl: warning: {lowered_note(rec.job_id, limit, deadline=deadline, grace=grace)}", file=out)
            else:
                raise NeverStarts(rec, st)
        line = describe(st)
        if not quiet and line != state["line"]:
            extra = f" on {st.node}" if st.phase == "Running" and st.node else ""
            print(f"pod {rec.namespace}/{rec.name} (Slurm job {rec.job_id}): {line}{extra}", file=out)
            state["line"] = line
        return None

    return poll(step, every=FILE_POLL, sleep=sleep, clock=clock)


def settle(slurm: Slurm, rec: RunRecord, *, sleep: Callable[[float], None] = time.sleep,
           clock: Callable[[], float] = time.monotonic) -> PodStatus:
    """The job's final status, waiting briefly for Slurm to record it (COMPLETING → final)."""
    last: list[PodStatus] = []

    def step() -> PodStatus | None:
        st = pod_status(slurm, rec)
        last[:] = [st]
        return st if st.job is not None and st.job.state in TERMINAL_STATES else None

    try:
        return poll(step, every=SETTLE_POLL, timeout=SETTLE_TIMEOUT, sleep=sleep, clock=clock)
    except TimeoutError:
        return last[0]


def follow_logs(slurm: Slurm, rec: RunRecord, container: str, *, out: TextIO, slurm_poll: float = SLURM_POLL,
                sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
    """``logs -f``: print the container's log as it grows, across restarts, until it will not run again
    (its files say so, or Slurm, asked every ``slurm_poll``, says the job ended)."""
    tail = LogTail(rec.dir.logs_dir, [container], out, prefixed=set())
    policy = restart_policies(rec.pod()).get(container, "Never")
    ask = Schedule((slurm_poll,), clock=clock)

    def step() -> bool | None:
        tail.pump()
        if container_done(rec.dir, container, policy=policy) or ask.due() and ended(
                slurm.query([rec.job_id]).get(rec.job_id)):
            tail.pump(final=True)
            return True
        return None

    poll(step, every=FILE_POLL, sleep=sleep, clock=clock)

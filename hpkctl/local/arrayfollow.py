"""``hpkctl run`` of a workload, in the foreground: progress lines and the pods' logs.

Logs go out as ``kubectl logs -f --prefix`` prints them, ``[pod/NAME/CONTAINER] line``, beside the
progress lines. The cost stays that of following one pod per running element: Slurm is asked once
per due tick for every element (one ``squeue``, the caller's ``states``), and only the log files of
pods that have started (or whose element runs) and are not done yet are read, each from where the
last read stopped; a pod's files are read a last time once its index has a result or its element
has ended. A run too short to be seen between two reads (a retried Job pod that fails at once) may
be missed; ``hpkctl logs`` and the pod directory's ``attempts/N/`` keep every run's log.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import TextIO

from hpkctl.jobs import TERMINAL_STATES
from hpkctl.jobs.poll import Schedule
from hpkctl.local.follow import FILE_POLL, SLURM_POLL, LogTail
from hpkctl.pod.status import containers_of
from hpkctl.provider import PodRef
from hpkctl.provider.jobpod import JobPodProvider
from hpkctl.provider.runrecords import RunRecord
from hpkctl.provider.workloads import ArrayStatus, IndexStatus, WorkloadFile, member_of


class ArrayLogs:
    """The log files of a workload's pods (the provider's, each pod a run of its own), followed while
    each pod runs."""

    def __init__(self, provider: JobPodProvider, rec: RunRecord, info: WorkloadFile, out: TextIO) -> None:
        self.provider = provider
        self.rec = rec
        self.info = info
        self.out = out
        self.tails: dict[int, LogTail] = {}
        self.done: set[int] = set()

    def _tail(self, index: int) -> LogTail | None:
        if index not in self.tails:
            member = member_of(self.rec, self.info, index)
            try:
                names = [n for n, _ in containers_of(member.pod())]
            except (OSError, ValueError):
                return None
            self.provider.know(member)
            self.tails[index] = LogTail(functools.partial(self.provider.log_file, member.uid), names, self.out,
                                        labels={n: f"pod/{member.name}/{n}" for n in names})
        return self.tails[index]

    def pump(self, st: ArrayStatus | None, *, final: bool = False) -> None:
        """Read what the running pods wrote since the last call; ``st`` (the latest status) says
        which pods run; ``final``: every pod that ran, a last time."""
        for x in st.indexes if st is not None else []:
            running = x.pod.job is not None and x.pod.job.state == "RUNNING"  # between a Job pod's runs too
            if x.index in self.done or not (x.pod.started_at or running):
                continue
            tail = self._tail(x.index)
            if tail is None:
                continue
            last = final or _over(x)
            tail.pump(final=last)
            if last:
                self.done.add(x.index)


def _over(x: IndexStatus) -> bool:
    """Nothing more will be written to this pod's logs: its index has a result, or its element ended."""
    return x.result is not None or (x.pod.job is not None and x.pod.job.state in TERMINAL_STATES)


STATUS_POLL = 3.0  # seconds between reads of the pods' status files (the progress line)
SETTLE = (0.5, 1.0, 2.0, 4.0)  # asks of Slurm once the files say the workload finished


def follow_array(provider: JobPodProvider, rec: RunRecord, *, out: TextIO = sys.stderr, log_out: TextIO | None = None,
                 quiet: bool = False, slurm_poll: float = SLURM_POLL, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> ArrayStatus:
    """Progress lines (when the counts change) and, with ``log_out``, the pods' logs, until the
    workload has finished and its elements ended; its status is the provider's (``provider`` knows
    ``rec``).

    Slurm is asked (one ``squeue`` for every element) at the start and then every ``slurm_poll``
    seconds, as for one pod; the status files, which say most of what changes, every
    ``STATUS_POLL``. Once the files say the workload finished, Slurm is asked sooner (``SETTLE``)
    for the elements' end, so the command does not wait a whole ``slurm_poll`` to return."""
    info = WorkloadFile.read(rec.pod_dir)
    logs = ArrayLogs(provider, rec, info, log_out) if log_out is not None else None
    ref = PodRef(rec.uid, rec.namespace, rec.name)
    ask, settle, read = Schedule((slurm_poll,), clock=clock), Schedule(SETTLE, clock=clock), Schedule((STATUS_POLL,), clock=clock)
    last = ""
    st: ArrayStatus | None = None
    while True:
        asked = ask.due() or (st is not None and st.finished and settle.due())
        if asked or read.due():
            got = provider.pod_statuses([ref], fresh=asked, now=clock())[rec.uid]
            assert isinstance(got, ArrayStatus), f"{rec.kind} {rec.name} is not a workload"
            st = got
            line = f"{rec.kind.lower()} {rec.namespace}/{rec.name}: {st.phase}: {st.summary()}"
            if line != last and not quiet:
                print(line, file=out, flush=True)
                last = line
            elements_done = all(x.pod.job is None or x.pod.job.state in TERMINAL_STATES for x in st.indexes)
            if st.finished and elements_done and asked:
                if logs is not None:
                    logs.pump(st, final=True)
                return st
        if logs is not None:
            logs.pump(st)
        sleep(FILE_POLL)


__all__ = ["ArrayLogs", "follow_array"]

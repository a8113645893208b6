"""``hpkctl run --pilot`` of a workload (Job, Deployment, ReplicaSet, StatefulSet): its pods as steps.

Without ``--pilot`` each pod of a workload is an element of a job array whose script
(``sbatch/array.sh.j2`` + ``sbatch/array-runtime.sh``) runs the pod's own script and does what the
Job controller would: run a failed pod again as ``backoffLimit``/``backoffLimitPerIndex`` say, fail
the Job (``BackoffLimitExceeded``, ``MaxFailedIndexesExceeded``, its ``activeDeadlineSeconds``). In pilot
mode the same element script runs as a step of a shared allocation, so those rules are the same
code. This process is the array: it starts at most ``parallelism`` elements at once, and once the
Job failed it has the running ones stopped (their pods' stop sequences run) and starts no more. The
steps, their ids and the workload's files are the provider's
(:class:`hpkctl.provider.pilotelements.PilotElements`); this module decides what to start and when,
and prints. It has to run for the workload to go on, so ``--detach`` is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from hpkctl.jobs import Slurm
from hpkctl.local.arrayfollow import ArrayLogs
from hpkctl.local.arrays import ArrayStatus
from hpkctl.local.follow import FILE_POLL
from hpkctl.local.signals import Interrupts
from hpkctl.local.submit import PreparedRun
from hpkctl.provider.pilotelements import PilotElements
from hpkctl.provider.pilotpod import pilot_run_provider
from hpkctl.provider.runrecords import RunRecord


class PilotArray:
    """One workload's elements as steps, run by this process."""

    def __init__(self, slurm: Slurm, prep: PreparedRun, interrupts: Interrupts, *, parallelism: int,
                 out: TextIO, quiet: bool) -> None:
        self.slurm, self.prep = slurm, prep
        self.rec: RunRecord = prep.record
        self.provider = pilot_run_provider(slurm, prep.profile)
        self.elements = PilotElements(self.provider, self.rec, prep.rendered, guard=interrupts.deferred)
        self.limit = max(1, min(parallelism, self.elements.count))
        self.out, self.quiet = out, quiet
        self.todo = list(range(self.elements.count))

    def _start(self, index: int) -> None:
        name = self.elements.info.pods[index].name

        def waiting(message: str) -> None:
            if not self.quiet:
                print(f"pod {self.rec.namespace}/{name}: Pending: {message}", file=self.out)

        self.elements.create(index, on_wait=waiting)

    def status(self) -> ArrayStatus:
        return self.elements.status()

    def run(self, *, log_out: TextIO, sleep: Callable[[float], None] = time.sleep) -> ArrayStatus:
        logs = ArrayLogs(self.provider, self.rec, self.elements.info, log_out)
        last = ""
        while True:
            self.elements.reap()
            if self.elements.failed():  # the Job failed: its other pods are stopped, no more start
                self.todo.clear()
                self.elements.stop()
            if self.elements.deleted():  # deleted from another process: it stops the running pods
                self.todo.clear()
            while self.todo and len(self.elements.running) < self.limit and not self.elements.deleted():
                self._start(self.todo.pop(0))
            st = self.status()
            line = f"{self.rec.kind.lower()} {self.rec.namespace}/{self.rec.name} (pilot): {st.phase}: {st.summary()}"
            if line != last and not self.quiet:
                print(line, file=self.out, flush=True)
                last = line
            if not self.elements.running and not self.todo:
                logs.pump(st, final=True)
                return st
            logs.pump(st)
            sleep(FILE_POLL)

    def stop(self) -> None:
        """An interrupt of the run: the workload's delete, the provider's as from ``hpkctl delete``
        (:mod:`hpkctl.provider.pilotworkload`: no more pods start, each running pod's stop sequence,
        then its step is cancelled)."""
        from hpkctl.local.runs import stop_run

        self.todo.clear()
        if self.rec.allocation:  # a pod started: the record says where
            stop_run(self.slurm, self.prep.profile, self.rec, out=self.out)


__all__ = ["PilotArray"]

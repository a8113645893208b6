"""``hpkctl run --pilot`` of a workload (Job, Deployment, ReplicaSet, StatefulSet): its pods as steps.

Without ``--pilot`` each pod of a workload is an element of a job array whose script
(``sbatch/array.sh.j2`` + ``sbatch/array-runtime.sh``) runs the pod's own script and does what the
Job controller would: run a failed pod again as ``backoffLimit``/``backoffLimitPerIndex`` say, fail
the Job (``BackoffLimitExceeded``, ``MaxFailedIndexesExceeded``, its ``activeDeadlineSeconds``). In
pilot mode the same element script runs as a step of a shared allocation (``SLURM_ARRAY_TASK_ID=i
HPK_PILOT=1 bash job/job.sh``), so those rules are the same code. This process is the array: it
starts at most ``parallelism`` elements at once, each placed as a single pod is
(:mod:`hpkctl.pilot.shared`: seeing every process's steps, waiting Pending for room), and once the
Job failed (``status/job.failed``) it sends the running elements TERM (their pods' stop sequences
run) and starts no more. It has to run for the workload to go on, so ``--detach`` is refused.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from hpkctl.jobs import JobInfo, Slurm
from hpkctl.jobs.steps import StepProcess
from hpkctl.local.arrayfollow import ArrayLogs
from hpkctl.local.arrays import ArrayStatus, WorkloadFile, array_status
from hpkctl.local.follow import FILE_POLL
from hpkctl.local.signals import Interrupts
from hpkctl.local.submit import PreparedRun
from hpkctl.pilot.launch import need_of
from hpkctl.pilot.pool import Pool
from hpkctl.pilot.shared import place_and_start
from hpkctl.pod import paths as f
from hpkctl.pod.paths import POD_DELETING, PodDir
from hpkctl.provider.pilotpod import pilot_run_provider
from hpkctl.provider.runrecords import SUBMITTED, RunRecord, save_record

PILOT_ELEMENT = "pilot"  # element ids in the status the array code reads: pilot_<index>


@dataclasses.dataclass
class Element:
    """A running element: its srun and its step (``J.S``)."""

    proc: StepProcess
    step: str
    termed: bool = False


class PilotArray:
    """One workload's elements as steps, run by this process."""

    def __init__(self, slurm: Slurm, pool: Pool, prep: PreparedRun, interrupts: Interrupts, *, parallelism: int,
                 out: TextIO, quiet: bool) -> None:
        self.slurm, self.pool, self.prep, self.interrupts = slurm, pool, prep, interrupts
        self.rec: RunRecord = prep.record
        self.info = WorkloadFile.read(self.rec.pod_dir)
        self.limit = max(1, min(parallelism, self.info.count))
        self.out, self.quiet = out, quiet
        self.running: dict[int, Element] = {}
        self.ended: set[int] = set()
        self.todo = list(range(self.info.count))
        self.array = PodDir(Path(self.rec.pod_dir))
        self.need = need_of(prep.rendered)  # the pods of one template need the same

    def _start(self, index: int) -> None:
        member = self.info.pods[index]
        pod_dir = Path(member.dir)
        script = str(Path(self.rec.pod_dir) / "job" / "job.sh")

        def start(spot: tuple[str, str]) -> StepProcess:
            with self.interrupts.deferred():
                proc = self.slurm.start_step(
                    spot[0], ["/usr/bin/env", f"SLURM_ARRAY_TASK_ID={index}", "HPK_PILOT=1", "/bin/bash", script],
                    name=member.name, node=spot[1], cpus=self.need.cpus, memory_mb=self.need.memory_mb,
                    gpus=self.need.gpus, gres_name=self.prep.profile.gpu.gres_name,
                    output=Path(self.rec.pod_dir) / "logs" / f"element-{index}.out", workdir=pod_dir,
                    srun_log=pod_dir / "logs" / "srun.log")
                if self.rec.state != SUBMITTED:
                    self.rec.allocation, self.rec.state = spot[0], SUBMITTED
                    save_record(self.prep.profile, self.rec)
            return proc

        def waiting(message: str) -> None:
            if not self.quiet:
                print(f"pod {self.rec.namespace}/{member.name}: Pending: {message}", file=self.out)

        spot, proc = place_and_start(self.pool, dataclasses.replace(self.need, uid=member.uid), pod_dir, start,
                                     on_wait=waiting, immediate=self.prep.profile.slurm.command_timeout)
        step = (PodDir(pod_dir).read(f.JOB_ID) or "").strip()
        self.running[index] = Element(proc, step)

    def _reap(self) -> None:
        for i, el in list(self.running.items()):
            if el.proc.poll() is not None:
                del self.running[i]
                self.ended.add(i)

    def _term(self) -> None:
        """TERM to every running element's step once the Job failed (its trap stops its pod with the
        pod's stop sequence, and the pod says why: the Job's failure, not a delete)."""
        for el in self.running.values():
            if not el.termed:
                self.slurm.cancel_step(el.step, signal="TERM")
                el.termed = True

    def status(self) -> ArrayStatus:
        """The workload's state as the array code reads it: each element's "job" is its step's state here."""
        jobs: dict[str, JobInfo | None] = {f"{PILOT_ELEMENT}_{i}": JobInfo(f"{PILOT_ELEMENT}_{i}", "RUNNING")
                                          for i in self.running}
        jobs.update({f"{PILOT_ELEMENT}_{i}": JobInfo(f"{PILOT_ELEMENT}_{i}", "COMPLETED") for i in self.ended})
        return array_status(dataclasses.replace(self.rec, job_id=PILOT_ELEMENT), jobs, info=self.info)

    def run(self, *, log_out: TextIO, sleep: Callable[[float], None] = time.sleep) -> ArrayStatus:
        logs = ArrayLogs(pilot_run_provider(self.slurm, self.prep.profile), self.rec, self.info, log_out)
        last = ""
        while True:
            self._reap()
            if self.array.exists("job.failed"):  # the Job failed: its other pods are stopped, no more start
                self.todo.clear()
                self._term()
            if self.array.exists(POD_DELETING):  # deleted from another process: it stops the running pods
                self.todo.clear()
            while self.todo and len(self.running) < self.limit and not self.array.exists(POD_DELETING):
                self._start(self.todo.pop(0))
            st = self.status()
            line = f"{self.rec.kind.lower()} {self.rec.namespace}/{self.rec.name} (pilot): {st.phase}: {st.summary()}"
            if line != last and not self.quiet:
                print(line, file=self.out, flush=True)
                last = line
            if not self.running and not self.todo:
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

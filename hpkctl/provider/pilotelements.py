"""The pods that ``hpkctl run --pilot`` runs, a pod's or a workload's, as steps that process starts.

A pod alone (:func:`start_run_pod`) is placed and started as the kubelet's pilot provider starts one,
and its record says why it waits, then which allocation runs it.

Without ``--pilot`` a workload is a job array (:mod:`hpkctl.provider.workloads`). In pilot mode the
same element script runs as a step of a run pool allocation (``SLURM_ARRAY_TASK_ID=i HPK_PILOT=1 bash
job/job.sh``), placed as a single pod is (:mod:`hpkctl.pilot.shared`: every process's steps seen,
waiting Pending for room), so the Job controller's rules are the same code. The front end
(:mod:`hpkctl.local.pilotarray`) decides how many run at once and when to stop; this module is the
provider's side of it, shaped like a provider's operations: ``create`` of one element (its step, the
record naming the allocation), ``statuses`` (which elements run, which ended, the workload's status as
the array code reads it), ``stop`` (TERM to the running elements once the Job failed) and what the
workload's own directory says (the Job failed, or it was deleted from another process:
:mod:`hpkctl.provider.pilotworkload`). Nothing outside the provider reads those files or the steps' ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from hpkctl.jobs import JobInfo
from hpkctl.jobs.steps import StepProcess
from hpkctl.pilot.launch import is_mpi, need_of, start_pod_step, step_launch
from hpkctl.pilot.shared import place_and_start
from hpkctl.pod import RenderedPod
from hpkctl.pod.paths import JOB_ID, POD_DELETING, PodDir
from hpkctl.provider.pilotpod import PilotPodProvider
from hpkctl.provider.runrecords import SUBMITTED, RunRecord
from hpkctl.provider.workloads import ArrayStatus, WorkloadFile, array_status

Spot = tuple[str, str]  # (allocation, node)
PILOT_ELEMENT = "pilot"  # element ids in the status the array code reads: pilot_<index>
JOB_FAILED = "job.failed"  # the array runtime's mark in the workload's status/: the Job failed


def start_run_pod(provider: PilotPodProvider, rec: RunRecord, rendered: RenderedPod, *,
                  on_wait: Callable[[str], None],
                  guard: Callable[[], AbstractContextManager[object]] = nullcontext) -> tuple[Spot, StepProcess]:
    """Place ``rendered`` (the pod of ``rec``) in the run pool, seeing the steps of every run, and start
    its step; the record then names the allocation (``guard``: no signal between the step's start and
    that write). While no allocation has room the pod is Pending: the record says why (``hpkctl
    status``), and so does ``on_wait``."""
    need = need_of(rendered)
    provider.pool.adopt()  # the allocations earlier runs left held

    def waiting(message: str) -> None:
        rec.waiting = message
        provider.records.save(rec)
        on_wait(message)

    def start(spot: Spot) -> StepProcess:
        with guard():
            proc = start_pod_step(provider.slurm, rendered, spot, need)
            rec.job_id, rec.allocation, rec.state, rec.waiting = "", spot[0], SUBMITTED, ""
            provider.records.save(rec)
        return proc

    return place_and_start(provider.pool, need, Path(rec.pod_dir), start, on_wait=waiting,
                           immediate=provider.profile.slurm.command_timeout)


@dataclasses.dataclass
class _Element:
    """A running element: its srun and its pod's directory, where its script writes its step (``J.S``)."""

    proc: StepProcess
    pod_dir: PodDir
    termed: bool = False

    @property
    def step(self) -> str:
        return (self.pod_dir.read(JOB_ID) or "").strip()


class PilotElements:
    """One workload's elements as steps of the run pool (``provider``'s), started by this process."""

    def __init__(self, provider: PilotPodProvider, rec: RunRecord, rendered: RenderedPod, *,
                 guard: Callable[[], AbstractContextManager[object]] = nullcontext) -> None:
        self.provider, self.rec, self.guard = provider, rec, guard  # guard: no signal while a step starts
        self.info = WorkloadFile.read(rec.pod_dir)
        self.need = need_of(rendered)  # the pods of one template need the same
        self.mpi = is_mpi(rendered)  # an MPI template: each element's ranks are a step of their own
        self.array = PodDir(Path(rec.pod_dir))
        self.running: dict[int, _Element] = {}
        self.ended: set[int] = set()
        provider.pool.adopt()  # the allocations earlier runs left held

    @property
    def count(self) -> int:
        return self.info.count

    def create(self, index: int, *, on_wait: Callable[[str], None]) -> None:
        """Place element ``index`` where Slurm has room and start its step; the run record names the
        allocation once the first step started (``hpkctl delete`` and an interrupt stop the workload
        through it). Waits Pending (telling ``on_wait``) while no allocation has room."""
        member = self.info.pods[index]
        pod_dir = Path(member.dir)
        root = Path(self.rec.pod_dir)
        profile = self.provider.profile

        def start(spot: Spot) -> StepProcess:
            node, overlap, argv = step_launch(self.mpi, spot, ["/usr/bin/env", f"SLURM_ARRAY_TASK_ID={index}",
                                                                "HPK_PILOT=1", "/bin/bash", str(root / "job" / "job.sh")])
            with self.guard():
                proc = self.provider.slurm.start_step(
                    spot[0], argv, name=member.name, node=node, cpus=self.need.cpus, memory_mb=self.need.memory_mb,
                    gpus=self.need.gpus, gres_name=profile.gpu.gres_name, output=root / "logs" / f"element-{index}.out",
                    workdir=pod_dir, srun_log=pod_dir / "logs" / "srun.log", overlap=overlap)
                if self.rec.state != SUBMITTED:
                    self.rec.allocation, self.rec.state = spot[0], SUBMITTED
                    self.provider.records.save(self.rec)
            return proc

        _, proc = place_and_start(self.provider.pool, dataclasses.replace(self.need, uid=member.uid), pod_dir, start,
                                  on_wait=on_wait, immediate=profile.slurm.command_timeout)
        self.running[index] = _Element(proc, PodDir(pod_dir))

    def reap(self) -> None:
        """Elements whose srun ended leave ``running`` for ``ended``."""
        for i, el in list(self.running.items()):
            if el.proc.poll() is not None:
                del self.running[i]
                self.ended.add(i)

    def failed(self) -> bool:
        """The Job failed (``BackoffLimitExceeded``, ...): its other pods are to stop, no more start."""
        return self.array.exists(JOB_FAILED)

    def deleted(self) -> bool:
        """The workload was deleted from another process (which stops the running pods)."""
        return self.array.exists(POD_DELETING)

    def stop(self) -> None:
        """TERM to every running element's step once the Job failed (its trap stops its pod with the
        pod's stop sequence, and the pod says why: the Job's failure, not a delete)."""
        for el in self.running.values():
            step = "" if el.termed else el.step  # "" until its script ran: TERM at the next call
            if step:
                self.provider.slurm.cancel_step(step, signal="TERM")
                el.termed = True

    def status(self) -> ArrayStatus:
        """The workload's state as the array code reads it: each element's "job" is its step's state here."""
        jobs: dict[str, JobInfo | None] = {f"{PILOT_ELEMENT}_{i}": JobInfo(f"{PILOT_ELEMENT}_{i}", "RUNNING")
                                          for i in self.running}
        jobs.update({f"{PILOT_ELEMENT}_{i}": JobInfo(f"{PILOT_ELEMENT}_{i}", "COMPLETED") for i in self.ended})
        return array_status(dataclasses.replace(self.rec, job_id=PILOT_ELEMENT), jobs, info=self.info)


__all__ = ["PILOT_ELEMENT", "PilotElements", "start_run_pod"]

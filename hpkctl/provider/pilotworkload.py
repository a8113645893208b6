"""The delete of a workload that ``hpkctl run --pilot`` runs: its pods are steps of shared allocations.

Job-per-pod, a workload is a job array and :class:`~hpkctl.provider.workloads.WorkloadStops` signals its
elements' batch shells. In pilot mode the elements are steps that the ``hpkctl run`` process starts
(:mod:`hpkctl.provider.pilotelements`), so a delete from another process (``hpkctl delete``) finds them by
the step id each member's directory holds (``job.id``, ``J.S``). The workload's own directory is
marked deleted first, so the run process starts no more of its pods; each running pod is marked
deleted and its step gets TERM (the pod's stop sequence: preStop, SIGTERM, the grace period); once
every one wrote ``pod.done``, or the grace period plus a margin is over, what still runs is
cancelled. Each call re-reads the members, so a step the run process started just before it saw the
mark is stopped too. Non-blocking, one step per call, as every provider ``delete``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hpkctl.jobs import Slurm
from hpkctl.jobs.steps import is_step_id
from hpkctl.pod.lifecycle import stop_wait
from hpkctl.pod.paths import JOB_ID, POD_DONE, PodDir
from hpkctl.provider.runrecords import RunRecord
from hpkctl.provider.slurmjobs import mark_deleting
from hpkctl.provider.workloads import WorkloadFile, pod_spec


@dataclass
class _Stop:
    sent: float  # when the first TERM went out
    limit: float  # seconds the pods' stop sequences may take
    termed: set[str] = field(default_factory=set)  # steps that got TERM


def live_steps(rec: RunRecord) -> list[tuple[PodDir, str]]:
    """(pod directory, step id) of the workload's pods whose step started and whose pod has not ended."""
    try:
        members = WorkloadFile.read(rec.pod_dir).pods
    except (OSError, ValueError, TypeError, KeyError):
        return []
    out = []
    for m in members:
        pd = PodDir(Path(m.dir))
        step = (pd.read(JOB_ID) or "").strip()
        if is_step_id(step) and not pd.exists(POD_DONE):
            out.append((pd, step))
    return out


class PilotWorkloadStops:
    """One pilot workload delete per record uid, advanced a step per call."""

    def __init__(self, slurm: Slurm, *, margin: float) -> None:
        self.slurm, self.margin = slurm, margin
        self._stops: dict[str, _Stop] = {}

    def step(self, rec: RunRecord, *, grace: float | None, now: float) -> tuple[bool, bool, bool]:
        """(done, killing: this call began stopping running pods, cancelled: steps were cancelled)."""
        stop = self._stops.get(rec.uid)
        if stop is None:
            mark_deleting(PodDir(Path(rec.pod_dir)))  # the run process starts no more of its pods
        live = live_steps(rec)
        if stop is None:
            if not live:
                return True, False, False
            stop = self._stops[rec.uid] = _Stop(now, stop_wait(pod_spec(live[0][0]), grace=grace, margin=self.margin))
        killing = not stop.termed
        for pd, step in live:
            if step not in stop.termed:
                mark_deleting(pd)
                self.slurm.cancel_step(step, signal="TERM")
                stop.termed.add(step)
        if live and now - stop.sent < stop.limit:
            return False, killing, False
        for _, step in live:
            self.slurm.cancel_step(step)
        del self._stops[rec.uid]
        return True, False, bool(live)


__all__ = ["PilotWorkloadStops", "live_steps"]

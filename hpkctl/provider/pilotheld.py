"""What the pilot provider (:mod:`hpkctl.provider.pilotpod`) is as the holder of allocations, whatever
its pods do: the pool (:mod:`hpkctl.pilot`) with the profile's ``[pilot]`` shape, adopted at start, and
what ``hpkctl stop --all``, exec and the node's capacity ask of the allocations. Pods' create, delete
and status rounds are :class:`~hpkctl.provider.pilotpod.PilotPodProvider`'s."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from hpkctl.errors import HpkError
from hpkctl.jobs import JobInfo, NodeInfo, Slurm
from hpkctl.jobs.steps import is_step_id
from hpkctl.pilot.pool import Pool
from hpkctl.pod.paths import JOB_ID, POD_DONE, PodDir
from hpkctl.provider.api import ExecSession
from hpkctl.provider.jobpod import JobPodProvider
from hpkctl.provider.records import RecordStore
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.provider.pilotpod")
PILOT_OWNER = "kubelet"  # the owner in a pilot kubelet's allocation comments (hpk-pilot kubelet=kubelet state=S node=N)


def pilot_enabled(profile: SiteProfile) -> SiteProfile:
    """``profile`` with ``[pilot] enabled`` (``--pilot`` turns it on whatever the profile says)."""
    return profile.model_copy(update={"pilot": profile.pilot.model_copy(update={"enabled": True})})


class PilotHolder(JobPodProvider):
    """A job-per-pod provider whose pods' jobs are held allocations (``pool``), pilot mode always on."""

    def __init__(self, *, slurm: Slurm, profile: SiteProfile, records: RecordStore, node: str, state_dir: Path,
                 owner: str = PILOT_OWNER) -> None:
        super().__init__(slurm=slurm, profile=pilot_enabled(profile), records=records)
        self.pool = Pool(slurm, self.profile, owner=owner, node=node, state_dir=state_dir)

    @property
    def profile(self) -> SiteProfile:
        return self._profile

    @profile.setter
    def profile(self, value: SiteProfile) -> None:
        """The kubelet hands its provider the profile with the cluster's DNS: pilot mode stays on."""
        self._profile = pilot_enabled(value)

    def start(self) -> None:
        super().start()
        held = self.pool.adopt()
        log.info("pilot: holding %d allocation(s) of an earlier kubelet: %s", len(held), ", ".join(held) or "none")

    def step_id(self, uid: str) -> str:
        """The pod's step, ``J.S``, as its script wrote it ("" before it did)."""
        rec = self._rec(uid)
        return (PodDir(Path(rec.pod_dir)).read(JOB_ID) or "").strip() if rec is not None and rec.pod_dir else ""

    # ------------------------------------------------------------------ what a kubelet left (stop --all)
    def owns_job(self, uid: str, comment: str, job_id: str) -> bool:
        """A pilot pod's recorded job is this kubelet's allocation (its comment names the kubelet, its
        state directory and node, never a pod): the pod's step in it is in the pod directory."""
        return comment == self.pool.comment

    def stoppable(self, uid: str, job: JobInfo | None) -> str:
        """The pod's step (``J.S``) while its allocation runs and the pod has not finished; else ""."""
        rec = self._rec(uid)
        if rec is None or not rec.pod_dir or job is None or job.state != "RUNNING":
            return ""
        pd = PodDir(Path(rec.pod_dir))
        step = (pd.read(JOB_ID) or "").strip()
        return step if is_step_id(step) and step.split(".")[0] == rec.job_id and not pd.exists(POD_DONE) else ""

    def release(self) -> list[str]:
        """Cancel every allocation of this kubelet (``hpkctl stop --all``, once its pods are stopped)."""
        self.pool.adopt()
        held = [h.job_id for h in self.pool.helds()]
        self.pool.release_all()
        return held

    async def exec(self, uid: str, container: str, command: Sequence[str], *, tty: bool,
                   stdin: bool) -> ExecSession:
        """A step of the pod's allocation on the node its step runs on: the allocation may span nodes,
        and srun alone would pick its first. The node is Slurm's (``squeue --steps``: the node's Slurm
        name, which ``status/job.node``, the host name, need not be)."""
        rec = self._rec(uid)
        if rec is None or not rec.job_id or not rec.pod_dir:
            raise HpkError(f"pod {uid} has no pilot allocation to run the command in")
        step = (PodDir(Path(rec.pod_dir)).read(JOB_ID) or "").strip()
        node = self.slurm.step_node(step) if is_step_id(step) else ""
        return await self.slurm.exec_step(rec.job_id, pod_dir=Path(rec.pod_dir), container=container,
                                          command=command, tty=tty, stdin=stdin, node=node)

    def capacity_nodes(self) -> list[NodeInfo]:
        """The node's capacity in pilot mode: the held allocations' shares, plus what the allocations
        that could still be requested would hold (``[pilot] max_allocations``), as two entries."""
        cap = self.pool.capacity()
        return [NodeInfo("pilot-held", (), cap.held.cpus, cap.held.memory_mb, cap.held.gpus, "allocated"),
                NodeInfo("pilot-requestable", (), cap.requestable.cpus, cap.requestable.memory_mb,
                         cap.requestable.gpus, "idle")]

    def shutdown(self) -> None:
        super().shutdown()  # steps and allocations stay: the next kubelet adopts them


__all__ = ["PILOT_OWNER", "PilotHolder", "pilot_enabled"]

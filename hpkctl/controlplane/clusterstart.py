"""``hpkctl start``: submit what is missing of the cluster, wait for each part, hand over before a job ends.

Split out of :mod:`hpkctl.controlplane.lifecycle`. Idempotent: the control plane first, then the
kubelet, each submitted only if Slurm has no job of its kind for this state directory (one running is
reported), each waited for (:mod:`hpkctl.controlplane.clusterwait`) within one deadline. A job with less
than ``[controlplane] takeover_before`` seconds left (or any, with ``takeover``) gets a successor: the same
script again, which ``--dependency=singleton`` holds until the old job has ended; it then resumes from the
state directory. One ``hpkctl start`` per state directory runs at a time (a lock file in it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hpkctl.controlplane.clusterview import ClusterError, ClusterJob, ClusterJobs, duration
from hpkctl.controlplane.clusterwait import wait_controlplane, wait_node
from hpkctl.controlplane.launch import CONTROLPLANE, KUBELET, JobScripts, controlplane_time, kubelet_time
from hpkctl.files import ExclusiveLock, LockHeld, private_dirs
from hpkctl.sites.schema import SiteProfile, slurm_time_to_seconds

if TYPE_CHECKING:
    from hpkctl.controlplane.lifecycle import Cluster


def start(cluster: Cluster, *, timeout: float, takeover: bool = False) -> None:
    """Submit what is missing, wait until the control plane serves and the node is Ready
    (``timeout`` seconds in all); a :class:`ClusterError` names what failed and its log."""
    deadline = cluster.clock() + timeout
    scripts = cluster.scripts()  # refuses an incomplete profile before anything is submitted
    if scripts.image and not os.path.isfile(scripts.image):
        raise ClusterError(f"the control-plane image {scripts.image} is not built",
                           hint=f"build it: hpkctl build --site {cluster.site} (or set [controlplane] bin_dir to "
                                "where the binaries are on the compute nodes)")
    with _start_lock(cluster, deadline):
        jobs = cluster.jobs()
        successors(cluster, jobs, scripts, force=takeover)
        job_id, cp = _ensure(cluster, jobs, CONTROLPLANE, scripts, label="control plane", script="controlplane.sh")
        wait_controlplane(cluster, job_id, deadline, known=cp)
        kjob, kubelet = _ensure(cluster, jobs, KUBELET, scripts, label="kubelet", script="kubelet.sh")
        wait_node(cluster, kjob, deadline, known=kubelet)

def _start_lock(cluster: Cluster, deadline: float) -> ExclusiveLock:
    """One ``hpkctl start`` per state directory at a time (issue 20.14: two at once each submitted
    the cluster's jobs): a second one waits for the first, then finds its jobs running."""
    lock = ExclusiveLock(private_dirs(cluster.layout.root) / "start.lock")
    said = False
    while True:
        try:
            return lock.acquire()
        except LockHeld as e:
            if not said:
                cluster.say(f"waiting for the other hpkctl start (pid {e.holder or 'unknown'}) of this cluster")
                said = True
            if cluster.clock() >= deadline:
                raise ClusterError(f"another hpkctl start (pid {e.holder or 'unknown'}) of the cluster in "
                                   f"{cluster.layout.root} still runs after the --timeout",
                                   hint="wait for it, then 'hpkctl status'") from None
            cluster.sleep(1.0)


def _ensure(cluster: Cluster, jobs: ClusterJobs, kind: str, scripts: JobScripts, *, label: str,
            script: str) -> tuple[str, ClusterJob | None]:
    """The running (or queued) job of ``kind``, or a new one submitted: its id and the job found."""
    found = _current(jobs, kind)
    if found is None:
        job_id = cluster.submit(kind, scripts)
        cluster.say(f"{label}: submitted Slurm job {job_id} ({cluster.layout.root / 'jobs' / script})")
        return job_id, None
    cluster.say(f"{label}: Slurm job {found.job_id} is already {_where(found)}")
    return found.job_id, found


def _current(jobs: ClusterJobs, kind: str) -> ClusterJob | None:
    of = jobs.of(kind)
    return next((j for j in of if not j.pending), of[0] if of else None)


def _where(job: ClusterJob) -> str:
    if job.pending:
        return f"queued ({job.reason or 'pending'})"
    left = job.left()
    return f"running on {job.node or '?'}" + (f", {duration(left)} left" if left is not None else "")


def successors(cluster: Cluster, jobs: ClusterJobs, scripts: JobScripts, *, force: bool) -> None:
    """A successor for each running job near its end (or every running job with ``force``)."""
    for kind, what in ((CONTROLPLANE, "control plane"), (KUBELET, "kubelet")):
        of = jobs.of(kind)
        running = [j for j in of if not j.pending]
        if not running or len(of) > 1:  # nothing to take over from, or a successor already waits
            continue
        window = takeover_window(cluster.profile, kind)
        left = running[0].left()
        if not force and (window <= 0 or left is None or left >= window):
            continue
        job_id = cluster.submit(kind, scripts)
        when = f"in {duration(left)}" if left is not None else "when it ends"
        cluster.say(f"{what}: submitted successor Slurm job {job_id}: it waits for job {running[0].job_id} to end "
                    f"({when}) and then resumes from {cluster.layout.root}")
        of.append(ClusterJob(kind, job_id, "PENDING", "Dependency"))


def takeover_window(profile: SiteProfile, kind: str) -> float:
    """Seconds before its end from which a running job gets a successor at ``hpkctl start``:
    ``[controlplane] takeover_before``, but at most half the job's time (else every start of a short
    job would queue a successor at once)."""
    total = slurm_time_to_seconds(controlplane_time(profile) if kind == CONTROLPLANE else kubelet_time(profile))
    return float(min(profile.controlplane.takeover_before, total // 2))


__all__ = ["start", "successors", "takeover_window"]

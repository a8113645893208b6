"""``hpkctl stop``: the cluster's jobs stopped the way ``hpkctl delete`` stops a pod.

Split out of :mod:`hpkctl.controlplane.lifecycle`. Waiting successors are cancelled first (once their
predecessor ends they would start), then the kubelet job and the control-plane job get
``scancel --signal=TERM --batch`` (the batch shell is the bootstrap, which stops its components in
reverse order), a bounded wait, then ``scancel``. With ``all_pods`` the kubelet's pods are then stopped
through the pod provider the kubelet used, as a delete stops them: the delete marker (so their status says
deleted, not "reached its time limit"), TERM to the batch shell (in pilot mode to the pod's step), each
pod's own grace period, then ``scancel``; a pilot kubelet's allocations are released after its pods (:mod:`hpkctl.provider.nodepods`: their jobs found in the kubelet's records and cross-checked
with the uid in each job's comment, never from the pods' annotations, which pod authors can write;
:func:`recorded_jobs`, which ``hpkctl status`` uses for the same reason).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpkctl.controlplane.clusterview import label_of
from hpkctl.controlplane.launch import CONTROLPLANE, KUBELET
from hpkctl.provider.jobpod import JobPodProvider
from hpkctl.provider.nodepods import node_jobs, node_provider as provider_of_node, stop_node_pods

if TYPE_CHECKING:
    from hpkctl.controlplane.lifecycle import Cluster

#: seconds a stopped job's batch shell gets after SIGTERM before it is cancelled
STOP_WAIT = {CONTROLPLANE: 90.0, KUBELET: 30.0}


def stop(cluster: Cluster, *, all_pods: bool = False) -> list[tuple[str, str, str]]:
    """Stop the cluster's jobs (see the module docstring); ``(what, job id, final state)`` each."""
    jobs = cluster.jobs()
    done: list[tuple[str, str, str]] = []
    # waiting successors first: once their predecessor ends they would start
    for job in [j for j in jobs.all() if j.pending]:
        cluster.slurm.cancel(job.job_id)
        cluster.say(f"{label_of(job.kind)}: cancelled queued Slurm job {job.job_id}")
        done.append((label_of(job.kind), job.job_id, "CANCELLED"))
    for job in [j for j in jobs.kubelet if not j.pending]:
        done.append(_stop_job(cluster, job.job_id, label_of(job.kind), STOP_WAIT[KUBELET]))
    if all_pods:  # once the kubelet is gone: its pods are stopped as a delete stops them, with their grace
        done += stop_node_pods(node_provider(cluster), say=cluster.say)
    for job in [j for j in jobs.controlplane if not j.pending]:
        done.append(_stop_job(cluster, job.job_id, label_of(job.kind), STOP_WAIT[CONTROLPLANE]))
    return done


def _stop_job(cluster: Cluster, job_id: str, what: str, wait: float) -> tuple[str, str, str]:
    cluster.say(f"{what}: stopping Slurm job {job_id} (SIGTERM to its batch shell, up to {wait:.0f} s)")
    cluster.slurm.cancel(job_id, signal="TERM", batch_only=True)
    try:
        snap = cluster.slurm.wait_for([job_id], timeout=wait, backoff=(0.5, 1.0))
    except TimeoutError:
        cluster.say(f"{what}: Slurm job {job_id} still runs after {wait:.0f} s: cancelling it")
        cluster.slurm.cancel(job_id)
        snap = cluster.slurm.wait_for([job_id], timeout=60, backoff=(0.5, 1.0))
    info = snap.get(job_id)
    state = info.state if info is not None else "gone"
    cluster.say(f"{what}: Slurm job {job_id} ended ({state})")
    return what, job_id, state


def node_provider(cluster: Cluster) -> JobPodProvider:
    """The provider the cluster's kubelet used (job-per-pod, or pilot mode), on its records."""
    return provider_of_node(cluster.slurm, cluster.profile, cluster.node_name)


def recorded_jobs(cluster: Cluster) -> dict[str, str]:
    """uid → job id of the kubelet's pods, from its records and checked against the jobs' comments, never
    from the pods' ``hpk.io/slurm-job-id`` annotation (any pod author can set that to another job of this
    user, issue 20.10): :func:`hpkctl.provider.nodepods.node_jobs`."""
    return node_jobs(node_provider(cluster))


__all__ = ["STOP_WAIT", "recorded_jobs", "stop"]

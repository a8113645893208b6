"""``hpkctl stop``: the cluster's jobs stopped the way ``hpkctl delete`` stops a pod.

Split out of :mod:`hpkctl.controlplane.lifecycle`. Waiting successors are cancelled first (once their
predecessor ends they would start), then the kubelet job and the control-plane job get
``scancel --signal=TERM --batch`` (the batch shell is the bootstrap, which stops its components in
reverse order), a bounded wait, then ``scancel``. With ``all_pods`` the kubelet's pods' jobs are stopped
too, found in the kubelet's records and cross-checked with the uid in each job's comment, never from the
pods' ``hpk.io/slurm-job-id`` annotations, which pod authors can write (:func:`recorded_jobs`, which
``hpkctl status`` uses for the same reason).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from hpkctl.controlplane.clusterview import label_of, read_json
from hpkctl.controlplane.launch import CONTROLPLANE, KUBELET
from hpkctl.jobs.states import TERMINAL_STATES
from hpkctl.pod.flags import uid_from_comment

if TYPE_CHECKING:
    from hpkctl.controlplane.lifecycle import Cluster

#: seconds a stopped job's batch shell gets after SIGTERM before it is cancelled
STOP_WAIT = {CONTROLPLANE: 90.0, KUBELET: 30.0}
#: seconds pods' jobs get after SIGTERM with ``stop --all`` (the default grace period + 10 s)
POD_STOP_WAIT = 40.0


def stop(cluster: Cluster, *, all_pods: bool = False) -> list[tuple[str, str, str]]:
    """Stop the cluster's jobs (see the module docstring); ``(what, job id, final state)`` each."""
    jobs = cluster.jobs()
    done: list[tuple[str, str, str]] = []
    # waiting successors first: once their predecessor ends they would start
    for job in [j for j in jobs.all() if j.pending]:
        cluster.slurm.cancel(job.job_id)
        cluster.say(f"{label_of(job.kind)}: cancelled queued Slurm job {job.job_id}")
        done.append((label_of(job.kind), job.job_id, "CANCELLED"))
    pod_ids = _pod_jobs(cluster) if all_pods else []
    for job in [j for j in jobs.kubelet if not j.pending]:
        done.append(_stop_job(cluster, job.job_id, label_of(job.kind), STOP_WAIT[KUBELET]))
    if all_pods:
        for what, job_id, state in _stop_pods(cluster, pod_ids):
            done.append((what, job_id, state))
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


def recorded_jobs(cluster: Cluster) -> tuple[dict[str, str], set[str]]:
    """The kubelet's own records, never the pods' ``hpk.io/slurm-job-id`` annotation (any pod author
    can set that to another job of this user, issue 20.10): ``({uid: job id}, uids of records
    still being submitted)``. A recorded job id counts only while Slurm either no longer lists
    the job or lists it with that pod's uid in its comment."""
    listed = {j.job_id: j.comment for j in cluster.slurm.user_jobs()}
    jobs: dict[str, str] = {}
    submitting: set[str] = set()
    records = Path(os.path.expanduser(cluster.profile.pods.state_dir)) / "kubelet" / cluster.node_name / "pods"
    for path in sorted(records.glob("*.json")):
        rec = read_json(path)  # hpkctl.kubelet.records.PodRecord, read as plain JSON (a sibling layer)
        if rec is None or rec.get("state") not in ("submitting", "submitted"):
            continue
        uid, job_id = str(rec.get("uid", "")), str(rec.get("job_id", "") or "")
        if not job_id:
            submitting.add(uid)
        elif job_id not in listed or uid_from_comment(listed[job_id]) == uid:
            jobs[uid] = job_id
    return jobs, submitting


def _pod_jobs(cluster: Cluster) -> list[str]:
    """Job ids of the kubelet's pods that Slurm still runs: the records' (:func:`recorded_jobs`), and
    jobs whose comment names the uid of a record written just before sbatch."""
    recorded, submitting = recorded_jobs(cluster)
    ids = dict.fromkeys(recorded.values())
    for j in cluster.slurm.user_jobs():
        if (uid_from_comment(j.comment) or "") in submitting and j.state not in TERMINAL_STATES:
            ids[j.job_id] = None
    return list(ids)


def _stop_pods(cluster: Cluster, job_ids: Iterable[str]) -> list[tuple[str, str, str]]:
    live = [j for j, info in cluster.slurm.query(list(job_ids)).items() if info.state not in TERMINAL_STATES]
    if not live:
        cluster.say("pods: no Slurm job of a pod of this node runs")
        return []
    cluster.say(f"pods: stopping {len(live)} Slurm job(s) of the node's pods: {' '.join(live)}")
    for j in live:
        cluster.slurm.cancel(j, signal="TERM", batch_only=True)
    try:
        snap = cluster.slurm.wait_for(live, timeout=POD_STOP_WAIT)
    except TimeoutError:
        for j in live:
            cluster.slurm.cancel(j)
        snap = cluster.slurm.wait_for(live, timeout=60)
    return [("pod", j, info.state if info is not None else "gone") for j, info in snap.items()]


__all__ = ["POD_STOP_WAIT", "STOP_WAIT", "recorded_jobs", "stop"]

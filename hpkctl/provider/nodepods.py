"""A kubelet's pods while no kubelet runs: their jobs for ``hpkctl status``, and their stop for ``hpkctl
stop --all``, through the job-per-pod provider the kubelet used (its records, its stop sequence).

Job ids come from the kubelet's records, cross-checked with the uid in each job's comment, never from
the pods' ``hpk.io/slurm-job-id`` annotations, which pod authors can write (issue 20.10): a recorded job
counts only while Slurm either no longer lists it or lists it with that pod's uid; a record written just
before ``sbatch`` (no job id) gets the job whose comment names its uid, as the kubelet's restart would
adopt it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hpkctl.jobs import TERMINAL_STATES, JobInfo
from hpkctl.pod.flags import uid_from_comment
from hpkctl.provider.api import Leftover
from hpkctl.provider.jobpod import JobPodProvider
from hpkctl.provider.stopwait import delete_and_wait

#: seconds the jobs get to end once their stop sequences are done (scancel'ed; KillWait is short)
END_WAIT = 60.0


def node_pods(provider: JobPodProvider) -> list[Leftover]:
    """The live pods the kubelet left (submitted, or being submitted), each with its checked job id
    (``""``: none to trust). The provider follows these job ids from now on (its ``delete``)."""
    listed = {j.job_id: j.comment for j in provider.slurm.user_jobs()}
    by_uid = {uid_from_comment(c) or "": j for j, c in listed.items()}
    out = []
    for left in provider.leftovers():
        if not left.live:
            continue
        uid, job_id = left.ref.uid, left.job_id
        if not job_id:
            job_id = by_uid.get(uid, "")  # recorded just before sbatch: its job carries the uid
        elif job_id in listed and uid_from_comment(listed[job_id]) != uid:
            job_id = ""  # another job of this user: never to be cancelled in this pod's name
        provider.follow(uid, job_id)
        out.append(Leftover(ref=left.ref, job_id=job_id, state=left.state, saved=left.saved))
    return out


def node_jobs(provider: JobPodProvider) -> dict[str, str]:
    """uid → job id of the kubelet's live pods (see :func:`node_pods`)."""
    return {p.ref.uid: p.job_id for p in node_pods(provider) if p.job_id}


def stop_node_pods(provider: JobPodProvider, *, say: Callable[[str], None]) -> list[tuple[str, str, str]]:
    """Stop every pod the kubelet left as a delete does (the delete marker, TERM to the batch shell, the
    pod's own grace period, then ``scancel``), all at once; ``("pod", job id, final state)`` each."""
    pods = [p for p in node_pods(provider) if p.job_id]
    states = provider.slurm.query([p.job_id for p in pods]) if pods else {}
    live = [p for p in pods if p.job_id in states and states[p.job_id].state not in TERMINAL_STATES]
    if not live:
        say("pods: no Slurm job of a pod of this node runs")
        return []
    ids = [p.job_id for p in live]
    say(f"pods: stopping {len(live)} Slurm job(s) of the node's pods, each with its grace period: {' '.join(ids)}")
    delete_and_wait(provider, [(p.ref, p.saved()) for p in live])
    snap: Mapping[str, JobInfo | None]
    try:
        snap = provider.slurm.wait_for(ids, timeout=END_WAIT, backoff=(0.5, 1.0))
    except TimeoutError:
        snap = provider.slurm.query(ids)
    return [("pod", j, info.state if info is not None else "gone") for j, info in
            ((j, snap.get(j)) for j in ids)]


__all__ = ["node_jobs", "node_pods", "stop_node_pods"]

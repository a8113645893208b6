"""A kubelet's pods while no kubelet runs: their jobs for ``hpkctl status``, and their stop for ``hpkctl
stop --all``, through the provider the kubelet used (its records, its stop sequence): the job-per-pod
one, or in pilot mode the pilot one, whose pods' recorded job is the kubelet's allocation (its comment
names the kubelet and node, not the pod; the pod's step is in its pod directory) and which releases its
allocations once their pods are stopped.

Job ids come from the kubelet's records, cross-checked with the uid in each job's comment, never from
the pods' ``hpk.io/slurm-job-id`` annotations, which pod authors can write (issue 20.10): a recorded job
counts only while Slurm either no longer lists it or lists it with that pod's uid; a record written just
before ``sbatch`` (no job id) gets the job whose comment names its uid, as the kubelet's restart would
adopt it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hpkctl.jobs import TERMINAL_STATES, JobInfo, Slurm
from hpkctl.jobs.steps import is_step_id
from hpkctl.pod.flags import pod_of_job
from hpkctl.provider.api import Leftover
from hpkctl.provider.jobpod import JobPodProvider, node_state_dir
from hpkctl.provider.stopwait import delete_and_wait
from hpkctl.sites.schema import SiteProfile

#: seconds the jobs get to end once their stop sequences are done (scancel'ed; KillWait is short)
END_WAIT = 60.0


def node_provider(slurm: Slurm, profile: SiteProfile, node: str) -> JobPodProvider:
    """The provider the kubelet of ``node`` used: pilot mode when the profile turns it on, or when
    Slurm still runs an allocation of that kubelet (``hpkctl kubelet --pilot`` on another profile)."""
    from hpkctl.pilot.pool import owner_comment
    from hpkctl.provider.pilotpod import PILOT_OWNER, PilotPodProvider

    state = node_state_dir(profile, node)
    comment = owner_comment(PILOT_OWNER, node, state)
    if profile.pilot.enabled or any(j.comment == comment and j.state not in TERMINAL_STATES
                                    for j in slurm.user_jobs()):
        return PilotPodProvider.for_pilot_node(slurm=slurm, profile=profile, node_state=state, node=node)
    return JobPodProvider.for_node(slurm=slurm, profile=profile, node_name=node)


def node_pods(provider: JobPodProvider) -> list[Leftover]:
    """The live pods the kubelet left (submitted, or being submitted), each with its checked job id
    (``""``: none to trust). The provider follows these job ids from now on (its ``delete``)."""
    listed = {j.job_id: j.comment for j in provider.slurm.user_jobs()}
    by_uid = dict(found for j, c in listed.items() if (found := pod_of_job(j, c)))
    out = []
    for left in provider.leftovers():
        if not left.live:
            continue
        uid, job_id = left.ref.uid, left.job_id
        if not job_id:
            job_id = by_uid.get(uid, "")  # recorded just before sbatch: its job carries the uid
        elif job_id in listed and not provider.owns_job(uid, listed[job_id], job_id):
            job_id = ""  # another job of this user: never to be cancelled in this pod's name
        provider.follow(uid, job_id)
        out.append(Leftover(ref=left.ref, job_id=job_id, state=left.state, saved=left.saved))
    return out


def node_jobs(provider: JobPodProvider) -> dict[str, str]:
    """uid → job id of the kubelet's live pods (see :func:`node_pods`)."""
    return {p.ref.uid: p.job_id for p in node_pods(provider) if p.job_id}


def stop_node_pods(provider: JobPodProvider, *, say: Callable[[str], None]) -> list[tuple[str, str, str]]:
    """Stop every pod the kubelet left as a delete does (the delete marker, TERM to the batch shell, or
    in pilot mode to the pod's step, the pod's own grace period, then ``scancel``), all at once, then
    release what the provider holds for pods to come (pilot mode: its allocations);
    ``("pod", job or step id, final state)`` and ``("pilot allocation", job id, final state)`` each."""
    pods = [p for p in node_pods(provider) if p.job_id]
    states = provider.slurm.query({p.job_id for p in pods}) if pods else {}
    live = [(p, what) for p in pods if (what := provider.stoppable(p.ref.uid, states.get(p.job_id)))]
    if any(is_step_id(what) for _, what in live):  # a step killed outside its pod's script has nothing to stop
        running = {s.step_id for s in provider.slurm.steps()}
        live = [(p, what) for p, what in live if not is_step_id(what) or what in running]
    done: list[tuple[str, str, str]] = []
    if live:
        ids = [what for _, what in live]
        kind = "pilot step(s)" if any(is_step_id(i) for i in ids) else "Slurm job(s)"
        say(f"pods: stopping {len(live)} {kind} of the node's pods, each with its grace period: {' '.join(ids)}")
        answers = delete_and_wait(provider, [(p.ref, p.saved()) for p, _ in live])
        jobs = [i for i in ids if not is_step_id(i)]
        done += [("pod", i, "CANCELLED" if answers[p.ref.uid].cancelled else "stopped")
                 for p, i in live if is_step_id(i)]
    else:
        say("pods: no Slurm job of a pod of this node runs")
        jobs = []
    held = provider.release()
    if held:
        say(f"pods: released the kubelet's pilot allocation(s) {' '.join(held)}")
    ids = jobs + held
    if not ids:
        return done
    snap: Mapping[str, JobInfo | None]
    try:
        snap = provider.slurm.wait_for(ids, timeout=END_WAIT, backoff=(0.5, 1.0))
    except TimeoutError:
        snap = provider.slurm.query(ids)
    return done + [("pilot allocation" if j in held else "pod", j, info.state if info is not None else "gone")
                   for j, info in ((j, snap.get(j)) for j in ids)]


__all__ = ["node_jobs", "node_pods", "node_provider", "stop_node_pods"]

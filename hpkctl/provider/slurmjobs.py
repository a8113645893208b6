"""A pod's Slurm job as the job-per-pod provider handles it, shared by every front end through it: whether
Slurm is done with a job, one query for many jobs, jobs Slurm will never start (and a time limit lowered to
the partition's so it may), the delete marker, and ``sbatch`` of a pod's script (moved here from
``hpkctl.local``, which the kubelet imported them from)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hpkctl.jobs import TERMINAL_STATES, JobInfo, Slurm, SlurmError, TimeLimitTooLong
from hpkctl.jobs.poll import poll
from hpkctl.pod import RenderedPod
from hpkctl.pod.lifecycle import SIGNAL_MARGIN
from hpkctl.pod.paths import POD_DELETING, PodDir
from hpkctl.runtime import ImageToPull
from hpkctl.sites.schema import seconds_to_slurm_time


# Pending reasons with which Slurm will never start the job: no node of the partition can hold it,
# or its limits forbid it (squeue(1), JOB REASON CODES). Slurm 22.05 with EnforcePartLimits=NO
# (the default) keeps such a job pending for ever instead of refusing it at submission.
NEVER_STARTS = frozenset({"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints",
                          "DependencyNeverSatisfied"})


def ended(job: JobInfo | None) -> bool:
    """Whether Slurm is done with the job (or has forgotten it)."""
    return job is None or job.state in TERMINAL_STATES


#: how long a lowered time limit is given to take effect (Slurm re-evaluates a pending job's reason
#: at its next scheduling pass) before the job is taken as one that never starts after all
LOWERED_GRACE = 30.0


def deadline_limit(job: JobInfo | None, spec: Mapping[str, Any]) -> int:
    """``activeDeadlineSeconds`` when Slurm may keep the job pending because its time limit, the
    deadline plus the backstop for the stop sequence, exceeds the partition's MaxTime (then
    :func:`lowered_limit` says what to lower it to); 0 when that does not apply.

    Slurm 22.05 first shows such a job as ``PartitionConfig`` (its check at submission) and only
    after its next scheduling pass as ``PartitionTimeLimit``; both are taken, and a job that stays
    pending after the lowering (too many CPUs, say) is cancelled once ``LOWERED_GRACE`` has passed."""
    if job is None or job.state != "PENDING" or job.reason not in ("PartitionTimeLimit", "PartitionConfig"):
        return 0
    deadline = spec.get("activeDeadlineSeconds")
    return deadline if isinstance(deadline, int) and deadline > 0 else 0


def lowered_limit(deadline: int, partition_max: int | None) -> int:
    """The limit to lower a job to whose backstop is above its partition's MaxTime: the MaxTime itself
    (all the room past the deadline the partition gives); the deadline when the MaxTime is unknown;
    0 when the partition cannot hold even the deadline (then the job never starts, rightly)."""
    if partition_max is None:
        return deadline
    return partition_max if partition_max >= deadline else 0


def lower_to_partition(slurm: Slurm, job_id: str, deadline: int) -> int:
    """Lower a pending job's limit as :func:`lowered_limit` says for the partition it waits in; the
    limit set, or 0 when there is nothing to lower to (then it never starts). Raises ``SlurmError``."""
    part = slurm.job_partition(job_id)
    limit = lowered_limit(deadline, slurm.partition_limit(part)) if part else 0
    if limit:
        slurm.shorten(job_id, limit)
    return limit


def lowered_note(job_id: str, limit: int, *, deadline: int, grace: int) -> str:
    """The warning for a lowered limit, with how early Slurm's ``--signal`` (grace + margin before
    the limit, up to a minute earlier still) may now start the stop sequence."""
    effective = -(-limit // 60) * 60  # Slurm keeps whole minutes
    early = deadline - (effective - max(grace, 2) - SIGNAL_MARGIN - 60)
    note = (f"Slurm job {job_id}'s time limit (activeDeadlineSeconds {deadline} s plus time for the stop sequence) "
            f"is above the partition's MaxTime: lowered to {effective} s")
    if early > 0:
        note += f"; Slurm may now start the pod's stop sequence up to {early} s before the deadline"
    return note


def start_check(slurm: Slurm, job_id: str, job: JobInfo | None, spec: Mapping[str, Any], *, lowered: float | None,
                now: float) -> tuple[str, float | None, int]:
    """What a pod's job that Slurm may keep pending for ever comes to, as (verdict, when its limit was
    lowered, the limit): ``""`` nothing to do (it may start, or a lowered limit is still being looked
    at: ``LOWERED_GRACE``); ``"lowered"``: its time limit was just lowered to its partition's MaxTime
    (:func:`lower_to_partition`); ``"never"``: it will never start. Raises ``SlurmError`` from the
    lowering (then ``lowered`` is ``now``: asked once)."""
    if not never_starts(job):
        return "", lowered, 0
    if lowered is not None and now - lowered < LOWERED_GRACE:
        return "", lowered, 0  # Slurm has not looked at the lowered limit yet
    deadline = deadline_limit(job, spec)
    if deadline and lowered is None:
        limit = lower_to_partition(slurm, job_id, deadline)
        return ("lowered" if limit else "never"), now, limit
    return "never", lowered, 0


def never_starts(job: JobInfo | None) -> bool:
    """Whether Slurm keeps the job pending for a reason that waiting cannot clear."""
    if job is None or job.state != "PENDING":
        return False
    if job.reason in NEVER_STARTS:
        return True
    # "ReqNodeNotAvail, UnavailableNodes:" with no node after it: no node can ever be chosen
    head, sep, nodes = job.reason.partition("UnavailableNodes:")
    return head.startswith("ReqNodeNotAvail") and bool(sep) and not nodes.strip()


def job_states(slurm: Slurm, job_ids: list[str]) -> dict[str, JobInfo | None]:
    """Slurm's view of jobs: one squeue call, then one batched final-state lookup for those that ended.
    Empty ids (runs still being submitted) are answered ``None`` without asking."""
    ids = [j for j in dict.fromkeys(job_ids) if j]
    jobs: dict[str, JobInfo | None] = dict(slurm.query(ids)) if ids else {}
    gone = [j for j in ids if ended(jobs.get(j))]
    finals = slurm.finals(gone) if gone else {}
    out: dict[str, JobInfo | None] = {j: finals.get(j) or jobs.get(j) for j in ids}
    out.update({j: None for j in job_ids if not j})
    return out


def wait_ended(slurm: Slurm, job_ids: list[str], *, timeout: float = 30.0,
               sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> bool:
    """Wait (with back-off) until Slurm says every job ended; False if one still runs after ``timeout``
    (a delete lets the job end before its directory goes: KillWait is short)."""
    ids = [j for j in job_ids if j]
    if not ids:
        return True
    try:
        return poll(lambda: True if all(ended(j) for j in slurm.query(ids).values()) else None,
                    timeout=timeout, sleep=sleep, clock=clock)
    except TimeoutError:
        return False


def mark_deleting(pod_dir: PodDir) -> None:
    """``status/pod.deleting``: the job's TERM comes from a delete (not from the time limit)."""
    try:
        pod_dir.status_file(POD_DELETING).write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
    except OSError:  # the job has not created status/ yet, or the directory is gone: nothing to tell
        pass


def term_once_started(slurm: Slurm, job_id: str, pod_dir: PodDir, started: bool) -> bool:
    """A delete's TERM to the batch shell of ``job_id`` alone (``scancel --signal=TERM --batch``), the pod
    marked deleted first, once ``started``: its script wrote the file that follows its TERM trap (a pod's
    ``job.started``; an array element's ``index.I.attempts``). Slurm says RUNNING before the script runs,
    and a TERM then kills bash by its default action: Slurm records FAILED, not CANCELLED, and the
    stop sequence never runs. False (nothing sent) until then: the caller looks again, up to its limit."""
    if not started:
        return False
    mark_deleting(pod_dir)  # so the pod's status says deleted, not killed by its time limit
    slurm.cancel(job_id, signal="TERM", batch_only=True)
    return True


def images_to_pull(rendered: RenderedPod) -> list[ImageToPull]:
    """Every image the job needs: the cni parent's (the job pulls it IfNotPresent on the node, which may
    be offline) and the containers'."""
    plan = rendered.plan
    out = [ImageToPull(source=image.source, sif=sif, policy=policy, credentials=plan.pull_credentials.get(image.registry))
           for image, sif, policy in plan.images]
    if plan.parent is not None:
        image, sif = plan.parent
        out.insert(0, ImageToPull(source=image.source, sif=sif, policy="IfNotPresent",
                                  credentials=plan.pull_credentials.get(image.registry)))
    return out


def job_partition_option(plan: Any) -> str:
    """The partition the pod's job asks for (its ``--partition`` option; "" for Slurm's default)."""
    return next((str(o.value) for o in plan.options if o.name == "--partition" and o.value), "")


def submit_job(slurm: Slurm, script: Path, *, workdir: Path, deadline: int, partition: str) -> tuple[str, int]:
    """``sbatch`` the pod's script: (job id, 0), or, when Slurm refuses its time limit (a site with
    ``EnforcePartLimits``: activeDeadlineSeconds plus the stop sequence's backstop above the
    partition's MaxTime), once more with ``--time`` lowered to that MaxTime (``lowered_limit``):
    (job id, the limit). The runtime still stops the pod at the deadline, unless Slurm's limit comes
    first. A refused sbatch made no job, so the second one cannot make a twin."""
    try:
        return slurm.submit(script, workdir=workdir), 0
    except TimeLimitTooLong:
        if deadline <= 0:
            raise
        try:
            limit = lowered_limit(deadline, slurm.partition_limit(partition))
        except SlurmError:
            limit = deadline
        if not limit:
            raise
        return slurm.submit(script, workdir=workdir, extra_args=[f"--time={seconds_to_slurm_time(limit)}"]), limit

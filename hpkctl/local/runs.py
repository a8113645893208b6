"""A run's state as ``hpkctl status`` shows it, how ``delete`` ends it, and ``run``'s exit status.

Everything here takes a :class:`~hpkctl.provider.runrecords.RunRecord` and Slurm's view of its job; a
record whose pod directory vanished, or whose job id was never written (hpkctl killed during
``sbatch``), still gets a status with a reason, never a traceback.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from hpkctl.errors import HpkError
from hpkctl.jobs import TERMINAL_STATES, JobInfo, Slurm, UserJob
from hpkctl.jobs.poll import poll
from hpkctl.provider import PodRef, delete_and_wait
from hpkctl.provider.jobpod import JobPodProvider
from hpkctl.provider.records import node_record_uids
from hpkctl.provider.runrecords import SUBMITTED, SUBMITTING, RunRecord, RunRecords, forget_run, save_record
from hpkctl.pod.flags import uid_from_comment
from hpkctl.provider.slurmjobs import (LOWERED_GRACE, NEVER_STARTS, deadline_limit, ended, job_states,
                                       lower_to_partition, lowered_limit, lowered_note, mark_deleting, never_starts)
from hpkctl.pod.lifecycle import SIGNAL_MARGIN, grace_period, stop_wait
from hpkctl.pod.paths import POD_DELETING, POD_DONE, PodDir
from hpkctl.pod.status import PodStatus, apptainer_fatal, containers_of, read_pod_status
from hpkctl.sites.schema import SiteProfile

# ---------------------------------------------------------------------------- exit statuses of 'hpkctl run'
# As `docker run` and `podman run` do: the pod's own exit code, except for these, which say that
# hpkctl (or the runtime around the container) failed. README.md has the table.
EXIT_HPKCTL = 125  # hpkctl's own error: usage, invalid manifest or profile, Slurm refused the job
EXIT_CANNOT_INVOKE = 126  # the container's command cannot be invoked (permission denied)
EXIT_NOT_FOUND = 127  # the container's command was not found
EXIT_NO_CODE = 1  # the pod failed without an exit code of its own (cancelled, node lost...)

# Pod failure reasons (status/pod.failed) that mean no container of the pod ever ran: setting the
# pod up failed (docker run answers 125 for these too: a failed pull, a missing bind source).
SETUP_REASONS = frozenset({"ErrImagePull", "ErrImageNeverPull", "HostPathCheckFailed", "CreateContainerError",
                           "PodSetupFailed", "ParentContainerFailed"})

# Pod failure reasons that come with no exit code of the pod's own: Slurm or someone outside ended
# the job (README: "1 when the pod failed without one (cancelled by Slurm, node lost)").
NO_CODE_REASONS = frozenset({"Cancelled", "NodeLost", "Preempted", "BootFailure", "Revoked"})


class NeverStarts(HpkError):
    """Slurm accepted the job but will never start it (``NEVER_STARTS``); ``status`` says why."""

    def __init__(self, rec: RunRecord, status: PodStatus) -> None:
        reason = status.job.reason if status.job is not None else status.reason
        super().__init__(f"Slurm will never start job {rec.job_id} of pod {rec.namespace}/{rec.name}: {reason}: "
                         f"{status.message}",
                         hint="lower the pod's resources (cpu → --cpus-per-task, memory → --mem) or node count, "
                              "or choose a partition whose nodes can hold it; 'sinfo -o \"%P %c %m %G %l\"' "
                              "shows what the partitions offer")
        self.record = rec
        self.status = status


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def run_status(rec: RunRecord, job: JobInfo | None, *, job_known: bool = True) -> PodStatus:
    """Status of one run: its status files combined with Slurm's ``job``; a reason for the odd cases."""
    if rec.state == SUBMITTING and not rec.job_id:
        if pid_alive(rec.pid) and rec.waiting:  # pilot mode: no allocation has room yet
            return PodStatus("Pending", "Unschedulable", rec.waiting, None, None, None, None)
        if pid_alive(rec.pid):
            return PodStatus("Pending", "Submitting", f"hpkctl (process {rec.pid}) is submitting the job",
                             None, None, None, None)
        return PodStatus("Unknown", "SubmissionUnknown",
                         f"hpkctl stopped while submitting (no job id was recorded); a job for it, if any, "
                         f"carries uid {rec.uid} in its comment ('squeue --me --format=\"%i %k\"'); "
                         f"'hpkctl delete {rec.name} -n {rec.namespace}' forgets the run",
                         None, None, None, None)
    try:
        pod = rec.pod()
    except (OSError, ValueError):
        state = f"Slurm job {rec.job_id} is {job.state}" if job else f"Slurm no longer knows job {rec.job_id}"
        return PodStatus("Unknown", "PodDirectoryMissing",
                         f"the pod directory {rec.pod_dir} is gone (deleted by hand?); {state}; "
                         f"'hpkctl delete {rec.name} -n {rec.namespace}' cancels the job and forgets the run",
                         None, None, job.nodes if job else None, None, [], job)
    # pilot mode: the pod is a step of a held allocation; its files say everything
    return read_pod_status(rec.dir.root, containers_of(pod), job, job_known=job_known and not rec.allocation)


def pod_status(slurm: Slurm, rec: RunRecord) -> PodStatus:
    """Status of one run, asking Slurm about its job."""
    return run_status(rec, job_states(slurm, [rec.job_id])[rec.job_id])


def wait_ended(slurm: Slurm, job_id: str, *, timeout: float = 30.0,
               sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> bool:
    """Wait (with back-off) until Slurm says the job ended; False if it still runs after ``timeout``."""
    try:
        return poll(lambda: True if ended(slurm.query([job_id]).get(job_id)) else None,
                    timeout=timeout, sleep=sleep, clock=clock)
    except TimeoutError:
        return False


def delete_run(slurm: Slurm, profile: SiteProfile, rec: RunRecord, *, out: TextIO) -> None:
    """End the run's pod as a delete does (:func:`stop_run`), wait for its job to end, forget the run."""
    if rec.state == SUBMITTING and not rec.job_id and pid_alive(rec.pid) and rec.pid != os.getpid():
        raise HpkError(f"pod {rec.namespace}/{rec.name} is being submitted right now (hpkctl process {rec.pid})",
                       hint="try again in a moment, once it has a Slurm job")
    if rec.state == SUBMITTING and not rec.job_id:  # hpkctl stopped during sbatch: a job may carry the uid
        rec.job_id = next((job.job_id for uid, job in pod_jobs(slurm) if uid == rec.uid), "")
    if rec.allocation:  # pilot mode: stop the pod's step, leave the allocation to others
        from hpkctl.local.pilotrun import stop_pilot

        stop_pilot(slurm, rec, out=out)
    elif rec.job_id and rec.is_array:
        _delete_array(slurm, rec, out=out)
    elif rec.job_id and stop_run(slurm, profile, rec, out=out):
        print(f"pod {rec.namespace}/{rec.name}: cancelled Slurm job {rec.job_id}", file=out)
        wait_ended(slurm, rec.job_id)  # let the job end before its directory goes (KillWait is short)
    forget_run(profile, rec)


def stop_run(slurm: Slurm, profile: SiteProfile, rec: RunRecord, *, out: TextIO) -> bool:
    """Delete the run's pod through the job-per-pod provider, as the kubelet deletes one: the delete
    marker (its status then says deleted, not cancelled from outside or timed out), SIGTERM to the
    batch shell alone (which stops the containers as Kubernetes does: preStop, SIGTERM, SIGKILL after
    the grace period, sidecars last), a wait for ``pod.done`` up to the grace periods plus a margin,
    then ``scancel``; a pending job is cancelled at once. True if a job was cancelled. A workload's
    array is cancelled (:func:`delete_run` stops its pods first: ``_delete_array``)."""
    if rec.is_array:
        slurm.cancel(rec.job_id)
        return True
    provider = JobPodProvider(slurm=slurm, profile=profile, records=RunRecords(profile))
    provider.know(rec)
    ref = PodRef(rec.uid, rec.namespace, rec.name)
    try:
        pod = rec.pod()
    except (OSError, ValueError):
        pod = {"metadata": {"uid": rec.uid, "name": rec.name, "namespace": rec.namespace}, "spec": {}}
    first = provider.delete(ref, grace=None, pod=pod, report=False)
    if first.done:
        return first.cancelled
    grace = max(grace_period(pod.get("spec") or {}), 2)
    print(f"pod {rec.namespace}/{rec.name}: stopping its containers (grace period {grace}s)", file=out)
    return delete_and_wait(provider, [(ref, pod)])[rec.uid].cancelled


def _delete_array(slurm: Slurm, rec: RunRecord, *, out: TextIO, timeout: float = 30.0,
                  sleep: Callable[[float], None] = time.sleep) -> None:
    """Stop a workload's running pods as a pod's delete does (their batch shells get TERM alone and
    pass it on; wait up to the grace period), then cancel the whole array and wait for its end."""
    from hpkctl.local.arrays import WorkloadFile, element_ids

    try:
        info = WorkloadFile.read(rec.pod_dir)
        ids = element_ids(rec, info.count)
    except (OSError, ValueError, TypeError, KeyError):
        info, ids = None, []
    states = slurm.query(ids) if ids else {}
    if ids and all(ended(j) for j in states.values()):
        return
    running = [int(j.rsplit("_", 1)[1]) for j, job in states.items() if job is not None and job.state == "RUNNING"]
    if info is not None and running:
        dirs = [PodDir(Path(info.pods[i].dir)) for i in running]
        try:
            spec = json.loads(dirs[0].pod_json.read_text()).get("spec") or {}
        except (OSError, ValueError):
            spec = {}
        grace = max(grace_period(spec), 2)
        print(f"{rec.kind.lower()} {rec.namespace}/{rec.name}: stopping its {len(running)} running pod(s) "
              f"(grace period {grace}s)", file=out)
        for d in dirs:
            mark_deleting(d)
        slurm.cancel(rec.job_id, signal="TERM", batch_only=True)
        try:
            poll(lambda: True if all(d.exists(POD_DONE) for d in dirs) else None, timeout=stop_wait(spec),
                 sleep=sleep)
        except TimeoutError:
            pass
    slurm.cancel(rec.job_id)  # the array's id: every element
    print(f"{rec.kind.lower()} {rec.namespace}/{rec.name}: cancelled Slurm job array {rec.job_id}", file=out)
    try:
        poll(lambda: True if all(ended(j) for j in slurm.query(ids).values()) else None, timeout=timeout)
    except TimeoutError:
        pass


# ---------------------------------------------------------------------------- jobs no record names


@dataclass(frozen=True)
class Unrecorded:
    """A job of this user whose comment names a pod (``hpk-uid=UID hpk-pod=NS/NAME``) no run record has."""

    job: UserJob
    uid: str
    namespace: str
    name: str

    def status(self) -> PodStatus:
        return PodStatus("Unknown", "RecordMissing",
                         f"Slurm job {self.job.job_id} ({self.job.state}) carries this pod's uid {self.uid} but no "
                         f"run record names it; 'hpkctl delete {self.name} -n {self.namespace}' cancels it",
                         None, None, None, None)


def _pod_of_comment(comment: str) -> tuple[str, str]:
    for word in comment.split()[1:2]:
        if word.startswith("hpk-pod=") and "/" in word:
            ns, _, name = word[len("hpk-pod="):].partition("/")
            return ns, name
    return "", ""


def pod_jobs(slurm: Slurm) -> list[tuple[str, UserJob]]:
    """(pod uid, job) for every job of this user that Slurm knows and whose comment names a pod."""
    out = []
    for job in slurm.user_jobs():
        uid = uid_from_comment(job.comment)
        if uid:
            out.append((uid, job))
    return out


def unrecorded_jobs(profile: SiteProfile, slurm: Slurm, records: Sequence[RunRecord]) -> list[Unrecorded]:
    """Jobs of pods that no record in ``records`` (all of them, every namespace) names, still queued or
    running, and that are not a kubelet's pods; records stuck in ``submitting`` whose job turns up get
    its id written in (adopted)."""
    by_uid = {r.uid: r for r in records}
    kubelet = node_record_uids(profile)  # the cluster's pods, which status shows in its own section
    found = []
    for uid, job in pod_jobs(slurm):
        if uid in kubelet:
            continue
        rec = by_uid.get(uid)
        if rec is not None:
            if rec.state == SUBMITTING and not rec.job_id and not pid_alive(rec.pid):
                rec.job_id, rec.state = job.job_id, SUBMITTED
                save_record(profile, rec)
            continue
        if job.state in TERMINAL_STATES:
            continue
        ns, name = _pod_of_comment(job.comment)
        found.append(Unrecorded(job=job, uid=uid, namespace=ns, name=name))
    return found


def _apptainer_fatal(rec: RunRecord, container: str) -> int | None:
    """126/127 when the container's log ends with Apptainer's FATAL for a command it could not start."""
    found = apptainer_fatal(rec.dir, container)
    return found[0] if found else None


def exit_status(rec: RunRecord, st: PodStatus) -> int:
    """What ``hpkctl run`` exits with for a pod that ended (README.md, "Exit status")."""
    if st.phase == "Succeeded":
        return 0
    if st.reason in SETUP_REASONS:
        return EXIT_HPKCTL
    if st.reason in NO_CODE_REASONS:
        return EXIT_NO_CODE
    for c in st.containers:
        if c.state == "terminated" and c.reason == "ContainerCannotRun" and c.exit_code in (126, 127):
            return c.exit_code  # read_pod_status mapped Apptainer's FATAL already
        if c.state == "terminated" and c.exit_code == 255:
            fatal = _apptainer_fatal(rec, c.name)
            if fatal is not None:
                return fatal
    code = st.exit_code
    return code if code is not None and 0 < code < 256 else EXIT_NO_CODE

"""The status of ``hpkctl run``'s pods and workloads as the provider reads them: the records (their
states: submitting, a job id, a pilot allocation), the pod directories' status files and Slurm's view of
the jobs, asked ONCE for every pod and every workload element shown (one ``squeue``, then one batched
final-state lookup for the jobs that left the queue), never per run.

One odd record never hides the others: when the one query fails (other than Slurm being unreachable,
which is everyone's problem and is raised), each record is asked on its own, so the Slurm problem shows
on the line of the record that caused it; a record whose status cannot be read (a workload file that is
not JSON, a job id Slurm answers strangely) becomes an ``Unknown`` status with the error as its message.
A record whose pod directory vanished, or whose job id was never written (hpkctl killed during
``sbatch``), still gets a status with a reason, never a traceback. Jobs of pods no record names (found by
the uid in their comment) are listed too (moved here from ``hpkctl.local``, issue 21.1).
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpkctl.errors import HpkError
from hpkctl.jobs import TERMINAL_STATES, JobInfo, Slurm, SlurmError, SlurmUnavailable, UserJob
from hpkctl.jobs.steps import is_step_id
from hpkctl.pod.lifecycle import grace_period
from hpkctl.pod.flags import pod_of_job
from hpkctl.pod.paths import JOB_ID, POD_DONE, PodDir
from hpkctl.pod.status import PodStatus, apptainer_fatal, containers_of, read_pod_status
from hpkctl.provider.records import node_record_uids
from hpkctl.provider.runrecords import SUBMITTED, SUBMITTING, RunRecord, save_record
from hpkctl.provider.api import Failure, Note, StatusReport
from hpkctl.provider.slurmjobs import deadline_limit, job_states, lowered_note, never_starts, start_check
from hpkctl.provider.workloads import ArrayStatus, WorkloadFile, array_status, element_ids
from hpkctl.sites.schema import SiteProfile


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
    """Status of one run, asking Slurm about its job (one squeue, and a final-state lookup once it ended)."""
    return run_status(rec, job_states(slurm, [rec.job_id])[rec.job_id])


STATUS_UNREADABLE = "StatusUnreadable"
_PROBLEMS = (HpkError, OSError, ValueError, TypeError, KeyError)


def _ids(rec: RunRecord, arrays: Mapping[str, WorkloadFile]) -> list[str]:
    return element_ids(rec, arrays[rec.uid].count) if rec.uid in arrays else [rec.job_id]


def problem_status(rec: RunRecord, error: Exception) -> PodStatus:
    """The status line of a record whose state could not be read: what went wrong and what to do."""
    text = error.message if isinstance(error, HpkError) else f"{type(error).__name__}: {error}"
    hint = f" ({error.hint})" if isinstance(error, HpkError) and error.hint else ""
    return PodStatus("Unknown", STATUS_UNREADABLE,
                     f"{text}{hint}; 'hpkctl delete {rec.name} -n {rec.namespace}' cancels its job and forgets "
                     f"the run", None, None, None, None)


def _live_step(rec: RunRecord) -> str:
    """A pilot pod's step (``J.S``) while its files say it has not ended; "" for any other record (a
    job-per-pod pod's ``status/job.id`` is a job, never a step: a pilot kubelet's records name no
    allocation, their job is it)."""
    if rec.is_array or rec.state != SUBMITTED or not rec.pod_dir:
        return ""
    pd = PodDir(Path(rec.pod_dir))
    step = (pd.read(JOB_ID) or "").strip()
    return step if is_step_id(step) and not pd.exists(POD_DONE) else ""


def lost_steps(records: Sequence[RunRecord], running: Callable[[], set[str]] | None) -> dict[str, str]:
    """uid -> step of the pilot pods whose step Slurm no longer runs (``running``: the running steps'
    ids, one ``squeue --steps``; ``None``: not asked now) though the pod never wrote ``pod.done``: the
    step was killed (``scancel`` of it, its node or allocation failed) before its script could say
    how the pod ended. The files are read again after Slurm answered: a pod writes ``pod.done``
    before its step ends, so one that ended meanwhile is not taken for lost."""
    live = {r.uid: s for r in records if (s := _live_step(r))}
    if not live or running is None:
        return {}
    steps = running()
    by_uid = {r.uid: r for r in records}
    return {uid: step for uid, step in live.items() if step not in steps and _live_step(by_uid[uid])}


def step_lost(rec: RunRecord, step: str) -> PodStatus:
    """The status of a pilot pod whose step ended without its script's last word (:func:`lost_steps`)."""
    st = read_pod_status(rec.dir.root, containers_of(rec.pod()), JobInfo(step, "CANCELLED"))
    return dataclasses.replace(st, message=f"its pilot step {step} ended before the pod's script said how the pod "
                               "ended: the step was cancelled, or its node or allocation failed")


def lost_step_reports(slurm: Slurm, records: Sequence[RunRecord],
                      allocations: Mapping[str, JobInfo | None]) -> dict[str, StatusReport]:
    """A pilot kubelet's status round: uid -> the final report of each pod whose step is lost while its
    allocation runs (``allocations``: the round's answer; :func:`lost_steps`, one ``squeue --steps`` for
    all), failed as ``hpkctl status`` fails it, with a warning event. An allocation that ended says
    itself why its pods failed (NodeLost, DeadlineExceeded...), as a job-per-pod pod's job. Slurm not
    answering: none (the next round asks again)."""
    records = [r for r in records if (a := allocations.get(r.job_id)) is not None and a.state == "RUNNING"]
    try:
        steps = lost_steps(records, lambda: {s.step_id for s in slurm.steps()})
    except SlurmError:
        return {}
    out = {}
    for rec in (r for r in records if r.uid in steps):
        st = step_lost(rec, steps[rec.uid])
        out[rec.uid] = StatusReport(uid=rec.uid, status=st, final=True,
                                    notes=(Note("Failed", f"{st.reason}: {st.message}", warning=True),))
    return out


def run_statuses(slurm: Slurm, records: Sequence[RunRecord], arrays: Mapping[str, WorkloadFile], *,
                 ask: Callable[[list[str]], Mapping[str, JobInfo | None]] | None = None,
                 steps: bool = False) -> list[PodStatus | ArrayStatus]:
    """The status of each record, in order (``arrays``: the workloads' ``job/workload.json`` by uid;
    ``steps``: ask Slurm which steps run, one ``squeue --steps``, when a pilot pod's files say it runs;
    never from an older answer, which a step started since would be missing from)."""
    ask = ask or (lambda ids: job_states(slurm, ids))
    problems: dict[str, Exception] = {}
    jobs: dict[str, JobInfo | None]
    try:
        jobs = dict(ask([j for r in records for j in _ids(r, arrays)]))
    except SlurmUnavailable:  # Slurm is down or slow for everyone: asking per record would only wait longer
        raise
    except _PROBLEMS:  # ask per record, so only the one that fails shows the error
        jobs = {}
        for r in records:
            try:
                jobs.update(ask(_ids(r, arrays)))
            except _PROBLEMS as exc:
                problems[r.uid] = exc
    try:
        lost = lost_steps(records, (lambda: {s.step_id for s in slurm.steps()}) if steps else None)
    except SlurmError:  # the pods' files still say the rest
        lost = {}
    out: list[PodStatus | ArrayStatus] = []
    for r in records:
        try:
            if r.uid in problems:
                raise problems[r.uid]
            if r.uid in lost:
                out.append(step_lost(r, lost[r.uid]))
                continue
            out.append(array_status(r, jobs, info=arrays[r.uid]) if r.uid in arrays else run_status(r, jobs.get(r.job_id), job_known=r.job_id in jobs))
        except _PROBLEMS as exc:
            out.append(problem_status(r, exc))
    return out


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
    """(pod uid, job) for every job of this user that Slurm knows and whose comment names a pod, once
    per pod: a workload's elements as its array, a batch's element as its pod's job (``pod_of_job``)."""
    out: dict[str, tuple[str, UserJob]] = {}
    for job in slurm.user_jobs():
        found = pod_of_job(job.job_id, job.comment)
        if not found:
            continue
        seen = out.get(found[0])  # a workload's elements: a live one's state stands for the array
        if seen is None or (seen[1].state in TERMINAL_STATES and job.state not in TERMINAL_STATES):
            out[found[0]] = (found[0], dataclasses.replace(job, job_id=found[1]))
    return list(out.values())


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


class StartChecks:
    """Jobs Slurm may keep pending for ever, for one-thread front ends (following a run): the status
    loop's own check (:mod:`~hpkctl.provider.jobstatus`) says the same with :func:`start_check`."""

    def __init__(self, slurm: Slurm) -> None:
        self.slurm = slurm
        self.lowered: dict[str, float | None] = {}

    def check(self, rec: RunRecord, jobs: Mapping[str, JobInfo | None], pod: Mapping[str, Any], *,
              now: float) -> Note | Failure | None:
        """``None``: wait; a ``TimeLimitLowered`` note once its limit was lowered to the partition's; a
        ``SlurmNeverStarts`` failure when it never starts (the caller deletes the pod)."""
        job = jobs.get(rec.job_id) if rec.job_id else None
        if not never_starts(job):
            return None
        spec = pod.get("spec") or {}
        try:
            verdict, self.lowered[rec.uid], limit = start_check(self.slurm, rec.job_id, job, spec,
                                                                lowered=self.lowered.get(rec.uid), now=now)
        except SlurmError as exc:
            self.lowered[rec.uid] = now
            return Failure("SlurmNeverStarts", f"lowering job {rec.job_id}'s time limit failed: {exc.message}")
        if verdict == "lowered":
            return Note("TimeLimitLowered", lowered_note(rec.job_id, limit, deadline=deadline_limit(job, spec),
                                                         grace=grace_period(spec)), warning=True)
        reason = job.reason if job is not None else ""
        return Failure("SlurmNeverStarts", f"Slurm will never start job {rec.job_id}: {reason}") if verdict else None


def fatal_exit(rec: RunRecord, container: str) -> int | None:
    """126/127 when the container's log ends with Apptainer's FATAL for a command it could not start."""
    found = apptainer_fatal(rec.dir, container)
    return found[0] if found else None


def workloads_of(records: Sequence[RunRecord]) -> dict[str, WorkloadFile]:
    """uid → ``job/workload.json`` of each workload among ``records`` (one whose directory vanished is
    shown as a pod)."""
    found = {}
    for r in records:
        if r.is_array:
            try:
                found[r.uid] = WorkloadFile.read(r.pod_dir)
            except (OSError, ValueError, TypeError, KeyError):
                continue
    return found


__all__ = ["STATUS_UNREADABLE", "StartChecks", "Unrecorded", "fatal_exit", "pid_alive", "pod_jobs", "pod_status", "problem_status",
           "run_status", "run_statuses", "unrecorded_jobs", "workloads_of"]

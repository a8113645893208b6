"""Whether a pod already has (or had) a Slurm job, before the kubelet submits one.

Why: the kubelet's records can be lost (a purged scratch, a changed ``state_dir``, a node-local disk,
a disk full between ``sbatch`` and the record's update, or a crash there that outlives Slurm's
``MinJobAge``). Submitting on a missing record would run a finished pod again, or give a running pod
a second, concurrent job and orphan the first. So before *any* submission the pod's uid is looked up
where a job leaves traces, cheapest first:

1. the pod directory's ``status/job.id``, which the job writes when it starts (no Slurm call);
2. ``squeue --me`` by the ``hpk-uid=`` job comment (jobs slurmctld still holds);
3. ``sacct`` by comment where accounting runs (jobs slurmctld has forgotten).

Only this user's own jobs count (``--me``; sacct lists a user's own jobs), so another user cannot
make the kubelet adopt her job by writing the uid into its comment.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpkctl.jobs import Slurm, UserJob
from hpkctl.jobs.info import is_job_id
from hpkctl.jobs.steps import is_step_id
from hpkctl.pod.flags import pod_of_job
from hpkctl.pod.paths import JOB_ID, PodDir
from hpkctl.provider.records import PodRecord

log = logging.getLogger("hpkctl.provider.adopt")

#: phases after which a pod never runs again (Kubernetes: a terminal phase is final)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class FoundJob:
    job_id: str
    where: str  # for the log and the event: "the pod directory", "squeue", "sacct"


def terminal_phase(pod: Mapping[str, Any]) -> str:
    """The pod's phase in the API when it is terminal (``Succeeded``/``Failed``), else ``""``."""
    phase = str((pod.get("status") or {}).get("phase") or "")
    return phase if phase in TERMINAL_PHASES else ""


def ran_before(pod: Mapping[str, Any]) -> bool:
    """Whether the API's status says a container of the pod has started (a kubelet reported it): the
    pod had a job even when no trace of it is left."""
    status = pod.get("status") or {}
    for c in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        state = c.get("state") or {}
        if "running" in state or "terminated" in state or c.get("lastState", {}).get("terminated"):
            return True
    return False


#: how far the API server's clock may be ahead of this host's
CLOCK_SKEW = 300.0


def _created(pod: Mapping[str, Any]) -> float:
    """The pod's ``creationTimestamp`` as a time; 0 when it has none (then it may be old)."""
    created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        return datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


#: how much further back than the pod that needs it one sacct listing reaches, so that the pods of
#: a backlog (created within this span) are all answered by the first listing
ACCOUNTED_SPAN = 3600.0


def _since(pod: Mapping[str, Any]) -> float:
    """From when sacct must look for the pod's job: its creation less the clock skew (no job of it
    is older), else a week back."""
    when = _created(pod) - CLOCK_SKEW
    return when if when > 0 else time.time() - 7 * 86400


def _slurm_time(when: float) -> str:
    """sacct's ``--starttime`` in local time (Slurm's)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(when))


def _by_uid(jobs: Iterable[UserJob]) -> dict[str, str]:
    """uid -> job id of the jobs whose comment names a pod (the first job of a uid wins; an element
    of a batch is its pod's job: :func:`~hpkctl.pod.flags.pod_of_job`)."""
    listing: dict[str, str] = {}
    for job in jobs:
        found = pod_of_job(job.job_id, job.comment)
        if found:
            listing.setdefault(*found)
    return listing


class JobFinder:
    """``find`` for one kubelet process. A pod with no record at all can only have a job that an
    earlier kubelet submitted, so one ``squeue`` listing taken at the first need answers for all of
    them (a burst of new pods costs no Slurm call each), and so does one ``sacct`` listing for the
    pods created before this process started (a kubelet restarted with a backlog of N pods asks
    sacct once, not N times: the listing reaches ``ACCOUNTED_SPAN`` further back than the first pod
    that needs it, and is taken again only for a pod older than that); a record left in
    ``submitting`` is looked up afresh in both."""

    def __init__(self, slurm: Slurm, *, started: float | None = None) -> None:
        self.slurm = slurm
        self.started = time.time() if started is None else started
        self._lock = threading.Lock()
        self._listing: dict[str, str] | None = None  # uid -> job id, from squeue at the first need
        self._listed_at = 0.0  # when the listing was begun (monotonic)
        self._accounted: tuple[float, dict[str, str]] | None = None  # (since, uid -> job id), from sacct
        self._fresh_accounted: tuple[float, float, dict[str, str]] | None = None  # (begun, since, listing)

    def prime(self) -> None:
        """Take the ``squeue`` listing now (a kubelet's start, on a thread of its own), so that the first
        pods of its first list do not wait for it before their ``sbatch``: any job of an earlier kubelet
        exists already. A failure is left to the first ``find``, which asks again and reports it."""
        try:
            self._listed(fresh=False)
        except Exception as exc:  # noqa: BLE001 - Slurm down now: the first find asks again
            log.debug("squeue listing at start not taken: %s", exc)

    def _listed(self, *, fresh: bool) -> dict[str, str]:
        """The squeue listing; ``fresh``: one begun after this call (the pods of an array whose sbatch gave
        no clear answer come back together: the first one's listing answers all that asked before it began)."""
        asked = time.monotonic()
        with self._lock:
            if self._listing is None or (fresh and self._listed_at < asked):
                began = time.monotonic()  # kept only with its listing: a failed one must not pass the old for new
                self._listing, self._listed_at = _by_uid(self.slurm.user_jobs()), began
            return self._listing

    def _accounted_since(self, since: float, *, fresh: bool) -> dict[str, str]:
        """The sacct listing reaching back to ``since``: the one taken before when it reaches that
        far (and ``fresh`` is not asked), else a new one (one call, under the lock: the workers
        adopting a backlog wait for the first listing rather than each asking sacct)."""
        asked = time.monotonic()
        with self._lock:
            if fresh:  # one begun after this call and reaching back far enough answers it (as _listed)
                last = self._fresh_accounted
                if last is None or last[0] < asked or since < last[1]:
                    began = time.monotonic()
                    last = (began, since, _by_uid(self.slurm.accounted_jobs(since=_slurm_time(since))))
                    self._fresh_accounted = last
                return last[2]
            if self._accounted is None or since < self._accounted[0]:
                reach = since - ACCOUNTED_SPAN
                self._accounted = (reach, _by_uid(self.slurm.accounted_jobs(since=_slurm_time(reach))))
            return self._accounted[1]

    def find(self, *, uid: str, pod: Mapping[str, Any], pod_dir: Path, fresh: bool) -> FoundJob | None:
        """The job of pod ``uid`` if one was ever submitted (see the module docstring), else ``None``;
        ``fresh``: ask squeue now (a submission of this process may have been cut short). Raises
        ``SlurmError`` when Slurm cannot be asked: the caller retries rather than guessing."""
        job_id = (PodDir(pod_dir).read(JOB_ID) or "").strip()
        if is_job_id(job_id):
            return FoundJob(job_id, f"the pod directory ({pod_dir}/status/{JOB_ID})")
        if is_step_id(job_id):  # a pilot step J.S: its allocation J is the pod's recorded job
            return FoundJob(job_id.partition(".")[0], f"the pod directory ({pod_dir}/status/{JOB_ID}: step {job_id})")
        job_id = self._listed(fresh=fresh).get(uid, "")
        if job_id:
            return FoundJob(job_id, "squeue (its job comment)")
        if fresh or _created(pod) < self.started + CLOCK_SKEW:
            job_id = self._accounted_since(_since(pod), fresh=fresh).get(uid, "")
            if job_id:
                return FoundJob(job_id, "sacct (its job comment)")
        return None


def intent_job(finder: JobFinder, rec: PodRecord, pod: Mapping[str, Any]) -> str:
    """The job of a record left in ``submitting`` (its ``sbatch`` may have run before the process died):
    found by the pod's uid as before a submission, else ``""``. A pod deleted while its kubelet was away
    has only this record: without the lookup its job would run on with nothing naming it."""
    found = finder.find(uid=rec.uid, pod=pod, pod_dir=Path(rec.pod_dir), fresh=True) if rec.pod_dir else None
    return found.job_id if found is not None else ""

"""A workload run as one Slurm job array (``hpkctl run`` of a Job, Deployment, ReplicaSet or StatefulSet),
as the provider keeps and reads it: ``job/workload.json`` (its rules and its pods: name, uid, pod
directory), the array's status files (``status/``, written by ``sbatch/array-runtime.sh``; laid out as
a pod's), its state as the Job (or ReplicaSet) controller would report it, and its pods as runs of
their own (``hpkctl logs``). Building the workload from a manifest is ``hpkctl.local.arrays``'s.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hpkctl.errors import HpkError
from hpkctl.jobs import TERMINAL_STATES, JobInfo, Slurm
from hpkctl.pod.lifecycle import stop_wait
from hpkctl.pod.paths import POD_DONE, PodDir, inside, read_int
from hpkctl.pod.status import PodStatus, containers_of, read_pod_status
from hpkctl.pod.translate import pod_dir_for
from hpkctl.provider.api import Deletion
from hpkctl.provider.records import STOPPED
from hpkctl.provider.runrecords import SUBMITTED, WORKLOAD_FILE, RunRecord
from hpkctl.provider.slurmjobs import ended, mark_deleting, term_once_started, wait_ended
from hpkctl.sites.schema import SiteProfile

SUCCEEDED, FAILED = "Succeeded", "Failed"  # an index's result (status/index.I)


@dataclass
class Member:
    name: str
    uid: str
    dir: str


@dataclass
class WorkloadFile:
    """``job/workload.json``: what ``status`` needs to read the array's state back."""

    kind: str
    name: str
    namespace: str
    count: int
    indexed: bool
    retries: bool
    pods: list[Member] = field(default_factory=list)
    backoff_limit_per_index: int | None = None  # a Job's spec.backoffLimitPerIndex (None: not set)

    @classmethod
    def read(cls, array_dir: str | Path) -> WorkloadFile:
        data = json.loads((Path(array_dir) / WORKLOAD_FILE).read_text())
        pods = [Member(**p) for p in data.pop("pods")]
        return cls(**data, pods=pods)


def write_workload_dir(root: Path, script: str, info: WorkloadFile) -> None:
    """The workload's directory: its array script and ``job/workload.json`` (never through a link)."""
    for sub in ("job", "status", "logs"):
        (root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    for rel, data, mode in (("job/job.sh", script, 0o700), (WORKLOAD_FILE, json.dumps(asdict(info), indent=2), 0o600)):
        target = root / rel
        if not inside(root, target):
            raise HpkError(f"{rel} would be written outside the workload directory {root}")
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(data)


def member_record(rec: RunRecord, index: int) -> RunRecord:
    """Pod ``index`` of a workload as a run record of its own (for ``logs``), its job the element."""
    return member_of(rec, WorkloadFile.read(rec.pod_dir), index)


def member_of(rec: RunRecord, info: WorkloadFile, index: int) -> RunRecord:
    """:func:`member_record` from the workload's ``job/workload.json`` read already (``info``)."""
    member = info.pods[index]
    return RunRecord(name=member.name, namespace=rec.namespace, uid=member.uid,
                     job_id=f"{rec.job_id}_{index}" if rec.job_id else "", pod_dir=member.dir, site=rec.site,
                     submitted=rec.submitted)


def find_member(records: list[RunRecord], name: str, namespace: str) -> RunRecord | None:
    """The workload pod called ``name`` (``train-3``) among the workloads in ``records``."""
    for rec in records:
        if not rec.is_array or rec.namespace != namespace:
            continue
        try:
            pods = WorkloadFile.read(rec.pod_dir).pods
        except (OSError, ValueError, TypeError, KeyError):
            continue
        for i, member in enumerate(pods):
            if member.name == name:
                return member_record(rec, i)
    return None


# ---------------------------------------------------------------------------------------------- status


@dataclass
class IndexStatus:
    index: int
    name: str
    job_id: str
    attempts: int
    result: str | None  # Succeeded | Failed | None (not decided yet)
    pod: PodStatus


@dataclass
class ArrayStatus:
    """A workload's state as the Job (or ReplicaSet) controller would report it."""

    kind: str
    phase: str  # Pending | Running | Complete | Failed (a Job), Pending | Running | Succeeded | Failed
    reason: str
    message: str
    active: int
    succeeded: int
    failed: int  # failed pods (each failed run of an index counts)
    indexes: list[IndexStatus]
    failed_indexes: list[int] | None = None  # with backoffLimitPerIndex: the indexes that used up their limit

    @property
    def finished(self) -> bool:
        return self.phase in ("Complete", "Failed", "Succeeded")

    def as_k8s(self) -> dict[str, Any]:
        status: dict[str, Any] = {"active": self.active, "succeeded": self.succeeded, "failed": self.failed}
        if self.kind == "Job":
            done = [i.index for i in self.indexes if i.result == SUCCEEDED]
            status["completedIndexes"] = _ranges(done)
            if self.failed_indexes is not None:  # the Job API has it only with backoffLimitPerIndex
                status["failedIndexes"] = _ranges(self.failed_indexes)
            if self.phase in ("Complete", "Failed"):
                status["conditions"] = [{"type": self.phase, "status": "True", "reason": self.reason,
                                         "message": self.message}]
        else:
            status["replicas"] = len(self.indexes)
            status["readyReplicas"] = sum(1 for i in self.indexes if i.pod.phase == "Running")
        status["pods"] = [{"name": i.name, "index": i.index, "jobId": i.job_id, "attempts": i.attempts,
                           "result": i.result, "status": i.pod.as_k8s()} for i in self.indexes]
        return status

    def summary(self) -> str:
        n = len(self.indexes)
        counts = f"{self.active} active, {self.succeeded}/{n} succeeded, {self.failed} failed"
        return counts if self.kind == "Job" else f"{self.active}/{n} running, {self.failed} failed"


def _ranges(indexes: list[int]) -> str:
    """``0-2,5``: Kubernetes' completedIndexes notation."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive indexes
    for i in sorted(indexes):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def element_ids(rec: RunRecord, count: int) -> list[str]:
    """Slurm's ids of the array's elements (``123_0``...): what squeue answers for, pending ones too."""
    return [f"{rec.job_id}_{i}" for i in range(count)] if rec.job_id else []


NEVER_RAN = "NeverRan"


def never_ran(pod: PodStatus) -> PodStatus:
    """An element Slurm has no record of and whose pod never started: it was cancelled while
    pending (the Job failed, or was deleted, first), so no pod ran for it, as the Job controller
    creates no pod for such an index. Not ``JobVanished``: nothing was lost."""
    return replace(pod, phase="Pending", reason=NEVER_RAN,
                   message="never ran: the workload ended before this pod's array element started")


def array_status(rec: RunRecord, jobs: Mapping[str, JobInfo | None], *,
                 info: WorkloadFile | None = None) -> ArrayStatus:
    """The workload's state from the array's and the pods' status files plus Slurm's elements
    (``info``: its ``job/workload.json``, when the caller has read it already)."""
    info = info or WorkloadFile.read(rec.pod_dir)
    array = PodDir(Path(rec.pod_dir))  # the array's status/ is laid out as a pod's
    ids = element_ids(rec, info.count) or [""] * info.count
    indexes = []
    for i, (member, job_id) in enumerate(zip(info.pods, ids)):
        job = jobs.get(job_id)
        pod_dir = PodDir(Path(member.dir))
        try:
            containers = containers_of(json.loads(pod_dir.pod_json.read_text()))
        except (OSError, ValueError):
            containers = []
        pod = read_pod_status(pod_dir.root, containers, job)
        if job is None and job_id and pod.started_at is None:
            pod = never_ran(pod)
        result = array.read(f"index.{i}")
        if result is None and job is not None and job.state in TERMINAL_STATES and pod.finished:
            result = SUCCEEDED if pod.phase == "Succeeded" else FAILED
        indexes.append(IndexStatus(index=i, name=member.name, job_id=job_id, result=result, pod=pod,
                                   attempts=read_int(array.read(f"index.{i}.attempts")) or 0))
    active = sum(1 for x in indexes if x.result is None and x.pod.job is not None and x.pod.job.state == "RUNNING")
    succeeded = sum(1 for x in indexes if x.result == SUCCEEDED)
    failed_runs = read_int(array.read("failures"))
    failed = failed_runs if failed_runs is not None else sum(1 for x in indexes if x.result == FAILED)
    ended = rec.job_id != "" and all(jobs.get(x.job_id) is None or jobs[x.job_id].state in TERMINAL_STATES  # type: ignore[union-attr]
                                     for x in indexes)
    job_failed = array.read("job.failed")
    phase, reason, message = "Pending", "", ""
    if job_failed:
        reason, _, message = job_failed.partition("\n")
        phase = FAILED
    elif succeeded == len(indexes):
        phase, reason = ("Complete", "CompletionsReached") if info.kind == "Job" else (SUCCEEDED, "")
    elif ended:
        phase = FAILED
        bad = [str(x.index) for x in indexes if x.result != SUCCEEDED]
        reason = "FailedIndexes" if info.kind == "Job" else "PodsFailed"
        message = f"pods of index {', '.join(bad)} did not succeed"
    elif active or any(x.result is not None for x in indexes):
        phase = "Running"
    limit = info.backoff_limit_per_index
    failed_indexes = None if limit is None else [x.index for x in indexes if x.result == FAILED and x.attempts > limit]
    return ArrayStatus(kind=info.kind, phase=phase, reason=reason, message=message, active=active,
                       succeeded=succeeded, failed=failed, indexes=indexes, failed_indexes=failed_indexes)


def found_record(profile: SiteProfile, *, uid: str, namespace: str, name: str, job_id: str) -> RunRecord:
    """The record of a run whose job was found by the uid in its comment when no record named it: its
    pod directory where the profile puts a pod of that uid (a workload's, when it holds
    ``job/workload.json``); never saved by this call."""
    root = pod_dir_for(profile, uid)
    try:
        kind = WorkloadFile.read(root).kind
        job_id = job_id.split("_", 1)[0]  # an element's id: the array's
    except (OSError, ValueError, TypeError, KeyError):
        kind = "Pod"
    return RunRecord(uid=uid, namespace=namespace, name=name, job_id=job_id,
                     pod_dir=root if Path(root).is_dir() else "", state=SUBMITTED, submitted=time.time(), kind=kind)


# ---------------------------------------------------------------------------------------------- delete


@dataclass
class _Stop:
    began: float  # when the delete began
    dirs: dict[int, PodDir]  # the pod directories of the elements that ran then, by index
    limit: float  # seconds their stop sequences may take
    termed: set[int] = field(default_factory=set)  # the elements whose batch shell got TERM


def pod_spec(pd: PodDir) -> dict[str, Any]:
    """The pod's spec as its directory keeps it (``job/pod.json``), for its grace period; ``{}`` when the
    file is gone or unreadable (the stop then waits the default grace period)."""
    try:
        spec = json.loads(pd.pod_json.read_text()).get("spec")
    except (OSError, ValueError, AttributeError):
        return {}
    return spec if isinstance(spec, dict) else {}


class WorkloadStops:
    """A workload's delete, one non-blocking step per call as a pod's (``JobPodProvider.delete``): its
    running pods are marked deleted and every element's batch shell gets TERM alone, once its script's
    TERM trap is set (``index.I.attempts`` is there: a TERM before kills bash, as a pod's before
    ``job.started``); each stops its containers as a pod's delete does (preStop, SIGTERM, the grace
    period, SIGKILL). Once every one of them is done (``pod.done``, or its index's result), or the
    grace periods plus a margin are over, the whole array is cancelled. Pending elements are cancelled
    with it; an array whose elements all ended is left alone."""

    def __init__(self, slurm: Slurm, *, margin: float) -> None:
        self.slurm = slurm
        self.margin = margin
        self._stops: dict[str, _Stop] = {}

    def step(self, rec: RunRecord, *, grace: float | None, now: float) -> tuple[bool, bool, bool]:
        """(done, killing: this call began stopping running pods, cancelled: the array was cancelled)."""
        stop, killing = self._stops.get(rec.uid), False
        if stop is None:
            try:
                info: WorkloadFile | None = WorkloadFile.read(rec.pod_dir)
                ids = element_ids(rec, info.count) if info is not None else []
            except (OSError, ValueError, TypeError, KeyError):
                info, ids = None, []
            states = self.slurm.query(ids) if ids else {}
            if ids and all(ended(j) for j in states.values()):
                return True, False, False
            running = [int(j.rsplit("_", 1)[1]) for j, job in states.items() if job is not None and job.state == "RUNNING"]
            if info is not None and running:
                dirs = {i: PodDir(Path(info.pods[i].dir)) for i in running}
                for d in dirs.values():
                    mark_deleting(d)
                stop = _Stop(now, dirs, stop_wait(pod_spec(dirs[running[0]]), grace=grace, margin=self.margin))
                self._stops[rec.uid] = stop
                killing = True
        if stop is not None:
            array = PodDir(Path(rec.pod_dir))  # the array's status/, laid out as a pod's
            # each running element's batch shell: `scancel --signal --batch` of the array's id waits
            # for ever when one of its elements is still pending (Slurm 22.05)
            for i, d in stop.dirs.items():
                if i not in stop.termed and term_once_started(self.slurm, f"{rec.job_id}_{i}", d,
                                                              array.exists(f"index.{i}.attempts")):
                    stop.termed.add(i)
            done = all(d.exists(POD_DONE) or array.exists(f"index.{i}") for i, d in stop.dirs.items())
            if killing or (not done and now - stop.began < stop.limit):
                return False, killing, False
        self.slurm.cancel(rec.job_id)  # the array's id: every element
        self._stops.pop(rec.uid, None)
        return True, False, True

    def delete(self, rec: RunRecord, *, grace: float | None, save: Callable[[RunRecord], None],
               recheck: float) -> Deletion:
        """:meth:`step` as the provider's ``delete`` answers it; the record says stopped once done."""
        done, killing, cancelled = self.step(rec, grace=grace, now=time.monotonic())
        if done:
            rec.state, rec.stopped = STOPPED, time.time()
            save(rec)
        return Deletion(done=done, job_id=rec.job_id, recheck_after=recheck, killing=killing, cancelled=cancelled)

    def wait_ended(self, rec: RunRecord, *, timeout: float) -> bool:
        """Wait (with back-off) until Slurm says the run's job (a workload's every element) ended; False if
        some still run after ``timeout``."""
        ids = [rec.job_id]
        if rec.is_array:
            try:
                ids = element_ids(rec, WorkloadFile.read(rec.pod_dir).count)
            except (OSError, ValueError, TypeError, KeyError):
                return True
        return wait_ended(self.slurm, ids, timeout=timeout)


__all__ = ["FAILED", "SUCCEEDED", "ArrayStatus", "WorkloadStops", "IndexStatus", "Member", "WorkloadFile", "array_status",
           "element_ids", "find_member", "found_record", "member_of", "member_record", "never_ran", "pod_spec",
           "write_workload_dir"]

"""``hpkctl run`` of a workload (Job, Deployment, ReplicaSet, StatefulSet) as one Slurm job array.

The workload's directory holds the array script (``job/job.sh``), ``job/workload.json`` (its
rules and its pods: name, uid, pod directory) and the array's status files (``status/``, written
by ``sbatch/array-runtime.sh``); each pod has its own pod directory as any pod has. The run
record names the workload, with ``kind`` set, so ``status``, ``logs`` and ``delete`` find it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from hpkctl.errors import HpkError, ManifestError
from hpkctl.jobs import TERMINAL_STATES, JobInfo
from hpkctl.local.manifest import Manifest, with_api_defaults
from hpkctl.provider.runrecords import SUBMITTING, WORKLOAD_FILE, RunRecord, check_name, create_record, forget_run
from hpkctl.local.workload import (JOB_KINDS, Workload, job_workload, member_pods, replica_workload)
from hpkctl.pod import RenderedPod, render_pod, write_pod_dir
from hpkctl.pod.array import NO_LIMIT, ArrayPlan, render_array
from hpkctl.pod.paths import PodDir, inside, read_int
from hpkctl.pod.status import PodStatus, containers_of, read_pod_status
from hpkctl.pod.translate import pod_dir_for
from hpkctl.pod.validation import validate_pod
from hpkctl.sites.schema import SiteProfile

SUCCEEDED, FAILED = "Succeeded", "Failed"  # an index's result (status/index.I)


def workload_of(manifest: Manifest, pod: Mapping[str, Any], *, now: bool = False) -> Workload | None:
    """The workload ``pod`` is the template of, when it runs as an array; None for a single pod.

    A CronJob runs on a schedule, which is Slurm's ``scrontab``, not hpkctl's: it is refused
    unless ``now`` (``hpkctl run --now``) asks for its Job once."""
    owner = manifest.owner(pod)
    if owner is None:
        return None
    kind, doc = owner
    source, template_at, _ = manifest.origin(pod)
    spec_at = template_at[: -len("template.")] if template_at.endswith("template.") else template_at
    name = str((doc.get("metadata") or {}).get("name") or "")
    where = f"{source}: {spec_at}"
    if kind == "CronJob":
        if not now:
            schedule = (doc.get("spec") or {}).get("schedule")
            raise ManifestError(
                f"{source}: a CronJob runs on a schedule ({schedule!r}); hpkctl runs no schedules",
                hint=f"run its Job once now with 'hpkctl run --now -f {manifest.path}', or let Slurm run "
                     f"that command on the schedule: 'scrontab -e' and a line such as "
                     f"'{schedule} hpkctl run --now -f {manifest.path}'")
        job_spec = ((doc.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}
        return job_workload(job_spec, name=name, where=where)
    found = doc.get("spec")
    spec: Mapping[str, Any] = found if isinstance(found, dict) else {}
    if kind == "Job":
        return job_workload(spec, name=name, where=where)
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        return replica_workload(kind, spec, name=name, where=where)
    return None  # a DaemonSet: one pod (manifest.workload_warnings says so)


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


def prepare_array(profile: SiteProfile, manifest: Manifest, template: dict[str, Any], workload: Workload, *,
                  namespace: str, out: TextIO) -> tuple[RunRecord, RenderedPod]:
    """Render every pod of the workload and the array script, create the run record exclusively,
    write the pods' directories and the workload's; submit nothing. The record is removed again
    when anything fails."""
    check_name(workload.name, namespace=namespace)
    array = build_array(profile, manifest, template, workload, namespace=namespace, create=True)
    members, rendered, script, info, uid, array_dir = array
    for w in rendered[0].warnings:
        print(f"hpkctl: warning: {w}", file=out)
    rec = RunRecord(name=workload.name, namespace=namespace, uid=uid, job_id="", pod_dir=array_dir,
                    site=profile.name, submitted=time.time(), state=SUBMITTING, pid=os.getpid(), kind=workload.kind)
    create_record(profile, rec)  # exclusive: a concurrent run of this name stops here
    try:
        for pod, r in zip(members, rendered):
            write_pod_dir(r, pod_json=json.dumps(pod, indent=2).encode())
        _write_array_dir(Path(array_dir), script, info)
    except BaseException:
        forget_run(profile, rec)
        raise
    return rec, rendered[0]


Built = tuple[list[dict[str, Any]], list[RenderedPod], str, "WorkloadFile", str, str]


def build_array(profile: SiteProfile, manifest: Manifest, template: dict[str, Any], workload: Workload, *,
                namespace: str, create: bool) -> Built:
    """The workload's pods (API defaults applied), each rendered, and the array script; writes nothing.
    ``create=False`` is a dry run (``hpkctl render``): uids derived from the content, as for a pod."""
    source, template_at, _ = manifest.origin(template)
    members = []
    for i, pod in enumerate(member_pods(workload, template, manifest.owner(template)[1])):  # type: ignore[index]
        validate_pod(pod, source=f"{source} (its pod {i}, {pod['metadata']['name']})", prefix=template_at)
        members.append(with_api_defaults(pod, namespace=namespace, create=create))
    rendered = [render_pod(pod, profile, objects=manifest.objects, services=manifest.services, strict=create)
                for pod in members]
    uid = str(uuid.uuid4()) if create else str(uuid.uuid5(uuid.NAMESPACE_URL, members[0]["metadata"]["uid"]))
    array_dir = pod_dir_for(profile, uid)
    job = workload.kind == "Job"
    plan = ArrayPlan(profile=profile, kind=workload.kind, namespace=namespace, name=workload.name, uid=uid,
                     array_dir=array_dir, pod_dirs=[r.plan.pod_dir for r in rendered],
                     options=rendered[0].plan.options, parallelism=workload.parallelism, retries=job,
                     backoff_limit=NO_LIMIT if workload.backoff_limit is None else workload.backoff_limit,
                     backoff_limit_per_index=(NO_LIMIT if workload.backoff_limit_per_index is None
                                              else workload.backoff_limit_per_index),
                     max_failed_indexes=NO_LIMIT if workload.max_failed_indexes is None else workload.max_failed_indexes,
                     active_deadline=workload.active_deadline or 0)
    script = render_array(plan)
    info = WorkloadFile(kind=workload.kind, name=workload.name, namespace=namespace, count=workload.count,
                        indexed=workload.indexed, retries=job, backoff_limit_per_index=workload.backoff_limit_per_index,
                        pods=[Member(name=p["metadata"]["name"], uid=p["metadata"]["uid"], dir=r.plan.pod_dir)
                              for p, r in zip(members, rendered)])
    return members, rendered, script, info, uid, array_dir


def _write_array_dir(root: Path, script: str, info: WorkloadFile) -> None:
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
    member = WorkloadFile.read(rec.pod_dir).pods[index]
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


__all__ = ["ArrayStatus", "build_array", "IndexStatus", "Member", "WorkloadFile", "array_status", "element_ids", "find_member",
           "member_record", "prepare_array", "workload_of"]

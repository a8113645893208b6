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
from pathlib import Path
from typing import Any, TextIO

from hpkctl.errors import ManifestError
from hpkctl.local.manifest import Manifest, with_api_defaults
from hpkctl.provider.runrecords import SUBMITTING, RunRecord, check_name, create_record, forget_run
from hpkctl.local.workload import (JOB_KINDS, Workload, job_workload, member_pods, replica_workload)
from hpkctl.pod import RenderedPod, render_pod, write_pod_dir
from hpkctl.pod.array import NO_LIMIT, ArrayPlan, render_array
from hpkctl.pod.translate import pod_dir_for
from hpkctl.pod.validation import validate_pod
from hpkctl.provider.workloads import (ArrayStatus, IndexStatus, Member, WorkloadFile, _ranges, array_status,
                                       element_ids, find_member, member_record, write_workload_dir)
from hpkctl.sites.schema import SiteProfile



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
        write_workload_dir(Path(array_dir), script, info)
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
    rendered = [render_pod(pod, profile, objects=manifest.objects, services=manifest.services, strict=create,
                           validated=True)
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


__all__ = ["ArrayStatus", "IndexStatus", "Member", "WorkloadFile", "_ranges", "array_status", "build_array", "element_ids", "find_member",
           "member_record", "prepare_array", "workload_of"]

"""Workloads in ``hpkctl run``: a Job, Deployment, ReplicaSet or StatefulSet as one Slurm job array.

Without a control plane there is no Job or ReplicaSet controller, so ``hpkctl run`` does their
work in Slurm's terms: each pod of the workload is one element of a job array
(``--array=0-(N-1)%P``), and the array's batch script (``sbatch/array.sh.j2``) retries failed
pods as the Job's ``backoffLimit``/``backoffLimitPerIndex`` say and ends the Job at its
``activeDeadlineSeconds``. One ``squeue`` call still answers for every element.

This module reads the workload's own fields (with the API server's validation rules) and makes
its pods: pod ``i`` is named ``<name>-<i>`` (a Job's pods get random suffixes under Kubernetes;
here the index keeps ``hpkctl logs NAME-3`` predictable), an Indexed Job's pods get
``JOB_COMPLETION_INDEX`` and the hostname ``<name>-<i>``, a StatefulSet's pods get their stable
hostname, subdomain and one volume directory per ``volumeClaimTemplates`` entry and ordinal.
A CronJob is not run on a schedule (that is Slurm's ``scrontab``); ``--now`` runs its Job once.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hpkctl.errors import ManifestError
from hpkctl.pod.validation import describe

# Kubernetes' limits (pkg/apis/batch/validation): an Indexed Job has at most 100000 completions.
MAX_INDEXED_COMPLETIONS = 100_000
DEFAULT_BACKOFF_LIMIT = 6  # the API server's default for spec.backoffLimit
JOB_KINDS = ("Job", "CronJob")
REPLICA_KINDS = ("Deployment", "ReplicaSet", "StatefulSet")


@dataclass
class Workload:
    """What the array script needs to know about a workload (``job/workload.json`` holds it)."""

    kind: str  # Job | Deployment | ReplicaSet | StatefulSet (a CronJob's Job is a Job)
    name: str
    count: int  # pods, the array's size
    parallelism: int | None = None  # the array's %limit; None: all at once
    indexed: bool = False
    backoff_limit: int | None = None  # failed pods the whole Job may have; None: not retried
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None
    active_deadline: int | None = None  # seconds from the first pod's start
    pods: list[str] = field(default_factory=list)  # pod names by index

    @property
    def retries(self) -> bool:
        return self.backoff_limit is not None or self.backoff_limit_per_index is not None


def _int(doc: Mapping[str, Any], keys: tuple[str, ...], *, where: str, minimum: int,
         default: int | None = None) -> int | None:
    node: Any = doc
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    if node is None:
        return default
    path = where + ".".join(keys)
    if isinstance(node, bool) or not isinstance(node, int):
        raise ManifestError(f"{path}: must be an integer, got {describe(node)}")
    if node < minimum:
        raise ManifestError(f"{path}: must be greater than or equal to {minimum}, got {node}")
    return node


def job_workload(spec: Mapping[str, Any], *, name: str, where: str) -> Workload:
    """A Job's fields (``where`` is the field path prefix of its spec, e.g. ``m.yaml: spec.``)."""
    completions = _int(spec, ("completions",), where=where, minimum=0)
    parallelism = _int(spec, ("parallelism",), where=where, minimum=0, default=1)
    mode = spec.get("completionMode") or "NonIndexed"
    if mode not in ("NonIndexed", "Indexed"):
        raise ManifestError(f"{where}completionMode: {describe(mode)} is not supported",
                            hint="use NonIndexed or Indexed")
    indexed = mode == "Indexed"
    if indexed and completions is None:
        raise ManifestError(f"{where}completions: required when completionMode is Indexed")
    if indexed and completions is not None and completions > MAX_INDEXED_COMPLETIONS:
        raise ManifestError(f"{where}completions: must be less than or equal to {MAX_INDEXED_COMPLETIONS} "
                            "when completionMode is Indexed")
    if parallelism == 0 or completions == 0:
        which = "parallelism" if parallelism == 0 else "completions"
        raise ManifestError(f"{where}{which}: 0 runs no pod", hint=f"set {which} to 1 or more")
    per_index = _int(spec, ("backoffLimitPerIndex",), where=where, minimum=0)
    if per_index is not None and not indexed:
        raise ManifestError(f"{where}backoffLimitPerIndex: requires completionMode: Indexed")
    max_failed = _int(spec, ("maxFailedIndexes",), where=where, minimum=0)
    if max_failed is not None and per_index is None:
        raise ManifestError(f"{where}maxFailedIndexes: requires backoffLimitPerIndex")
    # Kubernetes: with backoffLimitPerIndex the Job-wide backoffLimit defaults to "unlimited".
    backoff = _int(spec, ("backoffLimit",), where=where, minimum=0,
                   default=None if per_index is not None else DEFAULT_BACKOFF_LIMIT)
    deadline = _int(spec, ("activeDeadlineSeconds",), where=where, minimum=1)
    # No completions: a work queue of `parallelism` pods; here each of them must succeed once.
    count = completions if completions is not None else parallelism
    assert count is not None and parallelism is not None
    return Workload(kind="Job", name=name, count=count, parallelism=min(parallelism, count), indexed=indexed,
                    backoff_limit=backoff, backoff_limit_per_index=per_index, max_failed_indexes=max_failed,
                    active_deadline=deadline)


def replica_workload(kind: str, spec: Mapping[str, Any], *, name: str, where: str) -> Workload | None:
    """A Deployment/ReplicaSet/StatefulSet with more than one replica; None for one (a plain pod)."""
    replicas = _int(spec, ("replicas",), where=where, minimum=0, default=1)
    if replicas == 0:
        raise ManifestError(f"{where}replicas: 0 runs no pod", hint="set replicas to 1 or more")
    assert replicas is not None
    if replicas == 1 and kind != "StatefulSet":
        return None
    return Workload(kind=kind, name=name, count=replicas)


def member_pods(workload: Workload, template: Mapping[str, Any], owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The workload's pods, index by index, from its (validated) pod template."""
    pods = []
    found = owner.get("spec")
    spec: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    claims = [t for t in (spec.get("volumeClaimTemplates") or []) if isinstance(t, Mapping)]
    for i in range(workload.count):
        pod = copy.deepcopy(dict(template))
        meta = pod.setdefault("metadata", {})
        name = f"{workload.name}-{i}"
        meta["name"] = name
        labels = meta.setdefault("labels", {}) or {}
        meta["labels"] = labels
        annotations = meta.setdefault("annotations", {}) or {}
        meta["annotations"] = annotations
        pspec = pod.setdefault("spec", {})
        if workload.kind == "Job":
            labels.setdefault("batch.kubernetes.io/job-name", workload.name)
            labels.setdefault("job-name", workload.name)
            if workload.indexed:
                labels["batch.kubernetes.io/job-completion-index"] = str(i)
                annotations["batch.kubernetes.io/job-completion-index"] = str(i)
                pspec.setdefault("hostname", name)
                for key in ("initContainers", "containers"):
                    for c in pspec.get(key) or []:
                        env = [e for e in (c.get("env") or []) if e.get("name") != "JOB_COMPLETION_INDEX"]
                        c["env"] = [{"name": "JOB_COMPLETION_INDEX", "value": str(i)}, *env]
        elif workload.kind == "StatefulSet":
            labels["statefulset.kubernetes.io/pod-name"] = name
            labels["apps.kubernetes.io/pod-index"] = str(i)
            pspec["hostname"] = name
            if spec.get("serviceName"):
                pspec.setdefault("subdomain", spec["serviceName"])
            volumes = [v for v in pspec.get("volumes") or [] if isinstance(v, Mapping) and
                       v.get("name") not in {(c.get("metadata") or {}).get("name") for c in claims}]
            for claim in claims:  # the claim <template>-<set>-<ordinal>, as the controller names it
                cname = (claim.get("metadata") or {}).get("name")
                if cname:
                    volumes.append({"name": cname,
                                    "persistentVolumeClaim": {"claimName": f"{cname}-{workload.name}-{i}"}})
            pspec["volumes"] = volumes
        pods.append(pod)
    workload.pods = [p["metadata"]["name"] for p in pods]
    return pods


__all__ = ["DEFAULT_BACKOFF_LIMIT", "JOB_KINDS", "REPLICA_KINDS", "Workload", "job_workload", "member_pods",
           "replica_workload"]

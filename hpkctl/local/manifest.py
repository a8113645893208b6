"""Manifests from files: pick the pod (or a workload's pod template) and the objects it uses.

A file is read as ``kubectl apply -f`` reads it: one or more YAML documents, ``List`` objects
flattened. A pod taken from a file lacks what the API server would add (uid, defaults), so
:func:`pod_from_manifest` fills those in the same way, and the translator sees one shape of pod.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hpkctl.errors import ManifestError
from hpkctl.pod.objects import StaticObjects

# libyaml's C parser when present: several times faster for a burst of manifests.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_TEMPLATE_KINDS = {
    "Job": ("spec", "template"),
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


@dataclass
class Manifest:
    path: str
    pods: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (description, pod)
    objects: StaticObjects = field(default_factory=StaticObjects)
    services: list[dict[str, Any]] = field(default_factory=list)


def load_manifest(path: str | Path) -> Manifest:
    p = Path(path)
    try:
        text = p.read_text() if str(path) != "-" else sys.stdin.read()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}", hint="check the path given to -f") from exc
    try:
        docs = [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ManifestError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}",
                            hint="check indentation and quoting at that line") from exc
    manifest = Manifest(path=str(path))
    flat: list[tuple[int, dict[str, Any]]] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ManifestError(f"{path}: document {i + 1} is not a Kubernetes object (a mapping)")
        if doc.get("kind") == "List" or str(doc.get("kind", "")).endswith("List"):
            flat += [(i, item) for item in doc.get("items") or []]
        else:
            flat.append((i, doc))
    for i, doc in flat:
        kind = doc.get("kind")
        name = (doc.get("metadata") or {}).get("name", "")
        where = f"{path}: document {i + 1} ({kind} {name!r})"
        if not kind:
            raise ManifestError(f"{path}: document {i + 1}: missing 'kind'", hint="add kind: Pod (or Job, Deployment...)")
        if kind == "Pod":
            manifest.pods.append((f"Pod {name}", doc))
        elif kind in _TEMPLATE_KINDS:
            node: Any = doc
            for key in _TEMPLATE_KINDS[kind]:
                node = (node or {}).get(key) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                raise ManifestError(f"{where}: no pod template at {'.'.join(_TEMPLATE_KINDS[kind])}")
            manifest.pods.append((f"{kind} {name}", _pod_from_template(doc, node, kind=kind)))
        elif kind in ("ConfigMap", "Secret"):
            manifest.objects.add(doc)
        elif kind == "Service":
            manifest.services.append(doc)
    return manifest


def _pod_from_template(owner: Mapping[str, Any], template: Mapping[str, Any], *, kind: str) -> dict[str, Any]:
    meta = dict(template.get("metadata") or {})
    owner_meta = owner.get("metadata") or {}
    meta.setdefault("name", owner_meta.get("name", "pod"))
    meta.setdefault("namespace", owner_meta.get("namespace"))
    spec = dict(template.get("spec") or {})
    if kind in ("Job", "CronJob") and not spec.get("restartPolicy"):
        spec["restartPolicy"] = "Never"  # the API server requires Never/OnFailure for Job pods
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def select_pod(manifest: Manifest, name: str | None = None) -> dict[str, Any]:
    if not manifest.pods:
        raise ManifestError(f"{manifest.path}: no Pod, Job, Deployment or other pod template found",
                            hint="the file needs a document with kind: Pod (or a workload with a pod template)")
    if name is None:
        if len(manifest.pods) > 1:
            names = ", ".join(d for d, _ in manifest.pods)
            raise ManifestError(f"{manifest.path}: holds several pods ({names})", hint="choose one with --pod NAME")
        return manifest.pods[0][1]
    for desc, pod in manifest.pods:
        if (pod.get("metadata") or {}).get("name") == name or desc.split(" ", 1)[1] == name:
            return pod
    raise ManifestError(f"{manifest.path}: no pod named {name!r}",
                        hint="choose one of " + ", ".join(d for d, _ in manifest.pods))


def _container_defaults(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = str(c.get("image") or "")
    last = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in c:
        c["imagePullPolicy"] = "Always" if (":" not in last and "@" not in image) or last.endswith(":latest") \
            else "IfNotPresent"
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")


#: Namespace of the uids a dry run derives from a pod's content (uuid5).
_DRY_RUN_UIDS = uuid.UUID("5b0c1f7e-7d1e-4c55-9a59-6f1c2b1e0d42")


def with_api_defaults(pod: Mapping[str, Any], *, namespace: str | None = None, create: bool = False) -> dict[str, Any]:
    """Fill in what the API server adds when a pod is created (uid, namespace, spec defaults).

    ``create=True`` is a real creation: like the API server, it ignores the system fields a file
    may carry from ``kubectl get -o yaml`` (uid, resourceVersion, status...) and assigns a new uid,
    so two runs of one file never share a pod directory. A dry run keeps a given uid, or derives one
    from the pod's content, so rendering one file twice prints the same script.
    """
    out = copy.deepcopy(dict(pod))
    content_uid = str(uuid.uuid5(_DRY_RUN_UIDS, json.dumps(out, sort_keys=True, default=str)))
    meta = out.setdefault("metadata", {})
    if create:
        for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation",
                    "deletionTimestamp", "selfLink"):
            meta.pop(key, None)
        out.pop("status", None)
    if meta.get("namespace") is None:
        meta["namespace"] = namespace or "default"
    meta.setdefault("uid", str(uuid.uuid4()) if create else content_uid)
    meta.setdefault("creationTimestamp", dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    spec = out.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _container_defaults(c)
    return out


def validate_pod_shape(pod: Mapping[str, Any], *, source: str) -> None:
    """Structural checks that the API server would do, with the field named."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise ManifestError(f"{source}: spec: a pod needs a spec mapping")
    for key in ("containers", "initContainers", "volumes"):
        val = spec.get(key)
        if val is not None and not isinstance(val, list):
            raise ManifestError(f"{source}: spec.{key}: must be a list", hint=f"write {key}: [ ... ] or a '- ' list")
    if not spec.get("containers"):
        raise ManifestError(f"{source}: spec.containers: at least one container is required")
    for key in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(key) or []):
            if not isinstance(c, dict):
                raise ManifestError(f"{source}: spec.{key}[{i}]: must be a mapping")
            for req in ("name", "image"):
                if not c.get(req):
                    raise ManifestError(f"{source}: spec.{key}[{i}].{req}: required")
            for lst in ("command", "args"):
                if c.get(lst) is not None and (not isinstance(c[lst], list) or
                                               not all(isinstance(a, (str, int, float)) for a in c[lst])):
                    raise ManifestError(f"{source}: spec.{key}[{i}].{lst}: must be a list of strings",
                                        hint=f'write {lst}: ["sh", "-c", "..."]')
            for j, e in enumerate(c.get("env") or []):
                if not isinstance(e, dict) or not e.get("name"):
                    raise ManifestError(f"{source}: spec.{key}[{i}].env[{j}].name: required")
                if "value" in e and e["value"] is not None and not isinstance(e["value"], str):
                    raise ManifestError(f"{source}: spec.{key}[{i}].env[{j}].value: must be a string",
                                        hint=f'quote it: value: "{e["value"]}"')

"""Pods as controllers see them: made from a template with a controller reference, counted as
active/terminating/finished, deleted with their grace period, freed of a finalizer."""

from __future__ import annotations

import copy
from typing import Any

from .client import Kube, Obj, owner_ref, path_of

TERMINAL = ("Succeeded", "Failed")


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def active(pod: Obj) -> bool:
    """controller.FilterActivePods: not terminal and not being deleted."""
    return phase(pod) not in TERMINAL and not deleting(pod)


def ready(pod: Obj) -> bool:
    return phase(pod) == "Running" and any(c.get("type") == "Ready" and c.get("status") == "True"
                                           for c in (pod.get("status") or {}).get("conditions") or [])


def from_template(owner: Obj, kind: str, template: Obj, *, name: str = "", generate_name: str = "",
                  labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                  finalizers: tuple[str, ...] = ()) -> Obj:
    """controller.GetPodFromTemplate: the template's labels, annotations, finalizers and spec, the
    owner as controller (blockOwnerDeletion), a name or a generateName."""
    tmeta = template.get("metadata") or {}
    meta: Obj = {"labels": {**(tmeta.get("labels") or {}), **(labels or {})},
                 "ownerReferences": [owner_ref(owner, kind)]}
    if tmeta.get("annotations") or annotations:
        meta["annotations"] = {**(tmeta.get("annotations") or {}), **(annotations or {})}
    fins = [*(tmeta.get("finalizers") or []), *finalizers]
    if fins:
        meta["finalizers"] = fins
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})}


async def create(kube: Kube, ns: str, pod: Obj, why: str) -> Obj | None:
    made = await kube.write(f"create pod for {why}", "POST", path_of("Pod", ns), pod)
    return made


async def delete(kube: Kube, pod: Obj, *, grace: int | None = None) -> None:
    """DELETE with the uid as precondition; the pod's own grace period unless ``grace``."""
    body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1",
                            "preconditions": {"uid": pod["metadata"]["uid"]}, "propagationPolicy": "Background"}
    if grace is not None:
        body["gracePeriodSeconds"] = grace
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    await kube.write(f"delete pod {ns}/{name}", "DELETE", path_of("Pod", ns, name), body)


async def remove_finalizer(kube: Kube, pod: Obj, finalizer: str) -> bool:
    """A JSON patch that removes exactly that finalizer of exactly this pod (uid and entry tested)."""
    fins = pod["metadata"].get("finalizers") or []
    if finalizer not in fins:
        return True
    i = fins.index(finalizer)
    ops = [{"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]},
           {"op": "test", "path": f"/metadata/finalizers/{i}", "value": finalizer},
           {"op": "remove", "path": f"/metadata/finalizers/{i}"}]
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    out = await kube.write(f"remove finalizer {finalizer} of pod {ns}/{name}", "PATCH", path_of("Pod", ns, name),
                           ops, "application/json-patch+json")
    return out is not None


def condition(ctype: str, reason: str, message: str, when: str, status: str = "True") -> Obj:
    return {"type": ctype, "status": status, "lastProbeTime": when, "lastTransitionTime": when,
            "reason": reason, "message": message}


def has_condition(obj: Obj, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])

"""The ReplicaSet, Deployment and StatefulSet controllers' pod side (pkg/controller/replicaset,
deployment, statefulset): replicas kept, scale-down by deleting pods with their grace period, one
ReplicaSet per pod template (``<deployment>-<pod-template-hash>``), ordered StatefulSet pods."""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

from . import pods
from .client import Kube, Obj, now, owner_ref, path_of, say

HASH = "pod-template-hash"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Obj) -> str:
    """ComputeHash's shape: a 32-bit hash of the template, its decimal digits mapped to safe characters."""
    h = int.from_bytes(hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()[:4], "big")
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in str(h))


def _rank(p: Obj) -> tuple[int, int, int, str]:
    """Which pod goes first on scale-down (ActivePods order): unassigned, pending, not ready, newest."""
    return (0 if not p["spec"].get("nodeName") else 1, 0 if pods.phase(p) == "Pending" else 1,
            0 if not pods.ready(p) else 1, "".join(chr(0x10FFFF - ord(c)) for c in p["metadata"]["creationTimestamp"]))


async def _status(kube: Kube, kind: str, obj: Obj, status: Obj) -> None:
    if (obj.get("status") or {}) == status:
        return
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    body = {**obj, "apiVersion": "apps/v1", "kind": kind, "status": status}
    await kube.write(f"status of {kind.lower()} {ns}/{name}", "PUT", path_of(kind, ns, name) + "/status", body)


async def sync_replicaset(kube: Kube, rs: Obj, owned: list[Obj]) -> None:
    ns, name = rs["metadata"]["namespace"], rs["metadata"]["name"]
    want = int(rs["spec"].get("replicas", 1))
    live = [p for p in owned if pods.active(p)]
    if len(live) < want:
        for _ in range(want - len(live)):
            await pods.create(kube, ns, pods.from_template(rs, "ReplicaSet", rs["spec"].get("template") or {},
                                                           generate_name=f"{name}-"), f"replicaset {ns}/{name}")
    elif len(live) > want:
        for p in sorted(live, key=_rank)[:len(live) - want]:
            await pods.delete(kube, p)  # the pod's grace period: the kubelet stops it
    ready = sum(1 for p in live if pods.ready(p))
    st = {"replicas": len(live), "fullyLabeledReplicas": len(live), "readyReplicas": ready,
          "availableReplicas": ready, "observedGeneration": rs["metadata"].get("generation", 1)}
    await _status(kube, "ReplicaSet", rs, {k: v for k, v in st.items() if v or k in ("replicas", "observedGeneration")})


def _max_unavailable(dep: Obj, replicas: int) -> int:
    strategy = dep["spec"].get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0
    v = (strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%")
    n = math.floor(replicas * int(v[:-1]) / 100) if isinstance(v, str) and v.endswith("%") else int(v)
    return min(n, replicas)


async def sync_deployment(kube: Kube, dep: Obj, owned: list[Obj]) -> None:
    meta, spec = dep["metadata"], dep["spec"]
    ns, name = meta["namespace"], meta["name"]
    replicas = int(spec.get("replicas", 1))
    template = spec.get("template") or {}
    h = template_hash(template)
    new = next((rs for rs in owned if (rs["metadata"].get("labels") or {}).get(HASH) == h), None)
    when = now()
    if new is None:
        revision = 1 + max((int((rs["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision", 0))
                            for rs in owned), default=0)
        tmpl = copy.deepcopy(template)
        tmpl.setdefault("metadata", {})["labels"] = {**(tmpl["metadata"].get("labels") or {}), HASH: h}
        selector = copy.deepcopy(spec.get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH: h}
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": f"{name}-{h}", "labels": tmpl["metadata"]["labels"],
                           "annotations": {"deployment.kubernetes.io/revision": str(revision),
                                           "deployment.kubernetes.io/desired-replicas": str(replicas),
                                           "deployment.kubernetes.io/max-replicas": str(replicas)},
                           "ownerReferences": [owner_ref(dep, "Deployment")]},
              "spec": {"replicas": replicas, "minReadySeconds": spec.get("minReadySeconds", 0),
                       "selector": selector, "template": tmpl}}
        new = await kube.write(f"create replicaset for deployment {ns}/{name}", "POST", path_of("ReplicaSet", ns), rs)
        if new is None:
            return
        say(f"deployment {ns}/{name}: replicaset {new['metadata']['name']} (revision {revision})")
        owned = [*owned, new]
    scale = [(rs, replicas if rs is new else 0) for rs in owned]
    for rs, n in scale:  # old templates' ReplicaSets go to 0 at once (no surge/unavailable pacing)
        if int(rs["spec"].get("replicas", 1)) != n:
            await kube.write(f"scale replicaset {rs['metadata']['name']}", "PATCH",
                             path_of("ReplicaSet", ns, rs["metadata"]["name"]),
                             {"metadata": {"annotations": {"deployment.kubernetes.io/desired-replicas": str(replicas)}},
                              "spec": {"replicas": n}}, "application/merge-patch+json")
    sts = [rs.get("status") or {} for rs in owned]
    available = sum(s.get("availableReplicas", 0) for s in sts)
    updated = (new.get("status") or {}).get("replicas", 0)
    st: dict[str, Any] = {"observedGeneration": meta.get("generation", 1),
                          "replicas": sum(s.get("replicas", 0) for s in sts), "updatedReplicas": updated,
                          "readyReplicas": sum(s.get("readyReplicas", 0) for s in sts),
                          "availableReplicas": available,
                          "unavailableReplicas": max(0, replicas - available)}
    st = {k: v for k, v in st.items() if v or k == "observedGeneration"}
    old = {c["type"]: c for c in (dep.get("status") or {}).get("conditions") or []}
    ok = available >= replicas - _max_unavailable(dep, replicas)
    done = updated == replicas and available >= replicas and st.get("replicas", 0) == replicas
    rsname = new["metadata"]["name"]
    conds = [("Available", "True" if ok else "False",
              "MinimumReplicasAvailable" if ok else "MinimumReplicasUnavailable",
              "Deployment has minimum availability." if ok else "Deployment does not have minimum availability."),
             ("Progressing", "True", "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
              f'ReplicaSet "{rsname}" has successfully progressed.' if done else f'ReplicaSet "{rsname}" is progressing.')]
    st["conditions"] = []
    for ctype, status, reason, message in conds:
        c = old.get(ctype)
        if c and (c.get("status"), c.get("reason"), c.get("message")) == (status, reason, message):
            st["conditions"].append(c)
        else:
            st["conditions"].append(pods.condition(ctype, reason, message, when, status) |
                                    {"lastUpdateTime": when})
    await _status(kube, "Deployment", dep, st)


async def sync_statefulset(kube: Kube, sts: Obj, owned: list[Obj]) -> None:
    meta, spec = sts["metadata"], sts["spec"]
    ns, name = meta["namespace"], meta["name"]
    replicas = int(spec.get("replicas", 1))
    ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
    template = spec.get("template") or {}
    revision = f"{name}-{template_hash(template)}"
    by_ord: dict[int, Obj] = {}
    for p in owned:
        tail = p["metadata"]["name"][len(name) + 1:]
        if p["metadata"]["name"].startswith(f"{name}-") and tail.isdigit():
            by_ord[int(tail)] = p
    for i in range(replicas):
        p = by_ord.get(i)
        if p is None:
            pod = pods.from_template(sts, "StatefulSet", template, name=f"{name}-{i}",
                                     labels={"statefulset.kubernetes.io/pod-name": f"{name}-{i}",
                                             "apps.kubernetes.io/pod-index": str(i),
                                             "controller-revision-hash": revision})
            pod["spec"]["hostname"] = f"{name}-{i}"
            if spec.get("serviceName"):
                pod["spec"]["subdomain"] = spec["serviceName"]
            made = await pods.create(kube, ns, pod, f"statefulset {ns}/{name}")
            if made is not None:
                by_ord[i] = made
            if ordered:
                break  # OrderedReady: the next one once this one is Running and Ready
        elif pods.phase(p) in pods.TERMINAL and not pods.deleting(p):
            await pods.delete(kube, p)  # a finished pod is replaced (after it is gone)
            if ordered:
                break
        elif ordered and not (pods.ready(p) and not pods.deleting(p)):
            break
    extra = sorted((i for i in by_ord if i >= replicas), reverse=True)
    if extra and (not ordered or (all(pods.ready(by_ord[i]) for i in range(replicas) if i in by_ord)
                                  and not any(pods.deleting(by_ord[i]) for i in extra))):
        for i in extra[:1] if ordered else extra:  # highest ordinal first, one at a time when ordered
            if not pods.deleting(by_ord[i]):
                await pods.delete(kube, by_ord[i])
    live = [p for p in by_ord.values() if not pods.deleting(p)]
    ready = sum(1 for p in live if pods.ready(p))
    st = {"observedGeneration": meta.get("generation", 1), "replicas": len(live), "readyReplicas": ready,
          "currentReplicas": len(live), "updatedReplicas": len(live), "availableReplicas": ready,
          "currentRevision": revision, "updateRevision": revision, "collisionCount": 0}
    await _status(kube, "StatefulSet", sts, st)

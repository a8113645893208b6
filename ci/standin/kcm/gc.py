"""The garbage collector's owner check and pod GC (pkg/controller/garbagecollector, podgc):
dependents whose owners are all gone are deleted (background propagation), the Job controller's
finalizer leaves pods whose Job is gone, terminated pods over the threshold are deleted oldest first,
and pods bound to a Node that has been missing for 40 s are force-deleted."""

from __future__ import annotations

import time

from . import pods
from .client import Kube, Obj, path_of, say
from .jobs import TRACKING

QUARANTINE = 40.0  # podgc's quarantineTime before a pod of a missing Node goes


class Collector:
    def __init__(self, kube: Kube, threshold: int) -> None:
        self.kube = kube
        self.threshold = threshold
        self.missing_node: dict[str, float] = {}  # pod uid → when its Node was first seen missing

    async def owners(self, objects: dict[str, list[Obj]], dependents: list[tuple[str, Obj]]) -> None:
        """``objects``: kind → the objects that exist; a dependent none of whose owners (by uid) exists goes.
        Owners of other kinds are not looked at (such dependents are left alone)."""
        uids = {o["metadata"]["uid"] for objs in objects.values() for o in objs}
        for kind, d in dependents:
            refs = d["metadata"].get("ownerReferences") or []
            if not refs or any(r.get("kind") not in objects for r in refs) or any(r.get("uid") in uids for r in refs):
                continue
            ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
            if kind == "Pod" and TRACKING in (d["metadata"].get("finalizers") or []):
                await pods.remove_finalizer(self.kube, d, TRACKING)  # the Job controller frees orphans
            if d["metadata"].get("deletionTimestamp"):
                continue
            say(f"{kind.lower()} {ns}/{name}: its owner is gone, deleting it")
            if kind == "Pod":
                await pods.delete(self.kube, d)
            else:
                await self.kube.write(f"delete {kind.lower()} {ns}/{name}", "DELETE", path_of(kind, ns, name),
                                      {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background",
                                       "preconditions": {"uid": d["metadata"]["uid"]}})

    async def pods(self, all_pods: list[Obj], nodes: set[str]) -> None:
        done = [p for p in all_pods if pods.phase(p) in pods.TERMINAL and not pods.deleting(p)]
        if len(done) > self.threshold:
            for p in sorted(done, key=lambda p: p["metadata"]["creationTimestamp"])[:len(done) - self.threshold]:
                say(f"pod {p['metadata']['namespace']}/{p['metadata']['name']}: over the terminated-pod "
                    f"threshold ({self.threshold}), deleting it")
                await pods.delete(self.kube, p, grace=0)
        t = time.monotonic()
        seen = set()
        for p in all_pods:
            node = p["spec"].get("nodeName")
            if not node or node in nodes:
                continue
            uid = p["metadata"]["uid"]
            seen.add(uid)
            if t - self.missing_node.setdefault(uid, t) >= QUARANTINE:
                say(f"pod {p['metadata']['namespace']}/{p['metadata']['name']}: node {node} is gone, deleting it")
                await pods.delete(self.kube, p, grace=0)
        self.missing_node = {u: w for u, w in self.missing_node.items() if u in seen}

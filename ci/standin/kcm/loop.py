"""One level-triggered loop: list everything, reconcile every controller, then wait for a watch event
(or 2 s, for backoff and deadlines). Each round reads fresh lists, so nothing is assumed about what
the last round's writes did; writes that lose a race (404/409) are redone from the next lists."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from .client import Kube, Obj, controller_of, say
from .gc import Collector
from .jobs import Jobs
from .workloads import sync_deployment, sync_replicaset, sync_statefulset

LISTS = {"Pod": "/api/v1/pods", "Job": "/apis/batch/v1/jobs", "ReplicaSet": "/apis/apps/v1/replicasets",
         "Deployment": "/apis/apps/v1/deployments", "StatefulSet": "/apis/apps/v1/statefulsets"}
PERIOD = 2.0


def _by_controller(objs: list[Obj], kind: str) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = defaultdict(list)
    for o in objs:
        ref = controller_of(o)
        if ref is not None and ref.get("kind") == kind:
            out[ref["uid"]].append(o)
    return out


async def round_(kube: Kube, jobs: Jobs, gc: Collector) -> None:
    objs = {kind: await kube.list(path) for kind, path in LISTS.items()}
    nodes = {n["metadata"]["name"] for n in await kube.list("/api/v1/nodes")}
    rs_of = _by_controller(objs["ReplicaSet"], "Deployment")
    for d in objs["Deployment"]:
        if not d["metadata"].get("deletionTimestamp"):
            await sync_deployment(kube, d, rs_of.get(d["metadata"]["uid"], []))
    if objs["Deployment"]:
        objs["ReplicaSet"] = await kube.list(LISTS["ReplicaSet"])  # replicas just changed
    for kind, sync in (("ReplicaSet", sync_replicaset), ("StatefulSet", sync_statefulset)):
        owned = _by_controller(objs["Pod"], kind)
        for o in objs[kind]:
            if not o["metadata"].get("deletionTimestamp"):
                await sync(kube, o, owned.get(o["metadata"]["uid"], []))
    owned = _by_controller(objs["Pod"], "Job")
    for j in objs["Job"]:
        await jobs.sync(j, owned.get(j["metadata"]["uid"], []))
    uids = {j["metadata"]["uid"] for j in objs["Job"]}
    jobs.backoff = {u: b for u, b in jobs.backoff.items() if u in uids}  # deleted Jobs' back-off is forgotten
    await gc.owners({k: v for k, v in objs.items() if k != "Pod"},
                    [("Pod", p) for p in objs["Pod"]] + [("ReplicaSet", r) for r in objs["ReplicaSet"]])
    await gc.pods(objs["Pod"], nodes)


async def run(kube: Kube, *, gc_threshold: int) -> None:
    await kube.open()
    wake = asyncio.Event()
    watches = [asyncio.ensure_future(kube.watch(path, wake)) for path in LISTS.values()]
    jobs, gc = Jobs(kube), Collector(kube, gc_threshold)
    last = ""
    say("controllers: job, replicaset, deployment, statefulset, garbage collector (owners), pod GC "
        f"(terminated-pod threshold {gc_threshold})")
    try:
        while True:
            wake.clear()
            try:
                await round_(kube, jobs, gc)
                last = ""
            except Exception as e:  # noqa: BLE001 - the API server away or a bug: said once, retried
                msg = f"{type(e).__name__}: {e}"
                if msg != last:
                    say(f"controllers: {msg}")
                    last = msg
            try:
                await asyncio.wait_for(wake.wait(), timeout=PERIOD)
            except asyncio.TimeoutError:
                pass
            await asyncio.sleep(0.1)  # a burst of events is one round
    finally:
        for w in watches:
            w.cancel()
        await kube.close()

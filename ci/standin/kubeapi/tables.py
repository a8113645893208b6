"""Server-side printing for ``kubectl get`` (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``).

Without it kubectl prints only NAME and AGE (measured), so pods and nodes get the columns of
pkg/printers/internalversion/printers.go; other kinds get a name/age table.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

Row = list[Any]


def age(ts: str | None) -> str:
    """Short human duration (duration.HumanDuration)."""
    if not ts:
        return "<unknown>"
    then = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    s = int((datetime.now(timezone.utc) - then).total_seconds())
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 48:
        return f"{h}h"
    d = h // 24
    return f"{d}d{h % 24}h" if d < 8 and h % 24 else f"{d}d"


def _col(name: str, typ: str = "string", priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": typ, "format": fmt, "description": "", "priority": priority}


def pod_status(pod: dict[str, Any]) -> tuple[str, int, int, int]:
    """(STATUS, ready, total, restarts) as printPod computes them: a native sidecar (an init container
    with restartPolicy Always) counts among the containers, and once started it is passed over in
    the Init:... reason and counted ready when ready."""
    st, spec = pod.get("status") or {}, pod.get("spec") or {}
    reason = st.get("reason") or st.get("phase") or "Pending"
    statuses = st.get("containerStatuses") or []
    sidecars = {c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
    total = len(spec.get("containers") or []) + len(sidecars)
    restarts = sidecar_restarts = ready = 0
    initializing = False
    for i, c in enumerate(st.get("initContainerStatuses") or []):
        restarts += int(c.get("restartCount", 0))
        state = c.get("state") or {}
        term = state.get("terminated")
        if c.get("name") in sidecars:
            sidecar_restarts += int(c.get("restartCount", 0))
            if c.get("started"):
                ready += bool(c.get("ready"))
                continue
        if term and term.get("exitCode") == 0:
            continue
        if term:
            reason = "Init:" + (term.get("reason") or f"ExitCode:{term.get('exitCode')}")
        elif (state.get("waiting") or {}).get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{len(spec.get('initContainers') or [])}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True" for c in st.get("conditions") or [])
    if not initializing or initialized:
        restarts = sidecar_restarts
        has_running = False
        for c in reversed(statuses):
            restarts += int(c.get("restartCount", 0))
            state = c.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif state.get("terminated"):
                t = state["terminated"]
                reason = t.get("reason") or (f"Signal:{t['signal']}" if t.get("signal")
                                             else f"ExitCode:{t.get('exitCode')}")
            elif state.get("running") and c.get("ready"):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if st.get("reason") == "NodeLost" else "Terminating"
    return reason, ready, total, restarts


def _pod(o: dict[str, Any]) -> Row:
    reason, ready, total, restarts = pod_status(o)
    st, spec = o.get("status") or {}, o.get("spec") or {}
    return [o["metadata"]["name"], f"{ready}/{total}", reason, restarts, age(o["metadata"].get("creationTimestamp")),
            st.get("podIP") or "<none>", spec.get("nodeName") or "<none>", st.get("nominatedNodeName") or "<none>",
            "<none>"]


def _node(o: dict[str, Any]) -> Row:
    st, spec, meta = o.get("status") or {}, o.get("spec") or {}, o["metadata"]
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
    status = "Unknown" if ready is None or ready.get("status") == "Unknown" else \
        ("Ready" if ready.get("status") == "True" else "NotReady")
    if spec.get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(k.split("/", 1)[1] for k in (meta.get("labels") or {}) if k.startswith("node-role.kubernetes.io/"))
    info = st.get("nodeInfo") or {}
    addr = {a.get("type"): a.get("address") for a in st.get("addresses") or []}
    return [meta["name"], status, ",".join(roles) or "<none>", age(meta.get("creationTimestamp")),
            info.get("kubeletVersion", ""), addr.get("InternalIP", "<none>"), addr.get("ExternalIP", "<none>"),
            info.get("osImage", "<unknown>"), info.get("kernelVersion", "<unknown>"),
            info.get("containerRuntimeVersion", "<unknown>")]


def _generic(o: dict[str, Any]) -> Row:
    return [o["metadata"]["name"], age(o["metadata"].get("creationTimestamp"))]


def _ns(o: dict[str, Any]) -> Row:
    return [o["metadata"]["name"], (o.get("status") or {}).get("phase", ""), age(o["metadata"].get("creationTimestamp"))]


def _configmap(o: dict[str, Any]) -> Row:
    n = len(o.get("data") or {}) + len(o.get("binaryData") or {})
    return [o["metadata"]["name"], n, age(o["metadata"].get("creationTimestamp"))]


def _secret(o: dict[str, Any]) -> Row:
    return [o["metadata"]["name"], o.get("type", ""), len(o.get("data") or {}),
            age(o["metadata"].get("creationTimestamp"))]


def _event(o: dict[str, Any]) -> Row:
    inv = o.get("involvedObject") or {}
    last = o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get("creationTimestamp")
    return [age(str(last)[:19] + "Z") if last else "<unknown>", o.get("type", ""), o.get("reason", ""),
            f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}", o.get("message", "")]


def _service(o: dict[str, Any]) -> Row:
    spec = o.get("spec") or {}
    ports = ",".join(f"{p.get('port')}{'/' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
                     for p in spec.get("ports") or []) or "<none>"
    external = ",".join(spec.get("externalIPs") or []) or ("<pending>" if spec.get("type") == "LoadBalancer" else "<none>")
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [o["metadata"]["name"], spec.get("type", ""), spec.get("clusterIP") or "<none>", external, ports,
            age(o["metadata"].get("creationTimestamp")), selector]


def _deployment(o: dict[str, Any]) -> Row:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    return [o["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
            st.get("updatedReplicas", 0), st.get("availableReplicas", 0), age(o["metadata"].get("creationTimestamp"))]


def _lease(o: dict[str, Any]) -> Row:
    return [o["metadata"]["name"], (o.get("spec") or {}).get("holderIdentity", ""),
            age(o["metadata"].get("creationTimestamp"))]


TABLES: dict[str, tuple[list[dict[str, Any]], Callable[[dict[str, Any]], Row]]] = {
    "pods.": ([_col("Name", fmt="name"), _col("Ready"), _col("Status"), _col("Restarts", "string"),
               _col("Age"), _col("IP", priority=1), _col("Node", priority=1),
               _col("Nominated Node", priority=1), _col("Readiness Gates", priority=1)], _pod),
    "nodes.": ([_col("Name", fmt="name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version"),
                _col("Internal-IP", priority=1), _col("External-IP", priority=1), _col("OS-Image", priority=1),
                _col("Kernel-Version", priority=1), _col("Container-Runtime", priority=1)], _node),
    "namespaces.": ([_col("Name", fmt="name"), _col("Status"), _col("Age")], _ns),
    "configmaps.": ([_col("Name", fmt="name"), _col("Data", "integer"), _col("Age")], _configmap),
    "secrets.": ([_col("Name", fmt="name"), _col("Type"), _col("Data", "integer"), _col("Age")], _secret),
    "services.": ([_col("Name", fmt="name"), _col("Type"), _col("Cluster-IP"), _col("External-IP"), _col("Port(s)"),
                   _col("Age"), _col("Selector", priority=1)], _service),
    "deployments.apps": ([_col("Name", fmt="name"), _col("Ready"), _col("Up-to-date", "integer"),
                          _col("Available", "integer"), _col("Age")], _deployment),
    "leases.coordination.k8s.io": ([_col("Name", fmt="name"), _col("Holder"), _col("Age")], _lease),
    "events": ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")], _event),
}


def table(key: str, objs: list[dict[str, Any]], *, rv: str, include: str = "Metadata") -> dict[str, Any]:
    cols, fn = TABLES.get(key, ([_col("Name", fmt="name"), _col("Age")], _generic))
    rows = []
    for o in objs:
        row: dict[str, Any] = {"cells": fn(o)}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": o.get("metadata", {})}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": cols, "rows": rows}

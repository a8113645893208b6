"""A pod's ``status`` for the API server, and the patch that carries only what changed.

The status comes from :func:`hpkctl.pod.status.read_pod_status` (status files + Slurm's facts),
shaped as the real kubelet reports it. The patch is a strategic merge patch of ``pods/{p}/status``
that carries ``metadata.uid`` (the server then refuses it for another pod of the same name, as the
real kubelet's ``preparePatchBytesForPodStatus`` intends). ``containerStatuses`` are atomic lists
in the schema, so they are sent whole; conditions merge by ``type``, so only the kubelet's own
are sent (``PodScheduled`` belongs to the scheduler).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpkctl.kube.events import rfc3339
from hpkctl.pod.status import PodStatus

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
_TOP = ("phase", "reason", "message", "podIP", "podIPs", "hostIP", "hostIPs", "startTime")


def _container_extras(pod: Mapping[str, Any], entry: dict[str, Any], *, job_id: str) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    images = {c.get("name"): c.get("image", "") for c in (spec.get("initContainers") or [])
              + (spec.get("containers") or [])}
    image = images.get(entry["name"], "")
    entry["image"] = image
    entry["imageID"] = f"sif://{image}" if image else ""
    if job_id and "waiting" not in entry["state"]:
        entry["containerID"] = f"slurm://{job_id}/{entry['name']}"
    return entry


def api_status(pod: Mapping[str, Any], st: PodStatus, *, job_id: str, host_ip: str,
               previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The pod's status as the API server should hold it (without ``qosClass``, which the server owns)."""
    out = st.as_k8s()
    prev_conds = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    conds = []
    for c in out.pop("conditions"):
        if c["type"] not in KUBELET_CONDITIONS:
            continue
        old = prev_conds.get(c["type"])
        c["lastTransitionTime"] = (old.get("lastTransitionTime") if old and old.get("status") == c["status"]
                                   and old.get("lastTransitionTime") else rfc3339())
        c["lastProbeTime"] = None
        conds.append(c)
    out["conditions"] = conds
    if host_ip:
        out["hostIP"] = host_ip
        out["hostIPs"] = [{"ip": host_ip}]
    if st.phase == "Pending" and job_id and st.job is not None and not st.started_at:
        reason = st.job.reason or st.job.state
        out["message"] = f"Slurm job {job_id} is {st.job.state.lower()}" + (f" ({reason})" if reason else "")
        out.pop("reason", None)
    # as the real kubelet: the containers say how they run or ended (a pod Pending in its job is
    # still initializing: kubectl shows Init:... from the container statuses)
    if st.phase in ("Running", "Succeeded") or (st.phase == "Pending" and st.started_at):
        out.pop("reason", None)
        out.pop("message", None)
    for key in ("initContainerStatuses", "containerStatuses"):
        out[key] = [_container_extras(pod, dict(e), job_id=job_id) for e in out[key]]
        for e in out[key]:
            if st.phase == "Pending" and "waiting" in e["state"] and e["state"]["waiting"].get("reason") in (
                    "Waiting", "PodInitializing", "", None) and not st.started_at:
                e["state"] = {"waiting": {"reason": "ContainerCreating"}}
    if not out["initContainerStatuses"]:
        out.pop("initContainerStatuses")
    gen = (pod.get("metadata") or {}).get("generation")
    if gen:
        out["observedGeneration"] = gen
    return out


def _comparable(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """What counts as a change: everything but the condition timestamps."""
    s = dict(status or {})
    s["conditions"] = sorted(({k: v for k, v in c.items() if k not in ("lastTransitionTime", "lastProbeTime")}
                              for c in s.get("conditions") or [] if c.get("type") in KUBELET_CONDITIONS),
                             key=lambda c: str(c.get("type")))
    s.pop("qosClass", None)
    return s


def status_patch(uid: str, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The strategic merge patch from ``old`` to ``new``; ``None`` when nothing changed."""
    if _comparable(new) == _comparable(old):
        return None
    body: dict[str, Any] = dict(new)
    for key in (*_TOP, "initContainerStatuses"):
        if key not in new and (old or {}).get(key) is not None:
            body[key] = None  # SMP: null deletes the field
    if "conditions" in new:
        body["conditions"] = _condition_deletes(new["conditions"], (old or {}).get("conditions") or [])
    return {"metadata": {"uid": uid}, "status": body}


def _condition_deletes(new: list[dict[str, Any]], old: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``new``'s conditions, each with a null for every field its previous version had and it lacks.

    Conditions merge by ``type``, so a field left out would stay: a ``Ready`` turning True would keep
    ``ContainersNotReady`` and "containers with unready status". The real kubelet's two-way merge
    patch sends those fields as null, which deletes them."""
    before = {c.get("type"): c for c in old}
    return [{**{k: None for k in before.get(c.get("type"), {}) if k not in c}, **c} for c in new]


def forbidden_transitions(new: Mapping[str, Any], old: Mapping[str, Any] | None,
                          spec: Mapping[str, Any]) -> list[str]:
    """The container states in ``new`` the API server would refuse after ``old``, as field paths.

    kube-apiserver's ValidateContainerStateTransition and ValidateInitContainerStateTransition
    (pkg/apis/core/validation): unless the pod's restartPolicy is Always, a container ``old``
    reported terminated may not become non-terminated, except after a failure under OnFailure,
    and except an init container with its own restartPolicy Always (a native sidecar, which
    restarts under any pod policy). The path names the index in ``old``, as the server's does."""
    policy = spec.get("restartPolicy") or "Always"
    if policy == "Always" or not old:
        return []
    sidecars = {c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
    out = []
    for key, restartable in (("containerStatuses", set()), ("initContainerStatuses", sidecars)):
        now = {c.get("name"): c for c in new.get(key) or []}
        for i, prev in enumerate(old.get(key) or []):
            term = (prev.get("state") or {}).get("terminated")
            if term is None or (term.get("exitCode", 0) != 0 and policy == "OnFailure"):
                continue
            if prev.get("name") in restartable:
                continue
            c = now.get(prev.get("name"))
            if c is not None and "terminated" not in (c.get("state") or {}):
                out.append(f"status.{key}[{i}].state")
    return out


def never_regresses(new: Mapping[str, Any], old: Mapping[str, Any] | None, *, spec: Mapping[str, Any]) -> bool:
    """Whether ``new`` may follow ``old``: no container the API server counts as terminated for good
    goes back to running (:func:`forbidden_transitions`; a re-adopting kubelet must never try)."""
    return not forbidden_transitions(new, old, spec)


def reported_starts(status: Mapping[str, Any]) -> dict[str, str]:
    """Container name → the ``startedAt`` of the run the API already shows (running or terminated,
    or during a restart back-off the one in ``lastState``).

    A kubelet that starts again takes these as the starts it has announced: a ``Started`` event
    goes out only for a run that began after them, as the real kubelet emits it once per start."""
    out = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for c in status.get(key) or []:
            state = c.get("state") or {}
            last = (c.get("lastState") or {}).get("terminated") if "waiting" in state else None  # in a back-off
            started = (state.get("running") or state.get("terminated") or last or {}).get("startedAt")
            if c.get("name") and started:
                out[str(c["name"])] = str(started)
    return out

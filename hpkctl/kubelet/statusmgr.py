"""The kubelet's status manager: the one place a pod's status patch is made, on the pod's worker.

As the real kubelet's (``pkg/kubelet/status/status_manager.go``):

- A status goes out when it differs from what the kubelet last had accepted (``needsUpdate``);
  the patch is computed against the server's copy (the reflector's latest object) merged with
  that, so a field someone else set or removed is put right in the same patch.
- Every :data:`RECONCILE_EVERY` (10 s, the status manager's ``syncPeriod``) the status loop asks
  :meth:`StatusManager.needs_reconcile`: when the server's copy has moved on (a newer
  ``resourceVersion`` than the one the last patch was made against) and no longer shows what the
  kubelet reported (``needsReconcile``), the pod is queued and its worker patches it back.
- A refusal (4xx: the pod is not this node's, a field the server rejects) is not sent again at
  once: it is backed off (:class:`~hpkctl.backoff.Backoff`, up to 5 minutes) and logged once per
  distinct refusal. A 5xx or an unreachable server raises, and the worker retries with back-off.
- The job id annotation (``hpk.io/slurm-job-id``) of a pod this kubelet submitted rides on the
  pod's next status patch (``pods/status`` keeps annotation changes) rather than a patch of its
  own right after ``sbatch``: one write per pod less, and none on the submit path (issue 23.2).
- The events a status change means (Started, BackOff, Unhealthy, Killing, Failed:
  :mod:`hpkctl.kubelet.podevents`) go out once the status was accepted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from hpkctl.kube import Kube, KubeError, pod_path
from hpkctl.kubelet.podevents import PodEvents
from hpkctl.kubelet.podstatus import KUBELET_CONDITIONS, api_status, never_regresses, status_patch
from hpkctl.kubelet.table import Tracked
from hpkctl.pod.status import PodStatus
from hpkctl.provider import ProbeKill

log = logging.getLogger("hpkctl.kubelet.status")

RECONCILE_EVERY = 10.0
JOB_ID_ANNOTATION = "hpk.io/slurm-job-id"
_OWNED = ("phase", "reason", "message", "podIP", "podIPs", "hostIP", "hostIPs", "startTime",
          "initContainerStatuses", "containerStatuses", "observedGeneration")


def waiting_containers(pod: Mapping[str, Any], reason: str, message: str) -> list[dict[str, Any]]:
    """Every main container waiting for ``reason``: the pod never reached Slurm."""
    return [{"name": c.get("name"), "image": c.get("image", ""), "imageID": "", "ready": False, "restartCount": 0,
             "started": False, "state": {"waiting": {"reason": reason, "message": message}}}
            for c in (pod.get("spec") or {}).get("containers") or []]


def _canon(value: Any) -> Any:
    """For comparing with the server's copy: empty values dropped (the real API server writes
    ``lastState: {}`` and ``ready: false`` where the kubelet may leave them out)."""
    if isinstance(value, Mapping):
        out = {k: _canon(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [], False, "")}
    if isinstance(value, list):
        return [_canon(v) for v in value]
    return value


def _owned(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The part of a status the kubelet owns, comparable: its fields and conditions, without times."""
    s = status or {}
    out = {k: s.get(k) for k in _OWNED}
    out["conditions"] = sorted(({k: v for k, v in c.items() if k not in ("lastTransitionTime", "lastProbeTime")}
                                for c in s.get("conditions") or [] if c.get("type") in KUBELET_CONDITIONS),
                               key=lambda c: str(c.get("type")))
    return dict(_canon(out))


def _annotation_due(t: Tracked) -> str:
    """The job id the next status patch is to put on the pod ("" when it is there already)."""
    job = t.state.annotate
    if not job or job == t.state.annotated or \
            ((t.pod.get("metadata") or {}).get("annotations") or {}).get(JOB_ID_ANNOTATION) == job:
        return ""
    return job


def _version(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("resourceVersion") or "")


class StatusManager:
    def __init__(self, *, kube: Kube, events: PodEvents, host_ip: str = "") -> None:
        self.kube = kube
        self.events = events
        self.host_ip = host_ip
        self.patches = 0  # status patches sent (tests, bench)
        self.refusals = 0  # of which the server refused (4xx)

    # ------------------------------------------------------------------ sending
    def send(self, t: Tracked, status: dict[str, Any], *, now: float | None = None) -> bool:
        """Patch the pod's status to ``status``; True when the server holds it now (or already did).

        False when there was nothing new, the pod is gone (404/409), or the server refused it (4xx:
        ``t.state.patch_gate`` says when to try again; ``t.state.unsent`` keeps it). Raises
        ``KubeError`` (5xx) / ``KubeUnavailable``: the caller retries."""
        st = t.state
        now = time.monotonic() if now is None else now
        annotate = _annotation_due(t)
        if status_patch(t.uid, status, t.sent) is None and not st.reconcile and not annotate:
            return False  # needsUpdate: nothing the kubelet has not had accepted already
        if now < st.patch_gate:
            st.unsent = status
            return False
        server = dict(t.pod.get("status") or {})
        patch = status_patch(t.uid, status, {**server, **(t.sent or {})})
        if annotate:
            patch = patch or {"metadata": {"uid": t.uid}}
            patch["metadata"]["annotations"] = {JOB_ID_ANNOTATION: annotate}
        version = _version(t.pod)
        if patch is not None:
            try:
                self.patches += 1
                self.kube.patch(pod_path(t.namespace, t.name, "status"), patch)
            except KubeError as exc:
                if exc.code in (404, 409):  # deleted meanwhile, or another pod now has the name
                    st.unsent = None
                    return False
                st.unsent = status
                if 400 <= exc.code < 500:
                    self._refused(t, exc, now)
                    return False
                raise
        st.unsent, st.reconcile, st.sent_version = None, False, version
        if annotate:
            st.annotated = annotate
        st.patch_backoff.reset()
        st.patch_gate, st.refused = 0.0, ""
        sent = {**(t.sent or {}), **status}
        for k, v in (patch or {}).get("status", {}).items():
            if v is None:
                sent.pop(k, None)
        t.sent = sent
        return True

    def _refused(self, t: Tracked, exc: KubeError, now: float) -> None:
        st = t.state
        self.refusals += 1
        delay = st.patch_backoff.next()
        st.patch_gate = now + delay
        what = f"{exc.code}: {exc}"
        if what != st.refused:  # logged once per distinct refusal, not on every retry
            log.warning("pod %s: the API server refused its status (%s); retrying with back-off (next in %.0f s)",
                        t.key, what, delay)
            st.refused = what
        else:
            log.debug("pod %s: status refused again (%s); next try in %.0f s", t.key, what, delay)

    def retry(self, t: Tracked, *, now: float | None = None) -> float:
        """Send a status a refusal or an outage left unsent, once its gate is open; the seconds
        until it may be tried (0: nothing left)."""
        st = t.state
        now = time.monotonic() if now is None else now
        if st.unsent is None and not st.reconcile:
            return 0.0
        if now < st.patch_gate:
            return st.patch_gate - now
        status = st.unsent if st.unsent is not None else dict(t.sent or {})
        if st.reconcile:
            log.info("pod %s: the API server's status differs from the kubelet's: patching it back", t.key)
        self.send(t, status, now=now)
        return max(0.0, st.patch_gate - now) if st.unsent is not None else 0.0

    def needs_reconcile(self, t: Tracked) -> bool:
        """``needsReconcile``: the server's copy moved on since the last patch and lost what the
        kubelet reported. Read-only: the caller queues the pod, its worker patches."""
        st = t.state
        if t.sent is None or st.unsent is not None or st.reconcile or not st.sent_version:
            return False
        version = _version(t.pod)
        if version == st.sent_version:
            return False  # the copy the last patch was made against: nothing newer to compare
        if _owned(t.sent) == _owned(t.pod.get("status")):
            st.sent_version = version  # our own patch's echo: agreed, nothing to do at this version
            return False
        return True

    def waiting(self, t: Tracked, reason: str, message: str) -> bool:
        return self.send(t, {"phase": "Pending", "containerStatuses": waiting_containers(t.pod, reason, message)})

    # ------------------------------------------------------------------ reports from the status loop
    def report(self, t: Tracked, st: PodStatus, kills: tuple[ProbeKill, ...] = ()) -> bool:
        """The pod's status as the provider reported it: sent if changed, then its events; False when
        it was not accepted (try again later)."""
        new = api_status(t.pod, st, job_id=t.job_id, host_ip=self.host_ip, previous=t.sent)
        if not never_regresses(new, t.sent, spec=t.pod.get("spec") or {}):
            log.warning("pod %s: not reporting a terminated container as running again", t.key)
            return True
        before = t.status
        if not self.send(t, new) and t.state.unsent is not None:
            return False  # refused: neither the status nor its events count as reported
        t.status = st
        self.events.transitions(t, before, st, kills)
        return True

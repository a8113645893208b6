"""The events a pod's own changes raise, in the real kubelet's words: Started once per container run,
Unhealthy + Killing once per run a probe stopped, BackOff once per back-off of a crashing container,
Failed when the pod fails, and Optional/Mandatory…NotFound for the objects its translation missed.

Each is posted once: what was announced is kept on the pod's :class:`~hpkctl.kubelet.table.Tracked`
(a restarted kubelet starts from the starts the API's status already shows).
"""

from __future__ import annotations

from typing import Any

from hpkctl.kube.events import EventSink
from hpkctl.kubelet.table import Tracked
from hpkctl.pod.status import ContainerStatus, PodStatus
from hpkctl.provider import Note, ProbeKill


class PodEvents:
    def __init__(self, recorder: EventSink) -> None:
        self.recorder = recorder

    def post(self, t: Tracked, reason: str, message: str, *, warning: bool = False) -> None:
        pod = dict(t.pod)
        pod.setdefault("kind", "Pod")
        pod.setdefault("apiVersion", "v1")
        self.recorder.record(pod, reason=reason, message=message, type="Warning" if warning else "Normal")

    def notes(self, t: Tracked, notes: tuple[Note, ...]) -> None:
        for n in notes:
            self.post(t, n.reason, n.message, warning=n.warning)

    def missing(self, t: Tracked, missing: list[tuple[str, str]], *, mandatory: bool) -> None:
        for kind, name in missing:
            tag = f"{kind}:{name}"
            if tag in t.state.missing:
                continue
            t.state.missing.add(tag)
            which = "Mandatory" if mandatory else "Optional"
            self.post(t, f"{which}{kind}NotFound",
                      f"{kind.lower()} {t.namespace}/{name} not found" + ("" if mandatory else " (optional: skipped)"),
                      warning=mandatory)

    def transitions(self, t: Tracked, before: PodStatus | None, st: PodStatus, kills: tuple[ProbeKill, ...]) -> None:
        seen = t.state.started
        for c in st.containers:
            # every run that started, even one that ended between two polls (and is in its back-off now)
            ran = c.state in ("running", "terminated") or c.reason == "CrashLoopBackOff"
            if c.started_at and ran and seen.get(c.name) != c.started_at:
                seen[c.name] = c.started_at
                self.post(t, "Started", f"Started container {c.name}")
            self._probe_kills(t, [k for k in kills if k.container == c.name])
            self._back_off(t, c)
        if st.phase == "Failed" and (before is None or before.phase != "Failed"):
            self.post(t, "Failed", f"{st.reason}: {st.message}", warning=True)

    def _back_off(self, t: Tracked, c: ContainerStatus) -> None:
        """BackOff (Warning) once per back-off of a container, in the kubelet's words."""
        if c.reason != "CrashLoopBackOff" or c.state != "waiting":
            return
        seen = t.state.backoff_events
        if (c.name, c.last_finished_at) in seen:
            return
        seen.add((c.name, c.last_finished_at))
        meta: dict[str, Any] = t.pod.get("metadata") or {}
        self.post(t, "BackOff", f"Back-off restarting failed container {c.name} in pod "
                  f"{meta.get('name')}_{meta.get('namespace') or 'default'}({meta.get('uid')})", warning=True)

    def _probe_kills(self, t: Tracked, kills: list[ProbeKill]) -> None:
        """Unhealthy + Killing once per run a probe stopped (the provider reports the kill again after
        the restart, as the previous run's: the same key)."""
        seen = t.state.probe_kills
        for k in kills:
            if (k.container, k.run) in seen:
                continue
            seen.add((k.container, k.run))
            self.post(t, "Unhealthy", k.text, warning=True)
            kind = k.text.split(" ", 1)[0].lower()
            if kind in ("liveness", "startup"):
                self.post(t, "Killing", f"Container {k.container} failed {kind} probe, will be restarted")

"""The kubelet's in-memory view of its pods, keyed by UID (never by namespace/name: a pod deleted and
re-created under the same name is another pod, and virtual-kubelet's worst bugs came from forgetting
that).

One :class:`Tracked` per pod the API server has bound to this node (or that the kubelet still has a
job for). The reflector replaces ``pod`` (the server's copy); the pod's reconcile worker owns the rest
(:class:`~hpkctl.kubelet.podstate.PodState` says who writes what); the HTTPS server and the status
loop read them, through :meth:`PodTable.by_name` and :meth:`PodTable.snapshot`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hpkctl.kubelet.podstate import PodState
from hpkctl.pod.status import PodStatus

_SEMANTIC = ("labels", "annotations", "deletionTimestamp", "deletionGracePeriodSeconds")


@dataclass
class Tracked:
    uid: str
    namespace: str
    name: str
    pod: dict[str, Any]  # the latest object from the API server (raw JSON)
    job_id: str = ""  # "" until sbatch answered
    status: PodStatus | None = None  # the last status read from the pod directory and Slurm
    sent: dict[str, Any] | None = None  # the last status the API server accepted
    deleting: bool = False  # the stop sequence has begun
    error: str = ""  # a reason the pod could not be submitted (it has a Failed/Pending status saying so)
    state: PodState = field(default_factory=PodState)
    seen: float = field(default_factory=time.monotonic)  # when this kubelet first saw it (its registration)

    def replace(self, pod: dict[str, Any]) -> bool:
        """Take the server's newer copy; whether the change means work for the pod's worker, as the real
        kubelet's ``podsDifferSemantically`` (``pkg/kubelet/config/config.go``) decides: its spec, labels,
        annotations or deletion changed. A change of the status alone (each status patch's echo, ~3 per
        pod) is only the copy the status manager compares with, as there."""
        old, self.pod = self.pod, pod
        a, b = old.get("metadata") or {}, pod.get("metadata") or {}
        return old.get("spec") != pod.get("spec") or any(a.get(k) != b.get(k) for k in _SEMANTIC)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def containers(self) -> list[str]:
        spec = self.pod.get("spec") or {}
        return [c.get("name", "") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]


class PodTable:
    """Thread-safe map uid → :class:`Tracked`, with a namespace/name index for the HTTPS API."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, Tracked] = {}

    def get(self, uid: str) -> Tracked | None:
        with self._lock:
            return self._pods.get(uid)

    def unsubmitted(self, uid: str) -> bool:
        """A pod still to be submitted: the work queue runs its worker before other pods' status work."""
        t = self.get(uid)
        return t is not None and not (t.job_id or t.state.final or t.deleting)

    def put(self, t: Tracked) -> None:
        with self._lock:
            self._pods[t.uid] = t

    def pop(self, uid: str) -> Tracked | None:
        with self._lock:
            return self._pods.pop(uid, None)

    def by_name(self, namespace: str, name: str) -> Tracked | None:
        """The pod of that name; when an old pod of the name is still being stopped next to its
        successor, the one not being deleted."""
        with self._lock:
            found = [t for t in self._pods.values() if t.namespace == namespace and t.name == name]
        found.sort(key=lambda t: t.deleting)
        return found[0] if found else None

    def snapshot(self) -> list[Tracked]:
        with self._lock:
            return list(self._pods.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

"""What the kubelet knows about one pod besides its API object: a typed record with an explicit phase.

Who writes what (one writer per pod):

- the reconcile worker (one per uid at a time, :class:`~hpkctl.kube.workqueue.WorkQueue`) owns
  everything here except the fields marked *status loop*;
- the status loop (:meth:`~hpkctl.kubelet.pods.PodManager.poll`) only detects a change: it hands
  the provider's report to the worker through :meth:`PodState.observe` (and sets ``reconcile`` when
  the server's copy lost what the kubelet reported) and queues the uid; it never patches or fails a
  pod itself;
- the reflector only replaces the pod's API object (``Tracked.pod``, the server's copy).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from hpkctl.backoff import Backoff
from hpkctl.provider import StatusReport

#: as the kubelet's CreateContainerConfigError / image pull back-off: 10 s doubling up to 5 minutes
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0


class Phase(Enum):
    NEW = "new"  # bound to the node, nothing tried yet
    WAITING = "waiting"  # could not be created yet (a missing ConfigMap, a failed pull, an API error): gated
    PULLING = "pulling"  # the provider pulls its images; created again only when it says they are there
    SUBMITTED = "submitted"  # its job exists; its status is followed
    FINAL = "final"  # terminal, or never to run: nothing is reported any more


def _backoff() -> Backoff:
    return Backoff(initial=BACKOFF_START, cap=BACKOFF_MAX)


@dataclass
class PodState:
    phase: Phase = Phase.NEW
    # the gate: no create (no render, no ConfigMap/Secret GET, no TokenRequest, no sbatch) before it opens
    backoff: Backoff = field(default_factory=_backoff)
    gate_until: float = 0.0  # time.monotonic()
    pulled: bool = False  # the provider said the pulls of a PULLING pod ended: create it again
    pulling: tuple[str, ...] = ()  # the images of the Pulling event (Pulled names them again)
    pull_failed: bool = False
    # events already posted (each goes out once)
    started: dict[str, str] = field(default_factory=dict)  # container -> startedAt of the run announced
    backoff_events: set[tuple[str, str | None]] = field(default_factory=set)
    probe_kills: set[tuple[str, int]] = field(default_factory=set)
    missing: set[str] = field(default_factory=set)  # "kind:name" of objects reported missing
    token_due: float = 0.0  # time.time() when the projected tokens are due again
    annotated: str = ""  # the job id this process put on the pod (not again for each watch event)
    annotate: str = ""  # the job id the pod's next status patch carries (its submission's)
    # the status manager (worker only, but ``reconcile``: status loop)
    patch_backoff: Backoff = field(default_factory=lambda: Backoff(initial=1.0, cap=BACKOFF_MAX))
    patch_gate: float = 0.0  # time.monotonic(): no status patch before (after a 4xx)
    refused: str = ""  # the last refusal logged (a 4xx is logged once)
    sent_version: str = ""  # the server copy's resourceVersion when the last patch went out
    reconcile: bool = False  # the server's copy lost what the kubelet reported: patch again
    unsent: dict[str, Any] | None = None  # a status refused or not delivered, sent again after patch_gate
    _observed: StatusReport | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def final(self) -> bool:
        return self.phase is Phase.FINAL

    def gated(self, now: float) -> float:
        """Seconds the gate still holds (0: open)."""
        return max(0.0, self.gate_until - now)

    def close_gate(self, now: float) -> float:
        """A failed attempt: the gate holds for the next back-off delay; that delay."""
        delay = self.backoff.next()
        self.gate_until = now + delay
        return delay

    def open_gate(self) -> None:
        self.backoff.reset()
        self.gate_until = 0.0

    def observe(self, report: StatusReport) -> None:
        """Status loop: hand the provider's report to the worker. A newer report replaces one not yet
        taken, keeping its notes, probe kills and failure (each is said once, never lost)."""
        with self._lock:
            old = self._observed
            if old is not None:
                report = replace(report, notes=old.notes + report.notes,
                                 probe_kills=old.probe_kills + report.probe_kills,
                                 failure=report.failure or old.failure,
                                 status=report.status if report.status is not None else old.status)
            self._observed = report

    def take(self) -> StatusReport | None:
        """Worker: the observation to act on, if any."""
        with self._lock:
            obs, self._observed = self._observed, None
            return obs

    def give_back(self, report: StatusReport) -> None:
        """Worker: acting failed (the API server is down, a refusal): keep ``report``, before a newer one."""
        with self._lock:
            newer, self._observed = self._observed, None
        self.observe(report)
        if newer is not None:
            self.observe(newer)

    @property
    def observed(self) -> bool:
        with self._lock:
            return self._observed is not None

"""A pod provider that runs nothing: pods live in a dict, a test moves them along. It is the second
implementation of :class:`hpkctl.provider.PodProvider` that shows the seam holds (the kubelet runs on it
unchanged: tests/provider/test_fake_provider.py), and a stand-in for controller tests that want no Slurm."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpkctl.errors import HpkError
from hpkctl.pod.lifecycle import grace_period
from hpkctl.provider.tokens import TokenSource
from hpkctl.pod.status import ContainerStatus, PodStatus
from hpkctl.provider import (ContainerRun, Created, Deletion, ExecSession, Leftover, Outcome, PodInputs, PodRef,
                             StatusReport, Watched)


@dataclass
class FakePod:
    ref: PodRef
    pod: Mapping[str, Any]
    job_id: str
    phase: str = "Pending"  # what the next status report says
    changed: bool = True
    term_at: float | None = None  # when delete began
    grace: float | None = None  # the grace delete was given
    stopped: bool = False
    logs: dict[str, bytes] = field(default_factory=dict)


class FakeProvider:
    """Every operation of the Protocol, on memory. ``clock`` drives the stop sequences."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, log_dir: Path | None = None) -> None:
        self.clock = clock
        self.log_dir = log_dir
        self.pods: dict[str, FakePod] = {}
        self.left: list[Leftover] = []
        self.given_up: set[str] = set()
        self.calls: list[tuple[str, str]] = []  # (operation, uid)
        self.slurm_calls = 0
        self.stop_queries = 0
        self._ids = itertools.count(1001)

    def start(self) -> None:
        self.calls.append(("start", ""))

    def leftovers(self) -> list[Leftover]:
        return list(self.left)

    def create(self, pod: Mapping[str, Any], inputs: PodInputs) -> Created:
        ref = PodRef.of(pod)
        self.calls.append(("create", ref.uid))
        if ref.uid in self.pods:
            return Created(Outcome.ADOPTED, job_id=self.pods[ref.uid].job_id, where="memory")
        job_id = str(next(self._ids))
        self.pods[ref.uid] = FakePod(ref=ref, pod=pod, job_id=job_id)
        return Created(Outcome.SUBMITTED, job_id=job_id)

    def give_up(self, ref: PodRef) -> None:
        self.given_up.add(ref.uid)

    def delete(self, ref: PodRef, *, grace: float | None, pod: Mapping[str, Any], report: bool = True) -> Deletion:
        self.calls.append(("delete", ref.uid))
        p = self.pods.get(ref.uid)
        if p is None or p.stopped:
            return Deletion(done=True)
        now = self.clock()
        if p.term_at is None:
            p.term_at, p.grace = now, grace if grace is not None else float(grace_period(pod.get("spec") or {}))
            return Deletion(done=False, job_id=p.job_id, recheck_after=0.5, killing=True)
        assert p.grace is not None
        if now - p.term_at < p.grace:
            return Deletion(done=False, job_id=p.job_id, recheck_after=0.5)
        p.stopped = True
        return Deletion(done=True, job_id=p.job_id, cancelled=True)

    def statuses(self, pods: Sequence[Watched], *, now: float | None = None) -> list[StatusReport]:
        self.slurm_calls += 1
        out = []
        for w in pods:
            p = self.pods.get(w.ref.uid)
            if p is None or not p.changed:
                continue
            p.changed = False
            names = [c.get("name", "") for c in (w.pod.get("spec") or {}).get("containers") or []]
            state = {"Running": "running", "Succeeded": "terminated"}.get(p.phase, "waiting")
            containers = [ContainerStatus(name=n, init=False, state=state, exit_code=0 if state == "terminated" else None,
                                          reason="Completed" if state == "terminated" else "")
                          for n in names]
            st = PodStatus(p.phase, "", "", None, None, "fake-node", None, containers)
            out.append(StatusReport(uid=w.ref.uid, status=st, final=p.phase in ("Succeeded", "Failed")))
        return out

    def pod_statuses(self, refs: Sequence[PodRef], *, fresh: bool = True,
                     now: float | None = None) -> dict[str, PodStatus]:
        self.slurm_calls += 1  # one "query" for all of them
        return {r.uid: PodStatus(self.pods[r.uid].phase, "", "", None, None, "fake-node", None, []) for r in refs}

    def unstartable(self, ref: PodRef, pod: Mapping[str, Any], *, now: float | None = None) -> None:
        return None

    def refresh_tokens(self, ref: PodRef, pod: Mapping[str, Any], objects: TokenSource) -> None:
        self.calls.append(("refresh_tokens", ref.uid))

    def clean(self, keep: float) -> int:
        gone = [u for u, p in self.pods.items() if p.stopped]
        for u in gone:
            del self.pods[u]
        return len(gone)

    def log_file(self, uid: str, container: str, *, previous: bool = False) -> Path | None:
        p = self.pods.get(uid)
        if p is None or container not in p.logs or self.log_dir is None:
            return None
        path = self.log_dir / f"{uid}-{container}.log"
        path.write_bytes(p.logs[container])
        return path

    def container_run(self, uid: str, container: str) -> ContainerRun:
        p = self.pods.get(uid)
        return ContainerRun(running=p is not None and p.phase == "Running" and not p.stopped)

    def log_complete(self, uid: str, container: str, *, policy: str) -> bool:
        p = self.pods.get(uid)
        return p is None or p.phase in ("Succeeded", "Failed")

    async def exec(self, uid: str, container: str, command: Sequence[str], *, tty: bool,
                   stdin: bool) -> ExecSession:
        raise HpkError("the fake provider runs no commands")

    # ------------------------------------------------------------------ what a test does to its pods
    def set_phase(self, uid: str, phase: str) -> None:
        self.pods[uid].phase = phase
        self.pods[uid].changed = True

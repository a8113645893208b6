"""The kubelet as a pod controller (issue 21.2), on the fake provider (tests/support/fake_provider.py)
and a fake API server: one writer per pod (the status loop only detects; the pod's worker patches and
fails), a back-off gate that holds against watch events, a reconcile that repairs a status someone
else changed, a refused (4xx) status patch not retried in a loop, a 5xx retried, events throttled."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from hpkctl.errors import PodError
from hpkctl.kube import KubeError
from hpkctl.kube.eventcache import EventCorrelator
from hpkctl.kube.events import EventRecorder
from hpkctl.kubelet import pods as pods_mod
from hpkctl.kubelet.podstate import Phase
from hpkctl.kubelet.pods import PodManager
from hpkctl.provider import Created, Failure, PodInputs, StatusReport, Watched
from hpkctl.sites import load_site
from tests.support.fake_provider import FakeProvider
from tests.support.kubelet_fakes import FakeKube, _pod
from tests.support.waiting import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Api(FakeKube):
    """The fake API server, with the thread of every call and scripted refusals of status patches."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[tuple[str, str]] = []  # (method + path, thread name)
        self.refuse: list[KubeError] = []  # raised by the next status patches, in order
        self.missing = False  # ConfigMaps and Secrets: 404

    def get(self, path: str, **kw: Any) -> Any:
        self.calls.append(("GET", path, None))
        if self.missing and ("/configmaps/" in path or "/secrets/" in path):
            raise KubeError(404, "NotFound", f"{path} not found")
        return {"items": []}

    def patch(self, path: str, body: Any, **kw: Any) -> Any:
        self.threads.append((f"PATCH {path}", threading.current_thread().name))
        if path.endswith("/status") and self.refuse and "status" in body:
            self.calls.append(("REFUSED", path, body))
            raise self.refuse.pop(0)
        return super().patch(path, body, **kw)

    def reads(self) -> int:
        return sum(1 for m, _, _ in self.calls if m == "GET")

    def refused(self) -> int:
        return sum(1 for m, _, _ in self.calls if m == "REFUSED")


class Provider(FakeProvider):
    """The fake provider, with what a real one reads at create (a ConfigMap the pod names, through
    the kubelet's objects) and a pod whose job can never start."""

    def __init__(self) -> None:
        super().__init__()
        self.never: set[str] = set()
        self.attempts = 0

    def create(self, pod: Mapping[str, Any], inputs: PodInputs) -> Created:
        self.attempts += 1
        for c in (pod.get("spec") or {}).get("containers") or []:
            for ref in c.get("envFrom") or []:
                name = (ref.get("configMapRef") or {}).get("name")
                if name and inputs.objects is not None and inputs.objects.configmap("default", name) is None:
                    raise PodError("CreateContainerConfigError", f'configmap "{name}" not found')
        return super().create(pod, inputs)

    def statuses(self, pods: Any, *, now: float | None = None) -> list[StatusReport]:
        out = super().statuses(pods, now=now)
        for w in pods:
            if isinstance(w, Watched) and w.ref.uid in self.never:
                self.never.discard(w.ref.uid)
                out.append(StatusReport(uid=w.ref.uid, failure=Failure("SlurmNeverStarts", "never")))
        return out


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(pods_mod.time, "monotonic", c)  # the pods' gates, the status loop's rounds
    return c


def manager(api: Api, provider: Provider, *, events_clock: Clock | None = None) -> PodManager:
    recorder = EventRecorder(api, component="kubelet",  # type: ignore[arg-type]
                             correlator=EventCorrelator(clock=events_clock) if events_clock else None)
    m = PodManager(kube=api, provider=provider, profile=load_site("ci"), node_name="hpk",  # type: ignore[arg-type]
                   recorder=recorder)
    m.load_records()
    return m


def running(m: PodManager, provider: Provider, uid: str = "u-1") -> dict[str, Any]:
    """A pod created through the provider and reported Running."""
    pod = _pod(f"p-{uid}", uid)
    m.on_event("ADDED", pod)
    m.queue.drain()
    provider.set_phase(uid, "Running")
    return pod


def test_the_status_loop_only_detects_and_the_pods_worker_writes() -> None:
    """The status loop (this thread) asks the provider and queues; the status patch of one pod and the
    failure of another whose job can never start are made by the pods' workers, and by nothing else."""
    api, provider = Api(), Provider()
    m = manager(api, provider)
    running(m, provider)
    running(m, provider, "u-2")
    provider.never.add("u-2")
    patches, calls = len(api.status_patches()), len(api.threads)
    m.queue.start()
    try:
        m.poll()  # as the status loop does
        wait_for("the workers' patches", lambda: len(api.status_patches()) >= patches + 2, timeout=10, every=0.01)
        wait_for("the queue idle", m.queue.idle, timeout=10, every=0.01)
    finally:
        m.queue.stop()
    me = threading.current_thread().name
    writers = {name for call, name in api.threads[calls:] if call.endswith("/status")}
    assert writers and all(w.startswith("pod-worker-") for w in writers) and me not in writers, writers
    t1, t2 = m.table.get("u-1"), m.table.get("u-2")
    assert t1 is not None and t1.sent is not None and t1.sent["phase"] == "Running"
    assert t2 is not None and t2.state.final and t2.sent is not None and t2.sent["reason"] == "SlurmNeverStarts"


def test_the_back_off_gate_holds_against_watch_events(clock: Clock) -> None:
    """A missing ConfigMap: CreateContainerConfigError and a gate. The echo of the kubelet's own
    status patch and any other event during the gate create nothing and GET nothing."""
    api, provider = Api(), Provider()
    api.missing = True
    m = manager(api, provider)
    pod = _pod()
    pod["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    m.on_sync([pod])
    m.queue.drain()
    t = m.table.get("u-1")
    assert t is not None and t.state.phase is Phase.WAITING
    (patch,) = api.status_patches()
    assert patch["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    reads, gate = api.reads(), t.state.gated(clock.now)
    assert 5.0 <= gate <= 10.0  # the kubelet's 10 s back-off, jittered
    for rv in range(6, 16):  # echoes and other events while the gate holds
        echo = {**pod, "metadata": {**pod["metadata"], "resourceVersion": str(rv)}, "status": t.sent}
        m.on_event("MODIFIED", echo)
        m.queue.drain()
        clock.now += gate / 20
    assert api.reads() == reads and len(api.status_patches()) == 1 and provider.attempts == 1
    clock.now += gate  # the gate opens: one more try, one more back-off, longer
    m.sync("u-1")
    assert api.reads() > reads and provider.attempts == 2
    assert t.state.backoff.failures == 2 and t.state.gated(clock.now) > 0
    api.missing = False  # the ConfigMap exists now: once the gate opens the pod is created
    clock.now += t.state.gated(clock.now)
    m.sync("u-1")
    assert "u-1" in provider.pods and t.state.phase is Phase.SUBMITTED and t.state.gated(clock.now) == 0


def _running_and_reported(api: Api, provider: Provider) -> tuple[Any, dict[str, Any], Any]:
    """A manager with pod u-1 running and its status patched (the queue drained): (manager, pod, tracked)."""
    m = manager(api, provider)
    pod = running(m, provider)
    m.poll()
    m.queue.drain()
    t = m.table.get("u-1")
    assert t is not None and t.sent is not None
    return m, pod, t


def test_an_update_of_a_pods_status_alone_queues_no_work_but_a_change_of_its_spec_labels_or_deletion_does(
        clock: Clock) -> None:
    """As the real kubelet's podsDifferSemantically: the echo of each status patch (~3 per pod) only
    replaces the copy the status manager compares with; spec, labels, annotations and deletion queue it."""
    api, provider = Api(), Provider()
    m, pod, t = _running_and_reported(api, provider)
    assert m.queue.due("u-1") is None
    meta = pod["metadata"]
    echo = {**pod, "metadata": {**meta, "resourceVersion": "6"}, "status": t.sent}
    m.on_event("MODIFIED", echo)
    assert m.queue.due("u-1") is None and t.pod is echo  # taken, nothing queued
    changes = [{**echo, "metadata": {**meta, "labels": {"app": "x"}}},
               {**echo, "metadata": {**meta, "annotations": {"a": "b"}}},
               {**echo, "spec": {**pod["spec"], "activeDeadlineSeconds": 60}}]
    for changed in changes:
        m.on_event("MODIFIED", changed)
        assert m.queue.due("u-1") is not None and t.pod is changed, changed
        m.queue.drain()
        m.on_event("MODIFIED", echo)  # back as it was: a change again
        m.queue.drain()
    deleted = {**echo, "metadata": {**meta, "deletionTimestamp": "2026-11-24T05:00:00Z",
                                    "deletionGracePeriodSeconds": 30}}
    m.on_event("MODIFIED", deleted)
    assert m.queue.due("u-1") is not None and t.pod is deleted


def test_a_reconcile_repairs_a_status_someone_else_changed(clock: Clock) -> None:
    api, provider = Api(), Provider()
    m, pod, t = _running_and_reported(api, provider)
    assert t.sent["phase"] == "Running"
    sent = len(api.status_patches())
    # the echo of the kubelet's own patch: nothing to reconcile
    m.on_event("MODIFIED", {**pod, "metadata": {**pod["metadata"], "resourceVersion": "6"}, "status": t.sent})
    clock.now += 11
    m.poll()
    m.queue.drain()
    assert len(api.status_patches()) == sent
    # someone else (kubectl patch --subresource=status) marks it Failed
    other = {**t.sent, "phase": "Failed", "reason": "Tampered", "message": "not the kubelet's"}
    m.on_event("MODIFIED", {**pod, "metadata": {**pod["metadata"], "resourceVersion": "7"}, "status": other})
    m.queue.drain()
    assert len(api.status_patches()) == sent  # not at once: at the next reconcile round
    clock.now += 11
    m.poll()
    m.queue.drain()
    (repair,) = api.status_patches()[sent:]
    assert repair["status"]["phase"] == "Running"
    assert repair["status"]["reason"] is None and repair["status"]["message"] is None  # deleted again


def test_a_refused_status_patch_is_backed_off_and_logged_once(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    api, provider = Api(), Provider()
    m = manager(api, provider)
    running(m, provider)
    t = m.table.get("u-1")
    assert t is not None
    api.refuse = [KubeError(422, "Invalid", "status.containerStatuses: Invalid value")] * 3
    caplog.set_level(logging.WARNING, logger="hpkctl.kubelet.status")
    m.poll()
    m.queue.drain()
    assert api.refused() == 1 and t.state.patch_gate > clock.now
    rounds = 0
    while clock.now + 0.05 < t.state.patch_gate:  # status rounds: nothing sent again while the back-off holds
        clock.now += 0.05
        provider.set_phase("u-1", "Running")  # and the provider reports again
        m.poll()
        m.queue.drain()
        rounds += 1
    assert rounds >= 5
    assert api.refused() == 1
    clock.now = t.state.patch_gate
    m.sync("u-1")  # the gate opens: tried again, refused again, the back-off grows
    m.sync("u-1")
    assert api.refused() == 2 and t.state.patch_backoff.failures == 2
    assert len([r for r in caplog.records if "refused its status" in r.getMessage()]) == 1
    api.refuse = []
    clock.now = t.state.patch_gate
    m.sync("u-1")
    assert api.status_patches()[-1]["status"]["phase"] == "Running" and t.state.unsent is None


def test_a_5xx_or_an_unreachable_server_is_retried(clock: Clock) -> None:
    api, provider = Api(), Provider()
    m = manager(api, provider)
    running(m, provider)
    t = m.table.get("u-1")
    assert t is not None
    api.refuse = [KubeError(503, "ServiceUnavailable", "etcdserver: leader changed")]
    m.poll()
    m.queue.drain()
    assert t.state.observed and m.queue.due("u-1") is not None  # kept, and queued for a retry
    m.sync("u-1")
    assert api.status_patches()[-1]["status"]["phase"] == "Running" and not t.state.observed


def test_events_are_throttled_per_pod(clock: Clock) -> None:
    events = Clock()
    api, provider = Api(), Provider()
    m = manager(api, provider, events_clock=events)
    running(m, provider)
    t = m.table.get("u-1")
    assert t is not None
    before = len(api.events())
    for i in range(60):  # a pod that keeps failing differently
        m.events.post(t, f"Reason{i}", "m", warning=True)
    assert len(api.events()) - before <= 25
    events.now += 300
    m.events.post(t, "Later", "m")
    assert api.events()[-1]["reason"] == "Later"

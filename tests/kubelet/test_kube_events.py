"""hpkctl.kube.events against the Kubernetes API stand-in (which validates Events as the real server
does): the body client-go's recorder would post, aggregation of repeats into ``count``, a new event
once the remembered one is gone, and events about cluster-scoped objects (Nodes) in ``default``."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpkctl.kube import Kube, KubeUnavailable, namespaced, pod_path
from hpkctl.kube.events import EventBroadcaster, EventRecorder, event_body, post_event
from tests.support.kubeapi import KubeApi, pod, require_kubectl, start
from tests.support.waiting import wait_for

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def api() -> Iterator[KubeApi]:
    d = Path(tempfile.mkdtemp(prefix="events-test-"))
    a = start(d / "state")
    try:
        yield a
    finally:
        a.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def kube(api: KubeApi) -> Kube:
    return Kube(str(api.kubeconfig))


def make_pod(api: KubeApi, name: str) -> Obj:
    code, out = api.post(pod_path("default"), pod(name))
    assert code == 201, out
    return dict(out)


def events_about(api: KubeApi, uid: str) -> list[Obj]:
    code, out = api.get("/api/v1/namespaces/default/events", params={"fieldSelector": f"involvedObject.uid={uid}"})
    assert code == 200, out
    return list(out["items"])


@pytest.mark.standin
def test_post_event_is_what_the_kubelet_recorder_posts(api: KubeApi, kube: Kube) -> None:
    p = make_pod(api, "ev-shape")
    ev = post_event(kube, obj=p, reason="Pulled", message="image pulled", component="kubelet", host="hpk")
    assert re.fullmatch(r"ev-shape\.[0-9a-f]+", ev["metadata"]["name"])
    assert ev["involvedObject"] == {"kind": "Pod", "apiVersion": "v1", "name": "ev-shape", "namespace": "default",
                                    "uid": p["metadata"]["uid"], "resourceVersion": p["metadata"]["resourceVersion"]}
    assert (ev["type"], ev["reason"], ev["count"], ev["source"]) == ("Normal", "Pulled", 1,
                                                                      {"component": "kubelet", "host": "hpk"})
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", ev["firstTimestamp"])
    assert ev["lastTimestamp"] == ev["firstTimestamp"] and "eventTime" not in ev
    assert [e["metadata"]["name"] for e in events_about(api, p["metadata"]["uid"])] == [ev["metadata"]["name"]]


@pytest.mark.standin
def test_kubectl_describe_lists_the_event(api: KubeApi, kube: Kube) -> None:
    """``kubectl describe pod`` finds events by involvedObject fields: ours must be found that way."""
    require_kubectl()
    p = make_pod(api, "ev-describe")
    post_event(kube, obj=p, reason="FailedScheduling", message="0/1 nodes are available: 1 node(s) were unschedulable.",
               type="Warning", component="hpk-scheduler")
    out = api.kubectl("describe", "pod", "ev-describe").stdout
    assert re.search(r"Warning\s+FailedScheduling\s+.*hpk-scheduler\s+0/1 nodes are available", out), out


@pytest.mark.standin
def test_recorder_aggregates_repeats_and_starts_over_when_the_event_is_gone(api: KubeApi, kube: Kube) -> None:
    p = make_pod(api, "ev-agg")
    rec = EventRecorder(kube, component="hpk-scheduler")
    first = rec.record(p, reason="FailedScheduling", message="0/1 nodes are available", type="Warning")
    assert first is not None and first["count"] == 1
    for n in (2, 3):
        again = rec.record(p, reason="FailedScheduling", message="0/1 nodes are available", type="Warning")
        assert again is not None and (again["metadata"]["name"], again["count"]) == (first["metadata"]["name"], n)
    other = rec.record(p, reason="FailedScheduling", message="another message", type="Warning")
    assert other is not None and other["metadata"]["name"] != first["metadata"]["name"]
    assert sorted(e["count"] for e in events_about(api, p["metadata"]["uid"])) == [1, 3]
    # expired (TTL) or deleted: the next repeat is a new event, not an error
    assert api.delete(namespaced("events", "default", first["metadata"]["name"]))[0] == 200
    fresh = rec.record(p, reason="FailedScheduling", message="0/1 nodes are available", type="Warning")
    assert fresh is not None and fresh["count"] == 1 and fresh["metadata"]["name"] != first["metadata"]["name"]


@pytest.mark.standin
def test_events_about_a_node_go_to_default(api: KubeApi, kube: Kube) -> None:
    code, node = api.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ev-node"}})
    assert code == 201, node
    ev = post_event(kube, obj=node, reason="NodeReady", message="ready", component="kubelet", host="ev-node")
    assert ev["metadata"]["namespace"] == "default" and "namespace" not in ev["involvedObject"]


@pytest.mark.standin
def test_recorder_failure_is_logged_not_raised(api: KubeApi, kube: Kube, caplog: pytest.LogCaptureFixture) -> None:
    ghost = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "ghost", "namespace": "no-such-namespace",
                                                             "uid": "0000"}}
    assert EventRecorder(kube, component="hpk-scheduler").record(ghost, reason="X", message="m") is None
    assert "not recorded" in caplog.text


def test_event_body_refuses_what_the_server_would() -> None:
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "default"}}
    with pytest.raises(ValueError, match="type"):
        event_body(obj=obj, reason="R", message="m", type="Error", component="c")
    with pytest.raises(ValueError, match="list's items"):
        event_body(obj={"metadata": {"name": "p"}}, reason="R", message="m", component="c")
    long = event_body(obj=obj, reason="R", message="x" * 5000, component="c")
    assert len(long["message"]) == 1024 and long["message"].endswith("...")
    assert len(event_body(obj={**obj, "metadata": {"name": "n" * 253}}, reason="R", message="m",
                          component="c")["metadata"]["name"]) == 253


class Held(EventRecorder):
    """A recorder whose posts wait until ``release`` is set, and that remembers what it was given."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube, component="test")
        self.release = threading.Event()
        self.got: list[str] = []

    def record(self, obj: Obj, *, reason: str, message: str, type: str = "Normal", tries: int = 1,
               when: Any = None) -> Obj | None:
        assert self.release.wait(10), "the test never released the recorder"
        self.got.append(message)
        return None


class Kept(EventRecorder):
    """A recorder that keeps what it is given, with the time the event was recorded at."""

    def __init__(self) -> None:
        super().__init__(None, component="test")  # type: ignore[arg-type]  # never posts
        self.got: list[tuple[str, Any]] = []

    def record(self, obj: Obj, *, reason: str, message: str, type: str = "Normal", tries: int = 1,
               when: Any = None) -> Obj | None:
        self.got.append((message, when))
        return None


def test_the_broadcaster_holds_events_back_while_told_up_to_hold_max_and_keeps_their_time() -> None:
    """The kubelet's events wait while pods wait to be submitted (their POSTs and the API server's work
    come after the sbatch they would slow down), at most ``hold_max``, and never at close; each keeps
    the time it was recorded at, as client-go's recorder stamps it."""
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "default", "uid": "u"}}
    busy, asked = threading.Event(), [0]

    def hold() -> bool:
        asked[0] += 1
        return busy.is_set()

    busy.set()
    rec = Kept()
    b = EventBroadcaster(rec, hold=hold, hold_max=600)
    before = datetime.now(UTC)
    b.record(obj, reason="Submitted", message="m0")
    wait_for("the broadcaster to ask twice", lambda: asked[0] >= 2, timeout=10, every=0.01)
    assert rec.got == []  # held back
    released = datetime.now(UTC)
    busy.clear()
    wait_for("the event posted once nothing holds it", lambda: rec.got, timeout=10, every=0.01)
    ((message, when),) = rec.got
    assert message == "m0" and before <= when <= released  # the time it was recorded, not posted
    busy.set()
    short = Kept()
    b2 = EventBroadcaster(short, hold=hold, hold_max=0.2)
    b2.record(obj, reason="Submitted", message="m1")
    wait_for("the event posted after hold_max although held", lambda: short.got, timeout=10, every=0.01)
    closing = Kept()
    b3 = EventBroadcaster(closing, hold=hold, hold_max=600)
    b3.record(obj, reason="Submitted", message="m2")
    assert b3.close(10) and [m for m, _ in closing.got] == ["m2"]  # close posts what is held, at once
    full = Kept()
    b4 = EventBroadcaster(full, hold=hold, hold_max=600, size=8)
    for i in range(6):  # the first is taken and held; 5 wait: more than half the queue
        b4.record(obj, reason="Submitted", message=f"f{i}")
    wait_for("the held events posted once the queue is half full", lambda: len(full.got) >= 2, timeout=10,
             every=0.01)  # (a fast backlog's events would be dropped at record if the hold went on)
    assert b.close(10) and b2.close(10) and b4.close(10)


@pytest.mark.standin
def test_broadcaster_returns_before_the_post_drops_when_full_and_flushes_on_close(kube: Kube) -> None:
    """What the scheduler's binds rely on: ``record`` never waits for the API server; a full
    buffer drops the newest event (client-go's DropIfChannelFull) instead of blocking; ``close``
    posts everything still queued, in order."""
    held = Held(kube)
    b = EventBroadcaster(held, size=3)
    obj = {"kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u"}}
    for i in range(5):  # the thread takes the first and waits in record(); 3 fit; the 5th is dropped
        b.record(obj, reason="Scheduled", message=f"m{i}")
        if i == 0:
            wait_for("the first event taken off the queue", lambda: b._queue.empty())
    assert held.got == []  # nothing posted yet: every record() above returned without the post
    held.release.set()
    assert b.close(10)
    assert held.got == ["m0", "m1", "m2", "m3"]


@pytest.mark.standin
def test_the_broadcaster_tries_again_an_event_the_api_server_did_not_take(api: KubeApi, kube: Kube,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A POST that could not reach the server (a timeout on a loaded machine, a restarting API server) is
    tried again before the next event, as client-go's recordToSink does, with the same Event: a try whose
    answer was lost after the server created it ends in AlreadyExists, not in a twin. The broadcaster used
    to drop it and post the next one: a pod's Unhealthy was missing while the BackOff after it was there."""
    p = make_pod(api, "ev-retry")
    flaky = kube.clone(pool_size=1)
    real = flaky.post
    names: list[str] = []

    def post(path: str, body: Any, **kw: Any) -> Any:
        names.append(body["metadata"]["name"])
        if len(names) == 1:
            raise KubeUnavailable("connection refused")  # never reached the server
        if len(names) == 2:
            real(path, body, **kw)
            raise KubeUnavailable("read timed out")  # created, the answer lost
        return real(path, body, **kw)
    monkeypatch.setattr(flaky, "post", post)
    recorder = EventRecorder(flaky, component="kubelet", host="hpk")
    pauses: list[float] = []
    recorder._sleep = pauses.append
    b = EventBroadcaster(recorder)
    b.record(p, reason="Unhealthy", message="Liveness probe failed: HTTP probe failed with statuscode: 404",
             type="Warning")
    b.record(p, reason="BackOff", message="Back-off restarting failed container", type="Warning")
    assert b.close(10)
    got = [(e["reason"], e["count"]) for e in events_about(api, p["metadata"]["uid"])]
    assert sorted(got) == [("BackOff", 1), ("Unhealthy", 1)], got
    assert names[0] == names[1] == names[2] != names[3]  # one Event, tried three times; then the BackOff
    assert len(pauses) == 2 and 0 <= pauses[0] <= pauses[1] == 10.0  # the first pause randomised

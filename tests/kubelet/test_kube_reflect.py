"""hpkctl.kube.reflect against the Kubernetes API stand-in: list then watch, the in-stream 410 after a
compaction, bookmarks keeping the resume point fresh, a server stopped and restarted under the
reflector (back-off, not a hot loop), deletions during the gap synthesised by ObjectCache, and a
prompt stop of a quiet watch. Pure tests of Backoff and ObjectCache at the end."""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hpkctl.kube import Kube, pod_path
from hpkctl.kube.reflect import Backoff, ObjectCache, Reflector
from tests.support.kubeapi import KubeApi, listen_port, pod, start
from tests.support.waiting import wait_for

Obj = dict[str, Any]


def name_of(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


class Seen:
    """What a reflector delivered, in order; ``gate`` makes on_event block on one object's name."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.objects: list[Obj] = []
        self.syncs: list[list[str]] = []
        self.gate_name = ""
        self.gate_entered = threading.Event()
        self.gate_open = threading.Event()

    def on_event(self, typ: str, obj: Obj) -> None:
        if name_of(obj) == self.gate_name and typ == "ADDED":
            self.gate_entered.set()
            self.gate_open.wait(30)
        self.events.append((typ, name_of(obj)))
        self.objects.append(obj)

    def on_sync(self, items: list[Obj]) -> None:
        self.syncs.append(sorted(name_of(o) for o in items))
        self.objects.extend(items)


def _reconnected_twice(kube: "CountingKube") -> None:
    """Until three more requests went out (the server ends each watch after 1 s), and assert they were
    all watches: a reconnect that met a 410 would be followed by a list, so the first two did not."""
    before = kube.calls
    wait_for("three more requests", lambda: kube.calls >= before + 3, timeout=30)
    assert kube.watches[before:before + 3] == [True] * 3, kube.watches[before:]


class CountingKube(Kube):
    """Counts the requests sent (connection attempts included), to prove there is no hot loop."""

    calls = 0

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.watches: list[bool] = []  # per request: a watch (else a list or another call)

    def _send(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        query = kw.get("query") or []
        self.watches.append(("watch", "true") in (list(query.items()) if isinstance(query, dict) else list(query)))
        return super()._send(*args, **kw)


@pytest.fixture(scope="module")
def api() -> Iterator[KubeApi]:
    d = Path(tempfile.mkdtemp(prefix="reflect-test-"))
    a = start(d / "state")  # default --bookmark-interval (60 s): no bookmark within a test unless asked
    try:
        yield a
    finally:
        a.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def ns(api: KubeApi) -> str:
    name = f"r-{uuid.uuid4().hex[:8]}"
    code, out = api.post("/api/v1/namespaces", {"metadata": {"name": name}})
    assert code == 201, out
    return name


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    ev = threading.Event()
    yield ev
    ev.set()


def create_pod(api: KubeApi, ns: str, name: str, **spec: Any) -> Obj:
    code, out = api.post(pod_path(ns), pod(name, **spec))
    assert code == 201, out
    return dict(out)


def reflector(kube: Kube, ns: str, seen: Seen | ObjectCache, stop: threading.Event, **kw: Any) -> Reflector:
    kw.setdefault("backoff", Backoff(initial=0.1, cap=0.5))
    r = Reflector(kube, pod_path(ns), on_event=seen.on_event, on_sync=seen.on_sync, stop=stop, **kw)
    r.start()
    assert r.synced.wait(10), "no initial list"
    return r


@pytest.mark.standin
def test_list_then_watch_delivers_raw_objects_in_order(api: KubeApi, ns: str, stop: threading.Event) -> None:
    create_pod(api, ns, "before")
    seen = Seen()
    r = reflector(Kube(str(api.kubeconfig)), ns, seen, stop)
    assert seen.syncs == [["before"]]
    listed = seen.objects[0]
    assert (listed["kind"], listed["apiVersion"]) == ("Pod", "v1")  # filled in: list items lack them
    create_pod(api, ns, "b")
    assert api.patch(pod_path(ns, "b"), {"metadata": {"labels": {"x": "1"}}})[0] == 200
    code, gone = api.delete(pod_path(ns, "b"))
    assert code == 200, gone
    wait_for("three events", lambda: len(seen.events) >= 3)
    assert seen.events == [("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "b")]
    assert seen.objects[-2]["metadata"]["labels"] == {"x": "1"}
    assert r.resource_version == seen.objects[-1]["metadata"]["resourceVersion"]
    assert r.lists == 1


@pytest.mark.standin
def test_field_selector_transition_arrives_as_deleted(api: KubeApi, ns: str, stop: threading.Event) -> None:
    """What the scheduler relies on: a pod that gets bound leaves the ``spec.nodeName=`` watch as DELETED."""
    seen = Seen()
    reflector(Kube(str(api.kubeconfig)), ns, seen, stop, field_selector="spec.nodeName=")
    create_pod(api, ns, "unbound")
    create_pod(api, ns, "bound-at-once", node="elsewhere")  # never matches: never delivered
    code, out = api.post(pod_path(ns, "unbound", "binding"),
                         {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "unbound"},
                          "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
    assert code == 201, out
    create_pod(api, ns, "marker")  # after the others: once it is delivered, everything before it was
    wait_for("the marker", lambda: ("ADDED", "marker") in seen.events)
    assert seen.events == [("ADDED", "unbound"), ("DELETED", "unbound"), ("ADDED", "marker")]
    assert seen.objects[-2]["spec"]["nodeName"] == "n1"


@pytest.mark.standin
def test_expired_resume_point_lists_again(api: KubeApi, ns: str, stop: threading.Event) -> None:
    """The watch ends every second; after a compaction its resume point is older than the history,
    the server answers with an in-stream ERROR 410, and the reflector lists again (no crash, no loop)."""
    create_pod(api, ns, "a")
    seen = Seen()
    kube = CountingKube(str(api.kubeconfig))
    r = reflector(kube, ns, seen, stop, timeout_seconds=1)
    rv = int(r.resource_version)
    assert api.post(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "bump"}})[0] == 201
    code, out = api.post("/standin/compact", None)
    assert code == 200 and int(out["resourceVersion"]) > rv
    wait_for("a second list", lambda: r.lists >= 2, timeout=10)
    assert seen.syncs[:2] == [["a"], ["a"]]
    assert int(r.resource_version) >= int(out["resourceVersion"])
    create_pod(api, ns, "after")
    wait_for("the watch to go on", lambda: ("ADDED", "after") in seen.events)
    _reconnected_twice(kube)  # from the fresh resume point they must not 410 again
    assert r.lists == 2


@pytest.mark.standin
def test_bookmarks_keep_the_resume_point_fresh(tmp_path: Path, stop: threading.Event) -> None:
    """With bookmarks the resume point follows the server's revision on a quiet collection, so a
    compaction does not force a re-list (without them this is the previous test: lists == 2)."""
    a = start(tmp_path / "state", "--bookmark-interval", "0.3")
    try:
        seen = Seen()
        kube = CountingKube(str(a.kubeconfig))
        r = reflector(kube, "default", seen, stop, timeout_seconds=1)
        code, cm = a.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "bump"}})
        assert code == 201
        bumped = int(cm["metadata"]["resourceVersion"])
        wait_for("a bookmark past the configmap", lambda: int(r.resource_version) >= bumped)
        a.post("/standin/compact", None)
        _reconnected_twice(kube)  # each from the bookmarked revision
        assert (r.lists, seen.events) == (1, [])
    finally:
        stop.set()
        a.stop()


@pytest.mark.standin
def test_server_restart_gap_deletes_are_synthesised(tmp_path: Path, stop: threading.Event) -> None:
    """The reflector is held inside a callback while the API server restarts and a pod is deleted
    and another created: no watch can show those, only the re-list after the 410 (a restart
    jumps the revision), and ObjectCache turns the difference into DELETED/ADDED."""
    a = start(tmp_path / "state", port=listen_port())
    try:
        for n in ("keep", "goes"):
            create_pod(a, "default", n)
        seen = Seen()
        seen.gate_name = "gate"
        changes: list[tuple[str, str]] = []
        cache = ObjectCache(lambda typ, obj: (seen.on_event(typ, obj), changes.append((typ, name_of(obj)))))
        r = reflector(Kube(str(a.kubeconfig)), "default", cache, stop)
        assert sorted(changes) == [("ADDED", "goes"), ("ADDED", "keep")]
        goes_uid = next(o["metadata"]["uid"] for o in cache.items() if name_of(o) == "goes")
        create_pod(a, "default", "gate")
        assert seen.gate_entered.wait(10)
        a.stop()  # SIGTERM: the stand-in saves its snapshot (the gate pod in it) before it exits
        assert '"name":"gate"' in (tmp_path / "state" / "objects.json").read_text()
        a.start()
        assert a.delete(pod_path("default", "goes"))[0] == 200
        create_pod(a, "default", "new")
        seen.gate_open.set()
        wait_for("the re-list", lambda: r.lists >= 2)
        wait_for("the synthesised delete", lambda: ("DELETED", "goes") in changes)
        assert changes[3:] == [("DELETED", "goes"), ("ADDED", "new")]
        assert sorted(name_of(o) for o in cache.items()) == ["gate", "keep", "new"]
        assert seen.objects[-2]["metadata"]["uid"] == goes_uid  # the last state known before the gap
        create_pod(a, "default", "later")
        wait_for("watching again", lambda: ("ADDED", "later") in changes)
    finally:
        seen.gate_open.set()
        stop.set()
        a.stop()


@pytest.mark.standin
def test_unreachable_server_is_retried_with_back_off(tmp_path: Path, stop: threading.Event) -> None:
    a = start(tmp_path / "state", port=listen_port())
    try:
        kube = CountingKube(str(a.kubeconfig))
        seen = Seen()
        r = reflector(kube, "default", seen, stop, backoff=Backoff(initial=0.2, cap=0.8, rng=random.Random(1)))
        a.stop()
        # delays 0.1-0.2, 0.2-0.4, then 0.4-0.8 s: any four attempts in a row have at least three delays,
        # 0.7 s, between them; a hot loop makes them in milliseconds. (A lower bound only: load can make
        # the delays longer, never shorter.)
        before = kube.calls
        began = time.monotonic()
        wait_for("four more attempts", lambda: kube.calls >= before + 4, timeout=30, every=0.05)
        assert time.monotonic() - began >= 0.7 - 0.05, kube.calls - before
        a.start()
        create_pod(a, "default", "back")
        wait_for("events after the restart", lambda: ("ADDED", "back") in seen.events or
                 any("back" in s for s in seen.syncs), timeout=15)
        assert r.lists == 2  # the restart jumped the revision: the old resume point got a 410
    finally:
        stop.set()
        a.stop()


@pytest.mark.standin
def test_stop_interrupts_a_quiet_watch_at_once(api: KubeApi, ns: str) -> None:
    stop = threading.Event()
    kube = CountingKube(str(api.kubeconfig))
    r = reflector(kube, ns, Seen(), stop, timeout_seconds=300)
    # the list, then the watch's request sent (counted as it goes out): its read would block for 330 s
    wait_for("the watch", lambda: kube.calls >= 2 and r._stream is not None)
    stop.set()
    assert r.join(60), "the reflector did not stop"  # its watch's read would block for 330 s


@pytest.mark.standin
def test_a_failing_callback_does_not_stop_the_reflector(api: KubeApi, ns: str, stop: threading.Event) -> None:
    got: list[str] = []

    def on_event(typ: str, obj: Obj) -> None:
        got.append(name_of(obj))
        if name_of(obj) == "boom":
            raise RuntimeError("caller bug")

    r = Reflector(Kube(str(api.kubeconfig)), pod_path(ns), on_event=on_event, on_sync=lambda items: None, stop=stop)
    r.start()
    assert r.synced.wait(10)
    create_pod(api, ns, "boom")
    create_pod(api, ns, "fine")
    wait_for("the next event", lambda: "fine" in got)
    assert got == ["boom", "fine"]


# ---------------------------------------------------------------------------- pure


def test_backoff_grows_to_the_cap_with_jitter_and_resets() -> None:
    b = Backoff(initial=1.0, cap=8.0, rng=random.Random(7))
    delays = [b.next() for _ in range(8)]
    for d, top in zip(delays, [1, 2, 4, 8, 8, 8, 8, 8]):
        assert top / 2 <= d <= top
    assert len(set(delays)) == len(delays)  # jittered, not a fixed schedule
    b.reset()
    assert b.next() <= 1.0
    with pytest.raises(ValueError):
        Backoff(initial=0, cap=1)


def _obj(name: str, uid: str, rv: str) -> Obj:
    return {"metadata": {"name": name, "uid": uid, "resourceVersion": rv}}


def test_object_cache_turns_a_relist_into_events() -> None:
    changes: list[tuple[str, str, str]] = []
    cache = ObjectCache(lambda typ, o: changes.append((typ, name_of(o), o["metadata"]["uid"])))
    cache.on_sync([_obj("same", "u1", "1"), _obj("changes", "u2", "1"), _obj("goes", "u3", "1"),
                   _obj("renamed", "u4", "1")])
    assert len(changes) == 4 and {c[0] for c in changes} == {"ADDED"}
    changes.clear()
    cache.on_sync([_obj("same", "u1", "1"), _obj("changes", "u2", "5"), _obj("renamed", "u9", "6")])
    assert sorted(changes) == [("ADDED", "renamed", "u9"), ("DELETED", "goes", "u3"), ("DELETED", "renamed", "u4"),
                               ("MODIFIED", "changes", "u2")]
    changes.clear()
    cache.on_event("DELETED", _obj("same", "u1", "7"))
    assert changes == [("DELETED", "same", "u1")] and cache.get("u1") is None and len(cache) == 2

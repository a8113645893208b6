"""A new pod's objects and tokens read ahead (hpkctl/kubelet/prefetch.py): one GET serves the pods
registered before it was sent and no other (the real kubelet's cache-based manager), a missing
object is each reader's own, a request in flight is joined instead of sent twice, and the worker's
create takes what the prefetch read. Fakes of the API server; the threads are held by gates, never
by sleeps."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from hpkctl.kube import KubeError
from hpkctl.kubelet.objects import ApiObjects, FreshObjects
from hpkctl.kubelet.prefetch import Prefetch
from hpkctl.kubelet.tokencache import TokenCache
from hpkctl.sites import load_site
from tests.support.kubelet_fakes import FakeKube, FakeSlurm, _pod, pod_manager
from tests.support.waiting import wait_for


class GatedKube:
    """Answers GETs of ConfigMaps (``present``) and TokenRequests; each request waits for ``gate``
    when it is closed, so a test can hold a request in flight."""

    def __init__(self, present: set[str]) -> None:
        self.present = present
        self.gate = threading.Event()
        self.gate.set()
        self.calls: list[tuple[str, str]] = []
        self.entered = threading.Semaphore(0)
        self._lock = threading.Lock()

    def _call(self, verb: str, path: str) -> None:
        with self._lock:
            self.calls.append((verb, path))
        self.entered.release()
        assert self.gate.wait(30), "the test never opened the gate"

    def get(self, path: str, **kw: Any) -> Any:
        self._call("GET", path)
        name = path.rsplit("/", 1)[1]
        if name not in self.present:
            raise KubeError(404, "NotFound", f'configmaps "{name}" not found')
        return {"data": {"k": f"{name}-{len(self.calls)}"}}

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        self._call("POST", path)
        return {"status": {"token": f"tok-{body['spec']['boundObjectRef']['uid']}-{len(self.calls)}"}}

    def count(self, verb: str) -> int:
        with self._lock:
            return sum(1 for v, _ in self.calls if v == verb)


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def test_one_get_serves_the_readers_registered_before_it_was_sent_and_no_later_one() -> None:
    now = [100.0]
    kube = GatedKube({"cm"})
    fresh = FreshObjects(kube, clock=lambda: now[0])  # type: ignore[arg-type]
    first = fresh.get("configmaps", "default", "cm", since=99.0)
    assert first == {"data": {"k": "cm-1"}} and fresh.gets == 1
    # a pod seen before that GET was sent (at 100) reads its answer; one seen after it needs a new GET
    assert fresh.get("configmaps", "default", "cm", since=100.0) == first and fresh.gets == 1
    now[0] = 101.0
    assert fresh.get("configmaps", "default", "cm", since=100.5) == {"data": {"k": "cm-2"}} and fresh.gets == 2


def test_readers_join_a_get_in_flight_sent_after_their_registration() -> None:
    kube = GatedKube({"cm"})
    fresh = FreshObjects(kube)  # type: ignore[arg-type]
    kube.gate.clear()
    a, got_a = _in_thread(lambda: fresh.get("configmaps", "default", "cm", since=0.0))
    assert kube.entered.acquire(timeout=30)  # A's GET is in flight
    b, got_b = _in_thread(lambda: fresh.get("configmaps", "default", "cm", since=0.0))
    kube.gate.set()
    a.join(30)
    b.join(30)
    assert got_a == got_b == [{"data": {"k": "cm-1"}}]
    assert kube.count("GET") == 1


def test_a_missing_object_is_not_shared_each_reader_asks_again() -> None:
    kube = GatedKube(set())
    fresh = FreshObjects(kube)  # type: ignore[arg-type]
    assert fresh.get("configmaps", "default", "gone", since=0.0) is None
    kube.present.add("gone")  # created meanwhile: the next reader sees it, not the 404
    assert fresh.get("configmaps", "default", "gone", since=0.0) == {"data": {"k": "gone-2"}}
    assert kube.count("GET") == 2


def test_an_error_reaches_its_reader_and_the_next_one_gets_again() -> None:
    class Failing(GatedKube):
        fail = True

        def get(self, path: str, **kw: Any) -> Any:
            if self.fail:
                self.fail = False
                raise KubeError(500, "InternalError", "etcd is away")
            return super().get(path, **kw)

    kube = Failing({"cm"})
    fresh = FreshObjects(kube)  # type: ignore[arg-type]
    with pytest.raises(KubeError):
        fresh.get("configmaps", "default", "cm", since=0.0)
    assert fresh.get("configmaps", "default", "cm", since=0.0) == {"data": {"k": "cm-1"}}


def _token_pod(uid: str) -> dict[str, Any]:
    return {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [
                         {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                         {"configMap": {"name": "kube-root-ca.crt"}}]}}]}}


def test_a_token_request_in_flight_is_joined_not_sent_twice() -> None:
    kube = GatedKube({"kube-root-ca.crt"})
    cache = TokenCache()
    pod = _token_pod("u1")

    def token() -> bytes | None:
        return ApiObjects(kube, pod=pod, tokens=cache).service_account_token(  # type: ignore[arg-type]
            "default", "default", audience=None, expiration_seconds=None)

    kube.gate.clear()
    a, got_a = _in_thread(token)
    assert kube.entered.acquire(timeout=30)
    b, got_b = _in_thread(token)
    kube.gate.set()
    a.join(30)
    b.join(30)
    assert got_a == got_b == [b"tok-u1-1"]
    assert kube.count("POST") == 1 and cache.requests == 1


def test_the_prefetch_reads_a_new_pods_objects_and_token_and_the_create_takes_them(tmp_path: Path) -> None:
    """A pod registered with the prefetch: its ConfigMap GET and its TokenRequest are sent by the
    prefetch threads; the worker's create then sends neither again, and the token in the pod
    directory is the one the prefetch got."""
    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)})})
    api = GatedKube({"kube-root-ca.crt"})
    m = pod_manager(tmp_path, FakeKube(), FakeSlurm(), profile)
    m.prefetch = Prefetch(api, m.tokens)  # type: ignore[arg-type]
    try:
        m.load_records()
        pod = _pod()
        pod["spec"]["volumes"] = _token_pod("u-1")["spec"]["volumes"]
        m.on_event("ADDED", pod)
        wait_for("the prefetch's GET and TokenRequest", lambda: api.count("GET") == 1 and api.count("POST") == 1
                 and m.tokens.requests == 1, timeout=30)
        m.kube = api  # the worker's own reads, if any, would reach the same fake
        m.queue.drain()
        token = tmp_path / "pods/u-1/volumes/kube-api-access-x/token"  # written after sbatch, off the worker
        wait_for("the token file", token.exists, timeout=30)
        assert (api.count("GET"), api.count("POST")) == (1, 1)
        assert token.read_bytes() == b"tok-u-1-2"
    finally:
        m.prefetch.close()
        m.token_writer.close()

"""The kubelet's ConfigMap/Secret cache (per-object watches, as the real kubelet's default
``Watch`` strategy) against the Kubernetes API stand-in: a referenced object is read from its watch
with no GET, one watch serves every pod that names it, a change reaches the next read, a missing
object is missing as a 404 was, and the watch ends with the last pod that names it (or at once for
an immutable object). The token cache's keys, at the end (no server)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hpkctl.kube import Kube
from hpkctl.kubelet.objects import ApiObjects
from hpkctl.kubelet.objwatch import ObjectWatches
from hpkctl.kubelet.tokencache import TokenCache
from hpkctl.pod.objects import referenced_objects
from tests.support.kubeapi import KubeApi, start
from tests.support.waiting import wait_for

CM = "/api/v1/namespaces/default/configmaps"

pytestmark = pytest.mark.standin


class LoggingKube(Kube):
    """The requests this client sent, as (method, path)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.sent: list[tuple[str, str]] = []

    def _send(self, method: str, path: str, **kw: Any) -> Any:
        self.sent.append((method, path))
        return super()._send(method, path, **kw)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    a = start(tmp_path_factory.mktemp("objwatch") / "state")
    yield a
    a.stop()


@pytest.fixture
def watches(api: KubeApi) -> Iterator[ObjectWatches]:
    w = ObjectWatches(lambda: Kube(str(api.kubeconfig), pool_size=1), sync_wait=30)
    yield w
    w.close()


def _pod(uid: str, *cms: str) -> dict[str, Any]:
    return {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": n}} for n in cms]}],
                     "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [
                         {"configMap": {"name": "kube-root-ca.crt"}}]}}]}}


def _configmap(name: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}, **extra}


def test_pods_read_their_configmaps_from_one_watch_each_with_no_get(api: KubeApi, watches: ObjectWatches) -> None:
    assert api.post(CM, _configmap("shared", "one"))[0] == 201
    kube = LoggingKube(str(api.kubeconfig))
    for i in range(5):
        pod = _pod(f"u{i}", "shared")
        watches.register(f"u{i}", pod)
        objects = ApiObjects(kube, pod=pod, watches=watches)
        assert objects.configmap("default", "shared") == {"k": b"one"}
        assert objects.configmap("default", "kube-root-ca.crt") is not None
        assert objects.missing == []
    assert kube.sent == []  # no GET: every read came from a watch
    assert watches.started == 2  # one watch per object, not per pod

    # a change reaches the cache by its watch: the next pod rendered after it sees it
    assert api.put(f"{CM}/shared", _configmap("shared", "two"))[0] == 200
    wait_for("the change in the cache",
             lambda: ApiObjects(kube, pod=_pod("u9", "shared"), watches=watches).configmap("default", "shared")
             == {"k": b"two"}, timeout=30)
    assert kube.sent == []


def test_a_missing_object_is_missing_until_it_is_created(api: KubeApi, watches: ObjectWatches) -> None:
    """As a 404 to a GET was: the pod names it as missing (its CreateContainerConfigError and
    ``…NotFound`` event come from that), and once it is created the next read has it."""
    kube = LoggingKube(str(api.kubeconfig))
    pod = _pod("m1", "later")
    watches.register("m1", pod)
    objects = ApiObjects(kube, pod=pod, watches=watches)
    assert objects.configmap("default", "later") is None
    assert objects.missing == [("ConfigMap", "later")]
    assert api.post(CM, _configmap("later", "here"))[0] == 201
    wait_for("the new object in the cache",
             lambda: ApiObjects(kube, pod=pod, watches=watches).configmap("default", "later") == {"k": b"here"},
             timeout=30)
    assert kube.sent == []


def test_the_watch_ends_with_the_last_pod_that_names_the_object(api: KubeApi, watches: ObjectWatches) -> None:
    assert api.post(CM, _configmap("short", "v"))[0] == 201
    kube = LoggingKube(str(api.kubeconfig))
    watches.register("a", _pod("a", "short"))
    watches.register("b", _pod("b", "short"))
    cached, obj = watches.get("configmaps", "default", "short")
    assert cached and obj is not None and obj["data"] == {"k": "v"}
    watches.unregister("a")
    assert watches.get("configmaps", "default", "short")[0]  # b still names it
    watches.unregister("b")
    assert watches.get("configmaps", "default", "short") == (False, None)  # not watched: the caller GETs
    assert ApiObjects(kube, pod=_pod("c", "short"), watches=watches).configmap("default", "short") == {"k": b"v"}
    assert kube.sent == [("GET", f"{CM}/short")]


def test_an_immutable_object_is_kept_and_no_longer_watched(api: KubeApi, watches: ObjectWatches) -> None:
    assert api.post(CM, _configmap("frozen", "v", immutable=True))[0] == 201
    watches.register("f", _pod("f", "frozen"))
    cached, obj = watches.get("configmaps", "default", "frozen")
    assert cached and obj is not None and obj["data"] == {"k": "v"}
    item = watches._items[("configmaps", "default", "frozen")]
    assert item.immutable and item.stop.is_set()
    assert watches.get("configmaps", "default", "frozen")[1] == obj


def test_referenced_objects_are_the_ones_the_pod_names() -> None:
    pod = {"spec": {
        "initContainers": [{"name": "i", "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}]}],
        "containers": [{"name": "c", "env": [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "k"}}},
                                             {"name": "C", "value": "x"}],
                        "envFrom": [{"secretRef": {"name": "s2"}}, {"configMapRef": {"name": "c2"}}]}],
        "volumes": [{"name": "v1", "configMap": {"name": "c3"}}, {"name": "v2", "secret": {"secretName": "s3"}},
                    {"name": "v3", "projected": {"sources": [{"configMap": {"name": "c4"}}, {"secret": {"name": "s4"}},
                                                             {"serviceAccountToken": {"path": "t"}}]}},
                    {"name": "v4", "emptyDir": {}}],
        "imagePullSecrets": [{"name": "s5"}]}}
    assert referenced_objects(pod) == {("configmaps", f"c{i}") for i in range(1, 5)} | \
        {("secrets", f"s{i}") for i in range(1, 6)}


class _TokenKube:
    """Answers every TokenRequest with a new token; the requests are kept."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        self.requests.append(body)
        return {"status": {"token": f"tok{len(self.requests)}"}}


def _sa_pod(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid}, "spec": {"serviceAccountName": "sa"}}


def test_a_token_is_reused_for_its_pod_only_and_renewed_at_80_percent() -> None:
    """The real token manager's key holds the boundObjectRef (the pod's name and uid): the same pod
    asking again gets its cached token, another pod of the same service account a token of its own;
    after 80 % of the token's lifetime it is requested again, and a pod that left is forgotten."""
    now = [1000.0]
    cache = TokenCache(clock=lambda: now[0])
    kube = _TokenKube()

    def token(pod: dict[str, Any], audience: str | None = None) -> bytes | None:
        return ApiObjects(kube, pod=pod, tokens=cache).service_account_token(  # type: ignore[arg-type]
            "default", "sa", audience=audience, expiration_seconds=3600)

    a, b = _sa_pod("a", "uid-a"), _sa_pod("b", "uid-b")
    assert token(a) == b"tok1"
    assert token(a) == b"tok1" and len(kube.requests) == 1  # the same pod again: cached
    assert token(b) == b"tok2"  # the same service account, another pod: its own token
    assert kube.requests[1]["spec"]["boundObjectRef"] == {"apiVersion": "v1", "kind": "Pod", "name": "b",
                                                          "uid": "uid-b"}
    assert token(a, "vault") == b"tok3"  # another audience: another token
    now[0] += 0.79 * 3600
    assert token(a) == b"tok1"
    now[0] += 0.02 * 3600
    assert token(a) == b"tok4"  # past 80 % of its lifetime: renewed
    cache.forget_pod("uid-a")
    assert token(a) == b"tok5"


def test_a_watch_starts_at_the_first_read_not_when_a_pod_is_registered(api: KubeApi, watches: ObjectWatches) -> None:
    """A pod deleted before the kubelet heard of it names objects no pod on the node names any more,
    and a LIST for them then is refused by the Node authorizer: registering only counts the
    reference; the watch (its LIST) starts when a worker first reads the object to render a pod."""
    assert api.post(CM, _configmap("lazy", "v"))[0] == 201
    watches.register("l1", _pod("l1", "lazy"))
    watches.register("l2", _pod("l2", "lazy"))
    assert watches.started == 0
    watches.unregister("l1")
    watches.unregister("l2")
    assert watches.started == 0  # never read: never listed
    watches.register("l3", _pod("l3", "lazy"))
    cached, obj = watches.get("configmaps", "default", "lazy")
    assert cached and obj is not None and obj["data"] == {"k": "v"}
    assert watches.started == 1

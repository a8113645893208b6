"""ConfigMaps, Secrets, Services and service-account tokens for a pod, read from the API server.

The translator (:mod:`hpkctl.pod`) asks through :class:`hpkctl.pod.ObjectSource`; this one reads
each object from the kubelet's per-object watches (:mod:`hpkctl.kubelet.objwatch`) and GETs it
only when no watch holds it yet, and takes tokens from the kubelet's token cache
(:mod:`hpkctl.kubelet.tokencache`). What was missing is remembered, so the kubelet can raise
``Optional…NotFound`` / ``Mandatory…NotFound`` events as virtual-kubelet does.

Without watches, a GET serves every pod the kubelet first saw before the GET was sent
(:class:`FreshObjects`), as the real kubelet's cache-based object manager
(``pkg/kubelet/util/manager/cache_based_manager.go``, strategy ``Cache``): registering a pod
invalidates the cached copies of the objects it names, so a pod never reads an object older than its
own registration, and readers of one object wait for one fetch instead of each sending a GET (a burst
of 200 pods read ``kube-root-ca.crt`` with a GET each, one API round trip of every create).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from hpkctl.kube import Kube, KubeError, namespaced
from hpkctl.kubelet.objwatch import ObjectWatches
from hpkctl.kubelet.tokencache import TokenCache, token_key
from hpkctl.pod.objects import configmap_data, secret_data
from hpkctl.provider.tokens import TOKEN_SECONDS


READ_WAIT = 60.0  # seconds a reader waits for another's GET in flight before it sends its own
PRUNE_ABOVE, PRUNE_AGE = 512, 60.0  # reads kept before old ones are dropped; how old is old (seconds)


def get_object(kube: Kube, plural: str, namespace: str, name: str) -> Mapping[str, Any] | None:
    """One GET of a namespaced object; ``None`` for a 404."""
    try:
        obj = kube.get(namespaced(plural, namespace, name))
    except KubeError as exc:
        if exc.code != 404:
            raise
        return None
    return obj if isinstance(obj, dict) else None


@dataclass
class _Read:
    sent: float  # the clock when its GET went out
    done: threading.Event = field(default_factory=threading.Event)
    obj: Mapping[str, Any] | None = None
    found: bool = False  # only an object found is shared: a 404 or an error is each reader's own


class FreshObjects:
    """ConfigMaps and Secrets by GET, one GET serving every reader registered before it was sent
    (``since``: when the kubelet first saw the reader's pod, or when the pod's retry began)."""

    def __init__(self, kube: Kube, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.clock = clock
        self._lock = threading.Lock()
        self._reads: dict[tuple[str, str, str], _Read] = {}
        self.gets = 0  # GETs sent (tests, bench)

    def get(self, plural: str, namespace: str, name: str, *, since: float) -> Mapping[str, Any] | None:
        """The object (``None``: not found) as a GET sent at or after ``since`` saw it; raises the
        API's errors as a GET does."""
        key = (plural, namespace, name)
        with self._lock:
            read = self._reads.get(key)
            if read is not None and read.sent >= since and not (read.done.is_set() and not read.found):
                joined = read
            else:
                joined, read = None, _Read(sent=self.clock())
                self._reads[key] = read
                if len(self._reads) > PRUNE_ABOVE:
                    old = self.clock() - PRUNE_AGE
                    for k in [k for k, r in self._reads.items() if r.done.is_set() and r.sent < old]:
                        del self._reads[k]
        if joined is not None:
            if joined.done.wait(READ_WAIT) and joined.found:
                return joined.obj
            self.gets += 1
            return get_object(self.kube, *key)  # its GET found nothing or failed: this reader's own
        try:
            self.gets += 1
            read.obj = get_object(self.kube, *key)
            read.found = read.obj is not None
            return read.obj
        finally:
            read.done.set()


class ApiObjects:
    """An :class:`~hpkctl.pod.ObjectSource` for one pod's translation (``watches``, ``tokens``: the
    kubelet's caches; without them every object is a GET and every token a TokenRequest; ``fresh``:
    GETs shared by the pods registered before them, this pod's registration at ``since``)."""

    def __init__(self, kube: Kube, *, pod: Mapping[str, Any], watches: ObjectWatches | None = None,
                 tokens: TokenCache | None = None, fresh: FreshObjects | None = None, since: float = 0.0) -> None:
        self.kube = kube
        self.pod = pod
        self.watches = watches
        self.tokens = tokens
        self.fresh = fresh
        self.since = since
        self.missing: list[tuple[str, str]] = []  # ("ConfigMap"|"Secret", name)
        self.token_expiry: float | None = None
        self.read_s = 0.0  # seconds spent on reads and tokens, waits for ones in flight included (the kubelet's log)

    def _get(self, plural: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        t0 = time.monotonic()
        try:
            return self._read(plural, kind, namespace, name)
        finally:
            self.read_s += time.monotonic() - t0

    def _read(self, plural: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        cached, watched = self.watches.get(plural, namespace, name) if self.watches is not None else (False, None)
        obj: Mapping[str, Any] | None = watched
        if not cached:
            obj = get_object(self.kube, plural, namespace, name) if self.fresh is None else \
                self.fresh.get(plural, namespace, name, since=self.since)
        if obj is None:  # not there: a 404, or the watch holds no such object
            if (kind, name) not in self.missing:
                self.missing.append((kind, name))
            return None
        return obj if isinstance(obj, dict) else None

    def configmap(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        obj = self._get("configmaps", "ConfigMap", namespace, name)
        return configmap_data(obj) if obj is not None else None

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        obj = self._get("secrets", "Secret", namespace, name)
        return secret_data(obj) if obj is not None else None

    def service_account_token(self, namespace: str, service_account: str, *, audience: str | None,
                              expiration_seconds: int | None) -> bytes | None:
        """A real token from the TokenRequest API, bound to the pod (its lifetime ends with the pod)."""
        meta = self.pod.get("metadata") or {}
        spec: dict[str, Any] = {"expirationSeconds": int(expiration_seconds or TOKEN_SECONDS),
                                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"),
                                                   "uid": meta.get("uid")}}
        if audience:
            spec["audiences"] = [audience]

        def request() -> tuple[bytes, float] | None:
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
            out = self.kube.post(namespaced("serviceaccounts", namespace, service_account, "token"), body)
            token = ((out or {}).get("status") or {}).get("token")
            return (str(token).encode(), float(spec["expirationSeconds"])) if token else None

        t0 = time.monotonic()
        if self.tokens is None:
            asked = request()
            got = None if asked is None else (asked[0], time.time() + asked[1])
        else:
            got = self.tokens.get(token_key(namespace, service_account, spec), str(meta.get("uid") or ""), request)
        self.read_s += time.monotonic() - t0
        if got is None:
            return None
        token, expiry = got
        self.token_expiry = expiry if self.token_expiry is None else min(self.token_expiry, expiry)
        return token


class ServiceCache:
    """The Services of a namespace for service-link variables, cached for a few seconds so a burst
    of pods in one namespace costs one LIST, not one per pod."""

    def __init__(self, kube: Kube, *, ttl: float = 10.0) -> None:
        self.kube = kube
        self.ttl = ttl
        url = urlsplit(kube.host or "")
        self.api_endpoint = (url.hostname or "", url.port or 443)
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, list[dict[str, Any]]]] = {}

    def _list(self, namespace: str) -> list[dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(namespace)
        if hit and now - hit[0] < self.ttl:
            return hit[1]
        items = list((self.kube.get(namespaced("services", namespace)) or {}).get("items") or [])
        with self._lock:
            self._cache[namespace] = (now, items)
        return items

    def _reachable(self, svc: dict[str, Any]) -> dict[str, Any]:
        """The ``kubernetes`` Service as the pods can reach it: the API server's own address and port.
        Its cluster IP (10.96.0.1) routes nowhere here (no kube-proxy), and in-cluster clients build
        their URL from KUBERNETES_SERVICE_HOST/PORT."""
        host, port = self.api_endpoint
        if not host:
            return svc
        return {**svc, "spec": {**(svc.get("spec") or {}), "clusterIP": host,
                                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}}

    def for_pod(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The pod namespace's Services when ``enableServiceLinks`` (default true), plus the
        ``kubernetes`` Service of ``default``, which every pod gets (as the real kubelet does)."""
        spec = pod.get("spec") or {}
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        out = [self._reachable(s) for s in self._list("default")
               if (s.get("metadata") or {}).get("name") == "kubernetes"]
        if spec.get("enableServiceLinks", True) is not False:
            out = [s for s in self._list(ns) if not (ns == "default" and s in out)] + out
        return out


def cluster_dns(kube: Kube) -> str:
    """The address pods can use as their nameserver: the ``kube-system/kube-dns`` Endpoints the
    control plane publishes (CoreDNS's real address), when CoreDNS answers on port 53 there; ""
    otherwise (resolv.conf has no port, so on another port pods keep the node's resolver). The
    Node authorizer lets a kubelet get Endpoints."""
    try:
        ep = kube.get(namespaced("endpoints", "kube-system", "kube-dns"))
    except KubeError as exc:
        if exc.code in (403, 404):
            return ""
        raise
    for subset in (ep or {}).get("subsets") or []:
        if any(p.get("port") == 53 and (p.get("protocol") or "TCP") == "UDP" for p in subset.get("ports") or []):
            for addr in subset.get("addresses") or []:
                if addr.get("ip"):
                    return str(addr["ip"])
    return ""

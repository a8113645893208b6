"""Service-account tokens the kubelet requested, kept until they need a refresh, as the real
kubelet's token manager (``pkg/kubelet/token/token_manager.go``) keeps them.

A token is keyed by everything its TokenRequest says: the service account and namespace, the
audiences, ``expirationSeconds`` and the ``boundObjectRef``. The bound object is the pod (its name
and uid), so a token is never shared between pods, even of one service account: the API server
invalidates a bound token when its pod goes, and the real kubelet keys its cache the same way.
What the cache saves is a second request for the same pod: a create tried again (a
``CreateContainerConfigError``, an ``sbatch`` cut short), or two projected volumes asking for the
same token. A cached token is used until 80 % of its lifetime (or 24 h) has passed, then requested
again; a pod's tokens are forgotten when it leaves the node.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Mapping
from typing import Any

from hpkctl.kube import KubeError, KubeUnavailable
from hpkctl.kubelet.podevents import PodEvents
from hpkctl.kubelet.table import Tracked
from hpkctl.provider import PodProvider, PodRef
from hpkctl.provider.tokens import REFRESH_AT, TokenSource, refresh_after, token_files

log = logging.getLogger("hpkctl.kubelet.tokens")

MAX_TTL = 24 * 3600.0  # the real token manager refreshes any token older than this
FLIGHT_WAIT = 60.0  # seconds a reader waits for another's request in flight before it asks itself


def token_key(namespace: str, service_account: str, spec: Mapping[str, Any]) -> str:
    """The cache key of a TokenRequest (``keyFunc``: nothing secret in it)."""
    ref = spec.get("boundObjectRef") or {}
    return "/".join((namespace, service_account, ",".join(spec.get("audiences") or []),
                     str(spec.get("expirationSeconds") or ""), str(ref.get("kind") or ""),
                     str(ref.get("name") or ""), str(ref.get("uid") or "")))


class TokenCache:
    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[bytes, float, float, str]] = {}  # key -> (token, issued, expiry, pod uid)
        self._flights: dict[str, threading.Event] = {}  # key -> set when its request in flight ended
        self.requests = 0  # TokenRequests sent through the cache (tests)

    def _fresh(self, issued: float, expiry: float, now: float) -> bool:
        """``requiresRefresh``, negated: within 80 % of its lifetime, under 24 h old, not from the future."""
        return issued <= now < issued + (expiry - issued) * REFRESH_AT and now < issued + MAX_TTL

    def get(self, key: str, pod_uid: str, request: Callable[[], tuple[bytes, float] | None]) -> tuple[bytes, float] | None:
        """(token, expiry time) for ``key``: the cached one while fresh, else a new one from
        ``request()`` (which answers (token, lifetime in seconds), or ``None``), cached. A request for
        ``key`` already in flight (the kubelet's prefetch, :mod:`hpkctl.kubelet.prefetch`) is waited
        for instead of sent twice; if it brought nothing, this caller asks itself."""
        with self._lock:
            hit = self._tokens.get(key)
            if hit is not None and self._fresh(hit[1], hit[2], self.clock()):
                return hit[0], hit[2]
            flight = self._flights.get(key)
            mine = flight is None
            if flight is None:
                flight = self._flights[key] = threading.Event()
        if not mine:
            flight.wait(FLIGHT_WAIT)
            with self._lock:
                hit = self._tokens.get(key)
            if hit is not None and self._fresh(hit[1], hit[2], self.clock()):
                return hit[0], hit[2]
        try:
            now = self.clock()
            self.requests += 1
            got = request()
            if got is None:
                return None
            token, expiry = got[0], now + got[1]
            with self._lock:
                self._tokens[key] = (token, now, expiry, pod_uid)
            return token, expiry
        finally:
            if mine:
                with self._lock:
                    self._flights.pop(key, None)
                flight.set()

    def forget_pod(self, pod_uid: str) -> None:
        """``DeleteServiceAccountToken``: the pod left the node; also drops expired tokens."""
        now = self.clock()
        with self._lock:
            for key in [k for k, v in self._tokens.items() if v[3] == pod_uid or v[2] <= now]:
                del self._tokens[key]


def token_due(t: Tracked, now: float) -> bool:
    """Whether the running pod's projected tokens are due for renewal (80 % of their lifetime)."""
    return bool(not t.state.final and not t.deleting and t.job_id and refresh_after(t.pod) is not None
                and t.state.token_due <= now)


def renew_tokens(provider: PodProvider, t: Tracked, objects: TokenSource, events: PodEvents | None = None) -> bool:
    """Write the pod's projected tokens (again); False when that failed: a ``FailedMount`` warning, as a
    kubelet whose volume set-up failed posts, and the pod is due again (its caller retries)."""
    now = time.time()
    after = refresh_after(t.pod)
    if after is None:
        return True
    try:
        provider.refresh_tokens(PodRef(t.uid, t.namespace, t.name), t.pod, objects)
        t.state.token_due = now + after
        return True
    except (KubeError, KubeUnavailable, OSError) as exc:
        log.warning("pod %s: writing its service account token failed (trying again): %s", t.key, exc)
        t.state.token_due = 0.0
        if events is not None:
            volumes = ", ".join(sorted({f'"{rel.split("/")[1]}"' for rel, _, _ in token_files(t.pod)}))
            events.post(t, "FailedMount", f"MountVolume.SetUp failed for volume {volumes} : failed to fetch token: {exc}",
                        warning=True)
        return False


class TokenWriter:
    """Writes the projected tokens of pods just submitted without them (``Created.tokens_later``) on
    threads of its own, so no worker waits for a TokenRequest (issue 23.2); the token is usually the
    prefetch's, already there or in flight. A failure is a ``FailedMount`` event and the pod is queued
    for its worker to try again after ``retry``'s back-off; the job waits for the file meanwhile."""

    def __init__(self, provider: PodProvider, events: PodEvents, retry: Callable[[Tracked], None], *,
                 threads: int = 4) -> None:
        self.provider, self.events, self.retry = provider, events, retry
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tokens")

    def write(self, t: Tracked, objects: TokenSource) -> None:
        t.state.token_due = float("inf")  # being written: the worker does not renew it meanwhile
        self._pool.submit(self._write, t, objects)

    def _write(self, t: Tracked, objects: TokenSource) -> None:
        if not t.deleting and not renew_tokens(self.provider, t, objects, self.events):
            self.retry(t)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

"""Who may use the kubelet's HTTPS API: authorisation after the TLS handshake (issue 20.9).

The handshake proves only that a client certificate was signed by the cluster CA, which also signs
the scheduler's, the controller-manager's and every approved CSR's certificates. So each request is
also authorised, on the client certificate's identity (CN = user, O = groups): the API server's
kubelet-client identity (``[kubelet] api_clients``, ``kube-apiserver-kubelet-client`` by default)
and the group ``system:masters`` (cluster administrators, whom RBAC never refuses) are served at once;
anyone else only when the API server allows it (a SubjectAccessReview of the node subresource the
path maps to: ``nodes/proxy`` for exec, attach and logs, ``nodes/stats``...; the real kubelet's
webhook authorisation, with its cache times), else gets the real kubelet's 403. Users reach pods through the API server (``kubectl logs/exec``), which applies its
own RBAC to ``pods/log`` and ``pods/exec`` and then calls the kubelet as itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from aiohttp import web

from hpkctl.kubelet.apistatus import ApiError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: groups whose members are always served (RBAC's superuser group)
SUPERUSER_GROUPS = frozenset({"system:masters"})

# the kubelet's path → node subresource map (pkg/kubelet/server/auth.go, GetRequestAttributes)
_SUBRESOURCES = (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"), ("/spec", "spec"),
                 ("/checkpoint", "checkpoint"), ("/configz", "configz"), ("/healthz", "healthz"))
_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def identity(peercert: dict[str, Any] | None) -> tuple[str, list[str]]:
    """(user, groups) of a verified client certificate: its CN and its O values."""
    user, groups = "", []
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                user = str(value)
            elif key == "organizationName":
                groups.append(str(value))
    return user, groups


def subresource(path: str) -> str:
    """The node subresource a request path is authorised as (``proxy`` for everything else)."""
    for prefix, sub in _SUBRESOURCES:
        if path == prefix or path.startswith(prefix + "/"):
            return sub
    return "proxy"


#: asks the API server whether (user, groups, verb, node subresource) is allowed (SubjectAccessReview)
Review = Callable[[str, Sequence[str], str, str], bool]
#: the real kubelet's webhook cache: --authorization-webhook-cache-authorized-ttl / -unauthorized-ttl
ALLOWED_TTL, DENIED_TTL = 300.0, 30.0


class Decisions:
    """SubjectAccessReview answers, kept as long as the real kubelet keeps them (a client that
    streams many log requests asks the API server once per TTL, not once per request)."""

    def __init__(self, review: Review, *, clock: Callable[[], float] = time.monotonic,
                 denied_ttl: float = DENIED_TTL) -> None:
        self.review, self.clock, self.denied_ttl = review, clock, denied_ttl
        self._cache: dict[tuple[str, tuple[str, ...], str, str], tuple[bool, float]] = {}

    def allowed(self, user: str, groups: Sequence[str], verb: str, sub: str) -> bool:
        key = (user, tuple(sorted(groups)), verb, sub)
        hit = self._cache.get(key)
        if hit is not None and hit[1] > self.clock():
            return hit[0]
        try:
            ok = self.review(user, groups, verb, sub)
        except Exception as e:  # noqa: BLE001 - the API server cannot answer: deny, as the kubelet does
            log.warning("SubjectAccessReview for %s failed (denied): %s", user, e)
            return False
        self._cache[key] = (ok, self.clock() + (ALLOWED_TTL if ok else self.denied_ttl))
        return ok


def authoriser(users: Collection[str], *, groups: Collection[str] = SUPERUSER_GROUPS,
               review: Review | None = None, denied_ttl: float = DENIED_TTL) -> Callable[..., Any]:
    """An aiohttp middleware that serves ``users`` and members of ``groups``, and anyone else the API
    server allows (``review``: SubjectAccessReview on ``nodes/<subresource>``, as the real kubelet's
    webhook authorisation asks, a denial kept ``denied_ttl`` seconds; without it, nobody else)."""
    allowed_users, allowed_groups = frozenset(users), frozenset(groups)
    decisions = Decisions(review, denied_ttl=denied_ttl) if review is not None else None

    @web.middleware
    async def authorise(request: web.Request, handler: Handler) -> web.StreamResponse:
        cert = request.transport.get_extra_info("peercert") if request.transport is not None else None
        user, member_of = identity(cert)
        if user not in allowed_users and not allowed_groups.intersection(member_of):
            verb, sub = _VERBS.get(request.method, request.method.lower()), subresource(request.path)
            ok = decisions is not None and await asyncio.get_running_loop().run_in_executor(
                None, decisions.allowed, user, member_of, verb, sub)
            if not ok:
                raise ApiError(403, f"Forbidden (user={user}, verb={verb}, resource=nodes, subresource(s)=[{sub}])")
        return await handler(request)

    return authorise

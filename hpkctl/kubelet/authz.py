"""Who may use the kubelet's HTTPS API: authorisation after the TLS handshake (issue 20.9).

The handshake proves only that a client certificate was signed by the cluster CA, which also signs
the scheduler's, the controller-manager's and every approved CSR's certificates. So each request is
also authorised, on the client certificate's identity (CN = user, O = groups): the API server's
kubelet-client identity (``[kubelet] api_clients``, ``kube-apiserver-kubelet-client`` by default)
and the group ``system:masters`` (cluster administrators, whom RBAC never refuses) are served; anyone
else gets the real kubelet's 403 for the node subresource the path maps to (``nodes/proxy`` for exec,
attach and logs). Users reach pods through the API server (``kubectl logs/exec``), which applies its
own RBAC to ``pods/log`` and ``pods/exec`` and then calls the kubelet as itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

from aiohttp import web

from hpkctl.kubelet.apistatus import ApiError

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


def authoriser(users: Collection[str], *, groups: Collection[str] = SUPERUSER_GROUPS) -> Callable[..., Any]:
    """An aiohttp middleware that serves only ``users`` and members of ``groups``."""
    allowed_users, allowed_groups = frozenset(users), frozenset(groups)

    @web.middleware
    async def authorise(request: web.Request, handler: Handler) -> web.StreamResponse:
        cert = request.transport.get_extra_info("peercert") if request.transport is not None else None
        user, member_of = identity(cert)
        if user not in allowed_users and not allowed_groups.intersection(member_of):
            verb = _VERBS.get(request.method, request.method.lower())
            raise ApiError(403, f"Forbidden (user={user}, verb={verb}, resource=nodes, "
                                f"subresource(s)=[{subresource(request.path)}])")
        return await handler(request)

    return authorise

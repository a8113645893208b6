"""A raw-JSON client for the Kubernetes API, on the standard library's HTTP (:mod:`hpkctl.kube.http`).

Why raw JSON: the generated models cost ~14x the memory and time of ``json.loads`` for pod lists
(measured in ``kubelet-api.md`` §3.2), and the kubelet needs bodies exactly as the server sends
them (strategic-merge diffs, resourceVersions). Why not the ``kubernetes`` package's ApiClient at
all: its layers cost ~4 ms of CPU per request and its import 0.2 s of the kubelet's start-up; the
package is imported only for a kubeconfig that needs its loader (:mod:`hpkctl.kube.kubeconfig`).

Every call has a timeout, and errors come back as
:class:`KubeError` with the server's Status ``reason`` and ``code``, or :class:`KubeUnavailable`
when the server could not be reached at all.
"""

from __future__ import annotations

import copy
import http.client
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from hpkctl.errors import HpkError
from hpkctl.kube import kubeconfig
from hpkctl.kube.http import Cut, Response, Transport

Timeout = tuple[float, float]
DEFAULT_TIMEOUT: Timeout = (5.0, 30.0)
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class KubeError(HpkError):
    """The API server answered with an error Status (``code`` 404, 409, 410, 422...)."""

    def __init__(self, code: int, reason: str, message: str, *, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.body = dict(body or {})


class KubeUnavailable(HpkError):
    """The API server could not be reached (connection refused, TLS failure, timeout)."""


def _quote(part: str) -> str:
    return quote(part, safe="")


def pod_path(namespace: str, name: str = "", sub: str = "") -> str:
    path = f"/api/v1/namespaces/{_quote(namespace)}/pods"
    if name:
        path += f"/{_quote(name)}"
    return path + (f"/{sub}" if sub else "")


def node_path(name: str = "", sub: str = "") -> str:
    return "/api/v1/nodes" + (f"/{_quote(name)}" if name else "") + (f"/{sub}" if sub else "")


def lease_path(name: str = "", namespace: str = "kube-node-lease") -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{_quote(namespace)}/leases"
    return path + (f"/{_quote(name)}" if name else "")


def namespaced(kind_plural: str, namespace: str, name: str = "", sub: str = "") -> str:
    """A core/v1 namespaced path: ``configmaps``, ``secrets``, ``services``, ``events``, ``serviceaccounts``."""
    path = f"/api/v1/namespaces/{_quote(namespace)}/{kind_plural}"
    return path + (f"/{_quote(name)}" if name else "") + (f"/{sub}" if sub else "")


class Kube:
    """Kept-alive connections to the API server from a kubeconfig. Thread-safe.

    Give long watches and the lease renewer their own :class:`Kube` (``clone``): the lease must
    never wait behind other calls. A watch's connection is its own and never pooled.
    """

    def __init__(self, kubeconfig_path: str, *, pool_size: int = 4, context: str | None = None) -> None:
        cfg = kubeconfig.load(kubeconfig_path, context)
        self.kubeconfig = kubeconfig_path
        self.context = context
        self.host = cfg.host
        self.ca_file: str | None = cfg.ca_file  # the cluster CA (a file; a private copy of -data), if any
        # what a stream outside the transport (exec's WebSocket, kube/podexec.py) needs to authenticate the same way
        self.cert_file: str | None = cfg.cert_file
        self.key_file: str | None = cfg.key_file
        self.verify_tls = cfg.verify_tls
        self.tls_server_name = cfg.tls_server_name
        self._cfg = cfg
        try:
            self._http = Transport(cfg.host, pool_size=pool_size, ca_file=cfg.ca_file, cert_file=cfg.cert_file,
                                   key_file=cfg.key_file, verify_tls=cfg.verify_tls,
                                   tls_server_name=cfg.tls_server_name, proxy=cfg.proxy)
        except (OSError, ValueError) as exc:
            raise HpkError(f"cannot load kubeconfig {kubeconfig_path}: {exc}", hint=kubeconfig.HINT) from exc

    @property
    def authorization(self) -> str | None:
        """The Authorization header's value (a client certificate alone: None)."""
        return self._cfg.authorization()

    def clone(self, *, pool_size: int = 2) -> "Kube":
        """Another pool of connections with this one's settings and TLS context: the kubeconfig is not
        parsed again nor its CA and client key loaded again (~2.5 ms a clone; the kubelet makes 5 at start)."""
        other = copy.copy(self)
        other._http = self._http.sibling(pool_size)
        return other

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ requests
    def _send(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] | Mapping[str, Any] | None,
              body: Any, content_type: str | None, timeout: Timeout | float, cut: Cut | None = None) -> Response:
        items = list(query.items()) if isinstance(query, Mapping) else list(query or [])
        headers: dict[str, str] = {"Accept": "application/json", "User-Agent": "hpkctl"}
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            # text as given (server-side apply's YAML/JSON document), everything else as compact JSON
            data = (body if isinstance(body, bytes) else body.encode() if isinstance(body, str)
                    else json.dumps(body, separators=(",", ":")).encode())
        auth = self._cfg.authorization()
        if auth:
            headers["Authorization"] = auth
        url = path
        if items:
            url += "?" + urlencode([(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in items])
        try:
            return self._http.open(method, url, headers, data, timeout, cut)
        except (OSError, http.client.HTTPException) as exc:
            raise KubeUnavailable(f"{method} {path}: {str(exc) or type(exc).__name__}") from exc

    @staticmethod
    def _error(resp: Response, method: str, path: str) -> KubeError:
        data = resp.read()
        try:
            st = json.loads(data)
        except ValueError:
            st = {}
        if not isinstance(st, dict):
            st = {}
        return KubeError(int(resp.status), str(st.get("reason") or resp.reason or ""),
                         str(st.get("message") or data[:300].decode(errors="replace") or f"{method} {path}"), body=st)

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
                body: Any = None, content_type: str | None = None,
                timeout: Timeout | float = DEFAULT_TIMEOUT) -> Any:
        """Send one request; the decoded JSON answer (``None`` for an empty one)."""
        data = self.raw(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        return json.loads(data) if data else None

    def raw(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
            body: Any = None, content_type: str | None = None, timeout: Timeout | float = DEFAULT_TIMEOUT) -> bytes:
        """Send one request; the answer's bytes as sent (a container's log: ``GET pods/NAME/log``)."""
        resp = self._send(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        try:
            if resp.status >= 400:
                raise self._error(resp, method, path)
            return resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise KubeUnavailable(f"{method} {path}: {str(exc) or type(exc).__name__}") from exc

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        return self.request("POST", path, body=body, **kw)

    def put(self, path: str, body: Any, **kw: Any) -> Any:
        return self.request("PUT", path, body=body, **kw)

    def patch(self, path: str, body: Any, *, content_type: str = SMP, **kw: Any) -> Any:
        return self.request("PATCH", path, body=body, content_type=content_type, **kw)

    def delete(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("DELETE", path, body=body, **kw)

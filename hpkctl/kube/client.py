"""A raw-JSON client for the Kubernetes API, on top of the official ``kubernetes`` package.

Why raw JSON: the generated models cost ~14x the memory and time of ``json.loads`` for pod lists
(measured in ``kubelet-api.md`` §3.2), and the kubelet needs bodies exactly as the server sends
them (strategic-merge diffs, resourceVersions). The package still does the part worth having:
kubeconfig loading (client certs, tokens, exec plugins) and the TLS connection pool.

Every call has a timeout (the package has none by default), and errors come back as
:class:`KubeError` with the server's Status ``reason`` and ``code``, or :class:`KubeUnavailable`
when the server could not be reached at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from hpkctl.errors import HpkError

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
    """One connection pool to the API server from a kubeconfig. Thread-safe.

    Give long watches and the lease renewer their own :class:`Kube` (``clone``): a watch pins a
    pooled connection for minutes, and the lease must never wait for a connection.
    """

    def __init__(self, kubeconfig: str, *, pool_size: int = 4, context: str | None = None) -> None:
        cfg = k8s_client.Configuration()
        try:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=cfg)
        except (OSError, k8s_config.ConfigException, ValueError, TypeError) as exc:
            raise HpkError(f"cannot load kubeconfig {kubeconfig}: {exc}",
                           hint="pass --kubeconfig with a readable kubeconfig file (ci/kube-up prints one)") from exc
        cfg.connection_pool_maxsize = pool_size
        cfg.retries = False  # the callers retry with back-off; urllib3's 3 quick retries only delay the error
        self.kubeconfig = kubeconfig
        self.context = context
        self.host = cfg.host
        self.ca_file: str | None = cfg.ssl_ca_cert  # the cluster CA (a file the loader wrote), if any
        # what a stream outside the package (exec's WebSocket, kube/podexec.py) needs to authenticate the same way
        self.cert_file: str | None = cfg.cert_file
        self.key_file: str | None = cfg.key_file
        self.verify_tls = bool(cfg.verify_ssl)
        bearer: Any = dict(cfg.auth_settings()).get("BearerToken") or {}
        self.authorization: str | None = bearer.get("value") or None
        self._api = k8s_client.ApiClient(cfg)

    def clone(self, *, pool_size: int = 2) -> "Kube":
        return Kube(self.kubeconfig, pool_size=pool_size, context=self.context)

    def close(self) -> None:
        try:
            self._api.close()  # type: ignore[no-untyped-call]
        except Exception:  # noqa: BLE001 - closing a pool whose threads are gone
            pass

    # ------------------------------------------------------------------ requests
    def _send(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] | Mapping[str, Any] | None,
              body: Any, content_type: str | None, timeout: Timeout | float) -> Any:
        items = list(query.items()) if isinstance(query, Mapping) else list(query or [])
        headers: dict[str, str] = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        _, url, headers, _, _ = self._api.param_serialize(method, path, header_params=headers,
                                                          auth_settings=["BearerToken"])
        if items:
            url += "?" + urlencode([(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in items])
        try:
            return self._api.call_api(method, url, header_params=headers,
                                      body=body,  # the client serialises it (every content type we send is +json)
                                      _request_timeout=timeout)
        except ApiException as exc:  # the client raises only for transport failures (status 0)
            raise KubeUnavailable(f"{method} {path}: {exc.reason or exc}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeUnavailable(f"{method} {path}: {exc}") from exc

    @staticmethod
    def _error(resp: Any, method: str, path: str) -> KubeError:
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
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeUnavailable(f"{method} {path}: {exc}") from exc
        finally:
            resp.response.release_conn()
        return bytes(data)

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

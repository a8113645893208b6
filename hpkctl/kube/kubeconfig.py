"""Kubeconfig loading without the ``kubernetes`` package, for what kubeconfigs ordinarily hold.

Why in-house: importing ``kubernetes`` costs 0.2-0.26 s of the kubelet's start-up (to its first
sbatch), and hpkctl's own kubeconfigs (``ci/kube-up``, the control plane's PKI) use only a server, a
CA, a client certificate and key or a token. Those, with ``insecure-skip-tls-verify``,
``tls-server-name``, ``tokenFile``, ``username``/``password`` and contexts, are read here with the
package's semantics (``-data`` wins over the file, files are relative to the kubeconfig's directory,
``token`` over ``tokenFile``). Anything else (an ``exec`` plugin, an ``auth-provider``, a
``proxy-url``, a proxy from the environment, a ``KUBECONFIG``-style list of files) goes to the
package's loader, imported only then.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hpkctl.errors import HpkError

HINT = "pass --kubeconfig with a readable kubeconfig file (ci/kube-up prints one)"
_PROXY_VARS = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


@dataclass(frozen=True)
class Settings:
    """Where the API server is and how to authenticate to it (what :class:`~hpkctl.kube.Kube` needs)."""

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify_tls: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None
    #: the Authorization header's value now (an exec plugin's token is refreshed when it expires)
    authorization: Callable[[], str | None] = lambda: None


class _Bad(ValueError):
    """The kubeconfig is not what it should be (the message says where)."""


def load(kubeconfig: str, context: str | None = None) -> Settings:
    """The settings of ``context`` (else the current context) of the kubeconfig file ``kubeconfig``."""
    try:
        if os.pathsep in kubeconfig:
            return _with_kubernetes(kubeconfig, context)
        path = Path(kubeconfig)
        doc = yaml.load(path.read_bytes(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if not isinstance(doc, dict):
            raise _Bad("not a kubeconfig (expected a mapping with clusters, users and contexts)")
        ctx = _named(doc, "contexts", context or _str(doc.get("current-context"), "current-context"))
        cluster = _named(doc, "clusters", _str(ctx.get("cluster"), "the context's cluster"))
        user = _named(doc, "users", str(ctx["user"]), optional=True) if ctx.get("user") else {}
        if "exec" in user or "auth-provider" in user or "proxy-url" in cluster or _env_proxy(cluster):
            return _with_kubernetes(kubeconfig, context)
        # relative files from the directory that names the kubeconfig, as kubectl resolves them (not a symlink's target's)
        return _settings(cluster, user, Path(os.path.abspath(kubeconfig)).parent)
    except HpkError:
        raise
    except (OSError, yaml.YAMLError, ValueError, TypeError, KeyError) as exc:
        raise HpkError(f"cannot load kubeconfig {kubeconfig}: {exc}", hint=HINT) from exc


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Bad(f"Invalid kube-config file. Expected key {what}")
    return value


def _named(doc: dict[str, Any], section: str, name: str, *, optional: bool = False) -> dict[str, Any]:
    """The body of the one entry called ``name`` in ``section`` (a list of ``{name, <kind>}``)."""
    entries = doc.get(section)
    if not isinstance(entries, list):
        if optional:
            return {}
        raise _Bad(f"Invalid kube-config file. Expected {section} to be a list")
    found = [e for e in entries if isinstance(e, dict) and e.get("name") == name]
    if len(found) > 1:
        raise _Bad(f"Invalid kube-config file. Expected only one object with name {name} in {section} list")
    if not found:
        if optional:
            return {}
        raise _Bad(f"Invalid kube-config file. Expected object with name {name} in {section} list")
    body = found[0].get(section[:-1])
    if not isinstance(body, dict):
        raise _Bad(f"Invalid kube-config file. Expected key {section[:-1]} in {section}[name={name}]")
    return body


def _env_proxy(cluster: dict[str, Any]) -> bool:
    """Whether a proxy from the environment applies to this server (the package honours them)."""
    if not any(os.environ.get(v) for v in _PROXY_VARS):
        return False
    import urllib.request  # only with a proxy in the environment: it brings email and more
    from urllib.parse import urlsplit
    server = urlsplit(str(cluster.get("server") or ""))
    proxies = urllib.request.getproxies()
    if not (proxies.get(server.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(server.hostname or "")


def _settings(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> Settings:
    host = _str(cluster.get("server"), "server in the cluster").rstrip("/")
    ca = cert = key = None
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):  # kubectl refuses "false" (a string): it must not turn verification off
        raise _Bad(f"insecure-skip-tls-verify must be true or false, unquoted (it is {insecure!r})")
    if host.startswith("https"):
        ca = _file(cluster, "certificate-authority", base)
        if insecure and ca:
            raise _Bad("specifying a root certificates file with the insecure flag is not allowed "
                       "(remove insecure-skip-tls-verify or certificate-authority from the cluster)")
        cert = _file(user, "client-certificate", base)
        key = _file(user, "client-key", base)
        if cert and not key:
            raise _Bad("client-key-data or client-key must be specified for the user to use the clientCert "
                       "authentication method")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (base / str(user["tokenFile"])).read_text().strip()
    header: str | None = None
    if token:
        header = f"Bearer {token}"
    elif "username" in user and "password" in user:
        header = "Basic " + base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
    name = cluster.get("tls-server-name")
    return Settings(host=host, ca_file=ca, cert_file=cert, key_file=key,
                    verify_tls=not insecure,
                    tls_server_name=str(name) if name else None, authorization=lambda: header)


_written: dict[str, str] = {}
_written_lock = threading.Lock()
_tmpdir: list[str] = []


def _file(section: dict[str, Any], key: str, base: Path) -> str | None:
    """``key-data`` (base64) written once per process to a private file, else ``key`` resolved from ``base``."""
    data = section.get(f"{key}-data")
    if data:
        raw = base64.b64decode(str(data))
        digest = hashlib.sha256(raw).hexdigest()
        with _written_lock:
            if digest not in _written or not os.path.isfile(_written[digest]):
                if not _tmpdir:
                    _tmpdir.append(tempfile.mkdtemp(prefix="hpkctl-kubeconfig-"))  # 0700
                    atexit.register(shutil.rmtree, _tmpdir[0], True)
                fd, name = tempfile.mkstemp(dir=_tmpdir[0])  # 0600: a client key may be in it
                with os.fdopen(fd, "wb") as f:
                    f.write(raw)
                _written[digest] = name
            return _written[digest]
    if section.get(key):
        path = os.path.normpath(base / str(section[key]))
        if not os.path.isfile(path):
            raise _Bad(f"File does not exist: {path}")
        return path
    return None


def _with_kubernetes(kubeconfig: str, context: str | None) -> Settings:
    """The ``kubernetes`` package's loader, for what :func:`load` does not read itself."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    # the one user of urllib3 left (an auth-provider's token refresh): its line per connection is not
    # the daemons' -v log, as it was not when every request went through it
    logging.getLogger("urllib3").setLevel(logging.WARNING)

    cfg = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=cfg)
    except (OSError, k8s_config.ConfigException, ValueError, TypeError) as exc:
        raise HpkError(f"cannot load kubeconfig {kubeconfig}: {exc}", hint=HINT) from exc

    def authorization() -> str | None:
        bearer: Any = dict(cfg.auth_settings()).get("BearerToken") or {}  # refreshes an expired exec token
        return bearer.get("value") or None

    from kubernetes.client.rest import should_bypass_proxies

    # the package applied no_proxy only when it sent a request: the transport is given no proxy for such a host
    proxy = None if not cfg.proxy or should_bypass_proxies(cfg.host, cfg.no_proxy or "") else cfg.proxy
    return Settings(host=cfg.host, ca_file=cfg.ssl_ca_cert, cert_file=cfg.cert_file, key_file=cfg.key_file,
                    verify_tls=bool(cfg.verify_ssl), tls_server_name=cfg.tls_server_name or None,
                    proxy=proxy, authorization=authorization)

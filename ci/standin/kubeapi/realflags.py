"""The stand-in started as ``kube-apiserver`` with real kube-apiserver flags (no ``--state-dir``).

The control-plane bootstrap (``hpkctl/controlplane/components.py``) starts ``kube-apiserver`` with the
flags of a real kube-apiserver 1.36. Under that name and without ``--state-dir`` the stand-in takes
*exactly those flags*, parsed as kube-apiserver's pflag/cobra command line parses them
(``--flag=value`` or ``--flag value``, booleans also bare, string arrays repeatable, last value wins
otherwise): a flag outside :data:`FLAGS` ("unknown flag"), a value of the wrong kind, a missing or
unreadable file, an unknown admission plugin or authorization mode, or a positional argument is an
error with exit status 1, as the real binary fails. Flags a real kube-apiserver has but the bootstrap
does not pass are refused too: the stand-in does not model them.

What the flags become:

- ``--secure-port``/``--bind-address``: where it listens; ``--advertise-address``: the ``kubernetes``
  Endpoints.
- ``--tls-cert-file``/``--tls-private-key-file``: its serving certificate; ``--client-ca-file``: the CA
  whose client certificates authenticate (CN = user), also published as ``kube-root-ca.crt``.
- ``--kubelet-client-certificate``/``-key``: what it presents to kubelets (logs, exec);
  ``--kubelet-preferred-address-types``: how it picks a Node's address.
- ``--service-account-signing-key-file`` signs TokenRequest tokens with ``--service-account-issuer``
  (the first) as ``iss``; bearer tokens are verified with the ``--service-account-key-file`` keys.
- ``--service-cluster-ip-range``: cluster IPs (the kubernetes Service gets the first address).
- ``--default-not-ready-toleration-seconds``/``--default-unreachable-toleration-seconds``: the
  tolerations DefaultTolerationSeconds gives pods.
- etcd (``--etcd-*``): checked, not used. At start it GETs ``/health`` of the first
  ``--etcd-servers`` URL over TLS with ``--etcd-certfile``/``--etcd-keyfile``, trusting
  ``--etcd-cafile``, and exits 1 if etcd does not answer healthy within :data:`ETCD_WAIT` seconds
  (the real server cannot start without etcd either). Objects are *not* stored in etcd: they are
  kept as the stand-in always keeps them, in ``$HPK_STANDIN_APISERVER_DIR/objects.json`` when that
  variable names a directory (tests set it), else in memory only.
- ``--authorization-mode``: with ``Node``, node identities get what the Node authorizer grants
  (``nodeauth``); RBAC is not modelled: every other authenticated user may do anything.
  ``--enable-admission-plugins``: ``NodeRestriction`` is applied when listed (``nodeauth``); the rest
  is the stand-in's fixed admission (defaults, ServiceAccount, DefaultTolerationSeconds).
- Only checked (files readable, values well-formed): the
  ``--requestheader-*`` and ``--proxy-client-*`` flags (no front-proxy authentication, no aggregated APIs).
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

#: seconds to wait for etcd's /health before giving up
ETCD_WAIT = 20.0

AUTHORIZATION_MODES = ("AlwaysAllow", "AlwaysDeny", "ABAC", "Webhook", "RBAC", "Node")
ADDRESS_TYPES = ("Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP")
#: admission plugin names of kube-apiserver 1.36 (as its --help lists them; from the plugin registry
#: of kube-apiserver, MutatingAdmissionPolicy added in 1.32)
ADMISSION_PLUGINS = (
    "AlwaysAdmit", "AlwaysDeny", "AlwaysPullImages", "CertificateApproval", "CertificateSigning",
    "CertificateSubjectRestriction", "ClusterTrustBundleAttest", "DefaultIngressClass", "DefaultStorageClass",
    "DefaultTolerationSeconds", "DenyServiceExternalIPs", "EventRateLimit", "ExtendedResourceToleration",
    "ImagePolicyWebhook", "LimitPodHardAntiAffinityTopology", "LimitRanger", "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook", "NamespaceAutoProvision", "NamespaceExists", "NamespaceLifecycle",
    "NodeRestriction", "OwnerReferencesPermissionEnforcement", "PersistentVolumeClaimResize",
    "PodNodeSelector", "PodSecurity", "PodTolerationRestriction", "Priority", "ResourceQuota", "RuntimeClass",
    "ServiceAccount", "StorageObjectInUseProtection", "TaintNodesByCondition", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
)


class FlagError(Exception):
    """What kube-apiserver prints before exiting 1."""


# ------------------------------------------------------------------------------ value kinds


def _ip(v: str) -> str:
    try:
        ipaddress.ip_address(v)
    except ValueError:
        raise FlagError(f'invalid argument "{v}": failed to parse IP: "{v}"') from None
    return v


def _port(v: str) -> int:
    try:
        n = int(v, 10)
    except ValueError:
        raise FlagError(f'invalid argument "{v}": strconv.ParseInt: parsing "{v}": invalid syntax') from None
    if not 0 < n < 65536:
        raise FlagError(f"port {n} must be between 1 and 65535, inclusive")
    return n


def _int64(v: str) -> int:
    try:
        n = int(v, 10)
    except ValueError:
        raise FlagError(f'invalid argument "{v}": strconv.ParseInt: parsing "{v}": invalid syntax') from None
    if not -(2 ** 63) <= n < 2 ** 63:
        raise FlagError(f'invalid argument "{v}": strconv.ParseInt: parsing "{v}": value out of range')
    if n < 0:
        raise FlagError(f"toleration seconds {n} must not be negative")
    return n


def _file(v: str) -> Path:
    p = Path(v)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise FlagError(f"open {v}: {e.strerror}") from None
    if b"-----BEGIN " not in data:
        raise FlagError(f"{v}: no PEM data found")
    return p


def _list(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


def _choices(allowed: tuple[str, ...], what: str) -> Callable[[str], list[str]]:
    def parse(v: str) -> list[str]:
        items = _list(v)
        for item in items:
            if item not in allowed:
                raise FlagError(f'{what} "{item}" is unknown (known: {", ".join(allowed)})')
        if len(set(items)) != len(items):
            raise FlagError(f"{what}s may not repeat: {v}")
        return items
    return parse


def _urls(v: str) -> list[str]:
    items = _list(v)
    for u in items:
        parts = urlsplit(u)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
            raise FlagError(f"--etcd-servers: {u!r} is not a URL such as https://127.0.0.1:2379")
    if not items:
        raise FlagError("--etcd-servers must be specified")
    return items


def _cidrs(v: str) -> list[str]:
    items = _list(v)
    if not 0 < len(items) <= 2:
        raise FlagError(f"--service-cluster-ip-range {v!r}: one or two (dual-stack) CIDRs")
    for c in items:
        try:
            ipaddress.ip_network(c, strict=True)
        except ValueError as e:
            raise FlagError(f"--service-cluster-ip-range {c!r}: {e}") from None
    return items


def _issuer(v: str) -> str:
    if not v:
        raise FlagError("--service-account-issuer may not be empty")
    if ":" in v:
        parts = urlsplit(v)
        if parts.scheme != "https" or parts.query or parts.fragment:
            raise FlagError(f"service-account-issuer {v!r} contained a ':' but was not a valid URL "
                            "(https, no query or fragment)")
    return v


def _text(v: str) -> str:
    return v


@dataclass(frozen=True)
class Flag:
    parse: Callable[[str], Any]
    array: bool = False  # pflag stringArray: repeatable, values accumulate


#: exactly the flags hpkctl's bootstrap passes (hpkctl/controlplane/components.py apiserver_argv)
FLAGS: dict[str, Flag] = {
    "advertise-address": Flag(_ip),
    "bind-address": Flag(_ip),
    "secure-port": Flag(_port),
    "etcd-servers": Flag(_urls),
    "etcd-cafile": Flag(_file),
    "etcd-certfile": Flag(_file),
    "etcd-keyfile": Flag(_file),
    "tls-cert-file": Flag(_file),
    "tls-private-key-file": Flag(_file),
    "client-ca-file": Flag(_file),
    "kubelet-client-certificate": Flag(_file),
    "kubelet-client-key": Flag(_file),
    "kubelet-preferred-address-types": Flag(_choices(ADDRESS_TYPES, "address type")),
    "service-account-key-file": Flag(_file, array=True),
    "service-account-signing-key-file": Flag(_file),
    "service-account-issuer": Flag(_issuer, array=True),
    "service-cluster-ip-range": Flag(_cidrs),
    "authorization-mode": Flag(_choices(AUTHORIZATION_MODES, "authorization mode")),
    "enable-admission-plugins": Flag(_choices(ADMISSION_PLUGINS, "admission plugin")),
    "requestheader-client-ca-file": Flag(_file),
    "requestheader-allowed-names": Flag(_list),
    "requestheader-username-headers": Flag(_list),
    "requestheader-group-headers": Flag(_list),
    "requestheader-extra-headers-prefix": Flag(_list),
    "proxy-client-cert-file": Flag(_file),
    "proxy-client-key-file": Flag(_file),
    "default-not-ready-toleration-seconds": Flag(_int64),
    "default-unreachable-toleration-seconds": Flag(_int64),
}
#: what kube-apiserver requires (it exits otherwise)
REQUIRED = ("etcd-servers",)


def parse(argv: list[str]) -> dict[str, Any]:
    """Flag name → parsed value; :class:`FlagError` as kube-apiserver would refuse the command line."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            if argv[i:]:
                raise FlagError(f'"kube-apiserver" does not take any arguments, got {argv[i:]!r}')
            break
        if not arg.startswith("-") or arg == "-":
            raise FlagError(f'"kube-apiserver" does not take any arguments, got [{arg!r}]')
        if not arg.startswith("--"):
            raise FlagError(f"unknown shorthand flag: {arg[1:2]!r} in {arg}")
        name, eq, value = arg[2:].partition("=")
        flag = FLAGS.get(name)
        if flag is None:
            raise FlagError(f"unknown flag: --{name}")
        if not eq:
            if i >= len(argv):
                raise FlagError(f"flag needs an argument: --{name}")
            value = argv[i]
            i += 1
        try:
            parsed = flag.parse(value)
        except FlagError as e:
            msg = str(e)
            raise FlagError(msg if msg.startswith("--") or "--" in msg else f"{msg} for \"--{name}\" flag") from None
        if flag.array:
            values.setdefault(name, []).append(parsed)
        else:
            values[name] = parsed
    for name in REQUIRED:
        if name not in values:
            raise FlagError(f"--{name} must be specified")
    _consistent(values)
    return values


def _consistent(v: dict[str, Any]) -> None:
    """The cross-flag checks kube-apiserver makes at start (options Validate / Complete)."""
    pairs = (("tls-cert-file", "tls-private-key-file"), ("kubelet-client-certificate", "kubelet-client-key"),
             ("proxy-client-cert-file", "proxy-client-key-file"), ("etcd-certfile", "etcd-keyfile"))
    for a, b in pairs:
        if (a in v) != (b in v):
            raise FlagError(f"--{a} and --{b} must be given together")
    for a, b in pairs:
        if a in v:
            try:
                ssl.create_default_context().load_cert_chain(str(v[a]), str(v[b]))
            except ssl.SSLError as e:
                raise FlagError(f"--{a}/--{b}: tls: private key does not match public key ({e.reason})") from None
    if "tls-cert-file" not in v:
        raise FlagError("--tls-cert-file is needed: the stand-in does not make its own self-signed certificate")
    if "service-account-signing-key-file" in v and not v.get("service-account-issuer"):
        raise FlagError("service-account-issuer is a required flag when service-account-signing-key-file is set")
    if v.get("service-account-issuer") and "service-account-signing-key-file" not in v:
        raise FlagError("service-account-signing-key-file is a required flag (TokenRequest)")
    for name in ("authorization-mode", "enable-admission-plugins"):
        if name in v and not v[name]:
            raise FlagError(f"--{name} may not be empty")


# ------------------------------------------------------------------------------ credentials


class Credentials:
    """The stand-in's ``Pki`` interface (``ca_pem``, ``issuer``, ``sign_jwt``, ``verify_jwt``) on the
    files the flags name."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.client_ca: Path = values["client-ca-file"]
        self.ca_pem = self.client_ca.read_text()
        self.issuer: str = values.get("service-account-issuer", ["https://kubernetes.default.svc.cluster.local"])[0]
        key_file: Path | None = values.get("service-account-signing-key-file")
        key = serialization.load_pem_private_key(key_file.read_bytes(), None) if key_file else None
        if key is not None and not isinstance(key, rsa.RSAPrivateKey):
            raise FlagError(f"--service-account-signing-key-file {key_file}: the stand-in signs RS256 only")
        self.sa_key = key
        self.verify_keys: list[rsa.RSAPublicKey] = []
        for f in values.get("service-account-key-file", []):
            data = Path(f).read_bytes()
            pub: Any
            try:
                pub = serialization.load_pem_public_key(data)
            except ValueError:
                try:
                    pub = serialization.load_pem_private_key(data, None).public_key()
                except ValueError:
                    pub = x509.load_pem_x509_certificate(data).public_key()
            if isinstance(pub, rsa.RSAPublicKey):
                self.verify_keys.append(pub)

    def sign_jwt(self, claims: dict[str, Any]) -> str:
        if self.sa_key is None:
            raise RuntimeError("no --service-account-signing-key-file")
        claims = {**claims, "iss": self.issuer}
        pub = self.sa_key.public_key().public_bytes(serialization.Encoding.DER,
                                                    serialization.PublicFormat.SubjectPublicKeyInfo)
        h = hashes.Hash(hashes.SHA256())
        h.update(pub)
        kid = _b64(h.finalize())
        head = _b64(json.dumps({"alg": "RS256", "kid": kid}, separators=(",", ":")).encode())
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        sig = self.sa_key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{head}.{body}.{_b64(sig)}"

    def verify_jwt(self, token: str) -> dict[str, Any] | None:
        try:
            head, body, sig = token.split(".")
            claims: dict[str, Any] = json.loads(_unb64(body))
        except ValueError:
            return None
        for pub in self.verify_keys:
            try:
                pub.verify(_unb64(sig), f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
            except Exception:  # noqa: BLE001 - not this key
                continue
            ok = claims.get("exp", 0) > time.time() and claims.get("iss") == self.issuer
            return claims if ok else None
        return None


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


# ------------------------------------------------------------------------------ etcd


def wait_for_etcd(values: dict[str, Any], *, wait: float = ETCD_WAIT) -> str:
    """GET /health of the first etcd server with the etcd client certificate until it says healthy;
    the answer, or :class:`FlagError` after ``wait`` seconds."""
    url = urlsplit(values["etcd-servers"][0])
    if url.scheme == "https":
        ctx = ssl.create_default_context(cafile=str(values["etcd-cafile"]) if "etcd-cafile" in values else None)
        if "etcd-certfile" in values:
            ctx.load_cert_chain(str(values["etcd-certfile"]), str(values["etcd-keyfile"]))
    deadline = time.monotonic() + wait
    last = ""
    while True:
        try:
            conn: http.client.HTTPConnection = (
                http.client.HTTPSConnection(url.hostname or "", url.port, timeout=3, context=ctx)
                if url.scheme == "https" else http.client.HTTPConnection(url.hostname or "", url.port, timeout=3))
            conn.request("GET", "/health")
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace").strip()
            conn.close()
            if resp.status == 200 and json.loads(text).get("health") == "true":
                return text
            last = f"HTTP {resp.status}: {text}"
        except (OSError, ValueError, http.client.HTTPException) as e:
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise FlagError(f"etcd {values['etcd-servers'][0]} is not healthy after {wait:.0f} s: {last}")
        time.sleep(0.2)


def fail(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr, flush=True)
    return 1

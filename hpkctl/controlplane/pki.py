"""The control plane's PKI: certificate authorities, certificates, keys and kubeconfigs.

Everything lives in one private directory (the product uses ``~/.hpk/controlplane/pki``) and is
*reused* by every later call: the control plane is a Slurm job that ends and starts again, maybe on
another node, and a new CA would invalidate every kubeconfig and every kubelet credential handed out
before. Only what cannot stay valid is issued again: the API server's serving certificate when the
node's names or addresses changed (they are known only at job start), and any leaf that is not signed
by the current CA, does not match its key or is within ``RENEW_BEFORE`` of its end. The CAs and the
service-account key are never replaced silently; a problem with them is an error that says how to fix it.

Three CAs, as kubeadm has them, because each CA is trusted for a different question:

- ``ca``: the cluster CA. The API server's ``--client-ca-file`` and the kubelet API trust it for *who
  is calling*; it signs the serving certificates and every component's client certificate.
- ``front-proxy-ca``: the API server trusts identities in request headers (``X-Remote-User``) from
  clients of this CA alone (``--requestheader-client-ca-file``). Were it the cluster CA, any client
  certificate (a kubelet's, a user's) could claim to be anybody through those headers.
- ``etcd/ca``: etcd without its own auth gives *every* client certificate its CA signed full access to
  all data, Secrets included. With the cluster CA that would be every kubelet and user; with its own
  CA only the API server (``apiserver-etcd-client``) gets in. etcd listens on loopback only, inside the
  control-plane job, so its certificates name only loopback and never change when the job moves.

Keys are ECDSA P-256 (fast to make, accepted by etcd, Go's TLS, OpenSSL, Python); the service-account
signing key is RSA 2048 (RS256, which every token consumer understands). Files are 0600, directories
0700, every write is a temporary file renamed into place, and a lock file serialises two bootstraps.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from hpkctl.controlplane.pkifiles import PkiError, load_cert, load_key, locked, pem_key, read_checked, write_private

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Validity of the CAs (never renewed here: a new CA means new credentials for every client).
CA_VALIDITY = dt.timedelta(days=3650)
#: Validity of every leaf certificate.
LEAF_VALIDITY = dt.timedelta(days=365)
#: A leaf this close to its end is issued again (a control-plane job restarts at least daily).
RENEW_BEFORE = dt.timedelta(days=30)
#: Certificates start this much in the past, for compute nodes whose clocks run a little behind.
BACKDATE = dt.timedelta(hours=1)

SERVER = (ExtendedKeyUsageOID.SERVER_AUTH,)
CLIENT = (ExtendedKeyUsageOID.CLIENT_AUTH,)
BOTH = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
LOOPBACK_DNS = ("localhost",)
LOOPBACK_IPS: tuple[IPAddress, ...] = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))

_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key, as the components' ``--*-cert-file``/``--*-key-file`` take them."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Every file of the control plane's PKI (all under ``directory``)."""

    directory: Path
    ca: CertKey
    apiserver: CertKey
    apiserver_kubelet_client: CertKey
    apiserver_etcd_client: CertKey
    front_proxy_ca: CertKey
    front_proxy_client: CertKey
    etcd_ca: CertKey
    etcd_server: CertKey
    etcd_peer: CertKey
    services_hook_serving: CertKey
    admin: CertKey
    kubelet: CertKey
    scheduler: CertKey
    controller_manager: CertKey
    services_hook: CertKey
    service_account_key: Path
    service_account_pub: Path


@dataclass(frozen=True)
class _Leaf:
    """What a leaf certificate must say; one that says anything else is issued again."""

    name: str
    ca: str
    cn: str
    orgs: tuple[str, ...] = ()
    usages: tuple[ObjectIdentifier, ...] = CLIENT
    dns: tuple[str, ...] = ()
    ips: tuple[IPAddress, ...] = ()


# ------------------------------------------------------------------------------ public API


def ensure_pki(directory: Path, *, hosts: Iterable[str], node_name: str = "hpk",
               service_cidr: str = "10.96.0.0/12", cluster_domain: str = "cluster.local") -> Pki:
    """Create what is missing under ``directory`` and reuse the rest; return every path.

    ``hosts`` are the names and IP addresses of the node the API server runs on now (what the
    kubelet and users dial); they go into the serving certificate next to the fixed names.
    """
    serving = _serving_leaf(hosts, service_cidr=service_cidr, cluster_domain=cluster_domain)
    leaves = [
        serving,
        _Leaf("apiserver-kubelet-client", "ca", "kube-apiserver-kubelet-client", ("system:masters",)),
        _Leaf("apiserver-etcd-client", "etcd/ca", "kube-apiserver-etcd-client"),
        _Leaf("front-proxy-client", "front-proxy-ca", "front-proxy-client"),
        _Leaf("etcd/server", "etcd/ca", "hpk-etcd-server", (), BOTH, LOOPBACK_DNS, LOOPBACK_IPS),
        _Leaf("etcd/peer", "etcd/ca", "hpk-etcd-peer", (), BOTH, LOOPBACK_DNS, LOOPBACK_IPS),
        _Leaf("services-hook-serving", "ca", "hpk-services-hook", (), SERVER, LOOPBACK_DNS, LOOPBACK_IPS),
        _Leaf("admin", "ca", "kubernetes-admin", ("system:masters",)),
        _Leaf("kubelet", "ca", f"system:node:{_dns_name(node_name, 'node name')}", ("system:nodes",)),
        _Leaf("scheduler", "ca", "system:kube-scheduler"),
        _Leaf("controller-manager", "ca", "system:kube-controller-manager"),
        _Leaf("services-hook", "ca", "hpk:services-hook"),
    ]
    with locked(directory):
        cas = {name: _ensure_ca(directory, name, cn) for name, cn in
               (("ca", "hpk-ca"), ("front-proxy-ca", "hpk-front-proxy-ca"), ("etcd/ca", "hpk-etcd-ca"))}
        got = {leaf.name: _ensure_leaf(directory, leaf, *cas[leaf.ca]) for leaf in leaves}
        sa_key, sa_pub = _ensure_service_account_key(directory)

    def pair(name: str) -> CertKey:
        return got.get(name) or CertKey(*_paths(directory, name))

    return Pki(directory=directory, ca=pair("ca"), apiserver=pair("apiserver"),
               apiserver_kubelet_client=pair("apiserver-kubelet-client"),
               apiserver_etcd_client=pair("apiserver-etcd-client"),
               front_proxy_ca=pair("front-proxy-ca"), front_proxy_client=pair("front-proxy-client"),
               etcd_ca=pair("etcd/ca"), etcd_server=pair("etcd/server"), etcd_peer=pair("etcd/peer"),
               services_hook_serving=pair("services-hook-serving"), admin=pair("admin"),
               kubelet=pair("kubelet"), scheduler=pair("scheduler"),
               controller_manager=pair("controller-manager"), services_hook=pair("services-hook"),
               service_account_key=sa_key, service_account_pub=sa_pub)


def ensure_serving_cert(directory: Path, *, hosts: Iterable[str], service_cidr: str = "10.96.0.0/12",
                        cluster_domain: str = "cluster.local") -> CertKey:
    """The API server's serving certificate for this node, issued again by the existing cluster CA
    when its names or addresses differ from ``serving_names(...)`` or it nears its end.

    For a control plane that moved to another node; the CA (and so every client) stays.
    """
    leaf = _serving_leaf(hosts, service_cidr=service_cidr, cluster_domain=cluster_domain)
    with locked(directory):
        crt, key = _paths(directory, "ca")
        if not crt.exists():
            raise PkiError(f"no cluster CA in {directory}",
                           hint="create the PKI first (ensure_pki); this only renews the serving certificate")
        return _ensure_leaf(directory, leaf, *_ensure_ca(directory, "ca", "hpk-ca"))


def serving_names(hosts: Iterable[str], *, service_cidr: str = "10.96.0.0/12",
                  cluster_domain: str = "cluster.local") -> tuple[tuple[str, ...], tuple[IPAddress, ...]]:
    """The DNS names and IP addresses the API server's certificate must carry, in order, without repeats.

    In-cluster clients dial ``kubernetes.default.svc`` (whose ClusterIP is the service range's first
    address), the control plane's own components dial loopback, and everything outside the job dials
    the node by one of ``hosts`` (each a host name or an IP address, kept exactly as given).
    """
    domain = _dns_name(cluster_domain, "cluster domain")
    dns = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{domain}",
           *LOOPBACK_DNS]
    ips: list[IPAddress] = [*LOOPBACK_IPS]
    for cidr in service_cidr.split(","):
        try:
            net = ipaddress.ip_network(cidr.strip(), strict=True)
        except ValueError as e:
            raise PkiError(f"service CIDR {cidr.strip()!r}: {e}",
                           hint="give a network such as 10.96.0.0/12 (host bits zero; two, comma-separated, "
                                "for dual stack)") from None
        ips.append(net.network_address + 1)
    for host in hosts:
        ip = _ip(host)
        if ip is None:
            dns.append(_dns_name(host, "host name"))
        else:
            ips.append(ip)
    return tuple(dict.fromkeys(dns)), tuple(dict.fromkeys(ips))


# ------------------------------------------------------------------------------ CAs and leaves


def _serving_leaf(hosts: Iterable[str], *, service_cidr: str, cluster_domain: str) -> _Leaf:
    dns, ips = serving_names(hosts, service_cidr=service_cidr, cluster_domain=cluster_domain)
    return _Leaf("apiserver", "ca", "kube-apiserver", (), SERVER, dns, ips)


def _ensure_ca(directory: Path, name: str, cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """Load the CA ``name``, or create it when it never existed. Never replaces one that did."""
    crt, key = _paths(directory, name)
    fix = (f"restore {crt.name} and {key.name} from a backup, or remove {directory} to start a new "
           "cluster (every kubeconfig and the kubelet's credentials must then be handed out again)")
    if crt.exists():
        if not key.exists():
            raise PkiError(f"CA certificate {crt} has no key {key}", hint=fix)
        cert, pkey = load_cert(crt), load_key(key)
        if cert is None or not isinstance(pkey, ec.EllipticCurvePrivateKey):
            raise PkiError(f"CA {crt} or {key} is not a PEM certificate / ECDSA key", hint=fix)
        if cert.public_key() != pkey.public_key():
            raise PkiError(f"CA certificate {crt} does not belong to the key {key}", hint=fix)
        if cert.not_valid_after_utc <= _now():
            raise PkiError(f"CA {crt} expired on {cert.not_valid_after_utc:%Y-%m-%d}",
                           hint=f"remove {directory} to start a new cluster (and hand out new kubeconfigs)")
        return cert, pkey
    # a key without its certificate is a creation cut short: nothing was ever signed with it
    pkey = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = _now()
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
               .public_key(pkey.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - BACKDATE).not_valid_after(now + CA_VALIDITY)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(_key_usage(ca=True), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(pkey.public_key()), critical=False))
    cert = builder.sign(pkey, hashes.SHA256())
    write_private(key, pem_key(pkey))
    write_private(crt, cert.public_bytes(serialization.Encoding.PEM))
    return cert, pkey


def _ensure_leaf(directory: Path, leaf: _Leaf, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> CertKey:
    crt, key = _paths(directory, leaf.name)
    if _is_current(crt, key, leaf, ca):
        return CertKey(crt, key)
    pkey = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    builder = (x509.CertificateBuilder().subject_name(_subject(leaf)).issuer_name(ca.subject)
               .public_key(pkey.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - BACKDATE)
               .not_valid_after(min(now + LEAF_VALIDITY, ca.not_valid_after_utc))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(_key_usage(ca=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(list(leaf.usages)), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(pkey.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if leaf.dns or leaf.ips:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in leaf.dns]
        names += [x509.IPAddress(i) for i in leaf.ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    # key first: a crash in between leaves a pair that does not match, which the next call replaces
    write_private(key, pem_key(pkey))
    write_private(crt, cert.public_bytes(serialization.Encoding.PEM))
    return CertKey(crt, key)


def _is_current(crt: Path, key: Path, leaf: _Leaf, ca: x509.Certificate) -> bool:
    """Whether the leaf on disk can stay: signed by ``ca``, matching its key, saying what ``leaf`` says
    and not near its end. A private key others can read is an error, not something to paper over."""
    if not (crt.exists() and key.exists()):
        return False
    pkey, cert = load_key(key), load_cert(crt)
    if cert is None or pkey is None or cert.public_key() != pkey.public_key():
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    exts = cert.extensions
    try:
        usages = set(exts.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return False
    try:
        sans = exts.get_extension_for_class(x509.SubjectAlternativeName).value
        dns, ips = set(sans.get_values_for_type(x509.DNSName)), set(sans.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        dns, ips = set(), set()
    return (cert.subject == _subject(leaf) and usages == set(leaf.usages)
            and dns == set(leaf.dns) and ips == set(leaf.ips)
            and cert.not_valid_after_utc - _now() > RENEW_BEFORE)


def _ensure_service_account_key(directory: Path) -> tuple[Path, Path]:
    """``sa.key`` (kube-apiserver signs tokens with it) and ``sa.pub`` (both verify with it).

    Never replaced silently: a new key invalidates every service-account token already handed out.
    """
    key, pub = directory / "sa.key", directory / "sa.pub"
    if key.exists():
        pkey = load_key(key)
        if not isinstance(pkey, rsa.RSAPrivateKey):
            raise PkiError(f"{key} is not a PEM RSA private key",
                           hint=f"restore it from a backup, or remove {key} and {pub} to make a new one "
                                "(service-account tokens already issued then stop working until renewed)")
    else:
        pkey = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        write_private(key, pem_key(pkey))
    pub_pem = pkey.public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
    if not pub.exists() or read_checked(pub) != pub_pem:
        write_private(pub, pub_pem)
    return key, pub


# ------------------------------------------------------------------------------ helpers


def _subject(leaf: _Leaf) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in leaf.orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, leaf.cn)])


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         encipher_only=False, decipher_only=False)


def _paths(directory: Path, name: str) -> tuple[Path, Path]:
    return directory / f"{name}.crt", directory / f"{name}.key"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _ip(text: str) -> IPAddress | None:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        raise PkiError(f"IP address {text!r} has a zone (%{ip.scope_id}), which a certificate cannot carry",
                       hint=f"give {str(ip).split('%')[0]} without the zone")
    return ip


def _dns_name(name: str, what: str) -> str:
    """``name`` unchanged if it is a host name a certificate can carry (RFC 1123, ASCII), else an error."""
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise PkiError(f"{what} {name!r} is not a valid DNS name",
                       hint="use letters, digits and '-' in dot-separated labels of at most 63 characters, "
                            "no trailing dot (an internationalised name as its xn-- form)")
    return name

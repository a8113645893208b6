"""The control plane's PKI (hpkctl/controlplane/pki.py), checked by outside judges.

``openssl verify`` (Debian's OpenSSL, strict X.509, with the TLS purposes) for every leaf against its
CA and against the CAs it must *not* chain to; real TLS handshakes with Python's ``ssl`` (the serving
certificate under every name a client dials, client certificates required and checked); the
kubeconfig loaded by the official ``kubernetes`` client and used for a real HTTPS request; file modes,
reuse across calls and what makes a certificate be issued again; hypothesis for the node's names and
addresses going into the serving certificate unchanged.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as kclient
from kubernetes import config as kconfig

from hpkctl.controlplane import pki as pkimod
from hpkctl.controlplane.kubeconfig import write_kubeconfig
from hpkctl.controlplane.pki import (
    CertKey,
    Pki,
    PkiError,
    ensure_pki,
    ensure_serving_cert,
    serving_names,
)

HOSTS = ("node-a", "node-a.cluster.example", "10.1.2.3", "fd00::17")
FIXED_DNS = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local", "localhost")
FIXED_IPS = ("127.0.0.1", "::1", "10.96.0.1")
SERVER = ExtendedKeyUsageOID.SERVER_AUTH
CLIENT = ExtendedKeyUsageOID.CLIENT_AUTH


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(path: Path) -> tuple[list[str], list[object]]:
    ext = _cert(path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), list(ext.get_values_for_type(x509.IPAddress))


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """One PKI for the read-only tests (``~/.hpk/controlplane/pki`` in the product)."""
    return ensure_pki(tmp_path_factory.mktemp("home") / ".hpk" / "controlplane" / "pki", hosts=HOSTS)


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Another cluster's PKI: its certificates must get nowhere in ours."""
    return ensure_pki(tmp_path_factory.mktemp("other") / "pki", hosts=HOSTS)


# ---------------------------------------------------------------------------- openssl verify

#: leaf → (its CA, the TLS purposes it must pass)
LEAVES = {
    "apiserver": ("ca", ("sslserver",)),
    "apiserver_kubelet_client": ("ca", ("sslclient",)),
    "services_hook_serving": ("ca", ("sslserver",)),
    "admin": ("ca", ("sslclient",)),
    "kubelet": ("ca", ("sslclient",)),
    "scheduler": ("ca", ("sslclient",)),
    "controller_manager": ("ca", ("sslclient",)),
    "services_hook": ("ca", ("sslclient",)),
    "front_proxy_client": ("front_proxy_ca", ("sslclient",)),
    "apiserver_etcd_client": ("etcd_ca", ("sslclient",)),
    "etcd_server": ("etcd_ca", ("sslserver", "sslclient")),
    "etcd_peer": ("etcd_ca", ("sslserver", "sslclient")),
}
CAS = ("ca", "front_proxy_ca", "etcd_ca")


def _openssl_verify(ca: Path, cert: Path, purpose: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", "verify", "-x509_strict", "-purpose", purpose, "-CAfile", str(ca),
                           str(cert)], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_openssl_verifies_every_leaf_against_its_ca_for_its_purposes(made: Pki, leaf: str) -> None:
    ca_name, purposes = LEAVES[leaf]
    pair: CertKey = getattr(made, leaf)
    ca: CertKey = getattr(made, ca_name)
    for purpose in purposes:
        r = _openssl_verify(ca.cert, pair.cert, purpose)
        assert r.returncode == 0 and r.stdout.strip() == f"{pair.cert}: OK", r.stdout + r.stderr
    for purpose in {"sslserver", "sslclient"} - set(purposes):
        r = _openssl_verify(ca.cert, pair.cert, purpose)
        assert r.returncode != 0 and "unsuitable certificate purpose" in r.stdout + r.stderr, r.stdout


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_openssl_refuses_every_leaf_against_the_other_cas(made: Pki, stranger: Pki, leaf: str) -> None:
    """The three CAs are separate trust domains (a kubelet's cert never opens etcd), and another
    cluster's CA of the same names trusts none of ours."""
    ca_name, purposes = LEAVES[leaf]
    pair: CertKey = getattr(made, leaf)
    for other in [*(getattr(made, c) for c in CAS if c != ca_name), getattr(stranger, ca_name)]:
        r = _openssl_verify(other.cert, pair.cert, purposes[0])
        assert r.returncode != 0 and "unable to get local issuer certificate" in r.stdout + r.stderr, r.stdout


def test_openssl_accepts_the_cas_as_roots(made: Pki) -> None:
    for name in CAS:
        ca: CertKey = getattr(made, name)
        r = subprocess.run(["openssl", "verify", "-x509_strict", "-CAfile", str(ca.cert), str(ca.cert)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------------------- what the certificates say

#: leaf → (CN, O) as the API server's authenticator reads them
IDENTITIES = {
    "admin": ("kubernetes-admin", ["system:masters"]),
    "kubelet": ("system:node:hpk", ["system:nodes"]),
    "scheduler": ("system:kube-scheduler", []),
    "controller_manager": ("system:kube-controller-manager", []),
    "apiserver_kubelet_client": ("kube-apiserver-kubelet-client", ["system:masters"]),
    "services_hook": ("hpk:services-hook", []),
    "front_proxy_client": ("front-proxy-client", []),
    "apiserver_etcd_client": ("kube-apiserver-etcd-client", []),
    "apiserver": ("kube-apiserver", []),
}


@pytest.mark.parametrize("leaf", sorted(IDENTITIES))
def test_subjects(made: Pki, leaf: str) -> None:
    cn, orgs = IDENTITIES[leaf]
    subject = _cert(getattr(made, leaf).cert).subject
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [cn]
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == orgs


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_key_usages(made: Pki, leaf: str) -> None:
    cert = _cert(getattr(made, leaf).cert)
    want = {"sslserver": SERVER, "sslclient": CLIENT}
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(eku) == {want[p] for p in LEAVES[leaf][1]}
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.digital_signature and not ku.value.key_cert_sign
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and not bc.value.ca
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.not_valid_before_utc < dt.datetime.now(dt.timezone.utc) < cert.not_valid_after_utc


def test_cas_are_cas(made: Pki) -> None:
    for name in CAS:
        cert = _cert(getattr(made, name).cert)
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
        assert cert.issuer == cert.subject
    subjects = {_cert(getattr(made, n).cert).subject for n in CAS}
    assert len(subjects) == 3


def test_serving_cert_names_every_way_to_reach_the_api_server(made: Pki) -> None:
    dns, ips = _sans(made.apiserver.cert)
    assert dns == [*FIXED_DNS, "node-a", "node-a.cluster.example"]
    assert ips == [ipaddress.ip_address(i) for i in (*FIXED_IPS, "10.1.2.3", "fd00::17")]


def test_serving_names_follow_the_cluster_domain_and_service_range() -> None:
    dns, ips = serving_names(["n1", "n1"], service_cidr="10.100.0.0/16, fd00:10:96::/112",
                             cluster_domain="hpk.example")
    assert dns == ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.hpk.example", "localhost", "n1")
    assert ips == tuple(ipaddress.ip_address(i) for i in ("127.0.0.1", "::1", "10.100.0.1", "fd00:10:96::1"))


@pytest.mark.parametrize("leaf", ["etcd_server", "etcd_peer", "services_hook_serving"])
def test_loopback_servers_name_only_loopback(made: Pki, leaf: str) -> None:
    """etcd and the services hook are reached only inside the control-plane job, so their
    certificates never depend on the node (and are not issued again when it changes)."""
    dns, ips = _sans(getattr(made, leaf).cert)
    assert dns == ["localhost"] and ips == [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]


def test_service_account_key_pair(made: Pki) -> None:
    key = serialization.load_pem_private_key(made.service_account_key.read_bytes(), None)
    pub = serialization.load_pem_public_key(made.service_account_pub.read_bytes())
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048
    assert key.public_key() == pub


# ---------------------------------------------------------------------------- files on disk


def test_files_0600_directories_0700_parents_made_private(made: Pki) -> None:
    home = made.directory.parents[2]  # <tmp>/home, made by pytest
    for d in (made.directory, made.directory / "etcd", home / ".hpk", home / ".hpk" / "controlplane"):
        assert d.stat().st_mode & 0o7777 == 0o700, d
    files = [p for p in made.directory.rglob("*") if p.is_file()]
    assert len(files) == 3 * 2 + 12 * 2 + 2 + 1  # CAs, leaves, sa.key/sa.pub, .lock
    for p in files:
        assert p.stat().st_mode & 0o7777 == 0o600, p
    assert not [p for p in made.directory.rglob("*.tmp")]


def test_reused_on_the_next_call_byte_for_byte(made: Pki) -> None:
    before = _snapshot(made.directory)
    again = ensure_pki(made.directory, hosts=list(reversed(HOSTS)))  # same names, another order
    assert again == made
    assert _snapshot(made.directory) == before


def test_new_node_reissues_only_the_serving_cert(tmp_path: Path) -> None:
    p = ensure_pki(tmp_path / "pki", hosts=["node-a", "10.0.0.1"])
    before = _snapshot(p.directory)
    ensure_pki(p.directory, hosts=["node-b", "10.0.0.2"])
    after = _snapshot(p.directory)
    assert {k for k in before if before[k] != after[k]} == {"apiserver.crt", "apiserver.key"}
    assert _sans(p.apiserver.cert)[0][-1] == "node-b"
    # the serving-cert function alone does the same and keeps the CA
    served = ensure_serving_cert(p.directory, hosts=["node-c"])
    assert served == p.apiserver and _sans(p.apiserver.cert)[0][-1] == "node-c"
    final = _snapshot(p.directory)
    assert {k for k in after if after[k] != final[k]} == {"apiserver.crt", "apiserver.key"}
    assert ensure_serving_cert(p.directory, hosts=["node-c"]) == p.apiserver
    assert _snapshot(p.directory) == final


def test_new_node_name_reissues_only_the_kubelet_cert(tmp_path: Path) -> None:
    p = ensure_pki(tmp_path / "pki", hosts=["n"])
    before = _snapshot(p.directory)
    ensure_pki(p.directory, hosts=["n"], node_name="hpk-2")
    after = _snapshot(p.directory)
    assert {k for k in before if before[k] != after[k]} == {"kubelet.crt", "kubelet.key"}
    assert _cert(p.kubelet.cert).subject.rfc4514_string() == "CN=system:node:hpk-2,O=system:nodes"


def test_leaves_near_their_end_are_reissued_and_the_cas_kept(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pkimod, "LEAF_VALIDITY", dt.timedelta(days=20))
    p = ensure_pki(tmp_path / "pki", hosts=["n"])
    monkeypatch.undo()
    before = _snapshot(p.directory)
    ensure_pki(p.directory, hosts=["n"])
    after = _snapshot(p.directory)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {f"{n}.{x}" for n in ("apiserver", "apiserver-kubelet-client", "apiserver-etcd-client",
                                             "front-proxy-client", "etcd/server", "etcd/peer",
                                             "services-hook-serving", "admin", "kubelet", "scheduler",
                                             "controller-manager", "services-hook") for x in ("crt", "key")}
    left = _cert(p.admin.cert).not_valid_after_utc - dt.datetime.now(dt.timezone.utc)
    assert left > dt.timedelta(days=300)


def test_a_pair_cut_short_is_repaired(tmp_path: Path) -> None:
    """Key first, then certificate: a crash in between leaves a mismatched leaf (issued again) or a
    CA key without its certificate (nothing was ever signed with it: made anew)."""
    p = ensure_pki(tmp_path / "pki", hosts=["n"])
    other_key = ec.generate_private_key(ec.SECP256R1())
    p.scheduler.key.write_bytes(other_key.private_bytes(serialization.Encoding.PEM,
                                                        serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
    p.controller_manager.cert.write_bytes(b"garbage")
    ensure_pki(p.directory, hosts=["n"])
    for pair in (p.scheduler, p.controller_manager):
        cert = _cert(pair.cert)
        key = serialization.load_pem_private_key(pair.key.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey) and cert.public_key() == key.public_key()
        assert _openssl_verify(p.ca.cert, pair.cert, "sslclient").returncode == 0

    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o700)
    (fresh / "ca.key").write_bytes(other_key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    os.chmod(fresh / "ca.key", 0o600)
    q = ensure_pki(fresh, hosts=["n"])
    assert _openssl_verify(q.ca.cert, q.admin.cert, "sslclient").returncode == 0


def test_service_account_key_kept_and_its_public_half_restored(tmp_path: Path) -> None:
    p = ensure_pki(tmp_path / "pki", hosts=["n"])
    key, pub = p.service_account_key.read_bytes(), p.service_account_pub.read_bytes()
    p.service_account_pub.unlink()
    ensure_pki(p.directory, hosts=["n"])
    assert p.service_account_key.read_bytes() == key and p.service_account_pub.read_bytes() == pub


def test_concurrent_bootstraps_agree_on_one_ca(tmp_path: Path) -> None:
    results: list[bytes] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            results.append(ensure_pki(tmp_path / "pki", hosts=["n"]).ca.cert.read_bytes())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 4 and len(set(results)) == 1
    p = ensure_pki(tmp_path / "pki", hosts=["n"])
    assert p.ca.cert.read_bytes() == results[0]
    assert _openssl_verify(p.ca.cert, p.admin.cert, "sslclient").returncode == 0


# ---------------------------------------------------------------------------- errors that say how to fix


def _error(call: object) -> PkiError:
    assert callable(call)
    with pytest.raises(PkiError) as info:
        call()
    return info.value


def test_a_ca_key_others_can_read_is_refused(tmp_path: Path) -> None:
    p = ensure_pki(tmp_path / "pki", hosts=["n"])
    os.chmod(p.ca.key, 0o644)
    e = _error(lambda: ensure_pki(p.directory, hosts=["n"]))
    assert str(p.ca.key) in e.message and "0644" in e.message
    assert f"chmod 600 {p.ca.key}" in e.hint and "start a new cluster" in e.hint
    os.chmod(p.ca.key, 0o600)
    ensure_pki(p.directory, hosts=["n"])


def test_a_leaf_key_others_can_read_is_refused_not_replaced(tmp_path: Path) -> None:
    p = ensure_pki(tmp_path / "pki", hosts=["n"])
    os.chmod(p.admin.key, 0o640)
    e = _error(lambda: ensure_pki(p.directory, hosts=["n"]))
    assert str(p.admin.key) in e.message and "chmod 600" in e.hint
    e = _error(lambda: write_kubeconfig(tmp_path / "k", server="https://n:6443", ca=p.ca.cert,
                                        cert=p.admin.cert, key=p.admin.key, user="admin"))
    assert "0640" in e.message
    assert not (tmp_path / "k").exists()


def test_a_ca_without_its_key_is_refused(tmp_path: Path) -> None:
    p = ensure_pki(tmp_path / "pki", hosts=["n"])
    ca = p.ca.cert.read_bytes()
    p.ca.key.unlink()
    e = _error(lambda: ensure_pki(p.directory, hosts=["n"]))
    assert "has no key" in e.message and "restore" in e.hint and f"remove {p.directory}" in e.hint
    assert p.ca.cert.read_bytes() == ca  # never replaced silently


def test_a_key_that_is_a_symlink_or_not_ours_is_refused(tmp_path: Path) -> None:
    p = ensure_pki(tmp_path / "pki", hosts=["n"])
    real = tmp_path / "elsewhere.key"
    p.ca.key.rename(real)
    p.ca.key.symlink_to(real)
    e = _error(lambda: ensure_pki(p.directory, hosts=["n"]))
    assert f"cannot read {p.ca.key}" in e.message and "not a symlink" in e.hint
    p.ca.key.unlink()
    real.rename(p.ca.key)
    if os.geteuid() != 0:
        os.chmod(p.ca.key, 0)
        e = _error(lambda: ensure_pki(p.directory, hosts=["n"]))
        assert "Permission denied" in e.message
    else:
        os.chown(p.ca.key, 65534, 65534)
        e = _error(lambda: ensure_pki(p.directory, hosts=["n"]))
        assert "belongs to uid 65534" in e.message and f"chown 0 {p.ca.key}" in e.hint


def test_a_directory_others_can_enter_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "pki"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    e = _error(lambda: ensure_pki(d, hosts=["n"]))
    assert "0755" in e.message and f"chmod 700 {d}" in e.hint
    assert list(d.iterdir()) == []


def test_serving_cert_needs_an_existing_ca(tmp_path: Path) -> None:
    e = _error(lambda: ensure_serving_cert(tmp_path / "pki", hosts=["n"]))
    assert "no cluster CA" in e.message and "ensure_pki" in e.hint
    assert not (tmp_path / "pki" / "ca.crt").exists()


@pytest.mark.parametrize(("hosts", "kwargs", "words"), [
    (["bad_host"], {}, "host name 'bad_host' is not a valid DNS name"),
    (["node."], {}, "not a valid DNS name"),
    (["-node"], {}, "not a valid DNS name"),
    (["knoten-ü"], {}, "not a valid DNS name"),
    (["*.example"], {}, "not a valid DNS name"),
    (["a" * 64], {}, "not a valid DNS name"),
    (["[::1]"], {}, "not a valid DNS name"),
    (["fe80::1%eth0"], {}, "has a zone"),
    ([], {"service_cidr": "10.96.0.1/12"}, "service CIDR '10.96.0.1/12'"),
    ([], {"service_cidr": "nonsense"}, "service CIDR"),
    ([], {"cluster_domain": "cluster.local."}, "cluster domain"),
    ([], {"node_name": "Hpk_1"}, "node name"),
])
def test_bad_names_are_refused_before_anything_is_written(tmp_path: Path, hosts: list[str],
                                                          kwargs: dict[str, str], words: str) -> None:
    e = _error(lambda: ensure_pki(tmp_path / "pki", hosts=hosts, **kwargs))
    assert words in e.message and e.hint
    assert not (tmp_path / "pki").exists()


# ---------------------------------------------------------------------------- TLS handshakes


@dataclass
class _Seen:
    """What the server thread saw. With TLS 1.3 the client's handshake completes before the server has
    verified the client's certificate, so the client may fail (on its first read) before the server
    thread records the refusal: a test waits for that record (``refusal``), it never assumes it is
    there yet."""

    peers: list[tuple[str, str]] = field(default_factory=list)  # (CN, O) of accepted clients
    refused: list[str] = field(default_factory=list)  # server-side handshake errors
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def refuse(self, error: str) -> None:
        with self._changed:
            self.refused.append(error)
            self._changed.notify_all()

    def refusal(self, timeout: float = 30) -> str:
        """The first handshake error the server recorded, waiting up to ``timeout`` seconds for it."""
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self.refused), timeout):
                raise AssertionError(f"the server recorded no refused handshake within {timeout} s")
            return self.refused[0]


@pytest.fixture
def api(made: Pki) -> Iterator[tuple[int, _Seen]]:
    """An HTTPS server with the API server's serving certificate that requires a client certificate
    of the cluster CA, as kube-apiserver's ``--client-ca-file`` does; answers ``/version``."""
    seen = _Seen()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(made.ca.cert))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(str(made.apiserver.cert), str(made.apiserver.key))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            assert isinstance(self.connection, ssl.SSLSocket)
            peer = self.connection.getpeercert() or {}
            subject = dict(item for rdn in peer.get("subject", ()) for item in rdn)  # type: ignore[misc]
            seen.peers.append((str(subject.get("commonName")), str(subject.get("organizationName", ""))))
            body = json.dumps({"major": "1", "minor": "36", "gitVersion": "v1.36.0", "gitCommit": "x",
                               "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                               "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    class Server(http.server.ThreadingHTTPServer):
        def get_request(self) -> tuple[socket.socket, object]:
            sock, addr = self.socket.accept()
            sock.settimeout(10)
            try:
                return ctx.wrap_socket(sock, server_side=True), addr
            except (ssl.SSLError, OSError) as e:
                seen.refuse(str(e))
                sock.close()
                raise

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _client(ca: Path, pair: CertKey | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if pair is not None:
        ctx.load_cert_chain(str(pair.cert), str(pair.key))
    return ctx


def _get(port: int, ctx: ssl.SSLContext, name: str) -> bytes:
    """GET /version over 127.0.0.1, verifying the server as ``name`` (what a client dialling it checks)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=name) as tls:
        tls.sendall(b"GET /version HTTP/1.0\r\nHost: x\r\n\r\n")
        out = b""
        while chunk := tls.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1", "::1", "10.96.0.1", "kubernetes",
                                  "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
                                  "node-a", "node-a.cluster.example", "10.1.2.3", "fd00::17"])
def test_handshake_with_the_admin_cert_under_every_name(made: Pki, api: tuple[int, _Seen], name: str) -> None:
    port, seen = api
    reply = _get(port, _client(made.ca.cert, made.admin), name)
    assert reply.startswith(b"HTTP/1.0 200") and b'"gitVersion": "v1.36.0"' in reply
    assert seen.peers == [("kubernetes-admin", "system:masters")] and not seen.refused


def test_handshake_with_the_kubelet_cert(made: Pki, api: tuple[int, _Seen]) -> None:
    port, seen = api
    assert _get(port, _client(made.ca.cert, made.kubelet), "node-a").startswith(b"HTTP/1.0 200")
    assert seen.peers == [("system:node:hpk", "system:nodes")]


def test_a_client_cert_of_another_ca_is_refused(made: Pki, stranger: Pki, api: tuple[int, _Seen]) -> None:
    port, seen = api
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _get(port, _client(made.ca.cert, stranger.admin), "localhost")
    assert "certificate verify failed" in seen.refusal()
    assert not seen.peers and len(seen.refused) == 1


def test_a_client_cert_of_the_etcd_ca_is_refused(made: Pki, api: tuple[int, _Seen]) -> None:
    port, seen = api
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _get(port, _client(made.ca.cert, made.apiserver_etcd_client), "localhost")
    assert "certificate verify failed" in seen.refusal()
    assert not seen.peers


def test_no_client_cert_is_refused(made: Pki, api: tuple[int, _Seen]) -> None:
    port, seen = api
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _get(port, _client(made.ca.cert, None), "localhost")
    assert "certificate" in seen.refusal()
    assert not seen.peers


def test_the_server_is_not_trusted_under_another_name_or_ca(made: Pki, stranger: Pki,
                                                            api: tuple[int, _Seen]) -> None:
    port, _ = api
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        _get(port, _client(made.ca.cert, made.admin), "node-b")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _get(port, _client(stranger.ca.cert, made.admin), "localhost")


def test_a_client_cert_cannot_serve(made: Pki) -> None:
    """Key usages are enforced by TLS itself: the admin certificate (clientAuth only) is refused as a server's."""
    srv = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    srv.load_cert_chain(str(made.admin.cert), str(made.admin.key))
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(10)
        b.settimeout(10)
        t = threading.Thread(target=lambda: _quiet_handshake(srv, a), daemon=True)
        t.start()
        with pytest.raises(ssl.SSLCertVerificationError, match="unsuitable certificate purpose"):
            _client(made.ca.cert, None).wrap_socket(b, server_hostname="kubernetes-admin")
        t.join(10)


def _quiet_handshake(ctx: ssl.SSLContext, sock: socket.socket) -> None:
    try:
        ctx.wrap_socket(sock, server_side=True)
    except (ssl.SSLError, OSError):
        pass


# ---------------------------------------------------------------------------- kubeconfigs


@pytest.mark.parametrize(("leaf", "user"), [("admin", "admin"), ("kubelet", "system:node:hpk"),
                                            ("scheduler", "system:kube-scheduler")])
def test_kubeconfig_loads_with_the_kubernetes_client_and_talks_tls(made: Pki, api: tuple[int, _Seen],
                                                                   tmp_path: Path, leaf: str, user: str) -> None:
    port, seen = api
    pair: CertKey = getattr(made, leaf)
    path = write_kubeconfig(tmp_path / "sub" / f"{leaf}.kubeconfig", server=f"https://localhost:{port}",
                            ca=made.ca.cert, cert=pair.cert, key=pair.key, user=user)
    assert path.stat().st_mode & 0o7777 == 0o600 and path.parent.stat().st_mode & 0o7777 == 0o700
    contexts, active = kconfig.list_kube_config_contexts(config_file=str(path))
    assert len(contexts) == 1 and active["context"] == {"cluster": "hpk", "user": user}
    cfg = kclient.Configuration()
    kconfig.load_kube_config(config_file=str(path), client_configuration=cfg)
    assert cfg.host == f"https://localhost:{port}" and cfg.verify_ssl
    with kclient.ApiClient(cfg) as api_client:
        version = kclient.VersionApi(api_client).get_code(_request_timeout=10)
    assert version.git_version == "v1.36.0"
    assert seen.peers[-1][0] == _cert(pair.cert).subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def test_kubeconfig_embeds_the_files_and_is_replaced_atomically(made: Pki, tmp_path: Path) -> None:
    path = tmp_path / "admin.kubeconfig"
    for server in ("https://node-a:6443", "https://node-b:6443"):
        write_kubeconfig(path, server=server, ca=made.ca.cert, cert=made.admin.cert, key=made.admin.key,
                         user="admin")
        doc = yaml.safe_load(path.read_text())
        assert doc["clusters"][0]["cluster"]["server"] == server
    user = doc["users"][0]["user"]
    assert base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]) == made.ca.cert.read_bytes()
    assert base64.b64decode(user["client-certificate-data"]) == made.admin.cert.read_bytes()
    assert base64.b64decode(user["client-key-data"]) == made.admin.key.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["admin.kubeconfig"]  # no temporary left
    os.chmod(tmp_path, 0o755)  # a kubeconfig may go anywhere the caller likes; the file is 0600
    write_kubeconfig(path, server="https://node-a:6443", ca=made.ca.cert, cert=made.admin.cert,
                     key=made.admin.key, user="admin")
    assert path.stat().st_mode & 0o7777 == 0o600


def test_kubeconfig_refuses_plain_http(made: Pki, tmp_path: Path) -> None:
    e = _error(lambda: write_kubeconfig(tmp_path / "k", server="http://node-a:8080", ca=made.ca.cert,
                                        cert=made.admin.cert, key=made.admin.key, user="admin"))
    assert "https://" in e.hint and not (tmp_path / "k").exists()


# ---------------------------------------------------------------------------- property


_LABEL = st.from_regex(r"\A[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
_HOSTNAME = st.lists(_LABEL, min_size=1, max_size=4).map(".".join).filter(
    lambda h: len(h) <= 253 and not _is_ip(h))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@pytest.fixture(scope="module")
def property_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return ensure_pki(tmp_path_factory.mktemp("prop") / "pki", hosts=[])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(_HOSTNAME, max_size=4), ips=st.lists(st.ip_addresses(), max_size=4), data=st.data())
def test_node_names_and_addresses_go_into_the_serving_cert_unchanged(
        property_pki: Pki, names: list[str], ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address],
        data: st.DataObject) -> None:
    hosts = data.draw(st.permutations([*names, *(str(i) for i in ips)]))
    pair = ensure_serving_cert(property_pki.directory, hosts=hosts)
    dns, got_ips = _sans(pair.cert)
    # as a set: the same names in another order keep the certificate issued for the first order
    assert len(dns) == len(set(dns)) and set(dns) == {*FIXED_DNS, *(h for h in hosts if not _is_ip(h))}
    assert len(got_ips) == len(set(got_ips))
    assert set(got_ips) == {*(ipaddress.ip_address(i) for i in FIXED_IPS),
                            *(ipaddress.ip_address(h) for h in hosts if _is_ip(h))}
    assert set(names) <= set(dns) and set(ips) <= set(got_ips)
    _cert(pair.cert).verify_directly_issued_by(_cert(property_pki.ca.cert))  # raises if not

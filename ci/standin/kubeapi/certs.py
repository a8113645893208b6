"""The stand-in's PKI: one CA, the serving certificate, client certificates (admin, the kubelet
``system:node:<node>``, the scheduler, the API server's own kubelet-client), a kubelet serving
certificate, kubeconfigs, and the service-account signing key for TokenRequest.

Real clients (kubectl, client-go, the Python client) only talk TLS with verified certificates and
identify users by the client certificate's CN/O, so the stand-in does the same. Everything is
kept in the state directory and reused across restarts, so kubeconfigs stay valid.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ISSUER = "https://kubernetes.default.svc.cluster.local"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: Any) -> bytes:
    return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()))


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


class Pki:
    """Loads or creates everything under ``<state>/pki``."""

    issuer = ISSUER

    def __init__(self, state: Path) -> None:
        self.dir = state / "pki"
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.dir, 0o755)  # ca.crt is public; keys are 0600
        self.ca_key, self.ca_cert = self._ca()
        self.sa_key = self._sa_key()

    # ------------------------------------------------------------------ CA and leaf certs
    def _ca(self) -> tuple[Any, x509.Certificate]:
        kp, cp = self.dir / "ca.key", self.dir / "ca.crt"
        if kp.exists() and cp.exists():
            return (serialization.load_pem_private_key(kp.read_bytes(), None),
                    x509.load_pem_x509_certificate(cp.read_bytes()))
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes-standin-ca")])
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
                .not_valid_after(now + dt.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        _write(kp, _pem_key(key), 0o600)
        _write(cp, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        return key, cert

    @property
    def ca_pem(self) -> str:
        return self.ca_cert.public_bytes(serialization.Encoding.PEM).decode()

    def leaf(self, name: str, *, cn: str, orgs: tuple[str, ...] = (), server: bool = False,
             sans: tuple[str, ...] = ()) -> tuple[Path, Path]:
        """``<name>.crt``/``<name>.key`` signed by the CA (created once)."""
        cp, kp = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        if cp.exists() and kp.exists():
            cert = x509.load_pem_x509_certificate(cp.read_bytes())
            have = set()
            if server:
                have = {str(v) for v in cert.extensions.get_extension_for_class(
                    x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)}
                have |= {str(v) for v in cert.extensions.get_extension_for_class(
                    x509.SubjectAlternativeName).value.get_values_for_type(x509.IPAddress)}
            if set(sans) <= have:
                return cp, kp
        key = _key()
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
        now = dt.datetime.now(dt.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(self.ca_cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=3650))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                   else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if sans:
            alt: list[x509.GeneralName] = []
            for s in sans:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(s)))
                except ValueError:
                    alt.append(x509.DNSName(s))
            b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = b.sign(self.ca_key, hashes.SHA256())
        _write(kp, _pem_key(key), 0o600)
        _write(cp, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        return cp, kp

    def serving(self, extra_sans: tuple[str, ...] = ()) -> tuple[Path, Path]:
        host = socket.gethostname()
        sans = ("localhost", "127.0.0.1", "::1", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local", "10.96.0.1", host, *extra_sans)
        return self.leaf("apiserver", cn="kube-apiserver", server=True, sans=sans)

    # ------------------------------------------------------------------ kubeconfigs
    def kubeconfig(self, path: Path, *, server: str, user: str, cn: str, orgs: tuple[str, ...],
                   owner: tuple[int, int] | None) -> Path:
        cp, kp = self.leaf(f"user-{user}", cn=cn, orgs=orgs)
        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "standin",
               "clusters": [{"name": "standin", "cluster": {"server": server,
                                                            "certificate-authority-data": b64(self.dir / "ca.crt")}}],
               "users": [{"name": user, "user": {"client-certificate-data": b64(cp), "client-key-data": b64(kp)}}],
               "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": user}}]}
        _write(path, yaml.safe_dump(doc, sort_keys=False).encode(), 0o600)
        if owner is not None:
            os.chown(path, *owner)
        return path

    # ------------------------------------------------------------------ service-account tokens
    def _sa_key(self) -> rsa.RSAPrivateKey:
        kp = self.dir / "sa.key"
        if kp.exists():
            key = serialization.load_pem_private_key(kp.read_bytes(), None)
            assert isinstance(key, rsa.RSAPrivateKey)
            return key
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write(kp, _pem_key(key), 0o600)
        return key

    def sign_jwt(self, claims: dict[str, Any]) -> str:
        def enc(b: bytes) -> str:
            return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
        pub = self.sa_key.public_key().public_bytes(serialization.Encoding.DER,
                                                    serialization.PublicFormat.SubjectPublicKeyInfo)
        kid = enc(_sha256(pub))
        head = enc(json.dumps({"alg": "RS256", "kid": kid}, separators=(",", ":")).encode())
        body = enc(json.dumps(claims, separators=(",", ":")).encode())
        sig = self.sa_key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{head}.{body}.{enc(sig)}"

    def verify_jwt(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this server signed and that has not expired, else None."""
        try:
            head, body, sig = token.split(".")
            def pad(s: str) -> str:
                return s + "=" * (-len(s) % 4)
            self.sa_key.public_key().verify(base64.urlsafe_b64decode(pad(sig)), f"{head}.{body}".encode(),
                                            padding.PKCS1v15(), hashes.SHA256())
            claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(pad(body)))
        except Exception:  # noqa: BLE001 - any malformed token is simply not ours
            return None
        return claims if claims.get("exp", 0) > time.time() else None


def _sha256(data: bytes) -> bytes:
    h = hashes.Hash(hashes.SHA256())
    h.update(data)
    return h.finalize()

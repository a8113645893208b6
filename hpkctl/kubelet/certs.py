"""What the kubelet API serves with: a self-signed certificate when the admin gives none, the TLS
settings, and the listening socket; none of it needs aiohttp, so the kubelet makes them before it takes
its first pod (a kubelet that cannot serve stops before it submits anything) and imports the server
while the first pods are submitted.

The real kubelet does the same (``--tls-cert-file`` unset): the API server does not verify the
kubelet's certificate unless it runs with ``--kubelet-certificate-authority``; what protects the
kubelet API is that *clients* must present a certificate signed by the cluster CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hpkctl.errors import HpkError
from hpkctl.files import private_dirs, write_atomic


def self_signed(directory: Path, *, node_name: str, addresses: list[str], days: int = 365) -> tuple[str, str]:
    """Write (or reuse, while valid for another day) ``kubelet.crt``/``kubelet.key`` in ``directory``."""
    private_dirs(directory)
    crt, key = directory / "kubelet.crt", directory / "kubelet.key"
    now = datetime.datetime.now(datetime.timezone.utc)
    if crt.exists() and key.exists():
        try:
            cert = x509.load_pem_x509_certificate(crt.read_bytes())
            if cert.not_valid_after_utc > now + datetime.timedelta(days=1):
                return str(crt), str(key)
        except ValueError:
            pass
    pkey = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}@hpkctl")])
    sans: list[x509.GeneralName] = [x509.DNSName(node_name)]
    for a in addresses:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(a)))
        except ValueError:
            sans.append(x509.DNSName(a))
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(pkey.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(pkey, hashes.SHA256()))
    # whole files or none (a full disk must not leave half a key behind for the next start)
    write_atomic(key, pkey.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()), mode=0o600)
    write_atomic(crt, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
    return str(crt), str(key)


def serving_tls(cert_file: str, key_file: str, client_ca_file: str) -> ssl.SSLContext:
    """The server certificate, and client certificates required from the cluster CA."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=client_ca_file)
        ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as e:
        raise HpkError(f"the kubelet API cannot load its TLS files: {e}",
                       hint=f"check the serving certificate {cert_file}, its key {key_file} "
                       f"and the client CA {client_ca_file} (PEM, readable by this user)") from e
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def cannot_listen(host: str, port: int, error: BaseException) -> HpkError:
    return HpkError(f"the kubelet API cannot listen on {host}:{port}: {error}",
                    hint="choose a free port ([kubelet] port in the profile, or --port)")


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound and listening on ``host:port`` (0: a free port), for the server to take over."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=128)
    except OSError as e:
        raise cannot_listen(host, port, e) from e

"""Kubeconfig files: self-contained (CA and credentials embedded), 0600, written whole.

Split out of :mod:`hpkctl.controlplane.pki` (which makes the certificates) because a kubeconfig is
what leaves the control plane: it is copied to a laptop or into a pod and must keep working there, so
nothing in it refers to a file; it holds a private key or a token, hence 0600 like the key itself.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from hpkctl.controlplane.pkifiles import PkiError, private_dir, read_checked, write_private
from hpkctl.files import write_atomic


def write_kubeconfig(path: Path, *, server: str, ca: Path, cert: Path, key: Path, user: str) -> Path:
    """A self-contained kubeconfig (CA, certificate and key embedded), 0600, written atomically.

    Embedded rather than referring to files, so it can be copied to a laptop or into a pod and keeps
    working; it holds a private key, hence 0600 like the key itself.
    """
    if not server.startswith("https://"):
        raise PkiError(f"kubeconfig {path}: server {server!r} is not an https:// URL",
                       hint="give the API server's address as https://HOST:PORT")
    if not user:
        raise PkiError(f"kubeconfig {path}: empty user name", hint="name the user the certificate is for")

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "hpk", "cluster": {"server": server,
                                                 "certificate-authority-data": b64(read_checked(ca))}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(read_checked(cert)),
                                          "client-key-data": b64(read_checked(key, private=True))}}],
        "contexts": [{"name": f"{user}@hpk", "context": {"cluster": "hpk", "user": user}}],
        "current-context": f"{user}@hpk",
    }
    private_dir(path.parent, check=False)  # the file is 0600; where it goes is the caller's choice
    write_private(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return path


def token_kubeconfig(path: Path, *, server: str, ca: Path, token: str, user: str) -> Path:
    """A kubeconfig with a bearer token (CoreDNS's), CA embedded, 0600, written atomically."""
    doc = {"apiVersion": "v1", "kind": "Config", "preferences": {},
           "clusters": [{"name": "hpk", "cluster": {"server": server,
                                                    "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode()}}],
           "users": [{"name": user, "user": {"token": token}}],
           "contexts": [{"name": f"{user}@hpk", "context": {"cluster": "hpk", "user": user}}],
           "current-context": f"{user}@hpk"}
    write_atomic(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return path

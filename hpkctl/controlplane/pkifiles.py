"""The PKI's files on disk: private directories, locked, read and written so no one else can use them.

Split out of :mod:`hpkctl.controlplane.pki` (which decides *what* the certificates say) because this
is the part that guards the keys: a private key must be a regular file of ours with mode 0600 (a
symlink or a file others can read is refused with how to fix it), directories are 0700, every write
is atomic and durable (keys and kubeconfigs outlive the job that wrote them), and a lock file keeps
two bootstraps from making two different CAs.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from hpkctl.errors import HpkError
from hpkctl.files import write_atomic


class PkiError(HpkError):
    """A PKI file is unusable (names the file and how to fix it)."""


def pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_cert(path: Path) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(read_checked(path))
    except ValueError:
        return None


def load_key(path: Path) -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | None:
    try:
        key = serialization.load_pem_private_key(read_checked(path, private=True), None)
    except (ValueError, TypeError):
        return None
    return key if isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) else None


def read_checked(path: Path, *, private: bool = False) -> bytes:
    """The file's bytes; a private one must be a regular file of ours that nobody else can read."""
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_NOFOLLOW if private else 0))
    except OSError as e:
        raise PkiError(f"cannot read {path}: {e.strerror}",
                       hint=f"it must be a regular file owned by this user (uid {os.geteuid()}), "
                            f"not a symlink: chown/chmod 600 {path}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise PkiError(f"{path} is not a regular file", hint=f"remove {path}; it is made again if it can be")
        if private and st.st_uid != os.geteuid():
            raise PkiError(f"private key {path} belongs to uid {st.st_uid}, not to this user ({os.geteuid()})",
                           hint=f"chown {os.geteuid()} {path} if it is yours; nobody else may own your keys")
        if private and st.st_mode & 0o077:
            raise PkiError(f"private key {path} has mode {stat.S_IMODE(st.st_mode):04o}: others may read it",
                           hint=f"chmod 600 {path}; if others could have read it, remove {path.parent} "
                                "and start a new cluster (a leaked key stays valid until it expires)")
        return fh.read()


def private_dir(directory: Path, *, check: bool = True) -> None:
    """Create ``directory`` and its missing parents 0700; with ``check``, refuse an existing one that
    is not ours or that others can enter (they could swap the CA for their own)."""
    missing = [p for p in (directory, *directory.parents) if not p.exists()]
    for p in reversed(missing):
        p.mkdir(mode=0o700, exist_ok=True)
        os.chmod(p, 0o700)
    if not check:
        return
    st = os.stat(directory)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PkiError(f"PKI directory {directory} is owned by uid {st.st_uid} with mode "
                       f"{stat.S_IMODE(st.st_mode):04o}; it must be yours and private",
                       hint=f"chmod 700 {directory} (and chown it to uid {os.geteuid()})")


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold ``directory/.lock`` exclusively, so two bootstraps never make two different CAs.

    A file system without ``flock`` (Lustre mounted ``noflock``) is used unlocked: every write is
    still atomic, and two bootstraps of one user at the same instant are the rare case.
    """
    private_dir(directory)
    private_dir(directory / "etcd")
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno not in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP):
                raise
        yield
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes) -> None:
    """0600, whole, durable (file and rename): keys and kubeconfigs outlive the job that wrote them."""
    write_atomic(path, data, mode=0o600, sync_dir=True)

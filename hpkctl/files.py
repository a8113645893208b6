"""Writing a file so that a reader, or a crash, never sees half of it.

Records, kubeconfigs, keys, tokens and pod files are all read by another process (the kubelet after
a restart, kubectl, a container) while they may be rewritten; each is written beside its final name
and renamed over it. The temporary file is created exclusively and without following a link, so a
symlink planted in a shared directory cannot redirect the write.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600, sync: bool = True, sync_dir: bool = False) -> None:
    """Replace ``path`` with ``data`` (file mode ``mode``): readers see the old or the new content.

    ``sync`` flushes the file to disk before the rename (records and credentials that must survive a
    power cut: the rename alone may reach the disk before the data); ``sync_dir`` also syncs the
    directory, so the rename itself is durable. Pod files, rewritten at every start, skip both.
    """
    # a name of its own length: ``path``'s name may already be as long as the file system allows
    tmp = path.with_name(f".hpk-tmp-{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)  # the umask narrowed the mode os.open gave it
            fh.write(data)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


__all__ = ["write_atomic"]


class LockHeld(Exception):
    """Another process holds the lock file ``path``; ``holder`` is the pid it wrote (``""`` if unknown)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"another process (pid {holder or 'unknown'}) holds {path}")
        self.path, self.holder = path, holder


class ExclusiveLock:
    """One process at a time per state directory (issue 20.14, 20.17): an exclusive ``flock`` on
    ``path`` (created 0600) that names its holder, its pid written into the file, so the second
    process is refused with who holds it (:class:`LockHeld`). A ``flock`` ends with its process (a
    crash or SIGKILL frees it), so a stale lock file never blocks. A file system without ``flock``
    (Lustre mounted ``noflock``) is used unlocked (``locked`` is then False)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.locked = False
        self._fd: int | None = None

    def acquire(self) -> ExclusiveLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.locked = True
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                os.close(fd)
                raise LockHeld(self.path, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor ends the flock
            self._fd = None
            self.locked = False

    def __enter__(self) -> ExclusiveLock:
        return self if self._fd is not None else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def private_dirs(path: Path) -> Path:
    """``mkdir -p path`` where every directory it creates is 0700 (``os.makedirs`` gives the ones
    above the last the umask's mode, which left ``~/.hpk`` world-readable); existing ones are kept."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass
        os.chmod(d, 0o700)  # the umask may have narrowed it further, never widened: set exactly
    return path

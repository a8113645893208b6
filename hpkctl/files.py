"""Writing a file so that a reader, or a crash, never sees half of it.

Records, kubeconfigs, keys, tokens and pod files are all read by another process (the kubelet after
a restart, kubectl, a container) while they may be rewritten; each is written beside its final name
and renamed over it. The temporary file is created exclusively and without following a link, so a
symlink planted in a shared directory cannot redirect the write.
"""

from __future__ import annotations

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

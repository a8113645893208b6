"""An append-only log of JSON lines, one object per line, the last line of a key winning: the store
under the kubelet's records (:class:`hpkctl.provider.records.Records`).

Why a log: a file per record cost four namespace operations per pod (create a temporary file and
rename it over the record, twice: the intent before ``sbatch``, the job id after), each a metadata
server round trip on GPFS/Lustre and ~0.5 ms of system CPU on this project's ext4 VMs, plus an
fsync of a new inode. An append to a file kept open is one ``write`` (no namespace operation), and
its ``fdatasync`` (when the line must survive a power cut) flushes the data and the file's size only.

How it stays correct:

* one ``write`` per line on an ``O_APPEND`` descriptor, under a lock: lines of threads (and of other
  processes) never interleave; a line cut short (a crash or a full disk in the middle of the write)
  has no newline: the reader skips it, and the next append starts on a new line (``_torn``, and at
  open a file that does not end with a newline);
* ``fdatasync`` is group-committed (:meth:`AppendLog.append` ``sync=True``): a sync waits for the
  one in flight and is skipped when that one covered its line, so N threads flushing at once cost
  fewer than N flushes;
* compaction writes the live lines to a new file (fsync), renames it over the log and syncs the
  directory; other processes (``hpkctl status`` loading the records while a kubelet appends) are
  safe: an append holds a shared ``flock`` on the file it writes and checks, under it, that the file
  is still the log (``st_nlink``), a compaction holds the exclusive one from its read through its
  rename, so no line lands in a file already copied. A file system without ``flock`` (Lustre
  mounted ``noflock``) runs without it: one kubelet per state directory is its only writer then.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any

#: a line's object with only this key removes its key's entry
TOMBSTONE = "removed"


def tombstone(key: str) -> bytes:
    return json.dumps({TOMBSTONE: key}, separators=(",", ":")).encode() + b"\n"


def parse(data: bytes, key: str) -> tuple[dict[str, tuple[dict[str, Any], bytes]], int]:
    """The live entries of a log's content (key -> (object, its line)), and how many lines it has.
    A line that is not a JSON object with a string ``key`` (torn by a crash, garbage) is skipped."""
    live: dict[str, tuple[dict[str, Any], bytes]] = {}
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()  # no newline after it: cut short
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if isinstance(obj.get(TOMBSTONE), str) and len(obj) == 1:
            live.pop(obj[TOMBSTONE], None)
        elif isinstance(obj.get(key), str):
            live[obj[key]] = (obj, line + b"\n")
    return live, len(lines)


def read_log(path: Path, key: str) -> tuple[dict[str, tuple[dict[str, Any], bytes]], int]:
    """:func:`parse` of the file at ``path`` (nothing when there is none)."""
    try:
        return parse(path.read_bytes(), key)
    except FileNotFoundError:
        return {}, 0


def _flock(fd: int, op: int) -> bool:
    """``flock``; False when the file system has none (then unlocked)."""
    try:
        fcntl.flock(fd, op)
        return True
    except OSError as e:
        if e.errno in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return False
        raise


def _write_all(fd: int, data: bytes, path: Path) -> None:
    """All of ``data`` to ``fd``, or ``OSError``: a full disk or quota makes ``write`` return short, and a
    compaction that renamed a cut-short copy over the log would drop every record past the cut."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, f"{path}: written in part (no space left?)")
        view = view[n:]


class AppendLog:
    """The log at ``path`` (created 0600). Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # the descriptor, the write, the counters
        self._sync_lock = threading.Lock()  # one fdatasync in flight
        self._fd: int | None = None
        self._torn = False  # the last write may have been cut short: start the next on a new line
        self._written = 0  # lines this process appended
        self._synced = 0  # ... of which known to be on disk
        self.appended = 0  # lines appended since the log was last read whole or compacted (for the caller's policy)

    def _open(self) -> int:
        """The log opened for appending (read too: its last byte says whether a line was cut short)."""
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        size = os.fstat(fd).st_size
        self._torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
        return fd

    def _live_fd(self) -> int:
        """The descriptor of the log as it is now, share-locked (a compaction elsewhere renamed a new
        file over the one open here: that one has no name left, ``st_nlink`` 0, and is reopened)."""
        while True:
            if self._fd is None:
                self._fd = self._open()
            locked = _flock(self._fd, fcntl.LOCK_SH)
            if os.fstat(self._fd).st_nlink > 0:
                return self._fd
            if locked:
                _flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def append(self, line: bytes, *, sync: bool = False) -> None:
        """Append ``line`` (one JSON object, ending in a newline) with one ``write``; ``sync``: on disk
        when this returns."""
        with self._lock:
            fd = self._live_fd()
            try:
                data = b"\n" + line if self._torn else line
                self._torn = True  # until the write is known whole
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, f"{self.path}: the record was written in part (no space left?)")
                self._torn = False
            finally:
                _flock(fd, fcntl.LOCK_UN)
            self._written += 1
            self.appended += 1
            seq = self._written
        if sync:
            self._sync(seq)

    def _sync(self, seq: int) -> None:
        """Line ``seq`` on disk: one ``fdatasync`` covers every line written before it began."""
        with self._sync_lock:
            if self._synced >= seq:
                return  # the flush this one waited for covered it
            with self._lock:
                if self._fd is None:  # compacted meanwhile: the new file was flushed whole
                    return
                fd, upto = os.dup(self._fd), self._written
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self._synced = max(self._synced, upto)

    def compact(self, key: str, merge: dict[str, bytes] | None = None) -> dict[str, tuple[dict[str, Any], bytes]]:
        """Rewrite the log with its live lines only (plus ``merge``'s lines, key -> line, which win): a new file, flushed, renamed over the log, the directory flushed. The live
        entries afterwards."""
        with self._lock:
            rfd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                while True:  # the exclusive lock on the file that is the log now
                    _flock(rfd, fcntl.LOCK_EX)
                    if os.fstat(rfd).st_nlink > 0:
                        break
                    os.close(rfd)
                    rfd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                for stale in self.path.parent.glob(f".{self.path.name}.*"):  # a compaction killed midway
                    stale.unlink(missing_ok=True)  # (no other can be running: this one holds the lock)
                with os.fdopen(os.dup(rfd), "rb") as fh:
                    live, _ = parse(fh.read(), key)
                for k, line in (merge or {}).items():
                    live[k] = (json.loads(line), line)
                tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(6)}")
                fd = os.open(tmp, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o600)
                try:
                    _write_all(fd, b"".join(line for _, line in live.values()), tmp)
                    os.fsync(fd)
                    os.replace(tmp, self.path)
                except BaseException:
                    os.close(fd)
                    tmp.unlink(missing_ok=True)
                    raise
                dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
            finally:
                os.close(rfd)  # ends the exclusive lock: a writer waiting on the old file reopens
            if self._fd is not None:
                os.close(self._fd)
            self._fd, self._torn, self.appended = fd, False, 0
            self._synced = self._written
            return live

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


__all__ = ["TOMBSTONE", "AppendLog", "parse", "read_log", "tombstone"]

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
  directory. A process keeps a shared ``flock`` on the log for as long as it has it open for
  appending (taken once, not per line), and a compaction only *tries* the exclusive one (the
  kubelet converts its own): while another process appends (a kubelet, while ``hpkctl status``
  loads its records), nobody else compacts, so no line lands in a file already copied. A file
  system without ``flock`` (Lustre mounted ``noflock``) runs unlocked: only a process that appends
  compacts there (one kubelet per state directory, ``hpkctl stop --all`` once it is gone).
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


def _flock(fd: int, op: int) -> bool | None:
    """``flock``: True when taken, None when another process holds a conflicting lock (``LOCK_NB``),
    False when the file system has none (Lustre mounted ``noflock``: then unlocked)."""
    try:
        fcntl.flock(fd, op)
        return True
    except BlockingIOError:
        return None
    except OSError as e:
        if e.errno in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return False
        raise


def _read_all(fd: int) -> bytes:
    size, parts, at = os.fstat(fd).st_size, [], 0
    while at < size:
        part = os.pread(fd, size - at, at)
        if not part:
            break
        parts.append(part)
        at += len(part)
    return b"".join(parts)


def _write_all(fd: int, data: bytes, path: Path) -> None:
    """All of ``data`` to ``fd``, or ``OSError``: a full disk or quota makes ``write`` return short, and a
    compaction that renamed a cut-short copy over the log would drop every record past the cut."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, f"{path}: written in part (no space left?)")
        view = view[n:]


_APPEND = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


class AppendLog:
    """The log at ``path`` (created 0600). Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # the descriptor, the write, the counters
        self._sync_lock = threading.Lock()  # one fdatasync in flight
        self._fd: int | None = None  # open for appending, share-locked while open
        self._torn = False  # the last write may have been cut short: start the next on a new line
        self._written = 0  # lines this process appended
        self._synced = 0  # ... of which known to be on disk
        self.appended = 0  # lines appended since the log was last read whole or compacted (for the caller's policy)

    def _open(self) -> int:
        """The log opened for appending and share-locked for as long as it stays open, so that no other
        process compacts it meanwhile; one that did before the lock was taken renamed a new file over
        the one opened (``st_nlink`` 0): the new one is opened instead. Its last byte says whether a
        line was cut short."""
        while True:
            fd = os.open(self.path, _APPEND | os.O_CREAT, 0o600)
            _flock(fd, fcntl.LOCK_SH)
            st = os.fstat(fd)
            if st.st_nlink > 0:
                self._torn = st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) != b"\n"
                return fd
            os.close(fd)

    def append(self, line: bytes, *, sync: bool = False) -> None:
        """Append ``line`` (one JSON object, ending in a newline) with one ``write``; ``sync``: on disk
        when this returns."""
        with self._lock:
            if self._fd is None:
                self._fd = self._open()
            data = b"\n" + line if self._torn else line
            self._torn = True  # until the write is known whole
            if os.write(self._fd, data) != len(data):
                raise OSError(errno.ENOSPC, f"{self.path}: a record was written in part (no space left?)")
            self._torn = False
            self._written += 1
            self.appended += 1
            seq = self._written
        if sync:
            self._sync(seq)

    def sync(self) -> None:
        """Every line appended so far on disk."""
        with self._lock:
            seq = self._written
        self._sync(seq)

    def _sync(self, seq: int) -> None:
        """Line ``seq`` on disk: one ``fdatasync`` covers every line written before it began."""
        with self._sync_lock:
            if self._synced >= seq:
                return  # the flush this one waited for covered it (or a compaction flushed it)
            with self._lock:
                if self._fd is None:
                    return
                fd, upto = os.dup(self._fd), self._written
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self._synced = max(self._synced, upto)

    def compact(self, key: str) -> dict[str, tuple[dict[str, Any], bytes]] | None:
        """Rewrite the log with its live lines only: a new file, flushed, renamed over the log, the
        directory flushed; the live entries afterwards. ``None`` (nothing done) while another process
        has the log open for appending (its shared lock): the exclusive lock a compaction needs is
        only tried, never waited for, so a reader (``hpkctl status``) never compacts under a kubelet."""
        with self._lock:
            own = self._fd
            fd = own if own is not None else os.open(self.path, _APPEND | os.O_CREAT, 0o600)
            got = _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # from this process's shared lock, if it has one
            if got is None or (got is False and own is None) or os.fstat(fd).st_nlink == 0:
                # another process appends (or compacted just now; or no flock here and this process
                # writes nothing): not now. A failed conversion may have dropped the shared lock.
                if own is not None:
                    os.close(own)
                    self._fd = self._open()
                else:
                    os.close(fd)
                self.appended = 0
                return None
            for stale in self.path.parent.glob(f".{self.path.name}.*"):  # a compaction killed midway
                stale.unlink(missing_ok=True)  # (no other can be running: this one holds the exclusive lock)
            tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(6)}")
            new = os.open(tmp, _APPEND | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _flock(new, fcntl.LOCK_SH)  # before it has the log's name: nobody compacts it under this process
                live, _ = parse(_read_all(fd), key)
                _write_all(new, b"".join(line for _, line in live.values()), tmp)
                os.fsync(new)
                os.replace(tmp, self.path)
                dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
            except BaseException:
                os.close(new)
                tmp.unlink(missing_ok=True)
                _flock(fd, fcntl.LOCK_SH)
                if own is None:
                    os.close(fd)
                raise
            os.close(fd)  # the old file, nameless now: its lock goes with it
            self._fd, self._torn, self.appended = new, False, 0
            self._synced = self._written
            return live

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


__all__ = ["TOMBSTONE", "AppendLog", "parse", "read_log", "tombstone"]

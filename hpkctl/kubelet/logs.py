"""Container logs for ``/containerLogs/{ns}/{pod}/{container}``: Kubernetes' ``PodLogOptions`` over the
log files the job writes.

The job appends a container's stdout and stderr, as they come, to ``logs/<c>.log`` (``sbatch/runtime.sh``,
``hpk_run``), and moves it to ``logs/<c>.previous.log`` before a restart. Nothing records when a line
was written, so two options can only be approximated, soundly:

* ``timestamps=true`` prefixes each line with an **upper bound** of the time its first byte was
  written: for what the file holds when the request comes, the file's modification time; for what
  arrives while following, the time it was read (at most ``FOLLOW_POLL`` late). Times never go
  backwards within one response, and a line is never stamped earlier than it was written.
* ``sinceSeconds``/``sinceTime`` select at **file granularity**: the file as it stands is sent
  whole if it was modified at or after that time (so it may hold older lines), and skipped if its
  last write was before it; everything that arrives while following is newer. No line written
  after the time is ever left out.

``tailLines``, ``limitBytes`` (counting what is sent, timestamps included, as the kubelet does),
``previous`` and ``follow`` are exact. ``follow`` ends when the container has ended and will not run
again (:func:`hpkctl.pod.status.container_done`), or when the caller's ``done`` says so (the pod is
gone); it follows the log across restarts without losing what was written before the file moved.
``stream`` (split stdout/stderr) cannot be served: both go to one file.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from hpkctl.kubelet.apistatus import ApiError

FOLLOW_POLL = 0.2
CHUNK = 65536

Write = Callable[[bytes], Awaitable[None]]

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # Go's strconv.ParseBool, as the kubelet decodes
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since: float | None = None  # POSIX time: from sinceSeconds (before now) or sinceTime


def _bool(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name)
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ApiError(400, f"{name}={value!r} is not a boolean (use true or false)")


def _int(query: Mapping[str, str], name: str, *, minimum: int, rule: str) -> int | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise ApiError(400, f"{name}={value!r} is not an integer") from None
    if number < minimum:
        raise ApiError(422, f"{name}: Invalid value: {number}: {rule}")
    return number


def parse_rfc3339(text: str) -> float:
    """POSIX time of an RFC 3339 time (``2026-11-24T02:17:16Z``, fractions and offsets allowed)."""
    try:
        when = dt.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ApiError(400, f"sinceTime={text!r} is not an RFC 3339 time (e.g. 2026-11-24T10:00:00Z)") from None
    if when.tzinfo is None:
        raise ApiError(400, f"sinceTime={text!r} has no time zone (add Z for UTC)")
    return when.timestamp()


def parse_log_options(query: Mapping[str, str], *, now: float | None = None) -> LogOptions:
    """``PodLogOptions`` from the query, validated as the API server validates them.

    Also accepts the kubelet's legacy ``tail`` (``all`` = no limit). Raises ``ApiError`` (400 for
    what cannot be decoded, 422 for values Kubernetes calls invalid)."""
    q = dict(query)
    tail = q.pop("tail", None)
    if tail is not None and "tailLines" not in q and tail != "all":
        q["tailLines"] = tail
    stream = q.get("stream", "")
    if stream not in ("", "All"):
        raise ApiError(400, f"stream={stream}: this kubelet keeps a container's stdout and stderr in one log "
                       "file, in the order written; only stream=All (the default) can be served")
    seconds = _int(q, "sinceSeconds", minimum=1, rule="must be greater than 0")
    since_time = q.get("sinceTime") or None
    if seconds is not None and since_time is not None:
        raise ApiError(422, "at most one of `sinceTime` or `sinceSeconds` may be specified")
    since = None
    if seconds is not None:
        since = (time.time() if now is None else now) - seconds
    elif since_time is not None:
        since = parse_rfc3339(since_time)
    return LogOptions(
        follow=_bool(q, "follow"), previous=_bool(q, "previous"), timestamps=_bool(q, "timestamps"),
        tail_lines=_int(q, "tailLines", minimum=0, rule="must be greater than or equal to 0"),
        limit_bytes=_int(q, "limitBytes", minimum=1, rule="must be greater than 0"), since=since)


def rfc3339nano(when: float) -> str:
    """Go's ``time.RFC3339Nano`` in UTC (trailing zeros of the fraction dropped)."""
    seconds = int(when)
    nanos = int(round((when - seconds) * 1e9))
    if nanos >= 1_000_000_000:
        seconds, nanos = seconds + 1, nanos - 1_000_000_000
    base = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{nanos:09d}".rstrip("0")
    return f"{base}{'.' + frac if frac else ''}Z"


def tail_offset(fh: BinaryIO, lines: int) -> int:
    """Where the last ``lines`` lines of ``fh`` begin (a last line without newline counts)."""
    size = os.fstat(fh.fileno()).st_size
    if lines == 0 or size == 0:
        return size
    fh.seek(size - 1)
    need = lines + (1 if fh.read(1) == b"\n" else 0)
    pos, count = size, 0
    while pos > 0:
        step = min(CHUNK, pos)
        pos -= step
        fh.seek(pos)
        block = fh.read(step)
        end = len(block)
        while (end := block.rfind(b"\n", 0, end)) >= 0:
            count += 1
            if count == need:
                return pos + end + 1
    return 0


class _Output:
    """Timestamps at line starts and the byte limit, in front of the response."""

    def __init__(self, write: Write, *, timestamps: bool, limit: int | None) -> None:
        self._write = write
        self._timestamps = timestamps
        self._left = limit
        self._line_start = True

    @property
    def full(self) -> bool:
        return self._left is not None and self._left <= 0

    async def send(self, data: bytes, *, stamp: float) -> None:
        if not data or self.full:
            return
        if self._timestamps:
            prefix = rfc3339nano(stamp).encode() + b" "
            parts = data.split(b"\n")
            out = bytearray()
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                if last and not part:
                    break  # data ended with a newline: the next line starts later
                if self._line_start:
                    out += prefix
                out += part + (b"" if last else b"\n")
                self._line_start = not last
            data = bytes(out)
        if self._left is not None:
            data = data[:self._left]
            self._left -= len(data)
        if data:
            await self._write(data)


def _same_file(fh: BinaryIO, path: Path) -> bool | None:
    """Whether ``path`` still names the open file; ``None`` when nothing is there (yet)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    mine = os.fstat(fh.fileno())
    return (st.st_ino, st.st_dev) == (mine.st_ino, mine.st_dev)


async def stream_log(path: Path, opts: LogOptions, write: Write, *, done: Callable[[], bool],
                     poll: float = FOLLOW_POLL, clock: Callable[[], float] = time.time) -> None:
    """Send the log at ``path`` as ``opts`` say; with ``follow``, until ``done()`` holds.

    ``path`` must exist (``FileNotFoundError`` otherwise: the caller answers that the container
    is waiting). ``done`` is asked before each final read, so nothing written before it became
    true is lost."""
    out = _Output(write, timestamps=opts.timestamps, limit=opts.limit_bytes)
    # every open, stat and read runs on a worker thread: the HTTPS server's event loop serves every
    # other request meanwhile (a slow or hung file system holds up this stream only)
    fh: BinaryIO = await asyncio.to_thread(open, path, "rb")
    try:
        stamp = (await asyncio.to_thread(os.fstat, fh.fileno())).st_mtime
        if opts.since is not None and stamp < opts.since:
            fh.seek(0, os.SEEK_END)
        elif opts.tail_lines is not None:
            fh.seek(await asyncio.to_thread(tail_offset, fh, opts.tail_lines))
        while (chunk := await asyncio.to_thread(fh.read, CHUNK)) and not out.full:
            await out.send(chunk, stamp=stamp)
        if not opts.follow or opts.previous:
            return
        while not out.full:
            finished = await asyncio.to_thread(done)
            while (chunk := await asyncio.to_thread(fh.read, CHUNK)) and not out.full:
                stamp = max(stamp, clock())  # never before a time already sent
                await out.send(chunk, stamp=stamp)
            if await asyncio.to_thread(_same_file, fh, path) is False:  # a restart moved it aside, a new run began
                fresh = await asyncio.to_thread(_reopen, path)  # None: moved again in between, look once more
                if fresh is not None:
                    fh.close()
                    fh = fresh
                continue
            if finished:
                return
            await asyncio.sleep(poll)
    finally:
        fh.close()


def _reopen(path: Path) -> BinaryIO | None:
    try:
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    except FileNotFoundError:
        return None

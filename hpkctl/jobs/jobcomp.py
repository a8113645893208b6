"""Find a job's completion record in a jobcomp/filetxt log without reading the whole file.

Sites without slurmdbd often keep ``JobCompType=jobcomp/filetxt``: slurmctld appends one line per
finished job, and the file is never trimmed by Slurm, so it can reach gigabytes. The job we look
for almost always finished seconds ago, so the file is read backwards in blocks and the search
stops at the newest line for that id (ids are reused after ``MaxJobId`` wraps or a cluster is
rebuilt; the newest line is the one that belongs to our job).
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Collection, Iterator
from pathlib import Path

from hpkctl.jobs.info import JobInfo
from hpkctl.jobs.parse import jobcomp_user, parse_jobcomp_line

BLOCK = 64 * 1024
MAX_SCAN = 64 * 1024 * 1024  # ~130,000 jobs of ~500 bytes each: far older than any job we watch


def _lines_backwards(path: Path | str, *, max_bytes: int, block: int) -> Iterator[bytes]:
    """Complete lines of ``path`` from the last to the first, reading at most ``max_bytes``.

    A missing or unreadable file yields nothing (the file only appears after the first job ends).
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; a with-block would hide the OSError path
    except OSError:
        return
    with f:
        pos = f.seek(0, os.SEEK_END)
        scanned = 0
        carry = b""  # the (possibly incomplete) first line of the block read last
        while pos > 0 and scanned < max_bytes:
            n = min(block, pos, max_bytes - scanned)
            pos -= n
            f.seek(pos)
            lines = (f.read(n) + carry).split(b"\n")
            scanned += n
            if pos > 0:
                carry, lines = lines[0], lines[1:]
            else:
                carry = b""
            yield from reversed(lines)


def _whole(raw: bytes) -> bool:
    return parse_jobcomp_line(raw.decode("utf-8", "replace")) is not None


def find_many_in_jobcomp(path: Path | str, job_ids: Collection[str], *, user: str, max_bytes: int = MAX_SCAN,
                         block: int = BLOCK) -> dict[str, JobInfo]:
    """The newest record of each of ``job_ids`` in one backward scan of the jobcomp file at ``path``.

    Reads at most ``max_bytes`` from the end; a half-written last line is skipped. Stops as soon as
    every id is found, so a burst of recent jobs costs one short read.

    The file is world-readable and world-forgeable (issue 20.4: a job name or work dir with a line
    break appends any text), so a record is taken only when it is ``user``'s (``name(uid)``, the
    caller's), read field-exactly, and the line before it is itself a whole record (a forged line
    follows the fragment of the forger's own record, cut at the line break), or it is the file's
    first line. Callers still never let it override the pod's own status files.
    """
    wanted = {str(j) for j in job_ids}
    found: dict[str, JobInfo] = {}
    pending: tuple[str, JobInfo] | None = None  # a candidate, until the line before it is seen
    for raw in _lines_backwards(path, max_bytes=max_bytes, block=block) if wanted else ():
        if pending is not None:
            if _whole(raw):
                found.setdefault(*pending)
                if len(found) == len(wanted):
                    return found
            pending = None
        if not raw.startswith(b"JobId=") or b" " not in raw:
            continue
        line = raw.decode("utf-8", "replace")
        info = parse_jobcomp_line(line)
        if info is not None and info.job_id in wanted and info.job_id not in found and jobcomp_user(line) == user:
            pending = (info.job_id, info)
    if pending is not None and _at_start(path, max_bytes):
        found.setdefault(*pending)
    return found


def _at_start(path: Path | str, max_bytes: int) -> bool:
    """Whether a backward scan of at most ``max_bytes`` reached the file's first line."""
    try:
        return os.path.getsize(path) <= max_bytes
    except OSError:
        return False


def current_user() -> str:
    """This process's user as jobcomp writes it: ``name(uid)``."""
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return f"{name}({uid})"

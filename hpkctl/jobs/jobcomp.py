"""Find a job's completion record in a jobcomp/filetxt log without reading the whole file.

Sites without slurmdbd often keep ``JobCompType=jobcomp/filetxt``: slurmctld appends one line per
finished job, and the file is never trimmed by Slurm, so it can reach gigabytes. The job we look
for almost always finished seconds ago, so the file is read backwards in blocks and the search
stops at the newest line for that id (ids are reused after ``MaxJobId`` wraps or a cluster is
rebuilt; the newest line is the one that belongs to our job).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path

from hpkctl.jobs.info import JobInfo
from hpkctl.jobs.parse import jobcomp_array_id, parse_jobcomp_line

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


def find_many_in_jobcomp(path: Path | str, job_ids: Collection[str], *, max_bytes: int = MAX_SCAN,
                         block: int = BLOCK) -> dict[str, JobInfo]:
    """The newest record of each of ``job_ids`` in one backward scan of the jobcomp file at ``path``.

    Reads at most ``max_bytes`` from the end; a half-written last line is skipped. Stops as soon as
    every id is found, so a burst of recent jobs costs one short read.
    """
    wanted = {str(j) for j in job_ids}
    found: dict[str, JobInfo] = {}
    for raw in _lines_backwards(path, max_bytes=max_bytes, block=block) if wanted else ():
        if not raw.startswith(b"JobId=") or b" " not in raw:
            continue
        job_id = raw[6 : raw.find(b" ")].decode("ascii", "replace")
        if b" ArrayTaskId=" in raw:
            job_id = jobcomp_array_id(raw.decode("utf-8", "replace")) or job_id
        if job_id in wanted and job_id not in found:
            info = parse_jobcomp_line(raw.decode("utf-8", "replace"))
            if info is not None:
                found[job_id] = info
                if len(found) == len(wanted):
                    break
    return found

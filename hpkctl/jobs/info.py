"""``JobInfo``: what one Slurm source knows about one job, in one shape whatever the source.

Slurm prints the same facts differently in each command (``CANCELLED by 1001`` in sacct,
``CANCELLED`` in squeue; ``N/A``, ``NONE``, ``None``, ``Unknown`` or ``unknown`` for a time that
is not set; ``(null)`` or ``None assigned`` for no nodes). The helpers here normalise all of them
so that nothing above this package has to know which command answered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Source = Literal["squeue", "scontrol", "sacct", "jobcomp"]

_NO_TIME = {"", "N/A", "NONE", "UNKNOWN", "(NULL)", "0", "INVALID"}
_NO_NODES = {"", "(null)", "None assigned", "None"}
_JOB_ID = re.compile(r"^\d+(_\d+)?$")


@dataclass(frozen=True)
class JobInfo:
    """One job as one Slurm source reported it.

    ``state`` is Slurm's base state (``PENDING``, ``CANCELLED``; never ``CANCELLED by 1001`` or
    ``COMPLETED+``). ``reason`` is Slurm's reason code (``Resources``, ``NonZeroExitCode``) or
    ``""`` when Slurm says ``None``. ``exit_code``/``signal`` are the two halves of Slurm's
    ``ExitCode=rc:sig`` and are both ``None`` when the source does not know them (squeue never
    does). ``start_time``/``end_time`` are timezone-aware; for a pending job they are Slurm's
    *expected* times. ``source`` says which command answered, because the sources differ in how
    fresh and how complete they are.
    """

    job_id: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    nodes: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None
    source: Source = "squeue"


@dataclass(frozen=True)
class UserJob:
    """One job of the calling user as squeue lists it, with its comment (``""`` when it has none).

    The comment is whatever the job was submitted with (free text); what it means is the
    caller's business (hpkctl's pod jobs start theirs with ``hpk-uid=<pod uid>``).
    """

    job_id: str
    state: str
    comment: str


def is_job_id(value: str) -> bool:
    """True for ``123`` and ``123_4`` (array task); the only ids this package passes to Slurm."""
    return bool(_JOB_ID.match(value))


def base_state(value: str) -> str:
    """``"CANCELLED by 1001"`` → ``"CANCELLED"``; ``"COMPLETED+"`` (truncated) → ``"COMPLETED"``."""
    words = value.strip().split()
    return words[0].rstrip("+").upper() if words else ""


def parse_reason(value: str) -> str:
    """Slurm's reason, with its "no reason" spellings (``None``, ``(null)``) turned into ``""``."""
    value = value.strip()
    return "" if value in {"None", "(null)", "N/A"} else value


def parse_nodes(value: str) -> str:
    """A node list, or ``""`` for Slurm's spellings of "no nodes"."""
    value = value.strip()
    return "" if value in _NO_NODES else value


def parse_time(value: str) -> datetime | None:
    """Parse Slurm's ``YYYY-MM-DDTHH:MM:SS`` as *local* time and return an aware datetime.

    Slurm prints times in the local timezone of the process that formats them (the client for
    squeue/scontrol/sacct, slurmctld for the jobcomp file) and without an offset. Anything that is
    not a time (``N/A``, ``Unknown``, ``None``...) gives ``None`` rather than an error: a missing
    time must never break status reporting.
    """
    value = value.strip()
    if value.upper() in _NO_TIME:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").astimezone()
    except ValueError:
        return None


def parse_exit_code(value: str) -> tuple[int | None, int | None]:
    """``"3:0"`` → ``(3, 0)``; ``"0:9"`` → ``(0, 9)`` (killed by SIGKILL); garbage → ``(None, None)``."""
    rc, sep, sig = value.strip().partition(":")
    try:
        return int(rc), int(sig) if sep else 0
    except ValueError:
        return None, None

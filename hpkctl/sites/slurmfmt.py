"""Slurm's value formats in profiles (times, ``--mem``) and the base of every profile section:
shared by :mod:`hpkctl.sites.schema` and the sections kept in modules of their own (``pilot.py``)."""

from __future__ import annotations

import re

from hpkctl.typed import BaseModel, ConfigDict

# Slurm's time formats: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
# "days-hours:minutes", "days-hours:minutes:seconds"; "" means "not set".
_SLURM_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2})$")


def slurm_time_to_seconds(value: str) -> int:
    """Convert a Slurm time string to seconds (``"1-02:00:00"`` → 93600)."""
    if not _SLURM_TIME.match(value):
        raise ValueError(f"{value!r} is not a Slurm time (use e.g. '30', '01:30:00' or '1-00:00:00')")
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
        parts = [int(p) for p in value.split(":")]
        hours, minutes, seconds = (parts + [0, 0])[:3]
    else:
        parts = [int(p) for p in value.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def seconds_to_slurm_time(seconds: int) -> str:
    """Format seconds as Slurm's ``D-HH:MM:SS`` (rounded up to whole minutes, as Slurm does)."""
    minutes = -(-max(seconds, 60) // 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:00" if days else f"{hours:02d}:{minutes:02d}:00"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_SLURM_MEM = re.compile(r"^[1-9][0-9]*[KMGT]?$")


def _slurm_mem(value: str) -> str:
    """An sbatch ``--mem`` value (``4G``, ``4096``, ``512M``), or "" for none."""
    if value and not _SLURM_MEM.match(value):
        raise ValueError(f"{value!r} is not an sbatch --mem value (write e.g. '4G', '512M' or '4096' for MB)")
    return value

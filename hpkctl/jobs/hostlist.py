"""Slurm's compressed host lists, expanded in Python: the allocations' node shares (``alloc.py``) and the
steps' node lists (``steps.py``) both read them, and a job-per-pod ``hpkctl run`` loads ``steps`` but not
pilot mode's ``alloc``."""

from __future__ import annotations

import re


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list (``n[1-3,5],gpu07,a[01-02]b``) as names, in order; zero-padded
    ranges keep their width. ``scontrol show hostnames`` does the same with a process per call."""
    names: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", text.strip()):
        parts: list[str] = [""]
        for literal, ranges in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            parts = [p + literal for p in parts]
            if ranges:
                values: list[str] = []
                for r in ranges.split(","):
                    lo, _, hi = r.partition("-")
                    values += [str(n).zfill(len(lo)) for n in range(int(lo), int(hi or lo) + 1)]
                parts = [p + v for p in parts for v in values]
        names += [p for p in parts if p]
    return names

"""``hpkctl render --out DIR``: a dry run writes a pod directory, and never deletes anything.

``DIR`` must be missing, empty, or a pod directory an earlier ``render --out`` wrote (it holds
the marker file :data:`MARKER` and ``job/pod.json``). Even then it is refused when a job has run
in it (files under ``status/``, ``logs/`` or ``run/``): writing a pod directory clears those, and
they are not hpkctl's to remove.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from hpkctl import __version__
from hpkctl.errors import HpkError
from hpkctl.pod.paths import JOB_DIRS, PodDir

MARKER = ".hpkctl-render"


def _files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if not p.is_dir()] if path.is_dir() else []


def check_out_dir(out: Path) -> None:
    """``HpkError`` unless ``render --out`` may write the pod directory ``out``."""
    if not out.exists():
        return
    if not out.is_dir():
        raise HpkError(f"--out {out}: exists and is not a directory", hint="choose a new directory")
    entries = list(out.iterdir())
    if not entries:
        return
    if not (out / MARKER).is_file() or not (out / PodDir.POD_JSON).is_file():
        shown = ", ".join(sorted(e.name for e in entries)[:5]) + (", ..." if len(entries) > 5 else "")
        raise HpkError(f"--out {out}: the directory is not empty ({shown}) and is not a pod directory "
                       "'hpkctl render --out' wrote", hint="choose a new or empty directory")
    traces = [p for d in JOB_DIRS for p in _files_under(out / d)]
    if traces:
        shown = ", ".join(str(p.relative_to(out)) for p in traces[:3]) + (", ..." if len(traces) > 3 else "")
        raise HpkError(f"--out {out}: a job has run in this pod directory ({shown}); rendering again would "
                       "delete its status and logs", hint="choose a new directory, or remove those files first")


def mark_out_dir(out: Path, *, uid: str, files: Iterable[str]) -> None:
    """Write the marker that says ``out`` is a pod directory ``render --out`` wrote."""
    data = {"writtenBy": f"hpkctl render {__version__}", "uid": uid, "files": sorted(files)}
    path = out / MARKER
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(data, indent=2) + "\n")

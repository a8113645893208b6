"""Helpers for the tests of ci/: the real local Slurm that ci/setup brings up, used as user hpk.

With CI=true a missing Slurm (or user, or tool) fails the test instead of skipping it: CI must
never pass by skipping what it is there to check.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SINGLE_CONF = "/etc/slurm/slurm.conf"
MULTI_CONF = "/etc/slurm-multi/slurm.conf"
HPK_USER = os.environ.get("HPK_USER", "hpk")
# sinfo %T states of a node that takes no new job (a flag suffix like "*" = not responding, too)
NODE_NOT_USABLE = ("down", "drain", "fail", "unk", "inval", "future", "maint", "power", "reboot")


def missing(what: str) -> None:
    """Skip, or fail under CI=true, because `what` is not available here."""
    msg = f"{what} (run ci/setup as root)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {msg}", pytrace=False)
    pytest.skip(msg)


def as_hpk(argv: list[str], *, slurm_conf: str, cwd: Path | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run argv as the normal user hpk (via runuser when we are root) with SLURM_CONF set."""
    env_argv = ["env", f"SLURM_CONF={slurm_conf}", *argv]
    if os.geteuid() == 0:
        env_argv = ["runuser", "-u", HPK_USER, "--", *env_argv]
    return subprocess.run(env_argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False)


def _require_cluster(conf: str, min_nodes: int) -> None:
    if shutil.which("sinfo") is None or not Path(conf).is_file():
        missing(f"Slurm is not installed or {conf} is absent")
    try:
        pwd.getpwnam(HPK_USER)
    except KeyError:
        missing(f"user {HPK_USER} does not exist")
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != HPK_USER:
        missing(f"jobs must run as {HPK_USER}: run the tests as root or as {HPK_USER}")
    r = as_hpk(["sinfo", "--noheader", "--Node", "--format=%N %T"], slurm_conf=conf, timeout=30)
    up = {name for name, state in (line.split() for line in r.stdout.splitlines())
          if not state.endswith(("*", "~", "#", "!", "%", "$", "@", "^", "-"))
          and not state.startswith(NODE_NOT_USABLE)}
    if r.returncode != 0 or len(up) < min_nodes:
        missing(f"the cluster of {conf} is not up ({r.stdout.strip()}{r.stderr.strip()})")


@pytest.fixture
def single_cluster() -> str:
    """SLURM_CONF of the single-node cluster, checked to be up."""
    _require_cluster(SINGLE_CONF, 1)
    return SINGLE_CONF


@pytest.fixture
def multi_cluster() -> str:
    """SLURM_CONF of the multi-node cluster, checked to have at least 2 nodes up."""
    _require_cluster(MULTI_CONF, 2)
    return MULTI_CONF


@pytest.fixture(name="as_hpk")
def as_hpk_fixture():
    """The `as_hpk(argv, slurm_conf=..., cwd=..., timeout=...)` helper, for tests."""
    return as_hpk


@pytest.fixture
def hpk_dir():
    """A fresh directory that user hpk owns, for job scripts and outputs: under /tmp, or under
    $HPK_TEST_TMPDIR where the compute nodes share no /tmp with us (ci/docker-cluster)."""
    base = os.environ.get("HPK_TEST_TMPDIR", "/tmp")
    os.makedirs(base, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="hpk-ci-test-", dir=base))
    d.chmod(0o755)
    if os.geteuid() == 0:
        pw = pwd.getpwnam(HPK_USER)
        os.chown(d, pw.pw_uid, pw.pw_gid)
    yield d
    shutil.rmtree(d, ignore_errors=True)

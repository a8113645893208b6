"""Fixtures for the tests of ci/: the real local Slurm that ci/setup brings up, used as user hpk.

The helpers behind them are in ``tests.support.slurm``. With CI=true a missing Slurm (or user, or
tool) fails the test instead of skipping it: CI must never pass by skipping what it is there to check.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.ci import HPK_USER
from tests.support.slurm import MULTI_CONF, SINGLE_CONF, as_hpk, require_cluster


@pytest.fixture
def single_cluster() -> str:
    """SLURM_CONF of the single-node cluster, checked to be up."""
    require_cluster(SINGLE_CONF, 1)
    return SINGLE_CONF


@pytest.fixture
def multi_cluster() -> str:
    """SLURM_CONF of the multi-node cluster, checked to have at least 2 nodes up."""
    require_cluster(MULTI_CONF, 2)
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

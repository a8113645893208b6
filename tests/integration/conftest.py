"""Fixtures of the end-to-end tests: ``hpkctl run`` as the normal user ``hpk`` on the real local
Slurm, with the Apptainer stand-in first on PATH (``tests.support.hpk``). With CI=true anything
missing fails instead of skipping."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.hpk import Hpk, require_standin
from tests.support.slurm import MULTI_CONF, SINGLE_CONF, require_cluster


@pytest.fixture
def hpk_slurm_only():  # type: ignore[no-untyped-def]
    """Hpk for tests that need the real Slurm but no containers (also run in ci/docker-cluster)."""
    require_cluster(SINGLE_CONF, 1)
    base = os.environ.get("HPK_TEST_TMPDIR", "/tmp")
    os.makedirs(base, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="hpk-int-", dir=base))
    d.chmod(0o777)
    yield Hpk(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def hpk(hpk_slurm_only: Hpk) -> Hpk:
    require_standin()
    return hpk_slurm_only


@pytest.fixture
def hpk_multi(hpk: Hpk) -> Hpk:
    require_cluster(MULTI_CONF, 2)
    return hpk

"""Fixtures for the tests of the Apptainer stand-in (ci/standin/apptainer); running it is
``tests.support.standin``.

The stand-in runs as the normal user `hpk` (via runuser when the tests run as root), the way the
pods' jobs run it. With CI=true a missing store, bwrap or user fails the tests instead of skipping.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

from tests.support import ci, lanes
from tests.support.ci import HPK_USER
from tests.support.standin import STANDIN_DIR, STORE, Standin


def missing(what: str) -> None:
    """Skip, or fail under CI=true, because `what` is not available here."""
    ci.missing(what, fix="run ci/setup, or ci/standin/build-images, as root")


def _user() -> pwd.struct_passwd:
    try:
        user = pwd.getpwnam(HPK_USER)
    except KeyError:
        missing(f"user {HPK_USER} does not exist")
        raise
    if os.geteuid() not in (0, user.pw_uid):
        missing(f"the tests must run as root or as {HPK_USER}")
    return user


@pytest.fixture(scope="session")
def standin_ready() -> pwd.struct_passwd:
    """The stand-in's requirements: bwrap, unsquashfs, the store with busybox and hpk-parent."""
    lanes.need("standin")
    user = _user()
    for tool in ("bwrap", "unsquashfs"):
        if not shutil.which(tool):
            missing(f"{tool} is not installed")
    for name in ("busybox", "hpk-parent"):
        if not (STORE / name / "image.conf").is_file() or not (STORE / name / "image.sif").is_file():
            missing(f"stand-in image {name!r} is not in {STORE}")
    return user


@pytest.fixture
def standin(standin_ready: pwd.struct_passwd) -> Iterator[Standin]:
    lanes.need("standin")
    d = Path(tempfile.mkdtemp(prefix="standin-test-"))
    d.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(d, standin_ready.pw_uid, standin_ready.pw_gid)
    try:
        yield Standin(standin_ready, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def busybox_sif(standin_ready: pwd.struct_passwd) -> Iterator[Path]:
    """docker://busybox pulled once (as hpk) to a SIF, the way a pod's job pulls it."""
    d = Path(tempfile.mkdtemp(prefix="standin-sif-"))
    d.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(d, standin_ready.pw_uid, standin_ready.pw_gid)
    s = Standin(standin_ready, d)
    r = s.run("pull", str(d / "busybox.sif"), "docker://busybox")
    assert r.rc == 0, r.both
    try:
        yield d / "busybox.sif"
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def debian_ready(standin_ready: pwd.struct_passwd) -> None:
    if not (STORE / "debian" / "image.conf").is_file():
        missing(f"stand-in image 'debian' is not in {STORE}")


@pytest.fixture(scope="session")
def module() -> ModuleType:
    """The stand-in's package, for unit tests of its pure functions (under its own name, so it never
    meets another copy in sys.modules)."""
    path = STANDIN_DIR / "standin_apptainer" / "__init__.py"
    spec = importlib.util.spec_from_file_location("standin_apptainer_under_test", path,
                                                  submodule_search_locations=[str(path.parent)])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its modules import each other relative to it
    spec.loader.exec_module(mod)
    return mod

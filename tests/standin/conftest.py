"""Fixtures for the tests of the Apptainer stand-in (ci/standin/apptainer).

The stand-in runs as the normal user `hpk` (via runuser when the tests run as root), the way the
pods' jobs run it. With CI=true a missing store, bwrap or user fails the tests instead of skipping.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
STANDIN_DIR = REPO / "ci" / "standin"
APPTAINER = STANDIN_DIR / "apptainer"
STORE = Path(os.environ.get("HPK_STANDIN_STORE", "/srv/hpk-images/standin"))
HPK_USER = os.environ.get("HPK_USER", "hpk")


def missing(what: str) -> None:
    """Skip, or fail under CI=true, because `what` is not available here."""
    msg = f"{what} (run ci/setup, or ci/standin/build-images, as root)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {msg}", pytrace=False)
    pytest.skip(msg)


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def both(self) -> str:
        return self.out + self.err


@dataclass
class Standin:
    """Runs the stand-in as user hpk with a small, explicit environment."""

    user: pwd.struct_passwd
    workdir: Path

    @property
    def home(self) -> str:
        return self.user.pw_dir

    def argv(self, args: list[str], env: dict[str, str] | None = None) -> list[str]:
        base = {"PATH": "/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8", "TERM": "xterm",
                "https_proxy": "http://127.0.0.1:9"}
        base.update(env or {})
        argv = ["env", "-i", *(f"{k}={v}" for k, v in base.items()), str(APPTAINER), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", self.user.pw_name, "--", *argv]
        return argv

    def run(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            input: bytes | str | None = None, timeout: float = 60) -> Result:
        r = subprocess.run(self.argv(list(args), env), cwd=cwd or self.workdir, input=input,
                           capture_output=True, timeout=timeout, check=False)
        return Result(r.returncode, r.stdout.decode(errors="surrogateescape"),
                      r.stderr.decode(errors="surrogateescape"))

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv(list(args), env), cwd=self.workdir,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def file(self, name: str, content: str | bytes, mode: int = 0o644) -> Path:
        """A file in the work directory, readable (and owned) by hpk."""
        p = self.workdir / name
        p.write_bytes(content.encode() if isinstance(content, str) else content)
        p.chmod(mode)
        if os.geteuid() == 0:
            os.chown(p, self.user.pw_uid, self.user.pw_gid)
        return p

    def dir(self, name: str) -> Path:
        p = self.workdir / name
        p.mkdir()
        if os.geteuid() == 0:
            os.chown(p, self.user.pw_uid, self.user.pw_gid)
        return p


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
    """The stand-in's module, for unit tests of its pure functions."""
    path = STANDIN_DIR / "standin_apptainer.py"
    loader = importlib.machinery.SourceFileLoader("standin_apptainer_under_test", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod

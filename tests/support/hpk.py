"""``hpkctl`` end to end as the normal user ``hpk``, with the Apptainer stand-in first on PATH."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import lanes
from tests.support.ci import HPK_USER, REPO, missing

STANDIN = REPO / "ci" / "standin"
STORE = Path(os.environ.get("HPK_STANDIN_STORE", "/srv/hpk-images/standin"))
VENV_BIN = Path(os.environ.get("HPK_VENV", "/opt/hpkctl-venv")) / "bin"


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class Hpk:
    """Runs hpkctl as user hpk, the way an HPC user would."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.home = Path(pwd.getpwnam(HPK_USER).pw_dir)

    def hpkctl(self, *args: str, timeout: float = 240) -> Result:
        env = {"PATH": f"{STANDIN}:{VENV_BIN}:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8",
               "https_proxy": "http://127.0.0.1:9"}
        argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), str(VENV_BIN / "hpkctl"), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", HPK_USER, "--", *argv]
        r = subprocess.run(argv, cwd=self.workdir, capture_output=True, text=True, timeout=timeout, check=False)
        return Result(r.returncode, r.stdout, r.stderr)

    def manifest(self, *docs: dict[str, Any]) -> Path:
        path = self.workdir / f"m-{uuid.uuid4().hex[:8]}.yaml"
        path.write_text(yaml.safe_dump_all(docs, allow_unicode=True))
        path.chmod(0o644)
        return path

    def run(self, *docs: dict[str, Any], site: str = "ci", extra: tuple[str, ...] = (), timeout: float = 240) -> Result:
        return self.hpkctl("run", "-f", str(self.manifest(*docs)), "--site", site, *extra, timeout=timeout)

    def status(self, name: str, site: str = "ci") -> dict[str, Any]:
        r = self.hpkctl("status", name, "--site", site, "--json")
        assert r.rc == 0, r.output
        return json.loads(r.stdout)[0]


def pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    spec.setdefault("restartPolicy", "Never")
    meta: dict[str, Any] = {"name": name}
    if "annotations" in spec:
        meta["annotations"] = spec.pop("annotations")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers, **spec}}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def require_standin() -> None:
    lanes.need("standin")
    if shutil.which("bwrap") is None:
        missing("bubblewrap is not installed")
    if not (STANDIN / "apptainer").is_file() or not (STORE / "busybox").exists():
        missing(f"the Apptainer stand-in or its image store {STORE} is missing")


def hpkctl_pid(proc: subprocess.Popen[str]) -> int:
    """The hpkctl process under ``proc`` (runuser's child when we are root)."""
    pid = proc.pid
    for _ in range(50):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            break
        if b"hpkctl" in cmd and not cmd.startswith((b"runuser", b"timeout", b"env")):
            return pid
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        if not children:
            time.sleep(0.1)
            continue
        pid = int(children[0])
    raise AssertionError(f"no hpkctl process under {proc.pid}")

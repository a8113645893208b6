"""Running the Apptainer stand-in (ci/standin/apptainer) as the normal user ``hpk``, the way the
pods' jobs run it."""

from __future__ import annotations

import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.ci import REPO

STANDIN_DIR = REPO / "ci" / "standin"
APPTAINER = STANDIN_DIR / "apptainer"
STORE = Path(os.environ.get("HPK_STANDIN_STORE", "/srv/hpk-images/standin"))


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

"""The hpkctl runtime as a file: ``sbatch/runtime.sh``, installed once per version under the state dir.

Every job script used to carry the whole runtime (some 900 lines of bash, the same for every pod);
Slurm stores each script (StateSaveLocation, and slurmdbd with ``AccountingStoreFlags=job_script``).
Now the script names one file, ``<state_dir>/runtime/hpk-runtime-<version>-<sha12>.sh``, and checks
its sha256 before it sources it. The name holds the content's hash, so a file is never rewritten
with other content: an upgrade of hpkctl while a job waits in the queue installs a new file beside
the old one, which the queued job still finds. Nothing deletes these files (about 40 KB per
version).
"""

from __future__ import annotations

import functools
import hashlib
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from hpkctl import __version__
from hpkctl.errors import PodError
from hpkctl.files import write_atomic
from hpkctl.pod.paths import runtime_path
from hpkctl.pod.volumes import bindable
from hpkctl.resources import data_dir
from hpkctl.sites.schema import SiteProfile


@dataclass(frozen=True)
class Runtime:
    """One version of the runtime: its bytes, their sha256 and the file name that carries both."""

    data: bytes
    sha256: str
    version: str

    def path(self, state_dir: str) -> str:
        """Where it lives under an expanded ``state_dir``."""
        return runtime_path(state_dir, self.version, self.sha256)


@functools.cache
def current_runtime() -> Runtime:
    """``sbatch/runtime.sh`` of this installation (read once per process)."""
    data = (data_dir("sbatch") / "runtime.sh").read_bytes()
    version = re.sub(r"[^A-Za-z0-9._-]", "_", __version__)
    return Runtime(data=data, sha256=hashlib.sha256(data).hexdigest(), version=version)


def runtime_for(profile: SiteProfile) -> str:
    """The runtime file the job scripts of ``profile`` source: under its (expanded) state_dir."""
    path = current_runtime().path(posixpath.expanduser(profile.pods.state_dir))
    if not bindable(path):  # the cni parent container binds its directory
        raise PodError("InvalidPodDirectory", f"runtime path {path!r} contains ':', ',' or a line break",
                       hint="choose a [pods].state_dir without those characters in the site profile")
    return path


#: The files ``install_runtime`` found (or wrote) with the right content, by path: what ``fstat``
#: said of each when it was read. A kubelet submits many pods, all naming one runtime file; reading and hashing
#: its ~40 KB for every pod cost more than rendering the pod (issue 23.2). A file is trusted again
#: only while its inode, size, mtime and ctime are the ones seen: a purged, replaced or rewritten
#: file changes at least one (ctime changes on every write and rename, and nobody can set it back),
#: so it is read, checked and repaired as before.
_verified: dict[str, tuple[int, int, int, int, int]] = {}


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def install_runtime(path: Path) -> None:
    """Make sure this installation's runtime is at ``path`` (``Runtime.path``) before a job that
    names it is submitted. A file with the right content is left alone (many pods, one file, no
    write); a missing or altered one is written atomically, so no job ever sources half of it.
    A file this process already checked and that did not change since (``_verified``) is not read
    again.
    """
    runtime = current_runtime()
    key = f"{path}\0{runtime.sha256}"
    try:
        if _verified.get(key) == _identity(os.stat(path)):
            return  # one stat per pod, not an open, fstat and close
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if hashlib.sha256(fh.read()).hexdigest() == runtime.sha256:
                _verified[key] = _identity(st)
                return
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, runtime.data, mode=0o644)  # checked (and remembered) at the next call, as any file

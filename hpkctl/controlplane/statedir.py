"""The files of ``[controlplane] state_dir``: where each one is, who holds the directory, what phase it says.

Split out of :mod:`hpkctl.controlplane.bootstrap` because these files are the contract between the
control-plane job (the bootstrap writes them) and everything outside it (``hpkctl start``/``stop``/
``status`` and ``hpkctl doctor`` read them): :class:`Layout` names them, :func:`read_endpoint` reads
the ``endpoint`` whose presence means "ready", :func:`write_status` writes the phase ``hpkctl start``
follows, and :func:`lock_state` keeps two control planes off one state directory.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpkctl.errors import ControlPlaneError
from hpkctl.files import write_atomic
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.controlplane")


@dataclass(frozen=True)
class Layout:
    """Where everything lives under ``[controlplane] state_dir``."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        """Files of this run only: the Corefile and the components' own (loopback) kubeconfigs."""
        return self.root / "run"

    @property
    def endpoint(self) -> Path:
        return self.root / "endpoint"

    @property
    def status(self) -> Path:
        return self.root / "status"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    def kubeconfig(self, user: str) -> Path:
        """A published kubeconfig: ``admin``, ``kubelet`` or ``scheduler``."""
        return self.root / f"{user}.kubeconfig"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"


def layout_of(profile: SiteProfile) -> Layout:
    return Layout(Path(profile.controlplane.state_dir))


def read_endpoint(state_dir: Path) -> dict[str, Any] | None:
    """The published ``endpoint`` of a running control plane, or None when there is none."""
    try:
        data = json.loads((state_dir / "endpoint").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def utc_now() -> str:
    """Now, as the ``time``/``started`` fields of ``status`` and ``endpoint`` say it."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def lock_state(layout: Layout) -> int:
    """Hold ``layout.lock`` (non-blocking) for this run; ControlPlaneError naming the holder if another has it.

    A file system without ``flock`` is used unlocked, with a warning. Returns the descriptor to close.
    """
    fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP):
            log.warning("%s: no file locks on this file system; make sure one control plane at a time uses %s",
                        layout.lock, layout.root)
        else:
            holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise ControlPlaneError(
                f"another control plane runs with state directory {layout.root} ({holder or 'unknown'})",
                hint="stop it first (hpkctl stop), or give this one its own [controlplane] state_dir and ports") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    return fd


def write_status(layout: Layout, phase: str, message: str, *, slurm_job_id: str) -> None:
    """``status`` (JSON): the phase of this run, for ``hpkctl start``; a failure to write is only logged."""
    doc = {"phase": phase, "message": message, "time": utc_now(), "pid": os.getpid(), "host": socket.gethostname(),
           "slurm_job_id": slurm_job_id}
    try:
        write_atomic(layout.status, (json.dumps(doc, indent=1) + "\n").encode())
    except OSError as e:
        log.warning("cannot write %s: %s", layout.status, e)

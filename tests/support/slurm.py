"""The real local Slurm clusters that ``ci/setup`` brings up, used as the normal user ``hpk``."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from tests.support import lanes
from tests.support.ci import HPK_USER, missing

SINGLE_CONF = "/etc/slurm/slurm.conf"
MULTI_CONF = "/etc/slurm-multi/slurm.conf"
# sinfo %T states of a node that takes no new job (a flag suffix like "*" = not responding, too)
NODE_NOT_USABLE = ("down", "drain", "fail", "unk", "inval", "future", "maint", "power", "reboot")


def as_hpk(argv: list[str], *, slurm_conf: str, cwd: Path | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run argv as the normal user hpk (via runuser when we are root) with SLURM_CONF set."""
    lanes.need("slurm")
    env_argv = ["env", f"SLURM_CONF={slurm_conf}", *argv]
    if os.geteuid() == 0:
        env_argv = ["runuser", "-u", HPK_USER, "--", *env_argv]
    return subprocess.run(env_argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False)


def require_cluster(conf: str, min_nodes: int) -> None:
    """The cluster of `conf` is up with at least `min_nodes` usable nodes, and jobs can run as hpk
    (else ``missing``)."""
    lanes.need("slurm")
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
          # "-" (planned: the backfill scheduler holds the node for a pending job, e.g. a test's job
          # that waits for more than it has) leaves the node usable
          if not state.endswith(("*", "~", "#", "!", "%", "$", "@", "^"))
          and not state.startswith(NODE_NOT_USABLE)}
    if r.returncode != 0 or len(up) < min_nodes:
        missing(f"the cluster of {conf} is not up ({r.stdout.strip()}{r.stderr.strip()})")

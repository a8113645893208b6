"""The real local Slurm clusters that ``ci/setup`` brings up, used as the normal user ``hpk``."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

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


def node_load(conf: str = SINGLE_CONF) -> str:
    """Who holds the cluster's CPUs now, for a failed wait on a pod: ``sinfo``'s allocated/idle CPUs
    and every job in the queue (all users: other engineers' and benchmarks' jobs fill the same node)
    with its CPUs and, for a pending one, Slurm's reason. A pod whose job is pending for ``Resources``
    or ``Priority`` waited for capacity, not for a bug."""
    env = {**os.environ, "SLURM_CONF": conf}
    node = subprocess.run(["sinfo", "--noheader", "-O", "CPUsState,AllocMem,Memory"], capture_output=True,
                          text=True, timeout=30, check=False, env=env).stdout.split()
    queue = subprocess.run(["squeue", "--noheader", "--all", "--format=%i %u %T %C %r %j"],
                           capture_output=True, text=True, timeout=30, check=False, env=env).stdout.splitlines()
    running = [line for line in queue if " RUNNING " in line]
    pending = [line.split() for line in queue if " PENDING " in line]
    reasons = Counter(f[4] for f in pending if len(f) > 4)
    return "\n".join([f"--- Slurm CPUs allocated/idle/other/total, memory allocated of total (MB): {node}; running (id user state cpus reason name):",
                      *running, f"--- {len(pending)} pending, by reason: {dict(reasons)}; the first:",
                      *(" ".join(f) for f in pending[:5])])


def pod_summary(pod: dict[str, object] | None) -> str:
    """A pod's phase, message, Slurm job and container states in one line (what a failed wait reports)."""
    if not pod:
        return "pod not found"
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    assert isinstance(meta, dict) and isinstance(status, dict)
    states = {c.get("name"): c.get("state") for c in status.get("containerStatuses") or []}
    return (f"phase {status.get('phase')!r}, message {status.get('message')!r}, Slurm job "
            f"{(meta.get('annotations') or {}).get('hpk.io/slurm-job-id')}, node {(pod.get('spec') or {}).get('nodeName')!r}"
            f" (pod conditions {[(c.get('type'), c.get('status')) for c in status.get('conditions') or []]}),"
            f" containers {states}")


def queued_for_capacity(*jobs: str, conf: str = SINGLE_CONF) -> str:
    """Those of ``jobs`` Slurm keeps pending because the node is full (reason Resources or Priority), as
    "JOB (REASON)" joined; "" when none is (:func:`tests.support.waiting.wait_for`'s ``queued``)."""
    ids = [j for j in jobs if j]
    if not ids:
        return ""
    r = subprocess.run(["squeue", "--noheader", f"--jobs={','.join(ids)}", "--states=PENDING", "--format=%i %r"],
                       capture_output=True, text=True, timeout=30, check=False,
                       env={**os.environ, "SLURM_CONF": conf})
    return ", ".join(f"{job} ({reason})" for job, reason in (line.split(None, 1) for line in r.stdout.splitlines()
                                                             if len(line.split()) == 2)
                     if reason in ("Resources", "Priority"))


def pod_job(pod: dict[str, Any] | None) -> str:
    """The Slurm job id the kubelet annotated the pod with, or ""."""
    return str((((pod or {}).get("metadata") or {}).get("annotations") or {}).get("hpk.io/slurm-job-id") or "")

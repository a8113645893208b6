"""What ``hpkctl start``, ``stop`` and ``status`` know about a cluster, as plain data and its wording.

Split out of :mod:`hpkctl.controlplane.lifecycle` so that the cluster's jobs, the rows of ``hpkctl
status`` and the words for them (phases, durations, a log's tail) are shared by the start
(:mod:`hpkctl.controlplane.lifecycle`), its waits (:mod:`hpkctl.controlplane.clusterwait`), the stop
(:mod:`hpkctl.controlplane.clusterstop`) and the CLI's table, without any of them running anything.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpkctl.controlplane.launch import CONTROLPLANE
from hpkctl.errors import HpkError
from hpkctl.jobs import JobInfo
from hpkctl.jobs.states import PENDING_STATES

#: what the bootstrap's ``status`` phases mean to a user watching ``hpkctl start``
PHASES = {
    "starting": "the bootstrap started",
    "pki": "preparing the PKI (certificates for this node)",
    "etcd": "starting etcd",
    "kube-apiserver": "etcd ready; starting the API server",
    "kube-controller-manager": "API server ready; starting kube-controller-manager",
    "coredns": "kube-controller-manager ready; starting CoreDNS",
    "services rule": "CoreDNS ready; installing the services rule",
    "hpk-scheduler": "starting the scheduler",
    "ready": "ready",
    "stopping": "stopping",
    "stopped": "stopped",
    "failed": "failed",
}
JOB_LOG_LINES = 20


class ClusterError(HpkError):
    """A job of the cluster failed, was refused, or did not get ready in time; names the log to read."""


@dataclass(frozen=True)
class ClusterJob:
    kind: str  # CONTROLPLANE or KUBELET
    job_id: str
    state: str
    reason: str = ""
    node: str = ""
    start: dt.datetime | None = None
    end: dt.datetime | None = None

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    def left(self, now: dt.datetime | None = None) -> float | None:
        """Seconds until the time limit of a running job (Slurm's expected end), else None."""
        if self.pending or self.end is None:
            return None
        return (self.end - (now or dt.datetime.now(dt.timezone.utc))).total_seconds()


@dataclass
class ClusterJobs:
    """The cluster's jobs Slurm still has, oldest first: the first of each kind is the current one,
    the others are successors waiting for it (``--dependency=singleton``)."""

    controlplane: list[ClusterJob] = field(default_factory=list)
    kubelet: list[ClusterJob] = field(default_factory=list)

    def of(self, kind: str) -> list[ClusterJob]:
        return self.controlplane if kind == CONTROLPLANE else self.kubelet

    def all(self) -> list[ClusterJob]:
        return self.controlplane + self.kubelet


@dataclass(frozen=True)
class PodRow:
    namespace: str
    name: str
    phase: str
    job_id: str
    job_state: str = ""
    job_node: str = ""
    uid: str = ""


@dataclass
class ClusterStatus:
    """Everything ``hpkctl status`` shows about the cluster."""

    state_dir: str
    cluster: str
    jobs: ClusterJobs
    phase: dict[str, Any] | None  # the bootstrap's status file
    endpoint: dict[str, Any] | None
    api: str  # "ok", or why the API did not answer
    node_name: str
    node: str  # Ready, NotReady, Unknown, "missing", or "" when the API did not answer
    pods: list[PodRow] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        """Whether there is anything to show: jobs, or state of an earlier start."""
        return bool(self.jobs.all()) or self.phase is not None or self.endpoint is not None


def utc(text: str) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def duration(seconds: float) -> str:
    """``1h05m``, ``12m``, ``40s``."""
    s = max(0, int(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m" if s >= 60 else f"{s}s"


def tail(path: Path, lines: int = JOB_LOG_LINES) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 32 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError:
        return "    (no output yet)"
    return "\n".join("    " + ln for ln in text.splitlines()[-lines:]) or "    (empty)"


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def label_of(kind: str) -> str:
    return "control plane" if kind == CONTROLPLANE else "kubelet"


def slurm_line(job: ClusterJob) -> str:
    if job.pending:
        return f"Slurm job {job.job_id} queued ({job.reason or 'pending'})"
    return f"Slurm job {job.job_id} running on {job.node or '?'}"


def cluster_job(kind: str, info: JobInfo) -> ClusterJob:
    return ClusterJob(kind, info.job_id, info.state, info.reason, info.nodes, info.start_time, info.end_time)


def condition(obj: dict[str, Any], kind: str) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status", ""))
    return ""


def pod_row(pod: dict[str, Any]) -> PodRow:
    """A pod of the node as the API lists it; its job id is filled in from the kubelet's records."""
    meta = pod.get("metadata") or {}
    phase = str((pod.get("status") or {}).get("phase", "")) or "Pending"
    if meta.get("deletionTimestamp"):
        phase = "Terminating"
    return PodRow(str(meta.get("namespace", "")), str(meta.get("name", "")), phase, "", uid=str(meta.get("uid", "")))


__all__ = ["ClusterError", "ClusterJob", "ClusterJobs", "ClusterStatus", "JOB_LOG_LINES", "PHASES", "PodRow",
           "cluster_job", "condition", "duration", "label_of", "pod_row", "read_json", "slurm_line", "tail", "utc"]

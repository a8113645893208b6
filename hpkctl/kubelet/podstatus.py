"""A pod's status from its control files and Slurm's view of the job.

The job's own status files are the ground truth for containers (Slurm knows nothing of them) and
survive the job leaving ``squeue``. Slurm is the ground truth for what happened *to* the job:
a time limit, the OOM killer, a node failure, preemption or ``scancel`` override whatever the
script managed to record, because the script may have been killed before it could.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpkctl.jobs import JobInfo, PodOutcome, pod_outcome

# Slurm outcomes that explain the end of the pod better than the script could.
_SLURM_WINS = {"DeadlineExceeded", "OOMKilled", "NodeLost", "Preempted", "BootFailure", "Cancelled", "Revoked"}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().rstrip("\n")
    except (FileNotFoundError, NotADirectoryError):
        return None


@dataclass
class ContainerStatus:
    name: str
    init: bool
    state: str  # "waiting" | "running" | "terminated"
    reason: str = ""
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    restart_count: int = 0
    last_exit_code: int | None = None
    last_finished_at: str | None = None

    def as_k8s(self) -> dict[str, Any]:
        if self.state == "running":
            state: dict[str, Any] = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {"terminated": {"exitCode": self.exit_code, "reason": self.reason,
                                    "startedAt": self.started_at, "finishedAt": self.finished_at}}
        else:
            state = {"waiting": {"reason": self.reason}}
        out: dict[str, Any] = {"name": self.name, "state": state, "restartCount": self.restart_count,
                               "ready": self.state == "running" and not self.init, "started": self.state == "running"}
        if self.last_exit_code is not None:
            out["lastState"] = {"terminated": {"exitCode": self.last_exit_code, "finishedAt": self.last_finished_at,
                                               "reason": "Completed" if self.last_exit_code == 0 else "Error"}}
        return out


@dataclass
class PodStatus:
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    reason: str
    message: str
    exit_code: int | None
    pod_ip: str | None
    node: str | None
    started_at: str | None
    containers: list[ContainerStatus] = field(default_factory=list)
    job: JobInfo | None = None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def as_k8s(self) -> dict[str, Any]:
        status: dict[str, Any] = {"phase": self.phase}
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        if self.pod_ip:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.started_at:
            status["startTime"] = self.started_at
        status["initContainerStatuses"] = [c.as_k8s() for c in self.containers if c.init]
        status["containerStatuses"] = [c.as_k8s() for c in self.containers if not c.init]
        return status


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def container_statuses(status_dir: Path, containers: Sequence[tuple[str, bool]], *, oom: bool,
                       pod_finished: bool) -> list[ContainerStatus]:
    out = []
    for name, init in containers:
        started = _read(status_dir / f"{name}.started")
        code = _int(_read(status_dir / f"{name}.exitcode"))
        cs = ContainerStatus(name=name, init=init, state="waiting", started_at=started,
                             restart_count=_int(_read(status_dir / f"{name}.restarts")) or 0,
                             last_exit_code=_int(_read(status_dir / f"{name}.last-exitcode")),
                             last_finished_at=_read(status_dir / f"{name}.last-finished"))
        if code is not None:
            cs.state, cs.exit_code = "terminated", code
            cs.finished_at = _read(status_dir / f"{name}.finished")
            cs.reason = "Completed" if code == 0 else ("OOMKilled" if oom and code in (137, 9) else "Error")
        elif started is not None:
            cs.state = "running"
        else:
            cs.reason = "PodInitializing" if not init else "Waiting"
            if pod_finished:
                cs.reason = "NotStarted"
        out.append(cs)
    return out


def read_pod_status(pod_dir: Path, containers: Sequence[tuple[str, bool]], job: JobInfo | None, *,
                    job_known: bool = True) -> PodStatus:
    """Combine the status files of ``pod_dir`` with Slurm's ``job`` info.

    ``containers`` lists (name, is_init) in spec order. ``job`` is Slurm's latest view (``None``
    when Slurm has no record); ``job_known=False`` means Slurm was not asked (files only).
    """
    sd = pod_dir / "status"
    outcome: PodOutcome | None = pod_outcome(job) if job_known else None
    done = _int(_read(sd / "pod.done"))
    failed = _read(sd / "pod.failed")
    started_at = _read(sd / "job.started")
    oom = outcome is not None and outcome.reason == "OOMKilled"
    finished = done is not None or (outcome is not None and outcome.phase in ("Succeeded", "Failed"))
    cs = container_statuses(sd, containers, oom=oom, pod_finished=finished)
    ip = _read(sd / "pod.ip")
    node = _read(sd / "job.node") or (job.nodes if job else None)

    def make(phase: str, reason: str, message: str, code: int | None) -> PodStatus:
        return PodStatus(phase, reason, message, code, ip, node, started_at, cs, job)

    if outcome is not None and outcome.phase == "Failed" and outcome.reason in _SLURM_WINS:
        return make("Failed", outcome.reason, outcome.message, outcome.exit_code)
    if done is not None:
        if failed:
            reason, _, message = failed.partition("\n")
            return make("Failed", reason, message, done)
        if done == 0:
            return make("Succeeded", "Completed", "all containers exited with code 0", 0)
        bad = [c for c in cs if c.state == "terminated" and c.exit_code]
        msg = ", ".join(f"container {c.name} exited with code {c.exit_code}" for c in bad) or f"exit code {done}"
        return make("Failed", "Error", msg, done)
    if outcome is None:
        if started_at:
            return make("Running", "", "the job is running (Slurm not asked)", None)
        return make("Pending", "Submitted", "waiting for the job to start", None)
    if outcome.phase in ("Succeeded", "Failed"):
        # The job ended but its script never wrote pod.done: it died before or outside the script.
        if failed:
            reason, _, message = failed.partition("\n")
            return make("Failed", reason, message, outcome.exit_code)
        if outcome.phase == "Succeeded":
            return make("Failed", "JobFailed", "the job ended without writing the pod's status; see logs/slurm.out",
                        outcome.exit_code)
        return make("Failed", outcome.reason, outcome.message, outcome.exit_code)
    if outcome.phase == "Pending" and not started_at:
        return make("Pending", outcome.reason, outcome.message, None)
    if started_at:
        return make("Running", "", f"running on {node}" if node else "running", None)
    return make(outcome.phase, outcome.reason, outcome.message, None)


def containers_of(pod: Mapping[str, Any]) -> list[tuple[str, bool]]:
    spec = pod.get("spec") or {}
    return [(c.get("name", ""), True) for c in spec.get("initContainers") or []] + [
        (c.get("name", ""), False) for c in spec.get("containers") or []]

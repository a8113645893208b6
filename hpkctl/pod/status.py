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

from hpkctl.pod import paths as f
from hpkctl.pod.outcome import PodOutcome, SlurmFacts, pod_outcome
from hpkctl.pod.paths import PodDir, read_int

# Slurm outcomes that explain the end of the pod better than the script could.
_SLURM_WINS = {"DeadlineExceeded", "OOMKilled", "NodeLost", "Preempted", "BootFailure", "Cancelled", "Revoked"}


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
    job: SlurmFacts | None = None

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


def container_statuses(pd: PodDir, containers: Sequence[tuple[str, bool]], *, oom: bool,
                       pod_finished: bool) -> list[ContainerStatus]:
    out = []
    for name, init in containers:
        started = pd.read_container(name, f.STARTED)
        code = read_int(pd.read_container(name, f.EXITCODE))
        cs = ContainerStatus(name=name, init=init, state="waiting", started_at=started,
                             restart_count=read_int(pd.read_container(name, f.RESTARTS)) or 0,
                             last_exit_code=read_int(pd.read_container(name, f.LAST_EXITCODE)),
                             last_finished_at=pd.read_container(name, f.LAST_FINISHED))
        if code is not None:
            cs.state, cs.exit_code = "terminated", code
            cs.finished_at = pd.read_container(name, f.FINISHED)
            cs.reason = "Completed" if code == 0 else ("OOMKilled" if oom and code in (137, 9) else "Error")
        elif started is not None:
            cs.state = "running"
        else:
            cs.reason = "PodInitializing" if not init else "Waiting"
            if pod_finished:
                cs.reason = "NotStarted"
        out.append(cs)
    return out


def read_pod_status(pod_dir: Path, containers: Sequence[tuple[str, bool]], job: SlurmFacts | None, *,
                    job_known: bool = True) -> PodStatus:
    """Combine the status files of ``pod_dir`` with Slurm's ``job`` info.

    ``containers`` lists (name, is_init) in spec order. ``job`` is Slurm's latest view (``None``
    when Slurm has no record); ``job_known=False`` means Slurm was not asked (files only).
    """
    pd = PodDir(pod_dir)
    outcome: PodOutcome | None = pod_outcome(job) if job_known else None
    done = read_int(pd.read(f.POD_DONE))
    failed = pd.read(f.POD_FAILED)
    started_at = pd.read(f.JOB_STARTED)
    oom = outcome is not None and outcome.reason == "OOMKilled"
    finished = done is not None or (outcome is not None and outcome.phase in ("Succeeded", "Failed"))
    cs = container_statuses(pd, containers, oom=oom, pod_finished=finished)
    ip = pd.read(f.POD_IP)
    node = pd.read(f.JOB_NODE) or (job.nodes if job else None)

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


def restart_policies(pod: Mapping[str, Any]) -> dict[str, str]:
    """Each container's effective restart policy (init containers of ``Always`` pods retry on failure)."""
    spec = pod.get("spec") or {}
    pod_policy = spec.get("restartPolicy") or "Always"
    out = {c.get("name", ""): ("OnFailure" if pod_policy == "Always" else pod_policy)
           for c in spec.get("initContainers") or []}
    out.update({c.get("name", ""): pod_policy for c in spec.get("containers") or []})
    return out


def container_done(pd: PodDir, name: str, *, policy: str) -> bool:
    """Whether the container ended and will not run again, so its log is complete.

    An exit code alone is not enough: under ``Always`` (or ``OnFailure`` after a failure) the job
    restarts the container after a back-off, and ``logs -f`` must keep following across it.
    """
    if pd.exists(f.POD_DONE):
        return True
    code = read_int(pd.read_container(name, f.EXITCODE))
    if code is None:
        return False
    if pd.exists(f.POD_TERMINATING):
        return True
    return policy == "Never" or (policy == "OnFailure" and code == 0)

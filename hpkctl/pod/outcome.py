"""Slurm job states → Kubernetes pod phases, with a reason and a sentence for humans.

A state this table does not know (a newer Slurm) gives phase ``Unknown`` instead of an exception,
so one surprising job never stops status reporting for the others.

The pod's own status files are the ground truth for container exit codes (DEVELOPERS.md); Slurm's
view wins for what only Slurm knows: the time limit (``DeadlineExceeded``), the memory limit
(``OOMKilled``), node failures, preemption, cancellation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]

# Exit code reported for OUT_OF_MEMORY: the kernel's OOM killer sends SIGKILL (128 + 9), which is
# what Kubernetes shows for OOMKilled. Slurm itself records its private marker 0:125 (SIG_OOM).
OOM_EXIT_CODE = 137


class SlurmFacts(Protocol):
    """What pod status needs to know of its Slurm job (:class:`hpkctl.jobs.JobInfo` has all of it).

    A protocol, not an import: :mod:`hpkctl.pod` never imports :mod:`hpkctl.jobs`, which runs
    processes (an import-linter contract in pyproject.toml). ``state`` is Slurm's base state,
    ``reason`` its reason code or ``""``, ``exit_code``/``signal`` the halves of ``ExitCode=rc:sig``
    (``None`` when unknown), ``nodes`` the node list or ``""``.
    """

    @property
    def state(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def signal(self) -> int | None: ...
    @property
    def nodes(self) -> str: ...


@dataclass(frozen=True)
class PodOutcome:
    """A pod phase with a CamelCase ``reason`` and a sentence for humans (``kubectl describe``).

    ``exit_code`` is the job's exit code as a shell reports it (128 + signal when killed by a
    signal), ``None`` when Slurm did not say.
    """

    phase: Phase
    reason: str
    message: str
    exit_code: int | None = None


# Pending reasons that will not go away by waiting: say what to change.
_PENDING_HINTS = {
    "PartitionTimeLimit": "the requested time is above the partition's MaxTime: lower the pod's "
    "activeDeadlineSeconds or slurm.default_time, or set slurm.max_time in the profile",
    "PartitionConfig": "the request (CPUs, memory, nodes) exceeds what the partition's nodes offer: "
    "lower the pod's resources or choose another partition (slurm.partition)",
    "PartitionNodeLimit": "the node count is outside the partition's limits",
    "BadConstraints": "no node can satisfy the constraints (features, memory, GPUs) of the request",
    "DependencyNeverSatisfied": "a job this one depends on failed; it will never start",
    "InvalidAccount": "the account is not valid here: check slurm.account in the profile",
    "InvalidQOS": "the QOS is not valid here: check slurm.qos in the profile",
    "JobHeldUser": "the job is held (scontrol release <id> lets it run)",
    "JobHeldAdmin": "an administrator holds the job",
    "ReqNodeNotAvail": "a required node is down, drained or reserved",
}
_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

_ACTIVE = {
    "RUNNING": ("", "the job is running"),
    "CONFIGURING": ("Configuring", "Slurm is preparing the allocated nodes (e.g. booting them)"),
    "COMPLETING": ("Completing", "the job's processes ended; Slurm is cleaning up (epilog)"),
    "SUSPENDED": ("Suspended", "Slurm suspended the job; its processes are stopped until it is resumed"),
    "STOPPED": ("Stopped", "the job was stopped (SIGSTOP) and keeps its resources"),
    "SIGNALING": ("Signaling", "Slurm is delivering a signal to the job"),
    "RESIZING": ("Resizing", "the job's allocation is being resized"),
    "STAGE_OUT": ("StagingOut", "the job ended; Slurm is staging out its burst buffer"),
}
_REQUEUED = {
    "REQUEUED": ("Requeued", "Slurm requeued the job; it will start again"),
    "REQUEUE_HOLD": ("RequeueHold", "the job was requeued and is held"),
    "REQUEUE_FED": ("Requeued", "the job is being requeued by the federation"),
    "RESV_DEL_HOLD": ("ReservationDeleted", "the job's reservation was deleted; the job is held"),
    "SPECIAL_EXIT": ("SpecialExit", "the job exited with a special exit code and was requeued on hold"),
}
_FAILED = {
    "CANCELLED": ("Cancelled", "the Slurm job was cancelled (scancel or an administrator)"),
    "TIMEOUT": ("DeadlineExceeded", "the job reached its Slurm time limit (activeDeadlineSeconds or slurm.default_time)"),
    "DEADLINE": ("DeadlineExceeded", "the job reached its Slurm deadline (--deadline)"),
    "OUT_OF_MEMORY": ("OOMKilled", "the job exceeded its memory limit and was killed"),
    "NODE_FAIL": ("NodeLost", "a node of the job failed"),
    "PREEMPTED": ("Preempted", "the job was preempted by a higher-priority job"),
    "BOOT_FAIL": ("BootFailure", "the job's nodes failed to boot"),
    "REVOKED": ("Revoked", "Slurm revoked the job (federation: it runs on another cluster)"),
}


def _shell_exit_code(info: SlurmFacts) -> int | None:
    if info.exit_code is None:
        return None
    if info.signal and 0 < info.signal < 65:
        return 128 + info.signal
    return info.exit_code


def _ended(info: SlurmFacts) -> str:
    """Text such as ' (exit code 3)' or ' (killed by signal 9)' for a message; '' when unknown."""
    if info.exit_code is None:
        return ""
    if info.signal:
        return f" (killed by signal {info.signal})"
    return f" (exit code {info.exit_code})"


def pod_outcome(info: SlurmFacts | None) -> PodOutcome:
    """The pod phase for a job as Slurm last reported it; ``None`` means Slurm has no record."""
    if info is None:
        return PodOutcome(
            "Failed",
            "JobVanished",
            "Slurm has no record of the job: it left the queue (MinJobAge) and neither sacct "
            "nor the jobcomp file (slurm.jobcomp_file in the profile) knows it, or it was cancelled "
            "from outside hpkctl before it started (an element of a job array leaves no trace then)",
        )
    state = info.state
    slurm_reason = f"; Slurm reason: {info.reason}" if info.reason else ""
    if state == "PENDING":
        reason = info.reason if info.reason and _IDENT.match(info.reason) else "Pending"
        message = f"waiting in Slurm's queue: {info.reason or 'no reason given'}"
        if info.reason in _PENDING_HINTS:
            message += f" ({_PENDING_HINTS[info.reason]})"
        return PodOutcome("Pending", reason, message)
    if state in _REQUEUED:
        reason, message = _REQUEUED[state]
        return PodOutcome("Pending", reason, message + slurm_reason)
    if state in _ACTIVE:
        reason, message = _ACTIVE[state]
        return PodOutcome("Running", reason, message, _shell_exit_code(info) if state == "COMPLETING" else None)
    if state == "COMPLETED":
        return PodOutcome("Succeeded", "Completed", "the job completed successfully", _shell_exit_code(info))
    if state == "FAILED":
        return PodOutcome("Failed", "Error", f"the job failed{_ended(info)}{slurm_reason}", _shell_exit_code(info))
    if state in _FAILED:
        reason, message = _FAILED[state]
        code = OOM_EXIT_CODE if state == "OUT_OF_MEMORY" else _shell_exit_code(info)
        return PodOutcome("Failed", reason, message + slurm_reason, code)
    return PodOutcome(
        "Unknown",
        "UnknownSlurmState",
        f"Slurm reports job state {info.state or '(empty)'!r}, which hpkctl does not know{slurm_reason}",
    )


STEP_ID = re.compile(r"^[0-9]+\.[0-9]+$")  # status/job.id of a pilot pod: its step J.S of an allocation


def allocation_ended(outcome: PodOutcome, job: SlurmFacts | None, spec: Mapping[str, Any]) -> PodOutcome:
    """A pilot pod whose allocation reached its time limit: not the pod's deadline (Slurm's TIMEOUT is
    the allocation's), but the node going away under it, which the kubelet's graceful node shutdown
    reports as reason ``Terminated``; the message names the allocation and what keeps a pod out of
    one that ends before it."""
    job_id = getattr(job, "job_id", "") or "?"
    fix = ("its activeDeadlineSeconds should have kept it out of an allocation ending before it (a clock "
           "moved, or it was adopted): raise [pilot] time_limit in the site profile"
           if spec.get("activeDeadlineSeconds") else
           "a pod without activeDeadlineSeconds is placed where its allocation has [pilot] renewal_margin "
           "left: give the pod an activeDeadlineSeconds that covers its run (it then goes only where the "
           "allocation outlasts it), or raise [pilot] renewal_margin or time_limit in the site profile")
    return PodOutcome("Failed", "Terminated",
                      f"Pod was terminated in response to the end of its node: pilot allocation {job_id} "
                      f"reached its Slurm time limit; {fix}", outcome.exit_code)

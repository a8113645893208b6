"""Slurm job state → pod phase, for every state Slurm 22.05 documents."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hpkctl.jobs import JobInfo
from hpkctl.pod.outcome import PodOutcome, pod_outcome
from hpkctl.jobs.parse import parse_scontrol
from hpkctl.jobs.states import ACTIVE_STATES, ALL_STATES, PENDING_STATES, TERMINAL_STATES

CAPTURED = Path(__file__).parent.parent / "jobs" / "fixtures"


@pytest.fixture
def fixture_text() -> Callable[[str], str]:
    """Slurm output captured from a real cluster (tests/jobs/fixtures)."""
    return lambda name: (CAPTURED / name).read_text()

# "JOB STATE CODES" of squeue(1), Slurm 22.05.8 (Debian 12's /usr/share/man/man1/squeue.1.gz).
SLURM_22_05_STATES = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "CONFIGURING", "COMPLETING", "DEADLINE", "FAILED",
    "NODE_FAIL", "OUT_OF_MEMORY", "PENDING", "PREEMPTED", "RUNNING", "RESV_DEL_HOLD", "REQUEUE_FED",
    "REQUEUE_HOLD", "REQUEUED", "RESIZING", "REVOKED", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT",
    "STOPPED", "SUSPENDED", "TIMEOUT",
}  # fmt: skip


def job(state: str, **kw: object) -> JobInfo:
    return JobInfo(job_id="1", state=state, **kw)  # type: ignore[arg-type]


def test_every_documented_state_is_mapped() -> None:
    assert len(SLURM_22_05_STATES) == 24
    assert ALL_STATES == SLURM_22_05_STATES
    assert not (PENDING_STATES & ACTIVE_STATES or PENDING_STATES & TERMINAL_STATES or ACTIVE_STATES & TERMINAL_STATES)
    for state in SLURM_22_05_STATES:
        outcome = pod_outcome(job(state, exit_code=0, signal=0))
        assert outcome.phase != "Unknown", state
        assert outcome.message
        assert (outcome.phase in ("Succeeded", "Failed")) == (state in TERMINAL_STATES), state


@pytest.mark.parametrize(
    ("state", "phase", "reason"),
    [
        ("RUNNING", "Running", ""),
        ("CONFIGURING", "Running", "Configuring"),
        ("COMPLETING", "Running", "Completing"),
        ("SUSPENDED", "Running", "Suspended"),
        ("STOPPED", "Running", "Stopped"),
        ("COMPLETED", "Succeeded", "Completed"),
        ("FAILED", "Failed", "Error"),
        ("CANCELLED", "Failed", "Cancelled"),
        ("TIMEOUT", "Failed", "DeadlineExceeded"),
        ("DEADLINE", "Failed", "DeadlineExceeded"),
        ("OUT_OF_MEMORY", "Failed", "OOMKilled"),
        ("NODE_FAIL", "Failed", "NodeLost"),
        ("PREEMPTED", "Failed", "Preempted"),
        ("BOOT_FAIL", "Failed", "BootFailure"),
        ("REQUEUED", "Pending", "Requeued"),
        ("SPECIAL_EXIT", "Pending", "SpecialExit"),
    ],
)
def test_state_mapping(state: str, phase: str, reason: str) -> None:
    outcome = pod_outcome(job(state))
    assert (outcome.phase, outcome.reason) == (phase, reason)


def test_pending_uses_slurms_reason() -> None:
    outcome = pod_outcome(job("PENDING", reason="Resources"))
    assert outcome == PodOutcome("Pending", "Resources", "waiting in Slurm's queue: Resources")
    assert pod_outcome(job("PENDING", reason="Priority")).message == "waiting in Slurm's queue: Priority"


def test_pending_without_a_word_for_a_reason() -> None:
    long = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    outcome = pod_outcome(job("PENDING", reason=long))
    assert outcome.reason == "Pending" and long in outcome.message
    assert pod_outcome(job("PENDING")).reason == "Pending"


def test_pending_that_will_not_start_says_what_to_change() -> None:
    outcome = pod_outcome(job("PENDING", reason="PartitionTimeLimit"))
    assert outcome.phase == "Pending" and "activeDeadlineSeconds" in outcome.message
    assert "slurm.partition" in pod_outcome(job("PENDING", reason="PartitionConfig")).message


def test_failed_reports_exit_code_or_signal() -> None:
    exited = pod_outcome(job("FAILED", reason="NonZeroExitCode", exit_code=3, signal=0))
    assert exited.exit_code == 3 and "exit code 3" in exited.message and "NonZeroExitCode" in exited.message
    killed = pod_outcome(job("FAILED", exit_code=0, signal=9))
    assert killed.exit_code == 137 and "signal 9" in killed.message
    unknown = pod_outcome(job("FAILED"))
    assert unknown.exit_code is None and unknown.reason == "Error"


def test_oom_reports_137_not_slurms_marker(fixture_text) -> None:
    info = parse_scontrol(fixture_text("scontrol_out_of_memory.txt"), "17")
    assert info is not None and info.signal == 125
    assert pod_outcome(info) == PodOutcome(
        "Failed", "OOMKilled", "the job exceeded its memory limit and was killed; Slurm reason: OutOfMemory", 137
    )


def test_real_timeout_is_deadline_exceeded(fixture_text) -> None:
    info = parse_scontrol(fixture_text("scontrol_timeout.txt"), "16")
    outcome = pod_outcome(info)
    assert (outcome.phase, outcome.reason) == ("Failed", "DeadlineExceeded")


def test_vanished_job() -> None:
    outcome = pod_outcome(None)
    assert (outcome.phase, outcome.reason) == ("Failed", "JobVanished")
    assert "no record" in outcome.message and "slurm.jobcomp_file" in outcome.message


@pytest.mark.parametrize("state", ["SOMETHING_NEW", "", "PENDING_LATER"])
def test_unknown_state_is_unknown_phase(state: str) -> None:
    outcome = pod_outcome(job(state))
    assert (outcome.phase, outcome.reason) == ("Unknown", "UnknownSlurmState")

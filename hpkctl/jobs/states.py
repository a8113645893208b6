"""Slurm's job states, grouped by what they mean for a job's life: waiting, active, ended.

Covers all 24 job states of Slurm 22.05 (``JOB STATE CODES`` in squeue(1)). What a state means to
the layers above is decided there; this module only knows jobs.
"""

from __future__ import annotations

PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})
ACTIVE_STATES = frozenset(
    {"CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "REVOKED",
    }
)
ALL_STATES = PENDING_STATES | ACTIVE_STATES | TERMINAL_STATES


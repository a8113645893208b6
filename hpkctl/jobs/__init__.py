"""Slurm, and only Slurm: submit, query, cancel and final states of jobs. Knows jobs, nothing else.

This is the one package that runs Slurm commands (``Slurm`` in ``slurm.py``; how and why in
``command.py``). Everything above it gets typed values (``JobInfo``) and typed errors (``errors.py``
lists the kinds), never Slurm's text formats.
"""

from typing import TYPE_CHECKING, Any

from hpkctl.jobs.errors import (
    InvalidAccount,
    InvalidPartition,
    InvalidQos,
    NO_CLEAR_ANSWER,
    ResourcesUnavailable,
    SlurmError,
    SlurmTimeout,
    SlurmUnavailable,
    SubmitError,
    SubmitUnclear,
    TimeLimitTooLong,
)
from hpkctl.jobs.info import JobInfo, UserJob
from hpkctl.jobs.nodes import NodeInfo
from hpkctl.jobs.slurm import Slurm
from hpkctl.jobs.states import TERMINAL_STATES

if TYPE_CHECKING:
    from hpkctl.jobs.step import Step


def __getattr__(name: str) -> Any:
    """``Step`` on first use: it brings asyncio and the pty machinery, which only exec and attach
    need, not every ``hpkctl run`` (issue 23.2: the CLI imports only what its command needs)."""
    if name == "Step":
        from hpkctl.jobs.step import Step

        return Step
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "InvalidAccount",
    "InvalidPartition",
    "InvalidQos",
    "JobInfo",
    "NO_CLEAR_ANSWER",
    "NodeInfo",
    "ResourcesUnavailable",
    "Slurm",
    "SlurmError",
    "SlurmTimeout",
    "SlurmUnavailable",
    "Step",
    "SubmitError",
    "SubmitUnclear",
    "TERMINAL_STATES",
    "TimeLimitTooLong",
    "UserJob",
]

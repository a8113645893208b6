"""Slurm, and only Slurm: submit, query, cancel and final states of jobs. Knows jobs, nothing else.

This is the one package that runs Slurm commands (``Slurm`` in ``slurm.py``; how and why in
``command.py``). Everything above it gets typed values (``JobInfo``) and typed errors (``errors.py``
lists the kinds), never Slurm's text formats.
"""

from hpkctl.jobs.errors import (
    InvalidAccount,
    InvalidPartition,
    InvalidQos,
    ResourcesUnavailable,
    SlurmError,
    SlurmTimeout,
    SlurmUnavailable,
    SubmitError,
    TimeLimitTooLong,
)
from hpkctl.jobs.info import JobInfo, UserJob
from hpkctl.jobs.nodes import NodeInfo
from hpkctl.jobs.slurm import Slurm
from hpkctl.jobs.states import TERMINAL_STATES
from hpkctl.jobs.step import Step

__all__ = [
    "InvalidAccount",
    "InvalidPartition",
    "InvalidQos",
    "JobInfo",
    "NodeInfo",
    "ResourcesUnavailable",
    "Slurm",
    "SlurmError",
    "SlurmTimeout",
    "SlurmUnavailable",
    "Step",
    "SubmitError",
    "TERMINAL_STATES",
    "TimeLimitTooLong",
    "UserJob",
]

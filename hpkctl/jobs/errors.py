"""Errors raised by Slurm commands, typed so callers can tell "retry later" from "fix the request".

Two families:

* ``SlurmUnavailable`` / ``SlurmTimeout``: Slurm itself is not answering (binary missing,
  slurmctld down, munge down, overloaded controller). Nothing is wrong with the pod; retry later.
* ``SubmitError`` and its subclasses: sbatch answered and refused *this* job. Retrying the same
  request fails the same way; the profile or the pod manifest has to change. Each carries a
  CamelCase ``reason`` that the kubelet can put on the pod status unchanged.

Every message keeps Slurm's own text, because that is what a site's documentation and its admins
recognise ("Invalid account or account/partition combination specified").
"""

from __future__ import annotations

from collections.abc import Sequence

from hpkctl.errors import HpkError


class SlurmError(HpkError):
    """A Slurm command failed in a way no more specific class describes.

    ``command`` is the argument vector that ran, ``returncode`` and ``stderr`` what it gave back
    (``returncode`` is ``None`` when the command never ran or was killed).
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        command: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message, hint=hint)
        self.command = tuple(command)
        self.returncode = returncode
        self.stderr = stderr


class SlurmUnavailable(SlurmError):
    """Slurm cannot be used right now: a command is missing, or slurmctld/munge does not answer."""


class SlurmTimeout(SlurmUnavailable):
    """A Slurm command ran longer than ``slurm.command_timeout`` and was killed.

    A subclass of ``SlurmUnavailable`` because the usual cause is an overloaded or unreachable
    slurmctld. Careful with ``sbatch``: the controller may have accepted the job before the client
    gave up, so a blind resubmission can start the pod twice.
    """


class SubmitError(SlurmError):
    """sbatch refused the job. ``reason`` is a CamelCase word for the pod status."""

    default_reason = "SubmitFailed"

    def __init__(self, message: str, *, reason: str = "", **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.reason = reason or self.default_reason


class InvalidPartition(SubmitError):
    """The partition does not exist or this user may not use it."""

    default_reason = "InvalidPartition"


class InvalidAccount(SubmitError):
    """The account (budget) does not exist, or the user has no association with it here."""

    default_reason = "InvalidAccount"


class InvalidQos(SubmitError):
    """The QOS does not exist or is not allowed for the user's association."""

    default_reason = "InvalidQos"


class TimeLimitTooLong(SubmitError):
    """The requested ``--time`` is above what the partition, QOS or association allows."""

    default_reason = "TimeLimitTooLong"


class ResourcesUnavailable(SubmitError):
    """No node of the partition can ever satisfy the request (memory, CPUs, nodes, GPUs)."""

    default_reason = "ResourcesUnavailable"

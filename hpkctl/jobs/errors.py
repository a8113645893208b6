"""Errors raised by Slurm commands, typed so callers can tell "retry later" from "fix the request".

The kinds (all ``SlurmError``, itself an ``HpkError`` with ``message`` and ``hint``):

===================== ======================================================== =====================
class                 meaning                                                  ``reason``
===================== ======================================================== =====================
SlurmError            a command failed in a way nothing below describes        (none)
SlurmUnavailable      Slurm cannot be used now: command missing, slurmctld or  (none)
                      munge not answering. Retry later.
SlurmTimeout          (a SlurmUnavailable) a command ran past                  (none)
                      ``slurm.command_timeout`` and was killed
SubmitError           sbatch refused this job; the same request fails again    ``SubmitFailed``, or
                                                                               ``AccountingPolicy``
InvalidPartition      (a SubmitError) no such partition, or not allowed        ``InvalidPartition``
InvalidAccount        (a SubmitError) no such account/association              ``InvalidAccount``
InvalidQos            (a SubmitError) no such QOS, or not allowed              ``InvalidQos``
TimeLimitTooLong      (a SubmitError) ``--time`` above the allowed maximum     ``TimeLimitTooLong``
ResourcesUnavailable  (a SubmitError) no node can ever hold the request        ``ResourcesUnavailable``
===================== ======================================================== =====================

Hints name only what this layer knows: ``slurm.*`` keys of the site profile and "the job's sbatch
options". ``hint`` is a plain writable attribute: a caller that knows where the options came from
(and what else could change them) replaces or extends it before showing the error.

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
    gave up, so a blind resubmission can run the job twice.
    """


class SubmitUnclear(SlurmUnavailable):
    """sbatch's answer was cut off (the connection broke mid-request, or sbatch was killed by a
    signal): as after a timeout, the job may exist, and the caller looks for it (its uid is in the
    job's comment) instead of submitting again."""


#: what a caller of sbatch catches when it gave no answer (timed out, or cut off): the job may exist,
#: so the caller keeps what names it and looks for it by uid instead of submitting again
NO_CLEAR_ANSWER: tuple[type[SlurmError], ...] = (SlurmTimeout, SubmitUnclear)


class SubmitError(SlurmError):
    """sbatch refused the job. ``reason`` is a CamelCase word a caller can show as a status reason."""

    default_reason = "SubmitFailed"

    def __init__(
        self,
        message: str,
        *,
        reason: str = "",
        hint: str = "",
        command: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message, hint=hint, command=command, returncode=returncode, stderr=stderr)
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

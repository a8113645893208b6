"""``sbatch``: submitting a script, and turning sbatch's refusals into typed errors.

The hints here name only what this layer knows: ``slurm.*`` keys of the site profile and "the
job's sbatch options" (the ``extra_args`` a caller passes). A caller that knows where those options
came from adds its own advice to the error's writable ``hint``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from hpkctl.jobs.command import MID_REQUEST, UNREACHABLE, UNREACHABLE_HINT, Commands, Completed, failure, slurm_text
from hpkctl.jobs.errors import (
    InvalidAccount,
    InvalidPartition,
    InvalidQos,
    ResourcesUnavailable,
    SlurmError,
    SubmitError,
    SubmitUnclear,
    TimeLimitTooLong,
)
from hpkctl.jobs.info import is_job_id

log = logging.getLogger(__name__)

_OPTIONS = "the job's sbatch options"
_RESOURCES_HINT = (
    f"no node of the partition can hold the request: ask for less (CPUs, memory, nodes or GPUs in {_OPTIONS}), "
    "or choose a partition with bigger nodes (slurm.partition; `sinfo -o '%P %c %m %G'` lists them)"
)
# (text in sbatch's stderr, lower case) → (error class, hint, reason override)
SUBMIT_ERRORS: tuple[tuple[str, type[SubmitError], str, str], ...] = (
    (
        "invalid partition",
        InvalidPartition,
        f"set slurm.partition in the profile to a partition that exists (`sinfo -s` lists them), "
        f"or fix --partition in {_OPTIONS}",
        "",
    ),
    (
        "not permitted to use this partition",
        InvalidPartition,
        f"choose a partition your group may use: slurm.partition in the profile or --partition in {_OPTIONS}",
        "",
    ),
    (
        "invalid account",
        InvalidAccount,
        f"set slurm.account in the profile (or --account in {_OPTIONS}) to an account you belong to "
        "on this cluster: `sacctmgr show assoc user=$USER format=cluster,account,partition`",
        "",
    ),
    (
        "invalid qos",
        InvalidQos,
        f"set slurm.qos in the profile (or --qos in {_OPTIONS}) to a QOS your association allows "
        "(`sacctmgr show assoc user=$USER format=account,qos`), or leave it empty for the default",
        "",
    ),
    (
        "requested time limit is invalid",
        TimeLimitTooLong,
        f"request less time: lower --time in {_OPTIONS}, or slurm.default_time in the profile; "
        "set slurm.max_time to the partition's MaxTime (`sinfo -o '%P %l'`) so hpkctl catches this "
        "before submitting",
        "",
    ),
    ("requested node configuration is not available", ResourcesUnavailable, _RESOURCES_HINT, ""),
    ("more processors requested than permitted", ResourcesUnavailable, _RESOURCES_HINT, ""),
    ("memory required by task is not available", ResourcesUnavailable, _RESOURCES_HINT, ""),
    ("node count specification invalid", ResourcesUnavailable, _RESOURCES_HINT, ""),
    (
        "invalid generic resource",
        ResourcesUnavailable,
        "the GPU/gres request is unknown here: check gpu.gres_name and gpu.extended_resources in the "
        "profile against `sinfo -o '%P %G'`",
        "",
    ),
    (
        "job violates accounting/qos policy",
        SubmitError,
        "the job exceeds a limit of your account or QOS (jobs in the queue, size or time): lower the "
        "request or wait for other jobs; `sacctmgr show assoc user=$USER` shows the limits",
        "AccountingPolicy",
    ),
)


def sbatch(commands: Commands, script: Path, *, extra_args: Sequence[str] = (), workdir: Path | None = None,
           script_args: Sequence[str] = ()) -> str:
    """``sbatch --parsable [extra_args] [--chdir=workdir] script [script_args]``; the job id (see
    ``Slurm.submit``)."""
    args = ["--parsable", *extra_args]
    if workdir is not None:
        args.append(f"--chdir={workdir}")
    args += [str(Path(script).absolute()), *script_args]
    done = commands.run("sbatch", args)
    if done.returncode != 0:
        raise submit_error(done)
    lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
    job_id = lines[-1].split(";", 1)[0].strip() if lines else ""
    if not is_job_id(job_id):
        raise SlurmError(
            f"sbatch succeeded but printed no job id: {done.stdout.strip()!r}",
            hint="a site wrapper around sbatch may print extra text; set slurm.bin_dir to Slurm's own commands",
            command=done.argv,
            returncode=done.returncode,
            stderr=done.stderr,
        )
    if done.stderr.strip():
        log.warning("sbatch accepted job %s with messages: %s", job_id, slurm_text(done.stderr))
    return job_id


def sbatch_test_only(commands: Commands, script: Path, *, extra_args: Sequence[str] = ()) -> str:
    """``sbatch --test-only [extra_args] script``: would Slurm take the job (partition, account, time,
    resources), and when would it start? Slurm's answer (``Job N to start at T using C processors on
    nodes X in partition P``); nothing is queued (Slurm only uses up a job id). A refusal raises the
    same errors as :func:`sbatch`."""
    done = commands.run("sbatch", ["--test-only", *extra_args, str(Path(script).absolute())])
    if done.returncode != 0:
        raise submit_error(done)
    text = slurm_text(done.stderr) or slurm_text(done.stdout)
    return text[len("sbatch: "):] if text.startswith("sbatch: ") else text


def submit_error(done: Completed) -> SlurmError:
    """The error for a failed sbatch: a ``SubmitError`` when Slurm refused it (none was made: a known
    refusal, or sbatch's own exit status 1); ``SubmitUnclear`` when the answer was cut off (the
    connection broke mid-request, or sbatch, or a site's wrapper around it, was killed by a signal), so
    the job may exist and the caller must look for it rather than submit again; ``SlurmUnavailable``
    when the controller was not reached. A known refusal wins over connection noise printed beside it."""
    low = done.stderr.lower()
    known = next(((kind, kind_hint, reason) for needle, kind, kind_hint, reason in SUBMIT_ERRORS if needle in low), None)
    killed = done.returncode < 0 or done.returncode > 128  # a signal's (a shell's: 128 + it)
    if known is None and (killed or any(n in low for n in MID_REQUEST)):
        text = slurm_text(done.stderr) or f"exit status {done.returncode}"
        return SubmitUnclear(f"sbatch's answer was cut off ({text}): the job may exist", command=done.argv,
                             hint="look for it (`squeue --me`) before submitting again; " + UNREACHABLE_HINT,
                             returncode=done.returncode, stderr=done.stderr)
    if known is None and any(n in low for n in UNREACHABLE):
        return failure(done)  # the controller was not reached: no job
    message = f"sbatch refused the job: {slurm_text(done.stderr) or f'exit status {done.returncode}'}"
    hint = f"check the generated script and {_OPTIONS} (slurm.* in the profile); reproduce with: {' '.join(done.argv)}"
    cls, reason = SubmitError, ""
    if known is not None:
        cls, hint, reason = known
    return cls(message, hint=hint, reason=reason, command=done.argv, returncode=done.returncode, stderr=done.stderr)

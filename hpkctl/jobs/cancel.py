"""``scancel``: cancel a job or a step, or send a signal to it; ``scontrol update``: lower a job's time limit."""

from __future__ import annotations

import logging
import re

from hpkctl.jobs.command import Commands, failure, slurm_text
from hpkctl.jobs.query import check_id
from hpkctl.jobs.steps import is_step_id
from hpkctl.sites.schema import seconds_to_slurm_time

log = logging.getLogger(__name__)

# scancel's ways of saying "nothing left to cancel"
_ALREADY_DONE = ("already completing or completed", "job has already finished", "invalid job id specified")
_SIGNAL = re.compile(r"^(SIG)?[A-Z0-9+]+$")


def scancel(commands: Commands, job_id: str, *, signal: str | None = None, batch_only: bool = False) -> None:
    """Cancel the job, or with ``signal`` only signal it (see ``Slurm.cancel``). ``job_id`` may be a
    step, ``J.S`` (pilot mode's pods): a signal then goes to the step's task alone (no ``--batch`` or
    ``--full``, which are about a batch job), and without one the step is killed."""
    step = is_step_id(job_id)
    if not step:
        check_id(job_id)
    args: list[str] = []
    if batch_only and (signal is None or step):
        raise ValueError("batch_only needs a signal and a job: it says which process of the job a signal goes to")
    if signal is not None:
        if not _SIGNAL.match(signal):
            raise ValueError(f"{signal!r} is not a signal name or number (e.g. TERM, SIGUSR1, 15)")
        args.append(f"--signal={signal}")
        if not step:
            args.append("--batch" if batch_only else "--full")
    args.append(job_id)
    done = commands.run("scancel", args)
    if done.returncode == 0:
        return
    if any(s in done.stderr.lower() for s in _ALREADY_DONE):
        log.debug("scancel %s: job already gone: %s", job_id, slurm_text(done.stderr))
        return
    error = failure(done)
    if "permission denied" in done.stderr.lower():
        error.hint = ("only the job's owner (or a Slurm operator) can cancel it: "
                      "run hpkctl as the user that submitted it")
    raise error


def shorten(commands: Commands, job_id: str, seconds: int) -> None:
    """Lower the job's time limit to ``seconds`` (rounded up to whole minutes, as Slurm keeps it):
    ``scontrol update JobId=ID TimeLimit=...``. Its owner may lower a limit, never raise it."""
    check_id(job_id)
    if seconds <= 0:
        raise ValueError(f"a time limit of {seconds} s is not one")
    done = commands.run("scontrol", ["update", f"JobId={job_id}", f"TimeLimit={seconds_to_slurm_time(seconds)}"])
    if done.returncode != 0:
        raise failure(done)

"""Whether the site's accounting (``sacct``, slurmdbd) answers for the calling user: ``hpkctl doctor``'s
question. Asked whatever ``slurm.use_sacct`` says: a profile may read no final states from sacct while
the site still has it, and the user still sees their pods in it."""

from __future__ import annotations

from dataclasses import dataclass

from hpkctl.jobs.command import Commands, slurm_text
from hpkctl.jobs.errors import SlurmTimeout, SlurmUnavailable
from hpkctl.jobs.info import UserJob
from hpkctl.jobs.parse import SACCT_COMMENT_FORMAT, parse_sacct_comments


@dataclass(frozen=True)
class AccountingAnswer:
    """What ``sacct`` said. ``enabled``: the cluster has accounting (False where sacct says "accounting
    storage is disabled" or is not installed); ``jobs``: the user's jobs it recorded, oldest first;
    ``error``: why it gave no list (slurmdbd down, a timeout, accounting off)."""

    enabled: bool
    jobs: tuple[UserJob, ...] = ()
    error: str = ""


def accounted_args(since: str) -> list[str]:
    """``sacct`` options for the calling user's jobs (allocations, not steps) since ``since``
    (``YYYY-MM-DDTHH:MM:SS``), with their comments."""
    return ["--noheader", "--parsable2", "--allocations", f"--starttime={since}", f"--format={SACCT_COMMENT_FORMAT}"]


def ask_accounting(commands: Commands, *, since: str) -> AccountingAnswer:
    """One ``sacct`` of the user's jobs since ``since``; never raises for what sacct answers."""
    try:
        done = commands.run("sacct", accounted_args(since))
    except SlurmTimeout as e:
        return AccountingAnswer(True, error=e.message)
    except SlurmUnavailable as e:
        return AccountingAnswer(False, error=e.message)
    if done.returncode != 0:
        text = slurm_text(done.stderr) or f"sacct exited with {done.returncode}"
        return AccountingAnswer("accounting storage is disabled" not in text.lower(), error=text)
    return AccountingAnswer(True, tuple(parse_sacct_comments(done.stdout)))

"""``squeue``: the current state of any number of jobs, one call per ``QUERY_CHUNK`` ids."""

from __future__ import annotations

from collections.abc import Iterable

from hpkctl.jobs.command import Commands, failure
from hpkctl.jobs.info import JobInfo, UserJob, is_job_id
from hpkctl.jobs.parse import SQUEUE_FORMAT, USER_JOBS_FORMAT, parse_squeue, parse_user_jobs

# Job ids per squeue/sacct call: keeps the command line far below ARG_MAX (2,000 ids are ~16 KB) and
# each answer bounded, while a kubelet with its 1,000 pods (the node's default capacity) still asks
# Slurm once per status round.
QUERY_CHUNK = 2000


def check_id(job_id: str) -> str:
    """``job_id`` if it is a Slurm job id (the only thing this package passes to Slurm), else ``ValueError``."""
    if not isinstance(job_id, str) or not is_job_id(job_id):
        raise ValueError(f"{job_id!r} is not a Slurm job id (digits, or digits_digits for an array task)")
    return job_id


def unique_ids(job_ids: Iterable[str]) -> list[str]:
    """``job_ids`` checked, without duplicates, in their first order."""
    return list(dict.fromkeys(check_id(j) for j in job_ids))


def chunks(ids: list[str]) -> Iterable[list[str]]:
    """``ids`` in slices of at most ``QUERY_CHUNK``."""
    return (ids[start : start + QUERY_CHUNK] for start in range(0, len(ids), QUERY_CHUNK))


def squeue(commands: Commands, job_ids: Iterable[str]) -> dict[str, JobInfo]:
    """Current state of ``job_ids`` from slurmctld (see ``Slurm.query``)."""
    found: dict[str, JobInfo] = {}
    for chunk in chunks(unique_ids(job_ids)):
        # --array: one line per array element, pending ones too (else "123_[0-9%2]" on one line)
        args = ["--noheader", "--array", "--all", "--states=all", f"--jobs={','.join(chunk)}",
                f"--format={SQUEUE_FORMAT}"]
        done = commands.run("squeue", args)
        if done.returncode != 0:
            if "invalid job id specified" in done.stderr.lower():
                continue
            raise failure(done)
        wanted = set(chunk)
        found.update({j: info for j, info in parse_squeue(done.stdout).items() if j in wanted})
    return found


def user_jobs(commands: Commands) -> list[UserJob]:
    """Every job of the calling user that slurmctld still knows, with its comment (see ``Slurm.user_jobs``)."""
    # --array: each element of an array on its own line, pending ones too ("A_i", not "A_[0-9]")
    done = commands.run("squeue", ["--noheader", "--me", "--all", "--states=all", "--array",
                                   f"--format={USER_JOBS_FORMAT}"])
    if done.returncode != 0:
        raise failure(done)
    return parse_user_jobs(done.stdout)


def allocation_id(commands: Commands, job_id: str) -> str:
    """The job id of ``job_id``'s allocation: itself, or for an array element ``A_i`` the id Slurm gave
    the element when it started (srun's ``--jobid`` takes no ``A_i``); ``job_id`` itself when squeue
    does not know it (srun then says what is wrong)."""
    if "_" not in check_id(job_id):
        return job_id
    done = commands.run("squeue", ["--noheader", "--all", "--array", f"--jobs={job_id}", "--format=%A"])
    got = done.stdout.split() if done.returncode == 0 else []
    return got[0] if len(got) == 1 and got[0].isdigit() else job_id

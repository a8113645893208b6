"""The cluster's Slurm settings that decide how pods' jobs behave: ``scontrol show config``, and a
partition's time limit."""

from __future__ import annotations

from hpkctl.jobs.command import Commands, failure
from hpkctl.jobs.query import check_id
from hpkctl.sites.schema import slurm_time_to_seconds


def show_config(commands: Commands) -> dict[str, str]:
    """``Key = Value`` lines of ``scontrol show config`` (``ProctrackType``, ``KillWait``...)."""
    done = commands.run("scontrol", ["show", "config"])
    if done.returncode != 0:
        raise failure(done)
    out: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def partition_limit(commands: Commands, partition: str) -> int | None:
    """The partition's MaxTime in seconds (``sinfo --format=%P|%l``; ``""``: the default partition,
    the one sinfo marks ``*``); None when it has none (``infinite``) or sinfo does not say."""
    args = ["--noheader", "--format=%P|%l"]
    if partition:
        args.append(f"--partition={partition}")
    done = commands.run("sinfo", args)
    if done.returncode != 0:
        raise failure(done)
    for line in done.stdout.splitlines():
        name, _, limit = line.strip().partition("|")
        if (name.rstrip("*") == partition) if partition else name.endswith("*"):
            try:
                return slurm_time_to_seconds(limit.strip())
            except ValueError:  # "infinite", "n/a"
                return None
    return None


def job_partition(commands: Commands, job_id: str) -> str:
    """The partition a job is queued in (``squeue --jobs=ID --format=%P``); "" if Slurm forgot it."""
    check_id(job_id)
    done = commands.run("squeue", ["--noheader", f"--jobs={job_id}", "--format=%P"])
    if done.returncode != 0:
        raise failure(done)
    return done.stdout.strip().splitlines()[0].strip() if done.stdout.strip() else ""

"""``scontrol show config``: the cluster's Slurm settings that decide how pods' jobs behave."""

from __future__ import annotations

from hpkctl.jobs.command import Commands, failure


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

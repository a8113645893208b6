"""Running one Slurm command: its exact environment, its timeout, and what a failure means.

* **Environment.** The caller may itself run inside a Slurm job (or from a shell where a user set
  ``SQUEUE_FORMAT``). Slurm commands read dozens of ``SLURM_*``/``SBATCH_*``/``SQUEUE_*``... variables
  as if they were options, so a leaked ``SLURM_JOB_ID`` or ``SBATCH_PARTITION`` silently changes
  what is submitted or printed. Every command runs with those variables removed and only the
  profile's ``SLURM_CONF`` added.
* **Per call, no shared state.** Commands run through plumbum on a machine whose own environment
  is empty (:mod:`hpkctl.jobs.scrubbed`, imported at the first command): the ``env=`` of the call is
  exactly what the process gets, and nothing process-wide is changed, so any number of threads may
  run commands at once, each with its own environment.
* **Timeouts.** A hung slurmctld must not hang the caller: each command gets
  ``slurm.command_timeout`` and is killed after it (``SlurmTimeout``). Each command starts in its
  own session and the whole process group is killed, so a site's wrapper script around sbatch
  cannot keep the pipes (and the caller) waiting through a child it started.

Commands are found at call time (``slurm.bin_dir``, else ``PATH``), never at import, so importing
hpkctl works on machines without Slurm.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from hpkctl.jobs.errors import SlurmError, SlurmTimeout, SlurmUnavailable
from hpkctl.sites.schema import SlurmSection

if TYPE_CHECKING:
    from hpkctl.jobs.scrubbed import Proc as _Proc

log = logging.getLogger(__name__)

# Variables Slurm's commands read as options (see ENVIRONMENT VARIABLES in sbatch(1), squeue(1),
# sacct(1), scancel(1)) and the ones slurmd sets inside a job. SLURM_CONF is among them; the
# profile's conf_file is put back after scrubbing.
SCRUBBED_PREFIXES = ("SLURM_", "SLURMD_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SACCT_", "SCANCEL_")
# ... and the job identity an array's batch script gives each element (sbatch/batch.sh.j2): a job
# submitted from inside one must not take it for its own
SCRUBBED_NAMES = frozenset({"HPK_SLURM_JOB"})

#: texts of a connection that broke mid-request (slurmctld restarting, overloaded): whether the
#: controller acted on it is unknown (for sbatch: the job may exist, :class:`SubmitUnclear`)
MID_REQUEST = (
    "socket timed out on send/recv",
    "zero bytes were transmitted or received",
    "connection reset by peer",
    "broken pipe",
)
UNREACHABLE = (
    "unable to contact slurm controller",
    "connection refused",
    "protocol authentication error",
    "transport endpoint is not connected",
    "connection timed out",
    "network is unreachable",
    "no route to host",
    *MID_REQUEST,
)
UNREACHABLE_HINT = (
    "slurmctld does not answer: check `scontrol ping` and that munge runs (`munge -n | unmunge`); "
    "if this machine needs another cluster's config, set slurm.conf_file in the profile"
)


# ---------------------------------------------------------------------------- running


class Completed(NamedTuple):
    """A command that ran to its end (whatever its exit status)."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def slurm_text(stderr: str) -> str:
    """Slurm's message, one line per line, without the ``sbatch: error:`` prefix."""
    lines = [re.sub(r"^\w+: error: ", "", ln.strip()) for ln in stderr.splitlines() if ln.strip()]
    return "; ".join(lines)


def failure(done: Completed) -> SlurmError:
    """The error for a failed command that no caller-specific rule explained."""
    name = Path(done.argv[0]).name
    text = slurm_text(done.stderr) or f"exit status {done.returncode}"
    if any(n in done.stderr.lower() for n in UNREACHABLE):
        return SlurmUnavailable(f"{name} cannot reach Slurm: {text}", hint=UNREACHABLE_HINT, command=done.argv,
                                returncode=done.returncode, stderr=done.stderr)
    return SlurmError(f"{name} failed: {text}", hint=f"run it by hand to see more: {' '.join(done.argv)}",
                      command=done.argv, returncode=done.returncode, stderr=done.stderr)


def _kill_group(proc: _Proc) -> None:
    """Kill ``proc`` and everything it started in its session, then reap it."""
    pid = proc.pid
    if proc.returncode is None:  # not reaped, so ``pid`` is still our child (fakes in tests have pid 0)
        try:
            if pid > 0 and os.getpgid(pid) == pid:  # started with new_session: its group is its session
                os.killpg(pid, signal.SIGKILL)
            else:
                proc.kill()
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _finish(proc: _Proc, *, timeout: float) -> tuple[str, str]:
    """Wait for ``proc`` at most ``timeout`` seconds; its output. On a timeout (``TimeoutExpired``)
    or an interrupt its process group is killed before the exception goes on."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _kill_group(proc)
        raise
    encoding = proc.custom_encoding or "utf-8"
    return (
        out.decode(encoding, "replace") if isinstance(out, bytes) else str(out or ""),
        err.decode(encoding, "replace") if isinstance(err, bytes) else str(err or ""),
    )


def scrubbed_env(base: Mapping[str, str], *, conf_file: str = "") -> dict[str, str]:
    """``base`` without Slurm's option variables, plus ``SLURM_CONF=conf_file`` when one is given."""
    env = {k: v for k, v in base.items() if not k.startswith(SCRUBBED_PREFIXES) and k not in SCRUBBED_NAMES}
    if conf_file:
        env["SLURM_CONF"] = os.path.expanduser(conf_file)
    return env


class Commands:
    """Finds and runs Slurm's commands for one ``[slurm]`` profile section. Thread-safe: no state
    changes after construction.

    ``env`` is the environment commands start from (default: this process's, read at each call).
    """

    def __init__(self, config: SlurmSection, *, env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self._base_env = dict(env) if env is not None else None

    def _base(self) -> Mapping[str, str]:
        return self._base_env if self._base_env is not None else os.environ

    def env(self) -> dict[str, str]:
        """The exact environment every Slurm command gets."""
        return scrubbed_env(self._base(), conf_file=self.config.conf_file)

    def executable(self, name: str) -> str:
        """Absolute path of Slurm command ``name``: from ``slurm.bin_dir``, else looked up on PATH now."""
        if self.config.bin_dir:
            return str(Path(self.config.bin_dir).expanduser() / name)
        found = shutil.which(name, path=self._base().get("PATH", os.defpath))
        if not found:
            raise SlurmUnavailable(
                f"{name} not found on PATH",
                hint="install Slurm's client commands here, or set slurm.bin_dir in the profile to the "
                "directory that holds sbatch, squeue, scancel and sacct",
                command=(name,),
            )
        return found

    def run(self, name: str, args: Sequence[str]) -> Completed:
        """Run ``name args...`` with the scrubbed environment and the timeout."""
        exe = self.executable(name)
        argv = [exe, *args]
        timeout = self.config.command_timeout
        log.debug("running %s", argv)
        try:
            from hpkctl.jobs import scrubbed  # plumbum, at the first command (see its docstring)

            proc = scrubbed.popen(exe, args, env=self.env())
        except OSError as e:
            raise SlurmUnavailable(
                f"cannot run {exe}: {e.strerror or e}",
                hint="set slurm.bin_dir in the profile to the directory that holds Slurm's commands "
                "(or leave it empty to use PATH)",
                command=argv,
            ) from e
        try:
            out, err = _finish(proc, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise SlurmTimeout(
                f"{name} did not finish within {timeout:g} s and was killed: {' '.join(argv)}",
                hint="slurmctld may be overloaded or unreachable (`scontrol ping`); if it is just slow, "
                "raise slurm.command_timeout in the profile",
                command=argv,
            ) from e
        return Completed(argv, proc.returncode if proc.returncode is not None else -1, out, err)

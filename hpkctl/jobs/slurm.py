"""``Slurm``: every Slurm command hpkctl runs, and nothing else.

Why one class owns them all:

* **Environment.** The kubelet may itself run inside a Slurm job (or from a shell where a user set
  ``SQUEUE_FORMAT``). Slurm commands read dozens of ``SLURM_*``/``SBATCH_*``/``SQUEUE_*``... variables
  as if they were options, so a leaked ``SLURM_JOB_ID`` or ``SBATCH_PARTITION`` silently changes
  what is submitted or printed. Every command here runs with those variables removed and only
  the profile's ``SLURM_CONF`` added.
* **Timeouts.** A hung slurmctld must not hang the kubelet: each command gets
  ``slurm.command_timeout`` and is killed after it (``SlurmTimeout``).
* **One call per poll.** ``query`` asks about any number of jobs with one ``squeue`` (as submitit
  does) instead of one command per pod.
* **Typed errors.** sbatch's refusals become ``SubmitError`` subclasses that say what to change
  in the profile or the manifest; "Slurm is down" becomes ``SlurmUnavailable`` (retry later).

Commands are found at call time (``slurm.bin_dir``, else ``PATH``), never at import, so importing
hpkctl works on machines without Slurm.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path

from plumbum import local
from plumbum.commands.processes import ProcessTimedOut, run_proc

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
from hpkctl.jobs.info import JobInfo, is_job_id
from hpkctl.jobs.jobcomp import find_in_jobcomp, find_many_in_jobcomp
from hpkctl.jobs.parse import SACCT_FORMAT, SQUEUE_FORMAT, parse_sacct, parse_scontrol, parse_squeue
from hpkctl.jobs.states import TERMINAL_STATES
from hpkctl.sites.schema import SlurmSection

log = logging.getLogger(__name__)

# Variables Slurm's commands read as options (see ENVIRONMENT VARIABLES in sbatch(1), squeue(1),
# sacct(1), scancel(1)) and the ones slurmd sets inside a job. SLURM_CONF is among them; the
# profile's conf_file is put back after scrubbing.
SCRUBBED_PREFIXES = ("SLURM_", "SLURMD_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SACCT_", "SCANCEL_")

# Job ids per squeue call: keeps the command line far below ARG_MAX and each answer small.
QUERY_CHUNK = 500

DEFAULT_BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0)

# plumbum always merges its process-wide ``local.env`` into a command's environment, so the only
# way to *remove* variables is to swap ``local.env`` while the process is created. The lock keeps
# that swap private to one thread; it is held only for the fork/exec, not while the command runs.
_POPEN_LOCK = threading.Lock()

_UNREACHABLE = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out on send/recv",
    "protocol authentication error",
    "zero bytes were transmitted or received",
)
_UNREACHABLE_HINT = (
    "slurmctld does not answer: check `scontrol ping` and that munge runs (`munge -n | unmunge`); "
    "if this machine needs another cluster's config, set slurm.conf_file in the profile"
)
_FLAGS = "the pod's slurm-job.hpk.io/flags annotation"
_RESOURCES_HINT = (
    "no node of the partition can hold the request: lower the pod's resources (or pods.default_cpu / "
    "pods.default_memory in the profile), or choose a partition with bigger nodes (slurm.partition; "
    "`sinfo -o '%P %c %m %G'` lists them)"
)
# (text in sbatch's stderr, lower case) → (error class, hint, reason override)
_SUBMIT_ERRORS: tuple[tuple[str, type[SubmitError], str, str], ...] = (
    (
        "invalid partition",
        InvalidPartition,
        f"set slurm.partition in the profile to a partition that exists (`sinfo -s` lists them), "
        f"or fix --partition in {_FLAGS}",
        "",
    ),
    (
        "not permitted to use this partition",
        InvalidPartition,
        f"choose a partition your group may use: slurm.partition in the profile or --partition in {_FLAGS}",
        "",
    ),
    (
        "invalid account",
        InvalidAccount,
        f"set slurm.account in the profile (or --account in {_FLAGS}) to an account you belong to "
        "on this cluster: `sacctmgr show assoc user=$USER format=cluster,account,partition`",
        "",
    ),
    (
        "invalid qos",
        InvalidQos,
        f"set slurm.qos in the profile (or --qos in {_FLAGS}) to a QOS your association allows "
        "(`sacctmgr show assoc user=$USER format=account,qos`), or leave it empty for the default",
        "",
    ),
    (
        "requested time limit is invalid",
        TimeLimitTooLong,
        "request less time: lower the pod's activeDeadlineSeconds, or slurm.default_time in the "
        "profile; set slurm.max_time to the partition's MaxTime (`sinfo -o '%P %l'`) so hpkctl "
        "catches this before submitting",
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
# scancel's ways of saying "nothing left to cancel"
_ALREADY_DONE = ("already completing or completed", "job has already finished", "invalid job id specified")
_SIGNAL = re.compile(r"^(SIG)?[A-Z0-9+]+$")


def _slurm_text(stderr: str) -> str:
    """Slurm's message, one line per line, without the ``sbatch: error:`` prefix."""
    lines = [re.sub(r"^\w+: error: ", "", ln.strip()) for ln in stderr.splitlines() if ln.strip()]
    return "; ".join(lines)


def _check_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not is_job_id(job_id):
        raise ValueError(f"{job_id!r} is not a Slurm job id (digits, or digits_digits for an array task)")
    return job_id


def _all_finished(snapshot: Mapping[str, JobInfo | None]) -> bool:
    return all(info is None or info.state in TERMINAL_STATES for info in snapshot.values())


class Slurm:
    """Runs Slurm's commands for one site profile.

    ``env`` is the environment commands start from (default: this process's, read at each call);
    it is always scrubbed of Slurm's option variables (``SCRUBBED_PREFIXES``). Thread-safe.
    """

    def __init__(self, slurm: SlurmSection, *, env: Mapping[str, str] | None = None) -> None:
        self.config = slurm
        self._base_env = dict(env) if env is not None else None
        self._accounting: bool | None = None  # sacct usable? None until the first sacct call

    # ------------------------------------------------------------------ running commands

    def command_env(self) -> dict[str, str]:
        """The exact environment every Slurm command gets."""
        base = self._base_env if self._base_env is not None else os.environ
        env = {k: v for k, v in base.items() if not k.startswith(SCRUBBED_PREFIXES)}
        if self.config.conf_file:
            env["SLURM_CONF"] = os.path.expanduser(self.config.conf_file)
        return env

    def executable(self, name: str) -> str:
        """Absolute path of Slurm command ``name``: from ``slurm.bin_dir``, else looked up on PATH now."""
        if self.config.bin_dir:
            return str(Path(self.config.bin_dir).expanduser() / name)
        base = self._base_env if self._base_env is not None else os.environ
        found = shutil.which(name, path=base.get("PATH", os.defpath))
        if not found:
            raise SlurmUnavailable(
                f"{name} not found on PATH",
                hint="install Slurm's client commands here, or set slurm.bin_dir in the profile to the "
                "directory that holds sbatch, squeue, scancel and sacct",
                command=(name,),
            )
        return found

    def _run(self, name: str, args: Sequence[str]) -> tuple[list[str], int, str, str]:
        """Run ``name args...`` with the scrubbed environment and the timeout; ``(argv, rc, out, err)``."""
        exe = self.executable(name)
        argv = [exe, *args]
        timeout = self.config.command_timeout
        env = self.command_env()
        log.debug("running %s", argv)
        with _POPEN_LOCK, local.env():
            local.env.clear()
            local.env.update(env)
            try:
                proc = local[exe].popen(list(args))
            except OSError as e:
                raise SlurmUnavailable(
                    f"cannot run {exe}: {e.strerror or e}",
                    hint="set slurm.bin_dir in the profile to the directory that holds Slurm's commands "
                    "(or leave it empty to use PATH)",
                    command=argv,
                ) from e
        try:
            rc, out, err = run_proc(proc, None, timeout)
        except ProcessTimedOut as e:
            raise SlurmTimeout(
                f"{name} did not finish within {timeout:g} s and was killed: {' '.join(argv)}",
                hint="slurmctld may be overloaded or unreachable (`scontrol ping`); if it is just slow, "
                "raise slurm.command_timeout in the profile",
                command=argv,
            ) from e
        return argv, int(rc if rc is not None else -1), str(out), str(err)

    def _failure(self, argv: Sequence[str], *, rc: int, stderr: str) -> SlurmError:
        """The error for a failed command that no caller-specific rule explained."""
        name = Path(argv[0]).name
        text = _slurm_text(stderr) or f"exit status {rc}"
        kw = {"command": argv, "returncode": rc, "stderr": stderr}
        if any(n in stderr.lower() for n in _UNREACHABLE):
            return SlurmUnavailable(f"{name} cannot reach Slurm: {text}", hint=_UNREACHABLE_HINT, **kw)
        return SlurmError(f"{name} failed: {text}", hint=f"run it by hand to see more: {' '.join(argv)}", **kw)

    # ------------------------------------------------------------------ sbatch

    def submit(self, script: Path, *, extra_args: Sequence[str] = (), workdir: Path | None = None) -> str:
        """Submit ``script`` with ``sbatch --parsable [extra_args] [--chdir=workdir] script``; the job id.

        ``--parsable`` prints ``jobid`` or ``jobid;cluster``; the cluster part is dropped (hpkctl
        talks to one cluster per profile). A refusal raises a ``SubmitError`` subclass whose message
        keeps Slurm's text and whose hint names the profile key or manifest field to change.
        On ``SlurmTimeout`` the job may still have been created: look before resubmitting.
        """
        args = ["--parsable", *extra_args]
        if workdir is not None:
            args.append(f"--chdir={workdir}")
        args.append(str(Path(script).absolute()))
        argv, rc, out, err = self._run("sbatch", args)
        if rc != 0:
            raise self._submit_error(argv, rc=rc, stderr=err)
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        job_id = lines[-1].split(";", 1)[0].strip() if lines else ""
        if not is_job_id(job_id):
            raise SlurmError(
                f"sbatch succeeded but printed no job id: {out.strip()!r}",
                hint="a site wrapper around sbatch may print extra text; set slurm.bin_dir to Slurm's own commands",
                command=argv,
                returncode=rc,
                stderr=err,
            )
        if err.strip():
            log.warning("sbatch accepted job %s with messages: %s", job_id, _slurm_text(err))
        return job_id

    def _submit_error(self, argv: Sequence[str], *, rc: int, stderr: str) -> SlurmError:
        low = stderr.lower()
        if any(n in low for n in _UNREACHABLE):
            return self._failure(argv, rc=rc, stderr=stderr)
        text = _slurm_text(stderr) or f"exit status {rc}"
        for needle, cls, hint, reason in _SUBMIT_ERRORS:
            if needle in low:
                return cls(
                    f"sbatch refused the job: {text}",
                    hint=hint,
                    reason=reason,
                    command=argv,
                    returncode=rc,
                    stderr=stderr,
                )
        return SubmitError(
            f"sbatch refused the job: {text}",
            hint=f"check the generated script and the flags in the profile/annotation; reproduce with: {' '.join(argv)}",
            command=argv,
            returncode=rc,
            stderr=stderr,
        )

    # ------------------------------------------------------------------ squeue

    def query(self, job_ids: Collection[str]) -> dict[str, JobInfo]:
        """Current state of ``job_ids`` from slurmctld: one ``squeue`` call per 500 ids (``QUERY_CHUNK``).

        Runs ``squeue --noheader --all --states=all --jobs=ID,ID,... --format=SQUEUE_FORMAT``:
        ``--states=all`` keeps finished jobs visible until ``MinJobAge``; ``--all`` includes
        hidden partitions. Jobs Slurm no longer knows are simply absent from the result (use
        ``final`` for them); squeue's "Invalid job id specified" (every id unknown) gives ``{}``.
        squeue never reports exit codes: ``exit_code`` is ``None`` here.
        """
        ids = list(dict.fromkeys(_check_id(j) for j in job_ids))
        found: dict[str, JobInfo] = {}
        for start in range(0, len(ids), QUERY_CHUNK):
            chunk = ids[start : start + QUERY_CHUNK]
            args = ["--noheader", "--all", "--states=all", f"--jobs={','.join(chunk)}", f"--format={SQUEUE_FORMAT}"]
            argv, rc, out, err = self._run("squeue", args)
            if rc != 0:
                if "invalid job id specified" in err.lower():
                    continue
                raise self._failure(argv, rc=rc, stderr=err)
            wanted = set(chunk)
            found.update({j: info for j, info in parse_squeue(out).items() if j in wanted})
        return found

    # ------------------------------------------------------------------ final state

    def final(self, job_id: str) -> JobInfo | None:
        """State and exit code of a job that finished (or left squeue); ``None`` if nobody knows it.

        Sources, in order:

        1. ``scontrol show job`` while slurmctld still holds the job (``MinJobAge``, 300 s by
           default). Same daemon as squeue, no database lag, and it has ``ExitCode=rc:sig``.
           Its answer is final even when the job is still running.
        2. ``sacct`` when accounting works (``slurm.use_sacct``: ``auto`` probes once per
           ``Slurm`` object and remembers "Slurm accounting storage is disabled"; ``yes`` makes
           sacct failures errors; ``no`` never runs it). slurmdbd lags: right after the job ends
           it may still say RUNNING, so a non-final sacct answer falls through to 3.
        3. The jobcomp/filetxt file ``slurm.jobcomp_file``, newest line for the id, read from
           the end. Its times are in slurmctld's timezone.

        A non-final answer from 2 is returned when 3 has nothing, so callers can poll again.
        """
        _check_id(job_id)
        info = self._from_scontrol(job_id)
        if info is not None:
            return info
        fallback = self._from_sacct(job_id)
        if fallback is not None and fallback.state in TERMINAL_STATES:
            return fallback
        from_file = self._from_jobcomp(job_id)
        if from_file is not None:
            return from_file
        return fallback

    def finals(self, job_ids: Collection[str]) -> dict[str, JobInfo | None]:
        """``final`` for many jobs with as few Slurm calls as possible (a burst of pods ending).

        One backward scan of the jobcomp file (no Slurm call; slurmctld writes it when a job
        ends), then one ``sacct --jobs=a,b,...`` for the rest when accounting works, then
        ``scontrol show job`` per job only for what neither knew (typically none).
        """
        ids = list(dict.fromkeys(_check_id(j) for j in job_ids))
        if len(ids) <= 2:
            return {j: self.final(j) for j in ids}
        out: dict[str, JobInfo | None] = {}
        if self.config.jobcomp_file:
            out.update(find_many_in_jobcomp(os.path.expanduser(self.config.jobcomp_file), ids))
        rest = [j for j in ids if j not in out]
        if rest and self.config.use_sacct != "no" and self._accounting is not False:
            for chunk_start in range(0, len(rest), QUERY_CHUNK):
                chunk = rest[chunk_start : chunk_start + QUERY_CHUNK]
                found = self._sacct(chunk)
                out.update({j: i for j, i in found.items() if i.state in TERMINAL_STATES})
        for j in ids:  # neither the file nor sacct knew it: slurmctld may still hold it (MinJobAge)
            if j not in out:
                out[j] = self._from_scontrol(j)
        return out

    def _from_scontrol(self, job_id: str) -> JobInfo | None:
        args = ["--oneliner", "show", "job", job_id]
        argv, rc, out, err = self._run("scontrol", args)
        if rc != 0:
            if "invalid job id specified" in err.lower():
                return None
            raise self._failure(argv, rc=rc, stderr=err)
        return parse_scontrol(out, job_id)

    @property
    def accounting(self) -> bool | None:
        """Whether sacct works here: ``None`` until the first sacct call (or ``probe_accounting``)."""
        if self.config.use_sacct == "no":
            return False
        return self._accounting

    def probe_accounting(self) -> bool:
        """Ask sacct once (about job 1) whether accounting works, and remember the answer."""
        if self.accounting is None:
            self._from_sacct("1")
        return bool(self.accounting)

    def _from_sacct(self, job_id: str) -> JobInfo | None:
        return self._sacct([job_id]).get(job_id)

    def _sacct(self, job_ids: Sequence[str]) -> dict[str, JobInfo]:
        """One ``sacct`` call for ``job_ids``; ``{}`` when accounting is off (learned once, remembered)."""
        mode = self.config.use_sacct
        if mode == "no" or self._accounting is False:
            return {}
        args = ["--noheader", "--parsable2", "--allocations", f"--format={SACCT_FORMAT}", f"--jobs={','.join(job_ids)}"]
        try:
            argv, rc, out, err = self._run("sacct", args)
        except SlurmUnavailable as e:
            if mode == "yes" or isinstance(e, SlurmTimeout):
                raise
            log.info("sacct is not installed; using scontrol and the jobcomp file only: %s", e.message)
            self._accounting = False
            return {}
        if rc == 0:
            self._accounting = True
            found = {j: parse_sacct(out, j) for j in job_ids}
            return {j: info for j, info in found.items() if info is not None}
        if "accounting storage is disabled" in err.lower():
            if mode == "yes":
                raise SlurmUnavailable(
                    f"sacct: {_slurm_text(err)}",
                    hint='this cluster has no slurmdbd: set slurm.use_sacct = "auto" (or "no") in the profile '
                    "and slurm.jobcomp_file to the cluster's JobCompLoc (`scontrol show config | grep JobComp`)",
                    command=argv,
                    returncode=rc,
                    stderr=err,
                )
            log.info("Slurm accounting is disabled; using scontrol and the jobcomp file for final states")
            self._accounting = False
            return {}
        failure = self._failure(argv, rc=rc, stderr=err)
        if mode == "yes":
            raise failure
        log.warning("sacct failed, trying the jobcomp file: %s", failure.message)
        return {}

    def _from_jobcomp(self, job_id: str) -> JobInfo | None:
        if not self.config.jobcomp_file:
            return None
        return find_in_jobcomp(os.path.expanduser(self.config.jobcomp_file), job_id)

    # ------------------------------------------------------------------ scancel

    def cancel(self, job_id: str, *, signal: str | None = None) -> None:
        """Cancel the job, or with ``signal`` (``TERM``, ``USR1``, ``15``...) only signal it.

        A signal goes to the batch script and its children too (``--full``): the script is the
        pod's supervisor and must see it. Cancelling a job that already finished, or that Slurm
        forgot, is not an error; a permission problem is.
        """
        _check_id(job_id)
        args: list[str] = []
        if signal is not None:
            if not _SIGNAL.match(signal):
                raise ValueError(f"{signal!r} is not a signal name or number (e.g. TERM, SIGUSR1, 15)")
            args += [f"--signal={signal}", "--full"]
        args.append(job_id)
        argv, rc, _out, err = self._run("scancel", args)
        if rc == 0:
            return
        if any(s in err.lower() for s in _ALREADY_DONE):
            log.debug("scancel %s: job already gone: %s", job_id, _slurm_text(err))
            return
        failure = self._failure(argv, rc=rc, stderr=err)
        if "permission denied" in err.lower():
            failure.hint = "only the job's owner (or a Slurm operator) can cancel it: run hpkctl as the user that submitted it"
        raise failure

    # ------------------------------------------------------------------ polling

    def wait_for(
        self,
        job_ids: Iterable[str],
        *,
        until: Callable[[Mapping[str, JobInfo | None]], bool] = _all_finished,
        backoff: Sequence[float] = DEFAULT_BACKOFF,
        timeout: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> dict[str, JobInfo | None]:
        """Poll ``job_ids`` until ``until(snapshot)`` holds (default: all finished); the last snapshot.

        Each round is one ``query`` for the jobs not yet finished; a job that is finished in
        squeue or gone from it is resolved once with ``final`` (for its exit code) and then
        not asked about again. ``None`` in the snapshot means Slurm has no record of that job.
        Rounds are ``backoff`` seconds apart, the last value repeating, as submitit does;
        ``sleep`` and ``clock`` are parameters so tests need not wait. Raises ``TimeoutError``
        when ``timeout`` seconds pass first.
        """
        ids = list(dict.fromkeys(_check_id(j) for j in job_ids))
        if not backoff:
            raise ValueError("backoff needs at least one interval")
        deadline = None if timeout is None else clock() + timeout
        done: dict[str, JobInfo | None] = {}
        for attempt in itertools.count():
            live = [j for j in ids if j not in done]
            current: dict[str, JobInfo | None] = dict(self.query(live)) if live else {}
            ended = [j for j in live if current.get(j) is None or current[j].state in TERMINAL_STATES]  # type: ignore[union-attr]
            finals = self.finals(ended) if ended else {}
            for j in ended:
                final = finals.get(j) or current.get(j)
                if final is None or final.state in TERMINAL_STATES:
                    done[j] = final
                else:
                    current[j] = final
            snapshot = {j: done[j] if j in done else current.get(j) for j in ids}
            if until(snapshot):
                return snapshot
            if deadline is not None and clock() >= deadline:
                waiting = ", ".join(j for j in ids if j not in done) or "none"
                raise TimeoutError(f"Slurm jobs not done after {timeout:g} s (still running: {waiting})")
            sleep(backoff[min(attempt, len(backoff) - 1)])
        raise AssertionError("unreachable")  # pragma: no cover

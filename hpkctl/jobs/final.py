"""Final state and exit code of jobs that ended: ``scontrol``, then ``sacct``, then the jobcomp file.

Sources, in order:

1. ``scontrol show job`` while slurmctld still holds the job (``MinJobAge``, 300 s by default).
   Same daemon as squeue, no database lag, and it has ``ExitCode=rc:sig``. Its answer is final
   even when the job is still running.
2. ``sacct`` when accounting works (``slurm.use_sacct``: ``auto`` probes once per ``Slurm``
   object and remembers "Slurm accounting storage is disabled"; ``yes`` makes sacct failures
   errors; ``no`` never runs it). slurmdbd lags: right after the job ends it may still say
   RUNNING, so a non-final sacct answer falls through to 3.
3. The jobcomp/filetxt file ``slurm.jobcomp_file``, newest line for the id, read from the end.
   Its times are in slurmctld's timezone. Any user can forge lines in it (a job name with a line
   break), so only this user's field-exact records count (``jobcomp.find_many_in_jobcomp``), and
   ``hpkctl.pod.status`` never lets one override the pod's own status files.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence

from hpkctl.jobs.command import Commands, failure, slurm_text
from hpkctl.jobs.errors import SlurmTimeout, SlurmUnavailable
from hpkctl.jobs.info import JobInfo, UserJob
from hpkctl.jobs.jobcomp import current_user, find_many_in_jobcomp
from hpkctl.jobs.accounting import accounted_args
from hpkctl.jobs.parse import SACCT_FORMAT, parse_sacct, parse_sacct_comments, parse_scontrol
from hpkctl.jobs.query import check_id, chunks, unique_ids
from hpkctl.jobs.states import TERMINAL_STATES

log = logging.getLogger(__name__)


def _not_found(stdout: str, job_id: str) -> bool:
    """scontrol's answer (on stdout, exit 1) for an array element slurmctld no longer holds, e.g. one
    cancelled while pending, which never got a record of its own: ``Job 323_3 not found``."""
    return stdout.strip() == f"Job {job_id} not found"


class FinalStates:
    """The three sources for one profile, and what was learned about sacct (``accounting``).

    Safe to share between threads: the only state is the remembered accounting answer, a single
    attribute that every thread would set to the same value.
    """

    def __init__(self, commands: Commands) -> None:
        self._commands = commands
        self.config = commands.config
        self._accounting: bool | None = None  # sacct usable? None until the first sacct call

    @property
    def accounting(self) -> bool | None:
        """Whether sacct works here: ``None`` until the first sacct call (or ``probe_accounting``)."""
        if self.config.use_sacct == "no":
            return False
        return self._accounting

    def probe_accounting(self) -> bool:
        """Ask sacct once (about job 1) whether accounting works, and remember the answer."""
        if self.accounting is None:
            self._sacct(["1"])
        return bool(self.accounting)

    def final(self, job_id: str) -> JobInfo | None:
        """The job's final record, or ``None`` if nobody knows it (see the module docstring).

        A non-final answer from sacct is returned when the jobcomp file has nothing, so callers
        can poll again.
        """
        check_id(job_id)
        info = self._from_scontrol(job_id)
        if info is not None:
            return info
        fallback = self._sacct([job_id]).get(job_id)
        if fallback is not None and fallback.state in TERMINAL_STATES:
            return fallback
        from_file = self._from_jobcomp([job_id]).get(job_id)
        return from_file if from_file is not None else fallback

    def finals(self, job_ids: Iterable[str]) -> dict[str, JobInfo | None]:
        """``final`` for many jobs with as few Slurm calls as possible (a burst of jobs ending).

        One ``sacct --jobs=a,b,...`` per ``QUERY_CHUNK`` where accounting works (slurmdbd's record
        cannot be forged by other users; where accounting is off this costs no call once learned),
        then one backward scan of the jobcomp file for the rest (no Slurm call; slurmctld writes it
        when a job ends), then ``scontrol show job`` per job only for what neither knew.
        """
        ids = unique_ids(job_ids)
        if len(ids) <= 2:
            return {j: self.final(j) for j in ids}
        out: dict[str, JobInfo | None] = {}
        for chunk in chunks(ids):
            found = self._sacct(chunk)
            out.update({j: i for j, i in found.items() if i.state in TERMINAL_STATES})
        out.update(self._from_jobcomp([j for j in ids if j not in out]))
        for j in ids:  # neither sacct nor the file knew it: slurmctld may still hold it (MinJobAge)
            if j not in out:
                out[j] = self._from_scontrol(j)
        return out

    def accounted_jobs(self, *, since: str) -> list[UserJob]:
        """The calling user's jobs that slurmdbd recorded since ``since`` (``YYYY-MM-DDTHH:MM:SS``),
        with their comments: one ``sacct`` call; ``[]`` where accounting is off. Finds a job
        slurmctld has forgotten (``MinJobAge``), for the caller that must never submit twice.
        Comments reach slurmdbd only with ``AccountingStoreFlags=job_comment``; without it they
        are empty and nothing matches."""
        if self.config.use_sacct == "no" or self._accounting is False:
            return []
        try:
            done = self._commands.run("sacct", accounted_args(since))
        except SlurmUnavailable as e:
            if self.config.use_sacct == "yes" or isinstance(e, SlurmTimeout):
                raise
            self._accounting = False
            return []
        if done.returncode != 0:
            if "accounting storage is disabled" in done.stderr.lower() and self.config.use_sacct != "yes":
                self._accounting = False
                return []
            raise failure(done)
        self._accounting = True
        return parse_sacct_comments(done.stdout)

    def _from_scontrol(self, job_id: str) -> JobInfo | None:
        done = self._commands.run("scontrol", ["--oneliner", "show", "job", job_id])
        if done.returncode != 0:
            if "invalid job id specified" in done.stderr.lower() or _not_found(done.stdout, job_id):
                return None
            raise failure(done)
        return parse_scontrol(done.stdout, job_id)

    def _from_jobcomp(self, job_ids: Sequence[str]) -> dict[str, JobInfo]:
        if not self.config.jobcomp_file:
            return {}
        return find_many_in_jobcomp(os.path.expanduser(self.config.jobcomp_file), job_ids, user=current_user())

    def _sacct(self, job_ids: Sequence[str]) -> dict[str, JobInfo]:
        """One ``sacct`` call for ``job_ids``; ``{}`` when accounting is off (learned once, remembered)."""
        mode = self.config.use_sacct
        if mode == "no" or self._accounting is False:
            return {}
        args = ["--noheader", "--parsable2", "--allocations", f"--format={SACCT_FORMAT}", f"--jobs={','.join(job_ids)}"]
        try:
            done = self._commands.run("sacct", args)
        except SlurmUnavailable as e:
            if mode == "yes" or isinstance(e, SlurmTimeout):
                raise
            log.info("sacct is not installed; using scontrol and the jobcomp file only: %s", e.message)
            self._accounting = False
            return {}
        if done.returncode == 0:
            self._accounting = True
            found = {j: parse_sacct(done.stdout, j) for j in job_ids}
            return {j: info for j, info in found.items() if info is not None}
        if "accounting storage is disabled" in done.stderr.lower():
            if mode == "yes":
                raise SlurmUnavailable(
                    f"sacct: {slurm_text(done.stderr)}",
                    hint='this cluster has no slurmdbd: set slurm.use_sacct = "auto" (or "no") in the profile '
                    "and slurm.jobcomp_file to the cluster's JobCompLoc (`scontrol show config | grep JobComp`)",
                    command=done.argv,
                    returncode=done.returncode,
                    stderr=done.stderr,
                )
            log.info("Slurm accounting is disabled; using scontrol and the jobcomp file for final states")
            self._accounting = False
            return {}
        error = failure(done)
        if mode == "yes":
            raise error
        log.warning("sacct failed, trying the jobcomp file: %s", error.message)
        return {}

"""Slurm's view of the job-per-pod provider's jobs, asked as rarely as the answers allow.

The status round asks about every job the provider follows, stopping ones included, at most every
``[kubelet] slurm_poll`` (one ``squeue``, then one final-state lookup for those that ended); a stop
sequence reads that answer, so a delete usually costs no query of its own. A job the round has not
asked about (a pod gone while the kubelet was away) is asked about together with every other job the
provider still has a live record of, by one ``squeue`` at most every ``slurm_poll``: ``kubectl delete
pods --all`` costs one call, not one per pod or per re-check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from hpkctl.jobs import JobInfo, Slurm, SlurmError
from hpkctl.provider.slurmjobs import job_states


class JobCache:
    def __init__(self, slurm: Slurm, *, every: float) -> None:
        self.slurm = slurm
        self.every = every
        self.jobs: dict[str, JobInfo | None] = {}  # the last round's answer, by job id
        self.asked = 0.0
        self._lock = threading.Lock()  # one query at a time; the others wait for its answer
        self._stopping: dict[str, JobInfo] = {}
        self._stopping_ids: frozenset[str] = frozenset()
        self._stopping_asked = 0.0
        self._stopping_error: SlurmError | None = None
        self._states_asked: float | None = None  # states(): when it last asked (on the caller's clock)
        self.slurm_calls = 0  # status rounds' squeue calls (bench: Slurm commands per poll)
        self.stop_queries = 0  # squeue calls of stop sequences (bench: deleting many pods)

    def round(self, job_ids: list[str], *, now: float) -> bool:
        """The status round's query, if ``slurm_poll`` has passed since the last; whether it asked."""
        if not job_ids or now - self.asked < self.every:
            return False
        with self._lock:
            self.jobs = job_states(self.slurm, job_ids)
            self.asked = now
        self.slurm_calls += 1
        return True

    def states(self, job_ids: list[str], *, fresh: bool, now: float | None = None) -> dict[str, JobInfo | None]:
        """A one-thread front end's view (``hpkctl status``, following a run): Slurm's answer for
        ``job_ids``, asked now (one query for all) when ``fresh`` or the last answer is ``every`` old,
        else that last answer; only the ids Slurm was asked about (a failed ask is not repeated before
        ``every``: the caller follows the files meanwhile)."""
        now = time.monotonic() if now is None else now
        ids = [j for j in job_ids if j]
        with self._lock:
            if ids and (fresh or self._states_asked is None or now - self._states_asked >= self.every):
                self._states_asked = now
                self.slurm_calls += 1
                self.jobs = job_states(self.slurm, ids)
            return {j: self.jobs[j] for j in ids if j in self.jobs}

    def known(self, job_id: str) -> bool:
        """Whether the last round asked about ``job_id`` (then ``jobs[job_id] is None``: Slurm forgot it)."""
        return job_id in self.jobs

    def job_now(self, job_id: str, others: Callable[[], Iterable[str]]) -> JobInfo | None:
        """A stopping pod's job as Slurm last said, at most ``slurm_poll`` old (see the module
        docstring); ``others``: the job ids to ask about with it. Raises ``SlurmError``: slurmctld slow
        or down, and every waiting stop sequence gets that answer instead of each running into the
        command timeout in turn; the next interval asks again."""
        with self._lock:
            now = time.monotonic()
            if job_id in self.jobs and now - self.asked < self.every:
                return self.jobs[job_id]
            if job_id not in self._stopping_ids or now - self._stopping_asked >= self.every:
                ids = {job_id, *others()}
                ids.discard("")
                self._stopping_ids = frozenset(ids)
                self._stopping_asked = now
                self.stop_queries += 1
                try:
                    self._stopping, self._stopping_error = self.slurm.query(sorted(ids)), None
                except SlurmError as exc:
                    self._stopping, self._stopping_error = {}, exc
            if self._stopping_error is not None:
                raise self._stopping_error
            return self._stopping.get(job_id)

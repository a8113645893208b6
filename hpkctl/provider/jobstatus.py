"""The job-per-pod provider's status rounds: many pods' statuses from one Slurm query and the files of
those that changed (:meth:`StatusRounds.statuses`, the provider's ``statuses``).

Slurm is asked (one ``squeue`` for every followed job, stopping ones included) at most every
``slurm_poll``: only what status files cannot say comes from there (pending and its reason, killed by
Slurm: TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, cancelled). The files of a pod are read when its marker is in
the change log (:class:`~hpkctl.provider.changes.ChangeLog`: one readdir per round), when Slurm's view
of its job changed, and, every ``status_audit``, when the mtime of a running job's ``status/`` moved
without a marker (a directory removed by hand, an older runtime; a pending job's start is a change of
Slurm's view).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpkctl.jobs import JobInfo, Slurm, SlurmError
from hpkctl.pod.lifecycle import grace_period
from hpkctl.pod.paths import LAST_PROBE_KILL, PROBE_KILL, PodDir
from hpkctl.pod.status import PodStatus, containers_of, read_pod_status
from hpkctl.provider.api import Failure, Note, ProbeKill, StatusReport, Watched
from hpkctl.provider.changes import ChangeLog
from hpkctl.provider.jobcache import JobCache
from hpkctl.provider.slurmjobs import deadline_limit, ended, lowered_note, never_starts, start_check
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.provider.jobstatus")


def _job_key(job: JobInfo | None) -> tuple[Any, ...]:
    return () if job is None else (job.state, job.reason, job.exit_code, job.signal, job.nodes)


@dataclass
class _Seen:
    """What the last round knew of one pod: Slurm's view of its job, and its ``status/`` mtime."""

    key: Any = None
    dirty: bool = True
    mtime: int | None = None
    lowered: float | None = None  # when its time limit was lowered (a job Slurm kept pending for it)


@dataclass
class StatusRounds:
    slurm: Slurm
    profile: SiteProfile
    jobs: JobCache
    changes: ChangeLog
    pod_dir: Callable[[str], Path | None]  # uid -> the pod directory its record names
    audited: float = field(default_factory=lambda: time.monotonic())  # all read at first: the first audit later
    seen: dict[str, _Seen] = field(default_factory=dict)

    def forget(self, uid: str) -> None:
        self.seen.pop(uid, None)

    def changed(self, uid: str) -> None:
        """Read the pod's files at the next round (its job was just submitted or adopted)."""
        self.seen.setdefault(uid, _Seen()).key = None

    def statuses(self, pods: Sequence[Watched], *, deleting: set[str], now: float | None = None
                 ) -> list[StatusReport]:
        now = time.monotonic() if now is None else now
        k = self.profile.kubelet
        followed = [w for w in pods if w.job_id and self.pod_dir(w.ref.uid) is not None]
        live = [w for w in followed if w.ref.uid not in deleting]
        self.jobs.round([w.job_id for w in followed], now=now)
        audit = bool(live) and now - self.audited >= k.status_audit
        if audit:
            self.audited = now
        changed = self.changes.take({w.ref.uid for w in followed}) if followed else set()
        out = []
        for w in live:
            uid = w.ref.uid
            pod_dir = self.pod_dir(uid)
            assert pod_dir is not None
            s = self.seen.setdefault(uid, _Seen())
            job = self.jobs.jobs.get(w.job_id)
            known = self.jobs.known(w.job_id)
            key = (_job_key(job), known)
            mtime = None
            if w.reread or uid in changed or key != s.key:
                s.dirty = True
            elif audit and job is not None and job.state == "RUNNING" and (mtime := self._mtime(pod_dir)) != s.mtime:
                s.dirty = True
            if not s.dirty:
                continue
            try:
                if never_starts(job):
                    report = self._never_starts(w, job, s)
                    if report is not None:
                        out.append(report)
                    continue
                s.mtime = self._mtime(pod_dir) if mtime is None else mtime
                if not pod_dir.is_dir():
                    s.key, s.dirty = key, False
                    out.append(_dir_missing(w, pod_dir, job, known=known))
                    continue
                st = read_pod_status(pod_dir, containers_of(w.pod), job, job_known=known)
                final = st.finished and (ended(job) or (job is None and known))
                out.append(StatusReport(uid=uid, status=st, final=final, probe_kills=probe_kills(pod_dir, st)))
            except Exception:  # noqa: BLE001 - a bad pod directory must not stop the others' status
                log.exception("pod %s: reading its status failed", w.ref.key)
            s.key, s.dirty = key, False  # a report the caller cannot deliver comes back with ``reread``
        return out

    def _mtime(self, pod_dir: Path) -> int:
        self.changes.ops += 1
        try:
            return os.stat(pod_dir / "status").st_mtime_ns
        except OSError:
            return 0

    def _never_starts(self, w: Watched, job: JobInfo | None, s: _Seen) -> StatusReport | None:
        """Slurm keeps the job pending for a reason waiting cannot clear (no node of the partition can
        hold it): cancel it and fail the pod, as the real kubelet rejects a pod that cannot fit; first,
        a time limit above the partition's is lowered to it (and the job given time to be looked at)."""
        reason = job.reason if job is not None else ""
        spec = w.pod.get("spec") or {}
        try:
            verdict, s.lowered, limit = start_check(self.slurm, w.job_id, job, spec, lowered=s.lowered,
                                                    now=time.monotonic())
        except SlurmError as exc:
            log.warning("pod %s: lowering job %s's time limit failed: %s", w.ref.key, w.job_id, exc)
            verdict, s.lowered, limit = "never", time.monotonic(), 0
        if not verdict:
            return None
        if verdict == "lowered":
            note = Note("TimeLimitLowered", lowered_note(w.job_id, limit, deadline=deadline_limit(job, spec),
                                                         grace=grace_period(spec)), warning=True)
            return StatusReport(uid=w.ref.uid, notes=(note,))
        self.slurm.cancel(w.job_id)
        s.key, s.dirty = None, False
        return StatusReport(uid=w.ref.uid, final=True, failure=Failure(
            "SlurmNeverStarts",
            f"Slurm will never start job {w.job_id}: {reason}; lower the pod's resources (cpu → --cpus-per-task, "
            "memory → --mem) or node count, or choose a partition whose nodes can hold it ('sinfo -o \"%P %c %m "
            "%G %l\"' shows what the partitions offer)"))


def _dir_missing(w: Watched, pod_dir: Path, job: JobInfo | None, *, known: bool) -> StatusReport:
    """The pod directory is gone (removed by hand?): say so, keep the containers as last reported, and
    fail the pod once Slurm says the job ended."""
    state = f"Slurm job {w.job_id} is {job.state}" if job is not None else f"Slurm no longer knows job {w.job_id}"
    final = known and ended(job)
    st = PodStatus("Failed" if final else "", "PodDirectoryMissing",
                   f"the pod directory {pod_dir} is gone (deleted by hand?); {state}", None, None, None, None)
    return StatusReport(uid=w.ref.uid, status=st, keep_containers=True, final=final)


def probe_kills(pod_dir: Path, st: PodStatus) -> tuple[ProbeKill, ...]:
    """The probe kills the pod directory records: the current run's kill file, or after the restart the
    previous run's (the same kill, one restart later: the same run number)."""
    pd = PodDir(pod_dir)
    out = []
    for c in st.containers:
        current = pd.read_container(c.name, PROBE_KILL)
        text = current or pd.read_container(c.name, LAST_PROBE_KILL)
        if text:
            out.append(ProbeKill(c.name, c.restart_count if current else c.restart_count - 1, text))
    return tuple(out)


def final_report(uid: str, pod_dir: Path, pod: Mapping[str, Any]) -> StatusReport:
    """The containers' last states as a pod goes (its job ended or was cancelled)."""
    st = read_pod_status(pod_dir, containers_of(pod), None, job_known=False)
    return StatusReport(uid=uid, status=st, probe_kills=probe_kills(pod_dir, st))

"""The first pod provider: one Slurm job per pod (:class:`JobPodProvider`).

A pod becomes a pod directory (its job script, files and status files) and an ``sbatch`` of its script,
with the pod's uid in the job comment. Its record (:mod:`hpkctl.provider.records`) is written *before*
each step that creates something outside the process, so a process killed at any instant never
duplicates or orphans a job: the next one finds the job by the uid (:mod:`hpkctl.provider.adopt`). A
delete marks the pod as deleted, sends the batch shell TERM (the job stops its containers as Kubernetes
does), waits for ``pod.done`` up to the grace period and then cancels the job, one non-blocking step per
call. Statuses: :mod:`hpkctl.provider.jobstatus`; logs and exec: the pod directory, ``srun --overlap``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpkctl.errors import HpkError, PodError
from hpkctl.jobs import NO_CLEAR_ANSWER, JobInfo, Slurm, SubmitError
from hpkctl.pod import RenderedPod, pod_dir_for, render_pod, write_pod_dir
from hpkctl.pod.lifecycle import stop_wait
from hpkctl.pod.flags import pod_of_job
from hpkctl.pod.paths import EXITCODE, JOB_STARTED, POD_DONE, STARTED, PodDir
from hpkctl.pod.status import PodStatus, container_done
from hpkctl.provider.adopt import JobFinder, intent_job, ran_before, terminal_phase
from hpkctl.provider.api import (ContainerRun, Created, Deletion, ExecSession, Failure, ImagePullFailed, Leftover, Note,
                                 Outcome, PodInputs, PodRef, StatusReport, Watched)
from hpkctl.provider.batchsubmit import BatchSubmitter, forget_notices
from hpkctl.provider.changes import ChangeLog
from hpkctl.provider.jobcache import JobCache
from hpkctl.provider.jobstatus import StatusRounds, final_report
from hpkctl.provider.pulls import ImagePuller, pull_message
from hpkctl.provider.records import FAILED, STOPPED, SUBMITTED, SUBMITTING, PodRecord, Records, RecordStore, compact_json
from hpkctl.provider.slurmjobs import ended, images_to_pull, job_partition_option, lowered_note, term_once_started
from hpkctl.provider.tokens import TokenSource, defer_tokens, refresh
from hpkctl.provider.runstatus import StartChecks, run_statuses, workloads_of
from hpkctl.provider.workloads import ArrayStatus, WorkloadStops
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.provider.jobpod")

DELETE_CHECK = 0.5  # seconds between checks that a stopping pod has finished its stop sequence
STOP_MARGIN = 5.0  # past the grace periods, before the job is cancelled


class JobPodProvider:
    """:class:`~hpkctl.provider.api.PodProvider` with a Slurm job per pod; ``records``: where this front
    end's records live (a kubelet's: ``<state_dir>/kubelet/<node>``)."""

    def __init__(self, *, slurm: Slurm, profile: SiteProfile, records: RecordStore) -> None:
        self.slurm, self.profile, self.records = slurm, profile, records
        self.puller = ImagePuller(profile)
        self.finder = JobFinder(slurm)
        self.jobs = JobCache(slurm, every=profile.kubelet.slurm_poll)
        self.changes = ChangeLog(Path(os.path.expanduser(profile.pods.state_dir)))
        self.rounds = StatusRounds(slurm, profile, self.jobs, self.changes, self._pod_dir)
        self._recs: dict[str, PodRecord] = {}
        self._lock = threading.Lock()
        self._term_sent: dict[str, float] = {}  # uid -> when its batch shell got TERM
        self._starting: dict[str, float] = {}  # uid -> since when a delete waits for its script to start
        self._deleting: set[str] = set()
        self._parked: dict[str, RenderedPod] = {}  # uid -> its render, kept while images are pulled (or room awaited)
        self.workloads = WorkloadStops(slurm, margin=STOP_MARGIN)
        self.starts = StartChecks(slurm)
        self.submits = BatchSubmitter(slurm)  # pods ready together: one sbatch, one job array

    @classmethod
    def for_node(cls, *, slurm: Slurm, profile: SiteProfile, node_name: str) -> JobPodProvider:
        """The provider of the kubelet of node ``node_name``: its records are in :func:`node_state_dir`."""
        return cls(slurm=slurm, profile=profile, records=Records(node_state_dir(profile, node_name)))

    def know(self, rec: PodRecord) -> None:
        """Follow the pod of ``rec`` (a one-pod front end: ``hpkctl delete``, an interrupted ``hpkctl
        run``) without reading every record."""
        with self._lock:
            self._recs[rec.uid] = rec

    def follow(self, uid: str, job_id: str) -> None:
        """Take ``job_id`` (checked by the caller against the job's comment; ``""``: none) as the pod's
        job from now on, in memory: a front end that stops what a kubelet left (:mod:`~hpkctl.provider.nodepods`)."""
        with self._lock:
            rec = self._recs.get(uid)
            if rec is not None:
                self._recs[uid] = dataclasses.replace(rec, job_id=job_id, state=SUBMITTED if job_id else rec.state)

    # ------------------------------------------------------------------ counters for bench/
    @property
    def slurm_calls(self) -> int:
        return self.jobs.slurm_calls

    @property
    def stop_queries(self) -> int:
        return self.jobs.stop_queries

    # ------------------------------------------------------------------ records
    def _rec(self, uid: str) -> PodRecord | None:
        with self._lock:
            return self._recs.get(uid)

    def _save(self, rec: PodRecord) -> None:
        self.records.save(rec)
        with self._lock:
            self._recs[rec.uid] = rec

    def _pod_dir(self, uid: str) -> Path | None:
        rec = self._rec(uid)
        return Path(rec.pod_dir) if rec is not None and rec.pod_dir else None

    def start(self) -> None:
        self.changes.ensure()  # before any pod is submitted: its job writes markers from the start
        # the listing a new pod's adoption check needs, taken while the first list is read (issue 23.2)
        threading.Thread(target=self.finder.prime, name="squeue-listing", daemon=True).start()

    def leftovers(self) -> list[Leftover]:
        recs = self.records.load_all()
        with self._lock:
            self._recs = dict(recs)
        log.info("loaded %d pod record(s)", len(recs))
        return [Leftover(ref=PodRef(r.uid, r.namespace, r.name), job_id=r.job_id, state=r.state,
                         stopped_at=r.stopped, saved=r.saved) for r in recs.values()]

    def give_up(self, ref: PodRef) -> None:
        with self._lock:
            self._parked.pop(ref.uid, None)
        if self._rec(ref.uid) is None:
            self._save(PodRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, pod_dir="", state=FAILED,
                                 submitted=time.time()))

    def _prepare(self, ref: PodRef, pod: Mapping[str, Any], rec: PodRecord | None,
                 inputs: PodInputs) -> RenderedPod | Created:
        """The pod rendered once, and its images pulled here when the profile says so (``pull =
        "submit"``); a ``Created`` when it goes no further now. A render parked while the pull runs
        (or, in pilot mode, while the pod waits for room) is taken back: no second render, no second
        GET of its ConfigMaps and Secrets, no second token."""
        with self._lock:
            rendered = self._parked.pop(ref.uid, None)
        if rendered is None:
            found = self._ran_already(ref, pod, rec)
            if found is not None:
                return found
            rendered = render_pod(pod, self.profile, objects=inputs.objects, services=inputs.services)
        if self.profile.apptainer.pull == "submit":
            images = images_to_pull(rendered)
            ready = inputs.ready

            def pulled() -> None:
                if ready is not None:
                    ready(ref.uid)

            try:
                pending = self.puller.ensure(images, when_done=pulled)
            except PodError as exc:
                self.puller.forget(images)
                raise ImagePullFailed(exc.reason, pull_message(self.profile, exc, images), hint=exc.hint) from exc
            if pending:
                self._park(ref.uid, rendered)
                return Created(Outcome.PULLING, images=tuple(i.source for i in images),
                               warnings=tuple(rendered.warnings))
        return rendered

    def _park(self, uid: str, rendered: RenderedPod) -> None:
        """Keep ``rendered`` for the next create of pod ``uid`` (a delete or give-up drops it)."""
        with self._lock:
            self._parked[uid] = rendered

    # ------------------------------------------------------------------ create
    def create(self, pod: Mapping[str, Any], inputs: PodInputs) -> Created:
        ref = PodRef.of(pod)
        rec = self._rec(ref.uid)
        if rec is not None and rec.job_id:
            return Created(Outcome.ADOPTED, job_id=rec.job_id, where="its record", final=rec.state != SUBMITTED)
        inputs, later = defer_tokens(pod, inputs)  # no TokenRequest on the submit path: written after sbatch
        prepared = self._prepare(ref, pod, rec, inputs)
        if isinstance(prepared, Created):
            return prepared
        rendered, warnings = prepared, tuple(prepared.warnings)
        root = Path(rendered.plan.pod_dir)
        rec = PodRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, pod_dir=str(root), state=SUBMITTING,
                        submitted=time.time())
        self._save(rec)  # the intent, before anything outside this process exists
        write_pod_dir(rendered, pod_json=compact_json(pod))
        try:
            job_id, lowered = self.submits.submit(rendered.plan, deadline=rendered.plan.active_deadline,
                                                  partition=job_partition_option(rendered.plan))
        except NO_CLEAR_ANSWER as exc:
            log.warning("pod %s: sbatch gave no clear answer (%s); the job may exist: looking for it by uid next",
                        ref.key, exc.message)
            return Created(Outcome.RETRY, retry_after=5.0, warnings=warnings)
        except SubmitError as exc:
            rec.state = FAILED
            self._save(rec)
            raise PodError("SlurmRejected", f"Slurm refused the job: {exc.message}", hint=exc.hint) from exc
        notes = self._submitted(ref, rec, job_id)
        if lowered:
            notes += (Note("TimeLimitLowered", lowered_note(job_id, lowered, deadline=rendered.plan.active_deadline,
                                                            grace=rendered.plan.grace), warning=True),)
        return Created(Outcome.SUBMITTED, job_id=job_id, notes=notes, warnings=warnings, tokens_later=later)

    def _ran_already(self, ref: PodRef, pod: Mapping[str, Any], rec: PodRecord | None) -> Created | None:
        """Before any submission: a pod whose API phase is terminal is never run again, and a job
        found by the pod's uid (``JobFinder.find``) is adopted, not duplicated; a pod the API says
        has run but whose job left no trace fails instead of running twice."""
        pod_dir = Path(rec.pod_dir) if rec is not None and rec.pod_dir else Path(pod_dir_for(self.profile, ref.uid))
        found = self.finder.find(uid=ref.uid, pod=pod, pod_dir=pod_dir, fresh=rec is not None)
        phase = terminal_phase(pod)
        if found is None and not phase and not ran_before(pod):
            return None
        if rec is None:
            rec = PodRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, pod_dir=str(pod_dir),
                            state=SUBMITTING, submitted=time.time())
        if found is not None:
            log.info("pod %s: adopting job %s, found by the pod's uid in %s", ref.key, found.job_id, found.where)
            notes = self._submitted(ref, rec, found.job_id)
            # a terminal phase in the API stands; the job is only remembered (a delete cancels nothing new)
            return Created(Outcome.ADOPTED, job_id=found.job_id, where=found.where, final=bool(phase), notes=notes)
        rec.state = FAILED
        self._save(rec)
        if phase:
            log.info("pod %s: %s in the API and no record of it here: not run again", ref.key, phase)
            return Created(Outcome.RAN_BEFORE, final=True)
        raise PodError("JobLost", "the pod's containers ran, but its Slurm job is in no record of this kubelet, "
                       "no pod directory and no Slurm query any more (the kubelet's state directory was lost or "
                       "changed); it is not run a second time: delete the pod and create it again to rerun it")

    def _submitted(self, ref: PodRef, rec: PodRecord, job_id: str) -> tuple[Note, ...]:
        rec.job_id, rec.state = job_id, SUBMITTED
        self.rounds.changed(ref.uid)  # read its status at the next round
        try:
            self._save(rec)
        except OSError as exc:
            # the job exists: follow it from memory; after a restart it is found again by the pod's uid
            # (its job.id, squeue), never submitted a second time (issue 20.7: a full state disk)
            log.warning("pod %s: Slurm job %s runs, but its record cannot be written (%s); it is followed "
                        "from memory", ref.key, job_id, exc)
            with self._lock:
                self._recs[rec.uid] = rec
            return (Note("RecordNotWritten", f"the kubelet cannot write its record of Slurm job {job_id}: "
                         f"{exc.strerror or exc}; free space in its state directory", warning=True),)
        return ()

    # ------------------------------------------------------------------ delete
    def delete(self, ref: PodRef, *, grace: float | None, pod: Mapping[str, Any], report: bool = True) -> Deletion:
        with self._lock:
            self._parked.pop(ref.uid, None)
        rec = self._rec(ref.uid)
        job_id = rec.job_id if rec else ""
        if rec is not None and rec.state == SUBMITTING and not job_id:  # its sbatch may have run: by uid
            job_id = rec.job_id = intent_job(self.finder, rec, pod)
        if rec is not None and rec.state == STOPPED:
            return Deletion(done=True, job_id=job_id)
        if rec is not None and rec.is_array and job_id:  # a workload of hpkctl run: its job array
            return self.workloads.delete(rec, grace=grace, save=self._save, recheck=DELETE_CHECK)
        job = self.jobs.job_now(job_id, self._live_jobs) if job_id else None
        killing = False
        if ref.uid not in self._deleting:
            self._deleting.add(ref.uid)
            killing = bool(job_id) and not ended(job)  # a finished pod has nothing left to kill
        cancelled = False
        if job_id and not ended(job):
            # no pod directory (purged or removed by hand): no delete marker, no stop sequence to wait
            # for (pod.done can never appear), so the job is cancelled at once
            pd = PodDir(Path(rec.pod_dir)) if rec is not None and rec.pod_dir and Path(rec.pod_dir).is_dir() else None
            started = self._term_sent.get(ref.uid)
            limit = stop_wait(pod.get("spec") or {}, grace=grace, margin=STOP_MARGIN)
            # TERM once the script wrote job.started, its trap set (a TERM before kills it: FAILED); until then wait
            if pd is not None and started is None and term_once_started(self.slurm, job_id, pd, pd.exists(JOB_STARTED)):
                self._term_sent[ref.uid] = time.monotonic()
                return Deletion(done=False, job_id=job_id, recheck_after=DELETE_CHECK, killing=killing)
            since = started if started is not None else self._starting.setdefault(ref.uid, time.monotonic())
            waits = pd is not None and (not pd.exists(POD_DONE) if started else bool(job and job.state == "RUNNING"))
            if waits and time.monotonic() - since < limit:  # the stop sequence; a script that is starting
                return Deletion(done=False, job_id=job_id, recheck_after=DELETE_CHECK, killing=killing)
            self.slurm.cancel(job_id)
            cancelled = True
        final = None
        if report and job_id and rec is not None and rec.pod_dir:
            try:
                final = final_report(ref.uid, Path(rec.pod_dir), pod)
            except OSError as exc:
                log.debug("pod %s: final status not read: %s", ref.key, exc)
        if rec is not None:
            rec.state, rec.stopped = STOPPED, time.time()
            self._save(rec)
        self._term_sent.pop(ref.uid, None), self._starting.pop(ref.uid, None)
        self._deleting.discard(ref.uid)
        self.rounds.forget(ref.uid)
        return Deletion(done=True, job_id=job_id, killing=killing, cancelled=cancelled, final=final)

    def wait_ended(self, ref: PodRef, *, timeout: float = 30.0) -> bool:
        """After a delete: wait until Slurm says the pod's job (a workload's every element) ended, so its
        directory may go; False if it still runs after ``timeout``."""
        rec = self._rec(ref.uid)
        return rec is None or self.workloads.wait_ended(rec, timeout=timeout)

    # ------------------------------------------------------------------ what a kubelet left (stop --all)
    def owns_job(self, uid: str, comment: str, job_id: str) -> bool:
        """Whether job ``job_id`` with ``comment`` may be pod ``uid``'s (its comment names the uid, at
        its index in a batch): a record's job id alone is never trusted to cancel (issue 20.10)."""
        return (pod_of_job(job_id, comment) or ("", ""))[0] == uid

    def stoppable(self, uid: str, job: JobInfo | None) -> str:
        """What a delete of pod ``uid`` still has to end, given Slurm's view of its job: the job's id,
        or "" when nothing runs."""
        rec = self._rec(uid)
        return rec.job_id if rec is not None and rec.job_id and job is not None and not ended(job) else ""

    def release(self) -> list[str]:
        """Give back what this provider holds for pods to come (nothing: a job per pod); the job ids."""
        return []

    def _live_jobs(self) -> list[str]:
        with self._lock:
            return [r.job_id for r in self._recs.values() if r.job_id and r.state == SUBMITTED]

    # ------------------------------------------------------------------ status
    def statuses(self, pods: Sequence[Watched], *, now: float | None = None) -> list[StatusReport]:
        return self.rounds.statuses(pods, deleting=self.deleting_uids(), now=now)

    def deleting_uids(self) -> set[str]:
        """The pods whose delete has begun: the status rounds leave them to it."""
        return self._deleting

    def pod_statuses(self, refs: Sequence[PodRef], *, fresh: bool = True,
                     now: float | None = None) -> dict[str, PodStatus | ArrayStatus]:
        recs = [self._known(r.uid) for r in refs]
        got = run_statuses(self.slurm, recs, workloads_of(recs), steps=fresh,
                           ask=lambda ids: self.jobs.states(ids, fresh=fresh, now=now))
        return {r.uid: st for r, st in zip(recs, got)}

    def unstartable(self, ref: PodRef, pod: Mapping[str, Any], *, now: float | None = None) -> Note | Failure | None:
        return self.starts.check(self._known(ref.uid), self.jobs.jobs, pod, now=time.monotonic() if now is None else now)

    def _known(self, uid: str) -> PodRecord:
        if (rec := self._rec(uid)) is None:
            raise KeyError(f"no record of pod {uid}: know() it or load leftovers() first")
        return rec

    def refresh_tokens(self, ref: PodRef, pod: Mapping[str, Any], objects: TokenSource) -> None:
        pod_dir = self._pod_dir(ref.uid)
        if pod_dir is not None:
            refresh(objects, pod, pod_dir)

    def clean(self, keep: float) -> int:
        """Remove directories and records of pods stopped more than ``keep`` seconds ago."""
        with self._lock:
            old = [r for r in self._recs.values() if r.state == STOPPED and time.time() - r.stopped >= keep]
        state = Path(os.path.expanduser(self.profile.pods.state_dir)).resolve()
        for rec in old:
            if rec.pod_dir and Path(rec.pod_dir).resolve().is_relative_to(state):
                shutil.rmtree(rec.pod_dir, ignore_errors=True)
                forget_notices(rec.pod_dir, rec.job_id)
            self.records.remove(rec.uid)
            with self._lock:
                self._recs.pop(rec.uid, None)
        self.changes.clean(state / "pods")
        return len(old)

    def shutdown(self) -> None:
        self.puller.shutdown()

    # ------------------------------------------------------------------ logs and exec
    def log_file(self, uid: str, container: str, *, previous: bool = False) -> Path | None:
        pod_dir = self._pod_dir(uid)
        if pod_dir is None:
            return None
        path = PodDir(pod_dir).log(container, previous=previous)
        return path if path.is_file() else None

    def container_run(self, uid: str, container: str) -> ContainerRun:
        pod_dir, rec = self._pod_dir(uid), self._rec(uid)
        if pod_dir is None or rec is None:
            return ContainerRun(running=False)
        pd = PodDir(pod_dir)
        code = pd.read_container(container, EXITCODE)
        running = bool(rec.job_id) and pd.read_container(container, STARTED) is not None and code is None \
            and not pd.exists(POD_DONE)
        return ContainerRun(running=running, exit_code=code)

    def log_complete(self, uid: str, container: str, *, policy: str) -> bool:
        pod_dir = self._pod_dir(uid)
        return pod_dir is None or container_done(PodDir(pod_dir), container, policy=policy)

    async def exec(self, uid: str, container: str, command: Sequence[str], *, tty: bool,
                   stdin: bool) -> ExecSession:
        rec = self._rec(uid)
        if rec is None or not rec.job_id or not rec.pod_dir:
            raise HpkError(f"pod {uid} has no Slurm job to run the command in")
        return await self.slurm.exec_step(rec.job_id, pod_dir=Path(rec.pod_dir), container=container,
                                          command=command, tty=tty, stdin=stdin)


def node_state_dir(profile: SiteProfile, node_name: str) -> Path:
    """Where the kubelet of node ``node_name`` keeps its state (its lock, certificates and records)."""
    return Path(os.path.expanduser(profile.pods.state_dir)) / "kubelet" / node_name

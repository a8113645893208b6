"""The second pod provider: pods as job steps in allocations the kubelet holds (pilot mode).

Everything a pod is made of stays the job-per-pod provider's (:class:`JobPodProvider`): the record
written before anything exists outside the process, the pod directory and job script (rendered with
``[pilot] enabled``: no ``#SBATCH`` lines, ``HPK_PILOT=1``), adoption by uid, status rounds from the
change log and the files, logs, exec. What differs is where the script runs and how it is stopped:

* ``create`` books the pod in a held allocation (:mod:`hpkctl.pilot`) and starts its step (``srun
  --jobid=J --exact``); when none has room it requests one and answers ``RETRY`` (never waits): the
  pod that waited longest is asked again each second, the others when room frees (a step ended; the
  pod before them placed and room left: an allocation that starts has room for several) or every 10 s. The
  pod's job id, for the record, the API's ``hpk.io/slurm-job-id`` and the status rounds, is the
  allocation's; the step's own id is ``status/job.id`` (``J.S``).
* ``delete`` marks the pod deleted and sends TERM to the step's task alone (``scancel --signal=TERM
  J.S``), then kills the step once ``pod.done`` is there or the grace periods are over.
* A pod is final when its files say it finished (``pod.done``): the allocation runs on for others.
* A thread per running step reads its srun's output, where the pod's script writes a line after each
  status change (``changed``: the kubelet runs a status round at once), and waits for its srun: when
  it ends, the room is free and the pod that waited longest is created again at once. Each status round
  also reaps the srun of ended steps and lets the pool request and release allocations.
* A kubelet restart books the running pods again with their whole room (their needs from the saved
  pod; their nodes from ``status/job.node``, else from Slurm's running steps), an MPI pod's on each node.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpkctl.errors import PodError
from hpkctl.jobs import Slurm
from hpkctl.jobs.steps import StepProcess, is_step_id
from hpkctl.pilot.launch import need_of, start_pod_step
from hpkctl.pilot.plan import Need, unfit
from hpkctl.pod import write_pod_dir
from hpkctl.pod.lifecycle import stop_wait
from hpkctl.pod.paths import JOB_ID, POD_DONE, POD_TERMINATING, PodDir
from hpkctl.provider.api import Created, Deletion, Leftover, Outcome, PodInputs, PodRef, StatusReport, Watched
from hpkctl.provider.jobpod import DELETE_CHECK, STOP_MARGIN, JobPodProvider
from hpkctl.provider.jobstatus import final_report
from hpkctl.provider.pilotadopt import rebook
from hpkctl.provider.pilotbook import PilotBook
from hpkctl.provider.pilotheld import PILOT_OWNER, PilotHolder, pilot_enabled
from hpkctl.provider.pilotworkload import PilotWorkloadStops
from hpkctl.provider.records import STOPPED, SUBMITTING, PodRecord, RecordStore, Records, compact_json
from hpkctl.provider.runrecords import RunRecords
from hpkctl.provider.runstatus import lost_step_reports
from hpkctl.provider.slurmjobs import mark_deleting
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.provider.pilotpod")
SRUN_EXIT_WAIT = 30.0  # seconds a cancelled step's srun has to end before it is killed
WAIT_FOR_ROOM = 1.0  # seconds before the pod waiting longest asks create again (an allocation may have started)
WAIT_BEHIND = 10.0  # seconds before a pod behind it asks again (it is woken when room frees: a fallback)
WAKE_SCAN = 64  # waiting pods looked at, longest waiting first, for those a freed room fits


RUN_OWNER = "run"  # the allocations of this user's ``hpkctl run --pilot`` (a pilot kubelet's: PILOT_OWNER)


def run_provider(slurm: Slurm, profile: SiteProfile, *, pilot: bool) -> JobPodProvider:
    """The provider of ``hpkctl run``'s pods (records under ``<state_dir>/runs``): a pilot pod's (a step
    of an allocation of this user's run pool) or a job-per-pod one."""
    return pilot_run_provider(slurm, profile) if pilot else JobPodProvider(slurm=slurm, profile=profile,
                                                                            records=RunRecords(profile))


def pilot_run_provider(slurm: Slurm, profile: SiteProfile) -> PilotPodProvider:
    """``hpkctl run --pilot``'s provider: its pods are steps of this user's run pool's allocations."""
    return PilotPodProvider(slurm=slurm, profile=profile, records=RunRecords(profile), node=profile.pods.node_name,
                            state_dir=Path(profile.pods.state_dir).expanduser(), owner=RUN_OWNER)


class PilotPodProvider(PilotHolder):
    """:class:`~hpkctl.provider.api.PodProvider` whose pods are steps of held allocations."""

    def __init__(self, *, slurm: Slurm, profile: SiteProfile, records: RecordStore, node: str, state_dir: Path,
                 owner: str = PILOT_OWNER) -> None:
        super().__init__(slurm=slurm, profile=profile, records=records, node=node, state_dir=state_dir, owner=owner)
        self._book = PilotBook()  # each pod's state and the waiting queue; under _plock
        self._plock = threading.Lock()
        self.pilot_workloads = PilotWorkloadStops(slurm, margin=STOP_MARGIN)
        self.changed: Callable[[], None] = lambda: None  # a step said its pod changed (the kubelet: a round now)

    def _books_age(self, waiting: float) -> float:
        """How old the pool's books may be: ``waiting`` while an allocation is pending (a pod waits for
        it to run), else ``slurm_poll``, as the status rounds' squeue: with every allocation running, a
        squeue each status_poll (0.5 s) was most of a busy pilot kubelet's Slurm commands and told it
        nothing (bench/run pilot's backlog: squeue 0.31 per pod)."""
        return waiting if not self.pool.settled() else max(waiting, self.profile.kubelet.slurm_poll)

    def know_step(self, uid: str, proc: StepProcess) -> None:
        """The srun of pod ``uid``'s step, started by this process (``hpkctl run --pilot``): its delete
        waits for it to end."""
        with self._plock:
            self._book.pod(uid).step = proc

    def deleting_uids(self) -> set[str]:
        with self._plock:
            return {uid for uid, p in self._book.pods.items() if p.deleting}

    @classmethod
    def for_pilot_node(cls, *, slurm: Slurm, profile: SiteProfile, node_state: Path, node: str) -> PilotPodProvider:
        return cls(slurm=slurm, profile=profile, records=Records(node_state), node=node, state_dir=node_state)

    def leftovers(self) -> list[Leftover]:
        out = super().leftovers()
        # book the pods an earlier kubelet started in the allocations it held, each with its whole room
        rebook(self.pool, self.slurm, self.profile,
               [(left.ref, rec, left.saved) for left in out if left.live and (rec := self._rec(left.ref.uid)) is not None])
        return out

    def create(self, pod: Mapping[str, Any], inputs: PodInputs) -> Created:
        t0 = time.monotonic()
        ref = PodRef.of(pod)
        rec = self._rec(ref.uid)
        if rec is not None and rec.job_id:
            return Created(Outcome.ADOPTED, job_id=rec.job_id, where="its record", final=rec.state != "submitted")
        prepared = self._prepare(ref, pod, rec, inputs)  # rendered once; images pulled here if the profile says so
        if isinstance(prepared, Created):
            return prepared
        rendered = prepared
        t_render = time.monotonic()
        need = need_of(rendered)
        why = unfit(need, self.pool.rules)
        if why:
            raise PodError("PilotTooLarge", why)
        # The books are asked about again when older than a status round's Slurm answer may be ([kubelet]
        # slurm_poll: an idle kubelet runs no rounds, and an allocation released after an idle spell must
        # not be chosen); a pod that finds no room asks when they are over WAIT_FOR_ROOM old (one squeue a
        # second for all waiting pods). A pod within slurm_poll of another costs no squeue: its step is
        # its one Slurm call (bench/run pilot: the squeue was 0.02-0.14 s of the create path under load).
        self.pool.refresh(max_age=self.profile.kubelet.slurm_poll)
        spot = self.pool.place(need)
        if spot is None and (age := self._books_age(WAIT_FOR_ROOM)) < self.profile.kubelet.slurm_poll:
            self.pool.refresh(max_age=age)  # younger books only while an allocation is pending
            spot = self.pool.place(need)
        if spot is None:
            # A pod that begins to wait ticks now (it may need an allocation requested); one asked again
            # ticks only if no tick came within WAIT_FOR_ROOM (a tick is O(waiting pods)).
            with self._plock:
                pending, first = self._book.wait_turn(ref.uid, need, inputs.ready, now=time.monotonic(),
                                                      every=WAIT_FOR_ROOM)
            if pending:
                self.pool.tick(pending)
            self._park(ref.uid, rendered)  # kept while it waits for room: no re-render, no GETs, no token
            # The pod that waited longest asks again each WAIT_FOR_ROOM (an allocation may start); the
            # others are woken when room frees or the pod before them is placed, and ask only each
            # WAIT_BEHIND (each second, a backlog of N was N creates a second: bench/run pilot, 14
            # creates that found no room per pod placed).
            return Created(Outcome.RETRY, retry_after=WAIT_FOR_ROOM if first or inputs.ready is None else WAIT_BEHIND,
                           warnings=tuple(rendered.warnings))
        try:  # the room is booked: a failure before the step exists gives it back (else it blocks the retry)
            with self._plock:
                was_head = (head := self._book.head()) is not None and head[0] == ref.uid
                self._book.stop_waiting(ref.uid)
            t_place = time.monotonic()
            rec = PodRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, pod_dir=rendered.plan.pod_dir,
                            state=SUBMITTING, submitted=time.time())
            self._save(rec)  # the intent, before the step exists
            write_pod_dir(rendered, pod_json=compact_json(pod))
            t_dir = time.monotonic()
            proc = start_pod_step(self.slurm, rendered, spot, need, notify=True)
        except BaseException:
            self.pool.done(ref.uid)
            raise
        with self._plock:
            self._book.pod(ref.uid).step = proc
        threading.Thread(target=self._reap, args=(ref.uid, proc), name=f"pilot-step-{ref.name}", daemon=True).start()
        with self._plock:
            head = self._book.head()
        # the pod behind it: now the longest waiting, it asks each WAIT_FOR_ROOM from its next create on (its
        # retry was WAIT_BEHIND); or it fits too (an allocation that started has room for several)
        if head is not None and (was_head or self.pool.fits(head[1])):
            head[2](head[0])
        t_srun = time.monotonic()
        notes = self._submitted(ref, rec, spot[0])
        # the create path's stages (bench/run pilot's "where the time goes" splits the rest)
        log.info("pod %s: step of pilot allocation %s on %s (%s) in %.3f s: render %.3f, place %.3f, "
                 "record and pod directory %.3f, srun %.3f, record %.3f", ref.key, spot[0], spot[1], need.room(),
                 time.monotonic() - t0, t_render - t0, t_place - t_render, t_dir - t_place,
                 t_srun - t_dir, time.monotonic() - t_srun)
        return Created(Outcome.SUBMITTED, job_id=spot[0], notes=notes, warnings=tuple(rendered.warnings))

    def give_up(self, ref: PodRef) -> None:
        """The kubelet failed the pod before it ran: it waits for room no more (else its need is planned
        for, allocations requested and released again, and it takes the wake-ups of the pods behind it)."""
        with self._plock:
            self._book.drop(ref.uid)
        self.pool.done(ref.uid)  # a room booked by a create that failed after placing it is free again
        self._wake(1)  # the pod behind it, if it was the longest waiting, asks each WAIT_FOR_ROOM now
        super().give_up(ref)

    def delete(self, ref: PodRef, *, grace: float | None, pod: Mapping[str, Any], report: bool = True) -> Deletion:
        rec = self._rec(ref.uid)
        if rec is not None and rec.is_array and rec.state != STOPPED and rec.pod_dir:  # hpkctl run --pilot of a Job
            done, killing, cancelled = self.pilot_workloads.step(rec, grace=grace, now=time.monotonic())
            if done:
                rec.state, rec.stopped = STOPPED, time.time()
                self._save(rec)
            return Deletion(done=done, job_id=rec.job_id, recheck_after=DELETE_CHECK, killing=killing,
                            cancelled=cancelled)
        if rec is None or rec.state == STOPPED or not rec.pod_dir:
            with self._plock:
                waited = self._book.drop(ref.uid)
            if waited:
                self._wake(1)  # the pod behind it, if it waited longest, asks each WAIT_FOR_ROOM now
            return super().delete(ref, grace=grace, pod=pod, report=report)
        pd = PodDir(Path(rec.pod_dir))
        step = (pd.read(JOB_ID) or "").strip()
        now = time.monotonic()
        with self._plock:
            state = self._book.stop_waiting(ref.uid)
            killing = not state.deleting and not pd.exists(POD_DONE)
            state.deleting = True
            sent, proc = state.term_sent, state.step
        if is_step_id(step) and not pd.exists(POD_DONE):
            if sent is None:
                mark_deleting(pd)
                self.slurm.cancel_step(step, signal="TERM")
                with self._plock:
                    state.term_sent = now
                return Deletion(done=False, job_id=rec.job_id, recheck_after=DELETE_CHECK, killing=killing)
            if now - sent < stop_wait(pod.get("spec") or {}, grace=grace, margin=STOP_MARGIN):
                return Deletion(done=False, job_id=rec.job_id, recheck_after=DELETE_CHECK, killing=killing)
        if state.cancelled is None:
            # a pod whose files say it finished, and whose srun (when this process has it) ended, has no
            # step left to kill: no scancel (one Slurm call per deleted pod, for nothing)
            finished = pd.exists(POD_DONE) and (proc is None or proc.poll() is not None)
            if is_step_id(step) and not finished:
                self.slurm.cancel_step(step)
            with self._plock:
                state.cancelled = now
        if proc is not None and proc.poll() is None:
            # The step is cancelled and its srun ends with it: look again rather than hold the
            # worker (the Protocol's delete never blocks); an srun still there SRUN_EXIT_WAIT
            # after the cancel is killed, so its books are not kept for ever.
            if now - (state.cancelled or now) < SRUN_EXIT_WAIT:
                return Deletion(done=False, job_id=rec.job_id, recheck_after=DELETE_CHECK, killing=killing)
            proc.kill()
            proc.poll()
        with self._plock:
            self._book.drop(ref.uid)
        if self.pool.done(ref.uid):  # not when a status round or its srun's end freed the room already
            self._wake(1)
        final = final_report(ref.uid, Path(rec.pod_dir), pod) if report else None
        rec.state, rec.stopped = STOPPED, time.time()
        self._save(rec)
        self.rounds.forget(ref.uid)
        return Deletion(done=True, job_id=rec.job_id, killing=killing, cancelled=True, final=final)

    def statuses(self, pods: Sequence[Watched], *, now: float | None = None) -> list[StatusReport]:
        with self._plock:
            ended = [(uid, rc) for uid, p in self._book.pods.items() if p.step is not None
                     and (rc := p.step.poll()) is not None and not p.deleting]
            for uid, _ in ended:
                self._book.drop(uid)
            pending = self._book.waiting()
            self._book.ticked = time.monotonic()
        since = self.pool.clock() if ended else 0.0
        freed = 0
        for uid, rc in ended:  # reaped here before its thread did: the same checks (a dead allocation)
            freed += self._step_ended(uid, rc, since)
        # at most one squeue per status_poll, however often a step's announcement starts a round
        self._refresh_books(max_age=self._books_age(self.profile.kubelet.status_poll), pending=pending)
        asked = self.jobs.asked
        reports = super().statuses(pods, now=now)
        lost: dict[str, StatusReport] = {}
        if self.jobs.asked != asked:  # a step killed outside its pod's script: one squeue --steps per Slurm round
            self.pool.heard(self.jobs.jobs)  # an allocation it saw end takes no pod from now (woken ones below)
            gone = self.deleting_uids()
            lost = lost_step_reports(self.slurm, [r for w in pods if w.ref.uid not in gone
                                                  and (r := self._rec(w.ref.uid)) is not None], self.jobs.jobs)
        for uid in lost:
            freed += self.pool.done(uid)  # not a room freed already, or in an allocation that ended
        out = list(lost.values())
        for report in reports:
            if report.uid in lost:
                continue
            pod_dir = self._pod_dir(report.uid)
            # the allocation runs on for other pods: the pod's own files say it is done
            if report.status is not None and report.status.finished and pod_dir is not None \
                    and PodDir(pod_dir).exists(POD_DONE):
                report = dataclasses.replace(report, final=True)
                freed += self.pool.done(report.uid)  # not again when its srun's end freed it (one wake each)
            out.append(report)
        self._wake(freed)
        return out

    def _reap(self, uid: str, proc: StepProcess) -> None:
        """Pass on each status change the step announces (``changed``: a status round now, not up to ``status_poll``
        later), and when its srun ends free its room and wake the pod that waited longest at once (bench/run
        pilot's backlog: the room stood idle a round after each pod). One thread per running step (as many as the
        allocations' CPUs at most), blocked reading its srun's output: no Slurm call, no file read. A pod being
        deleted is left to its delete, which waits for this srun too."""
        try:
            rc = proc.wait_changes(self.changed)
        except Exception:  # noqa: BLE001 - the status rounds reap it instead
            log.debug("pilot: waiting for the srun of pod %s failed", uid, exc_info=True)
            return
        ended = self.pool.clock()
        with self._plock:
            state = self._book.pods.get(uid)
            mine = state is not None and state.step is proc and not state.deleting
            if mine:
                self._book.drop(uid)
        if mine and self._step_ended(uid, rc, ended):  # not when a round freed its room already
            self._wake(1)

    def _step_ended(self, uid: str, rc: int | None, since: float) -> bool:
        """Pod ``uid``'s srun ended (seen at ``since``, by its thread or a status round): its room is free (False:
        a round freed it already, seeing pod.done). A step killed before its script's last word or TERMed by
        Slurm may have lost its allocation: ask before a wake."""
        freed = self.pool.done(uid)
        pod_dir = self._pod_dir(uid)
        if pod_dir is None or not PodDir(pod_dir).exists(POD_DONE) or PodDir(pod_dir).exists(POD_TERMINATING):
            self._refresh_books(max_age=max(self.pool.clock() - since, 1e-6))
        log.info("pilot: the step of pod uid %s ended (srun exit status %s): its room is free", uid, rc)
        return freed

    def _refresh_books(self, *, max_age: float, pending: Sequence[Need] | None = None) -> None:
        """The pool's books at most ``max_age`` old; then, with ``pending`` (a status round's), its tick."""
        try:
            self.pool.refresh(max_age=max_age)
            if pending is not None:
                self.pool.tick(pending)
        except Exception:  # noqa: BLE001 - Slurm's trouble must not stop the pods' status
            log.exception("pilot: refreshing the allocations failed")

    def _wake(self, n: int) -> None:
        """Room for about ``n`` pods was freed: of the pods that have waited longest (the first WAKE_SCAN),
        the first ``n`` that fit now are created again now, not after their retry (a backlog's pods
        otherwise ran in waves a second apart: bench/run pilot; and a big pod at the head that does not
        fit took the one wake-up while a small one behind it that did waited WAIT_BEHIND); when none fits,
        the longest waiting (the books may be older than the freed room). One that finds no room waits again."""
        if n <= 0:
            return
        with self._plock:
            waiting = self._book.first_waiting(WAKE_SCAN)
        # asked only until n fit (Pool.fits is a placement: all WAKE_SCAN of a backlog were asked at each wake,
        # ~35 placements per pod in bench/run pilot's, 3% of the kubelet's CPU)
        fitting = list(itertools.islice(((uid, wake) for uid, need, wake in waiting if self.pool.fits(need)), n))
        for uid, wake in fitting or [(uid, wake) for uid, _, wake in waiting[:1]]:  # none fits: the head looks again
            wake(uid)


__all__ = ["PILOT_OWNER", "RUN_OWNER", "PilotPodProvider", "pilot_enabled", "pilot_run_provider", "run_provider"]

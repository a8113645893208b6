"""Pods to Slurm jobs and back: the kubelet's reconcile loop.

Every pod the API server binds to the node arrives through the reflector (:meth:`PodManager.on_event`,
:meth:`PodManager.on_sync`) and is handled by :meth:`PodManager.sync` on a bounded pool of workers,
one worker per pod uid at a time (:class:`~hpkctl.kube.workqueue.WorkQueue`). Nothing here waits
for long: a pull, a grace period or a back-off re-queues the pod for later, so one slow pod never
holds the others up.

Status flows the other way in :meth:`PodManager.poll`: one ``squeue`` call per ``slurm_poll`` (10 s)
for all jobs, the change log every ``status_poll`` (one readdir; a pod's files are read only when it
left a marker there or Slurm's view of its job changed), and a status patch only when something
changed.

A per-pod problem never escapes: it becomes the pod's status (a reason and a message) and an event.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hpkctl.errors import PodError
from hpkctl.jobs import JobInfo, Slurm, SlurmError, SlurmTimeout, SubmitError
from hpkctl.kube import Kube, KubeError, KubeUnavailable, pod_path
from hpkctl.kube.events import EventSink
from hpkctl.kube.workqueue import WorkQueue
from hpkctl.kubelet.adopt import JobFinder, ran_before, terminal_phase
from hpkctl.kubelet.changes import ChangeLog
from hpkctl.kubelet.objects import ApiObjects, ServiceCache
from hpkctl.kubelet.podstatus import api_status, never_regresses, reported_starts, status_patch
from hpkctl.kubelet.records import FAILED, STOPPED, SUBMITTED, SUBMITTING, PodRecord, Records
from hpkctl.kubelet.table import PodTable, Tracked
from hpkctl.kubelet.tokens import refresh, refresh_after
from hpkctl.local.runs import (LOWERED_GRACE, deadline_limit, ended, job_states, lower_to_partition, lowered_note,
                               mark_deleting, never_starts)
from hpkctl.local.submit import images_to_pull, job_partition_option, submit_job
from hpkctl.pod import render_pod, write_pod_dir
from hpkctl.pod.translate import pod_dir_for
from hpkctl.pod.lifecycle import grace_period, stop_wait
from hpkctl.pod.paths import JOB_STARTED, LAST_PROBE_KILL, POD_DONE, PROBE_KILL, PodDir
from hpkctl.pod.status import PodStatus, containers_of, read_pod_status
from hpkctl.runtime import ImageToPull, pull_images
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.kubelet.pods")

JOB_ID_ANNOTATION = "hpk.io/slurm-job-id"
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # as the kubelet's CreateContainerConfigError / image back-off
_DELETE_CHECK = 0.5  # seconds between checks that a stopping pod has finished its stop sequence


class ImagePuller:
    """Pulls each image once, off the pod-creation path: a pod whose images are missing is parked
    and re-queued when the pull ends; other pods go on meanwhile. Only used with ``[apptainer] pull
    = "submit"`` (offline compute nodes); with ``pull = "job"`` the job pulls, on its node."""

    def __init__(self, profile: SiteProfile, *, workers: int = 2) -> None:
        self.profile = profile
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pull")
        self._lock = threading.Lock()
        self._pulls: dict[str, Future[None]] = {}

    def _pull(self, image: ImageToPull) -> None:
        a = self.profile.apptainer
        with open(os.devnull, "w") as quiet:
            pull_images([image], apptainer=a.binary, window=a.always_pull_window, timeout=a.pull_timeout, out=quiet)

    def ensure(self, images: list[ImageToPull], *, when_done: Callable[[], None]) -> list[Future[None]]:
        """Start (or join) the pulls; the futures not yet done. ``when_done`` runs once per pull that ends."""
        pending = []
        with self._lock:
            for image in images:
                fut = self._pulls.get(image.sif)
                if fut is None:
                    fut = self._pool.submit(self._pull, image)
                    self._pulls[image.sif] = fut
                if not fut.done():
                    fut.add_done_callback(lambda _f: when_done())
                    pending.append(fut)
                elif (exc := fut.exception()) is not None:
                    raise exc  # the caller forgets it after its back-off, so the next try pulls again
        return pending

    def forget(self, images: list[ImageToPull]) -> None:
        """After a failed pull: let the next attempt pull again."""
        with self._lock:
            for image in images:
                fut = self._pulls.get(image.sif)
                if fut is not None and fut.done():
                    del self._pulls[image.sif]

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _meta(pod: dict[str, Any]) -> dict[str, Any]:
    return pod.get("metadata") or {}


def _waiting_containers(pod: dict[str, Any], reason: str, message: str) -> list[dict[str, Any]]:
    """Every main container waiting for ``reason``: the pod never reached Slurm."""
    return [{"name": c.get("name"), "image": c.get("image", ""), "imageID": "", "ready": False, "restartCount": 0,
             "started": False, "state": {"waiting": {"reason": reason, "message": message}}}
            for c in (pod.get("spec") or {}).get("containers") or []]


def _job_key(job: JobInfo | None) -> tuple[Any, ...]:
    return () if job is None else (job.state, job.reason, job.exit_code, job.signal, job.nodes)


class PodManager:
    def __init__(self, *, kube: Kube, slurm: Slurm, profile: SiteProfile, node_name: str, records: Records,
                 recorder: EventSink, host_ip: str = "", table: PodTable | None = None) -> None:
        self.kube = kube
        self.slurm = slurm
        self.profile = profile
        self.node_name = node_name
        self.records = records
        self.recorder = recorder
        self.host_ip = host_ip
        self.table = table or PodTable()
        self.queue = WorkQueue(self.sync, workers=profile.kubelet.workers)
        self.puller = ImagePuller(profile)
        self.services = ServiceCache(kube)
        self.finder = JobFinder(slurm)
        self._recs: dict[str, PodRecord] = {}
        self._recs_lock = threading.Lock()
        self._gone: set[str] = set()  # uids whose API object no longer exists
        self._synced_once = False
        self._jobs: dict[str, JobInfo | None] = {}  # the last squeue answer, by job id
        self._jobs_asked = 0.0
        self._stopping: dict[str, JobInfo] = {}  # jobs of pods being stopped, one squeue for all of them
        self._stopping_ids: frozenset[str] = frozenset()
        self._stopping_asked = 0.0
        self._stopping_error: SlurmError | None = None
        self._stopping_lock = threading.Lock()
        self._audited = time.monotonic()  # the first audit one status_audit from now: every pod is read at first
        self.changes = ChangeLog(Path(os.path.expanduser(profile.pods.state_dir)))
        self.slurm_calls = 0  # squeue rounds (bench: Slurm commands per poll)
        self.stop_queries = 0  # squeue calls of stop sequences (bench: deleting many pods)

    # ------------------------------------------------------------------ records
    def load_records(self) -> None:
        with self._recs_lock:
            self._recs = self.records.load_all()
        log.info("loaded %d pod record(s)", len(self._recs))

    def _rec(self, uid: str) -> PodRecord | None:
        with self._recs_lock:
            return self._recs.get(uid)

    def _save(self, rec: PodRecord) -> None:
        self.records.save(rec)
        with self._recs_lock:
            self._recs[rec.uid] = rec

    # ------------------------------------------------------------------ reflector callbacks
    def _upsert(self, pod: dict[str, Any]) -> str:
        meta = _meta(pod)
        uid = str(meta.get("uid") or "")
        t = self.table.get(uid)
        if t is None:
            rec = self._rec(uid)
            t = Tracked(uid=uid, namespace=meta.get("namespace") or "default", name=meta.get("name") or "", pod=pod)
            t.sent = dict(pod.get("status") or {})
            t.extra["started"] = reported_starts(t.sent)  # a restarted kubelet announces only new starts
            if rec is not None:
                t.pod_dir = Path(rec.pod_dir)
                t.job_id = rec.job_id
                if rec.state == FAILED:
                    t.extra["final"] = True
            self.table.put(t)
        else:
            t.pod = pod
        return uid

    def on_event(self, typ: str, pod: dict[str, Any]) -> None:
        if typ == "DELETED":
            uid = str(_meta(pod).get("uid") or "")
            rec = self._rec(uid)
            if self.table.get(uid) is None and (rec is None or rec.state == STOPPED):
                return  # unknown, or stopped already (the DELETED of the kubelet's own final delete)
            if self.table.get(uid) is None:
                self._upsert(pod)
            self._gone.add(uid)
            self.queue.add(uid)
            return
        self.queue.add(self._upsert(pod))

    def on_sync(self, items: list[dict[str, Any]]) -> None:
        """A full list: every pod is (re)considered; tracked pods and records the list lacks were
        deleted while nobody watched (only decided from a complete list: never from a partial view)."""
        fresh = {str(_meta(p).get("uid") or ""): p for p in items}
        for uid, pod in fresh.items():
            self._gone.discard(uid)
            self.queue.add(self._upsert(pod))
        for t in self.table.snapshot():
            if t.uid not in fresh:
                self._gone.add(t.uid)
                self.queue.add(t.uid)
        if not self._synced_once:
            self._synced_once = True
            with self._recs_lock:
                orphans = [r for u, r in self._recs.items() if u not in fresh and r.state in (SUBMITTING, SUBMITTED)]
            for rec in orphans:
                log.info("pod %s/%s (uid %s) was deleted while the kubelet was away: stopping job %s",
                         rec.namespace, rec.name, rec.uid, rec.job_id or "(none recorded)")
                self.table.put(Tracked(uid=rec.uid, namespace=rec.namespace, name=rec.name, pod=self._saved_pod(rec),
                                       pod_dir=Path(rec.pod_dir), job_id=rec.job_id))
                self._gone.add(rec.uid)
                self.queue.add(rec.uid)

    @staticmethod
    def _saved_pod(rec: PodRecord) -> dict[str, Any]:
        try:
            return dict(json.loads(PodDir(Path(rec.pod_dir)).pod_json.read_text()))
        except (OSError, ValueError):
            return {"metadata": {"name": rec.name, "namespace": rec.namespace, "uid": rec.uid}, "spec": {}}

    # ------------------------------------------------------------------ the reconcile step
    def sync(self, uid: str) -> None:
        t = self.table.get(uid)
        if t is None:
            return
        try:
            if uid in self._gone:
                self._stop(t, final_delete=False)
            elif _meta(t.pod).get("deletionTimestamp"):
                self._stop(t, final_delete=True)
            elif t.extra.get("final"):
                return
            else:
                rec = self._rec(uid)
                if rec is None or (rec.state == SUBMITTING and not rec.job_id):
                    self._create(t, rec)
                elif rec.job_id and (_meta(t.pod).get("annotations") or {}).get(JOB_ID_ANNOTATION) != rec.job_id:
                    self._annotate(t, rec.job_id)  # killed between sbatch and the annotation: finish the step
        except (KubeError, KubeUnavailable) as exc:
            log.warning("pod %s: API server: %s (retrying)", t.key, exc)
            self.queue.add_after(uid, self._backoff(t))
        except SlurmError as exc:
            log.warning("pod %s: Slurm: %s (retrying)", t.key, exc)
            self.queue.add_after(uid, self._backoff(t))
        except OSError as exc:  # the pod directory cannot be written (disk full, quota): retry later
            log.warning("pod %s: %s (retrying)", t.key, exc)
            self._event(t, "Failed", f"cannot prepare the pod directory: {exc}", warning=True)
            self.queue.add_after(uid, self._backoff(t))
        except Exception as exc:  # noqa: BLE001 - a bad pod never takes the kubelet down
            log.exception("pod %s: unexpected error", t.key)
            try:
                self._fail(t, "KubeletError", f"{type(exc).__name__}: {exc} (a bug in hpkctl: please report it "
                           "with the kubelet's log)")
            except Exception:  # noqa: BLE001 - the API is down too: the next sync tries again
                self.queue.add_after(uid, self._backoff(t))

    def _backoff(self, t: Tracked) -> float:
        delay = float(t.extra.get("backoff") or BACKOFF_START / 2)
        t.extra["backoff"] = min(delay * 2, BACKOFF_MAX)
        return delay

    def _event(self, t: Tracked, reason: str, message: str, *, warning: bool = False) -> None:
        pod = dict(t.pod)
        pod.setdefault("kind", "Pod")
        pod.setdefault("apiVersion", "v1")
        self.recorder.record(pod, reason=reason, message=message, type="Warning" if warning else "Normal")

    # ------------------------------------------------------------------ create
    def _create(self, t: Tracked, rec: PodRecord | None) -> None:
        pod = t.pod
        if self._ran_already(t, rec):
            return
        objects = ApiObjects(self.kube, pod=pod)
        try:
            rendered = render_pod(pod, self.profile, objects=objects, services=self.services.for_pod(pod))
        except PodError as exc:
            self._missing_events(t, objects, mandatory=exc.reason == "CreateContainerConfigError")
            if exc.reason == "CreateContainerConfigError":
                self._waiting(t, exc.reason, exc.message)
                self.queue.add_after(t.uid, self._backoff(t))
            else:
                self._fail(t, exc.reason, f"{exc.message}" + (f" (fix: {exc.hint})" if exc.hint else ""))
            return
        self._missing_events(t, objects, mandatory=False)
        for w in rendered.warnings:
            log.info("pod %s: %s", t.key, w)
        if self.profile.apptainer.pull == "submit":
            images = images_to_pull(rendered)
            try:
                pending = self.puller.ensure(images, when_done=lambda: self.queue.add(t.uid))
            except PodError as exc:
                self.puller.forget(images)
                t.extra.pop("pulling", None)
                reason = "ImagePullBackOff" if t.extra.get("pull_failed") else exc.reason
                t.extra["pull_failed"] = True
                message = exc.message
                if exc.reason == "ErrImagePull":  # e.g. compute nodes without internet (JSC)
                    names = " ".join(i.source.removeprefix("docker://") for i in images)
                    message += (f" (if this node cannot reach the registry, pull where it can, e.g. on a login "
                                f"node: hpkctl pull {names} --site {self.profile.name}")
                    if any(i.policy == "Always" for i in images):  # :latest or untagged, or asked for
                        message += ("; and set imagePullPolicy: IfNotPresent, or Always pulls again after "
                                    f"[apptainer] always_pull_window ({self.profile.apptainer.always_pull_window} s)")
                    message += ")"
                self._event(t, "Failed", message, warning=True)
                self._waiting(t, reason, message)
                self.queue.add_after(t.uid, self._backoff(t))
                return
            if pending:
                if not t.extra.get("pulling"):
                    t.extra["pulling"] = True
                    self._event(t, "Pulling", "Pulling image(s) " + ", ".join(i.source for i in images))
                if not t.extra.get("pull_failed"):  # after a failure the pod shows ImagePullBackOff meanwhile
                    self._waiting(t, "ContainerCreating", "pulling images")
                return
            if t.extra.pop("pulling", None):
                self._event(t, "Pulled", "Image(s) pulled: " + ", ".join(i.source for i in images))
        root = Path(rendered.plan.pod_dir)
        rec = PodRecord(uid=t.uid, namespace=t.namespace, name=t.name, pod_dir=str(root), state=SUBMITTING,
                        submitted=time.time())
        self._save(rec)  # the intent, before anything outside this process exists
        write_pod_dir(rendered, pod_json=json.dumps(pod, indent=1).encode())
        t.pod_dir = root
        try:
            job_id, lowered = submit_job(self.slurm, root / "job" / "job.sh", workdir=root,
                                         deadline=rendered.plan.active_deadline,
                                         partition=job_partition_option(rendered.plan))
        except SlurmTimeout:
            log.warning("pod %s: sbatch timed out; the job may exist: looking for it by uid next", t.key)
            self.queue.add_after(t.uid, 5.0)
            return
        except SubmitError as exc:
            rec.state = FAILED
            self._save(rec)
            self._fail(t, "SlurmRejected", f"Slurm refused the job: {exc.message}"
                       + (f" (fix: {exc.hint})" if exc.hint else ""))
            return
        self._submitted(t, rec, job_id)
        if lowered:
            self._event(t, "TimeLimitLowered", lowered_note(job_id, lowered, deadline=rendered.plan.active_deadline,
                                                            grace=rendered.plan.grace), warning=True)
        if (due := refresh_after(pod)) is not None:
            t.extra["token_due"] = time.time() + due

    def _ran_already(self, t: Tracked, rec: PodRecord | None) -> bool:
        """Before any submission: a pod whose API phase is terminal is never run again, and a job
        found by the pod's uid (``JobFinder.find``) is adopted, not duplicated; a pod the API says
        has run but whose job left no trace fails instead of running twice. True if handled."""
        pod_dir = Path(rec.pod_dir) if rec is not None and rec.pod_dir else Path(pod_dir_for(self.profile, t.uid))
        found = self.finder.find(uid=t.uid, pod=t.pod, pod_dir=pod_dir, fresh=rec is not None)
        phase = terminal_phase(t.pod)
        if found is None and not phase and not ran_before(t.pod):
            return False
        if rec is None:
            rec = PodRecord(uid=t.uid, namespace=t.namespace, name=t.name, pod_dir=str(pod_dir), state=SUBMITTING,
                            submitted=time.time())
        if found is not None:
            log.info("pod %s: adopting job %s, found by the pod's uid in %s", t.key, found.job_id, found.where)
            if phase:  # the API's final word stands; the job is only remembered (a delete cancels nothing new)
                t.extra["final"] = True
            self._submitted(t, rec, found.job_id, event=not phase)
            return True
        rec.state = FAILED
        self._save(rec)
        if phase:
            log.info("pod %s: %s in the API and no record of it here: not run again", t.key, phase)
            t.extra["final"] = True
            return True
        self._fail(t, "JobLost", "the pod's containers ran, but its Slurm job is in no record of this kubelet, "
                   "no pod directory and no Slurm query any more (the kubelet's state directory was lost or "
                   "changed); it is not run a second time: delete the pod and create it again to rerun it")
        return True

    def _submitted(self, t: Tracked, rec: PodRecord, job_id: str, *, event: bool = True) -> None:
        rec.job_id, rec.state = job_id, SUBMITTED
        t.job_id, t.pod_dir = job_id, Path(rec.pod_dir)
        try:
            self._save(rec)
        except OSError as exc:
            # the job exists: follow it from memory; after a restart it is found again by the pod's uid
            # (its job.id, squeue), never submitted a second time (issue 20.7: a full state disk)
            log.warning("pod %s: Slurm job %s runs, but its record cannot be written (%s); it is followed "
                        "from memory", t.key, job_id, exc)
            with self._recs_lock:
                self._recs[rec.uid] = rec
            self._event(t, "RecordNotWritten", f"the kubelet cannot write its record of Slurm job {job_id}: "
                        f"{exc.strerror or exc}; free space in its state directory", warning=True)
        t.extra.pop("backoff", None)
        try:
            self._annotate(t, job_id)  # first: the job id is what users and tools wait for (issue 23.2)
        finally:
            if event:
                # the scheduler's Scheduled says where the pod went; this is the kubelet's own step
                self._event(t, "Submitted", f"Submitted as Slurm job {job_id}")
        t.extra["key"] = None  # read its status at the next poll

    def _annotate(self, t: Tracked, job_id: str) -> None:
        """The job id on the pod, for users (``kubectl describe``) and tools; through ``pods/status``,
        which keeps annotation changes, so the kubelet needs no right to update pods."""
        self.kube.patch(pod_path(t.namespace, t.name, "status"),
                        {"metadata": {"uid": t.uid, "annotations": {JOB_ID_ANNOTATION: job_id}}})

    def _missing_events(self, t: Tracked, objects: ApiObjects, *, mandatory: bool) -> None:
        for kind, name in objects.missing:
            tag = f"missing:{kind}:{name}"
            if t.extra.get(tag):
                continue
            t.extra[tag] = True
            which = "Mandatory" if mandatory else "Optional"
            self._event(t, f"{which}{kind}NotFound",
                        f"{kind.lower()} {t.namespace}/{name} not found" + ("" if mandatory else " (optional: skipped)"),
                        warning=mandatory)

    def _waiting(self, t: Tracked, reason: str, message: str) -> None:
        self._send(t, {"phase": "Pending", "containerStatuses": _waiting_containers(t.pod, reason, message)})

    def _fail(self, t: Tracked, reason: str, message: str) -> None:
        log.warning("pod %s: %s: %s", t.key, reason, message)
        self._event(t, "Failed", f"{reason}: {message}", warning=True)
        t.error = reason
        t.extra["final"] = True
        status = {"phase": "Failed", "reason": reason, "message": message,
                  "containerStatuses": _waiting_containers(t.pod, reason, message[:1000])}
        if self._rec(t.uid) is None:
            self._save(PodRecord(uid=t.uid, namespace=t.namespace, name=t.name, pod_dir="", state=FAILED,
                                 submitted=time.time()))
        self._send(t, status)

    def _send(self, t: Tracked, status: dict[str, Any]) -> bool:
        patch = status_patch(t.uid, status, t.sent)
        if patch is None:
            return False
        try:
            self.kube.patch(pod_path(t.namespace, t.name, "status"), patch)
        except KubeError as exc:
            if exc.code in (404, 409):  # deleted meanwhile, or another pod now has the name
                return False
            raise
        t.sent = {**(t.sent or {}), **{k: v for k, v in status.items()}}
        for k, v in patch["status"].items():
            if v is None:
                t.sent.pop(k, None)
        return True

    # ------------------------------------------------------------------ delete
    def _stop(self, t: Tracked, *, final_delete: bool) -> None:
        """The pod's stop sequence, without blocking a worker: TERM to the batch shell (which runs
        preStop, SIGTERM, the grace period, SIGKILL), then re-check every half second until the pod
        is done or its grace is up; then ``scancel``; then, for a pod the API still has, the final
        ``DELETE`` with grace 0 and the uid as precondition (so nothing stays Terminating)."""
        rec = self._rec(t.uid)
        job_id = t.job_id or (rec.job_id if rec else "")
        job = self._job_now(job_id) if job_id else None
        if not t.deleting:
            t.deleting = True
            if job_id and not ended(job):  # a finished pod has nothing left to kill
                self._event(t, "Killing", f"Stopping the pod's containers (Slurm job {job_id})")
        cancelled = False
        if job_id:
            if not ended(job):
                pd = PodDir(t.pod_dir) if t.pod_dir else None
                started = t.extra.get("term_sent")
                # Slurm's answer may be slurm_poll old: a job it still called PENDING may have started
                running = job is not None and (job.state == "RUNNING" or pd is not None and pd.exists(JOB_STARTED))
                if running and pd is not None and started is None:
                    mark_deleting(pd)
                    self.slurm.cancel(job_id, signal="TERM", batch_only=True)
                    t.extra["term_sent"] = time.monotonic()
                    self.queue.add_after(t.uid, _DELETE_CHECK)
                    return
                if started is not None and pd is not None and not pd.exists(POD_DONE) and \
                        time.monotonic() - started < self._grace(t):
                    self.queue.add_after(t.uid, _DELETE_CHECK)
                    return
                self.slurm.cancel(job_id)
                cancelled = True
        self._final_status(t, job_id)
        if final_delete:
            try:
                self.kube.delete(pod_path(t.namespace, t.name), {"gracePeriodSeconds": 0,
                                                                   "preconditions": {"uid": t.uid}},
                                 query={"gracePeriodSeconds": 0})
            except KubeError as exc:
                if exc.code not in (404, 409):  # gone already, or the name is another pod's now
                    raise
        if rec is not None:
            rec.state, rec.stopped = STOPPED, time.time()
            self._save(rec)
        self.table.pop(t.uid)
        self._gone.discard(t.uid)
        self.recorder.forget(t.uid)
        log.info("pod %s (uid %s) stopped%s", t.key, t.uid, f", job {job_id} cancelled" if cancelled else "")

    def _grace(self, t: Tracked) -> float:
        grace = _meta(t.pod).get("deletionGracePeriodSeconds")
        return stop_wait(t.pod.get("spec") or {}, grace=None if grace is None else float(grace), margin=5.0)

    def _job_now(self, job_id: str) -> JobInfo | None:
        """A stopping pod's job as Slurm last said, at most ``slurm_poll`` old. The status round asks
        about every tracked job, stopping ones included, so a delete usually costs no squeue of its
        own; a job that round has not asked about (a pod gone while the kubelet was away) is asked
        about together with every other pod being stopped, by one squeue at most every ``slurm_poll``:
        ``kubectl delete pods --all`` costs one call, not one per pod or per re-check."""
        every = self.profile.kubelet.slurm_poll
        with self._stopping_lock:  # one query at a time; the others wait for its answer
            now = time.monotonic()
            if job_id in self._jobs and now - self._jobs_asked < every:
                return self._jobs[job_id]
            if job_id not in self._stopping_ids or now - self._stopping_asked >= every:
                ids = {job_id}
                for t in self.table.snapshot():  # stopping, or about to be: deleted in the API, or gone
                    if t.deleting or t.uid in self._gone or _meta(t.pod).get("deletionTimestamp"):
                        rec = self._rec(t.uid)
                        ids.add(t.job_id or (rec.job_id if rec else ""))
                ids.discard("")
                self._stopping_ids = frozenset(ids)
                self._stopping_asked = now
                self.stop_queries += 1
                try:
                    self._stopping, self._stopping_error = self.slurm.query(sorted(ids)), None
                except SlurmError as exc:
                    # slurmctld slow or down: the waiting workers get this answer too instead of each
                    # running into the command timeout in turn; the next interval asks again
                    self._stopping, self._stopping_error = {}, exc
            if self._stopping_error is not None:
                raise self._stopping_error
            return self._stopping.get(job_id)

    def _final_status(self, t: Tracked, job_id: str) -> None:
        """Report the containers' last states before the pod goes (best effort)."""
        if t.pod_dir is None or t.uid in self._gone or not job_id:
            return
        try:
            st = read_pod_status(t.pod_dir, containers_of(t.pod), None, job_known=False)
            self._report(t, st)
        except (KubeError, KubeUnavailable, OSError) as exc:
            log.debug("pod %s: final status not sent: %s", t.key, exc)

    # ------------------------------------------------------------------ status
    def _report(self, t: Tracked, st: PodStatus) -> None:
        new = api_status(t.pod, st, job_id=t.job_id, host_ip=self.host_ip, previous=t.sent)
        if not never_regresses(new, t.sent, spec=t.pod.get("spec") or {}):
            log.warning("pod %s: not reporting a terminated container as running again", t.key)
            return
        before = t.status
        self._send(t, new)  # raises when the API cannot be told: then nothing below happens either
        t.status = st
        self._transition_events(t, before, st)

    def _transition_events(self, t: Tracked, before: PodStatus | None, st: PodStatus) -> None:
        seen = t.extra.setdefault("started", {})
        for c in st.containers:
            # every run that started, even one that ended between two polls (and is in its back-off now)
            ran = c.state in ("running", "terminated") or c.reason == "CrashLoopBackOff"
            if c.started_at and ran and seen.get(c.name) != c.started_at:
                seen[c.name] = c.started_at
                self._event(t, "Started", f"Started container {c.name}")
            self._probe_kill_events(t, c)
            self._back_off_event(t, c)
        if st.phase == "Failed" and (before is None or before.phase != "Failed"):
            self._event(t, "Failed", f"{st.reason}: {st.message}", warning=True)

    def _back_off_event(self, t: Tracked, c: Any) -> None:
        """BackOff (Warning) once per back-off of a container, in the kubelet's words."""
        if c.reason != "CrashLoopBackOff" or c.state != "waiting":
            return
        seen = t.extra.setdefault("backoffs", set())
        if (c.name, c.last_finished_at) in seen:
            return
        seen.add((c.name, c.last_finished_at))
        meta = t.pod.get("metadata") or {}
        self._event(t, "BackOff", f"Back-off restarting failed container {c.name} in pod "
                    f"{meta.get('name')}_{meta.get('namespace') or 'default'}({meta.get('uid')})", warning=True)

    def _probe_kill_events(self, t: Tracked, c: Any) -> None:
        """Unhealthy + Killing once per run a probe stopped: the current run's kill file, or after the
        restart the previous run's (the same kill, one restart later: same key)."""
        if t.pod_dir is None:
            return
        pd = PodDir(t.pod_dir)
        current = pd.read_container(c.name, PROBE_KILL)
        text = current or pd.read_container(c.name, LAST_PROBE_KILL)
        if not text:
            return
        run = c.restart_count if current else c.restart_count - 1
        seen = t.extra.setdefault("kills", set())
        if (c.name, run) in seen:
            return
        seen.add((c.name, run))
        self._event(t, "Unhealthy", text, warning=True)
        kind = text.split(" ", 1)[0].lower()
        if kind in ("liveness", "startup"):
            self._event(t, "Killing", f"Container {c.name} failed {kind} probe, will be restarted")

    def poll(self, *, now: float | None = None) -> int:
        """One status round; returns the number of pods whose status was read.

        Slurm is asked (one ``squeue`` for every tracked job, stopping ones included) at most every
        ``slurm_poll``: only what status files cannot say comes from there (pending and its reason,
        killed by Slurm: TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, cancelled). The files of a pod are read
        when its marker is in the change log (:class:`~hpkctl.kubelet.changes.ChangeLog`: one readdir
        per round), when Slurm's view of its job changed, and, every ``status_audit``, when the mtime
        of a running job's ``status/`` moved without a marker (a directory removed by hand, an older
        runtime; a pending job's start is a change of Slurm's view)."""
        now = time.monotonic() if now is None else now
        k = self.profile.kubelet
        tracked = [t for t in self.table.snapshot() if t.job_id and t.pod_dir and not t.extra.get("final")]
        live = [t for t in tracked if not t.deleting]
        if tracked and now - self._jobs_asked >= k.slurm_poll:
            with self._stopping_lock:  # the stop sequences read this answer too (_job_now)
                self._jobs = job_states(self.slurm, [t.job_id for t in tracked])
                self._jobs_asked = now
            self.slurm_calls += 1
        audit = bool(live) and now - self._audited >= k.status_audit
        if audit:
            self._audited = now
        changed = self.changes.take({t.uid for t in tracked}) if tracked else set()
        read = 0
        for t in live:
            assert t.pod_dir is not None
            job = self._jobs.get(t.job_id)
            key = (_job_key(job), t.job_id in self._jobs)
            mtime = None
            if t.uid in changed or key != t.extra.get("key"):
                t.extra["dirty"] = True
            elif audit and job is not None and job.state == "RUNNING" and \
                    (mtime := self._status_mtime(t)) != t.extra.get("mtime"):
                t.extra["dirty"] = True
            if not t.extra.get("dirty"):
                continue
            try:
                if never_starts(job):
                    self._never_starts(t, job)
                    continue
                t.extra["mtime"] = self._status_mtime(t) if mtime is None else mtime
                if not t.pod_dir.is_dir():
                    self._dir_missing(t, job, known=t.job_id in self._jobs)
                    t.extra["key"], t.extra["dirty"] = key, False
                    continue
                st = read_pod_status(t.pod_dir, containers_of(t.pod), job, job_known=t.job_id in self._jobs)
                self._report(t, st)
            except (KubeError, KubeUnavailable) as exc:
                log.warning("pod %s: status not sent: %s (next round)", t.key, exc)
                continue  # still dirty: read again next round
            except Exception:  # noqa: BLE001 - a bad pod directory must not stop the others' status
                log.exception("pod %s: reading its status failed", t.key)
                t.extra["key"], t.extra["dirty"] = key, False  # not again until something changes
                continue
            t.extra["key"], t.extra["dirty"] = key, False
            read += 1
            if st.finished and (ended(job) or (job is None and t.job_id in self._jobs)):
                t.extra["final"] = True
        return read

    def _status_mtime(self, t: Tracked) -> int:
        assert t.pod_dir is not None
        self.changes.ops += 1
        try:
            return os.stat(t.pod_dir / "status").st_mtime_ns
        except OSError:
            return 0

    def _never_starts(self, t: Tracked, job: JobInfo | None) -> None:
        """Slurm keeps the job pending for a reason waiting cannot clear (no node of the partition can
        hold it): cancel it and fail the pod, as the real kubelet rejects a pod that cannot fit."""
        reason = job.reason if job is not None else ""
        lowered = t.extra.get("time_lowered")
        if lowered is not None and time.monotonic() - lowered < LOWERED_GRACE:
            return  # Slurm has not looked at the lowered limit yet
        spec = t.pod.get("spec") or {}
        deadline = deadline_limit(job, spec)
        if deadline and lowered is None:
            t.extra["time_lowered"] = time.monotonic()
            try:
                limit = lower_to_partition(self.slurm, t.job_id, deadline)
            except SlurmError as exc:
                log.warning("pod %s: lowering job %s's time limit failed: %s", t.key, t.job_id, exc)
                limit = 0
            if limit:
                self._event(t, "TimeLimitLowered", lowered_note(t.job_id, limit, deadline=deadline,
                                                                grace=grace_period(spec)), warning=True)
                return
        self.slurm.cancel(t.job_id)
        self._fail(t, "SlurmNeverStarts",
                   f"Slurm will never start job {t.job_id}: {reason}; lower the pod's resources (cpu → "
                   "--cpus-per-task, memory → --mem) or node count, or choose a partition whose nodes can hold "
                   "it ('sinfo -o \"%P %c %m %G %l\"' shows what the partitions offer)")

    def _dir_missing(self, t: Tracked, job: JobInfo | None, *, known: bool) -> None:
        """The pod directory is gone (removed by hand?): say so, keep the containers as last reported,
        and fail the pod once Slurm says the job ended."""
        state = (f"Slurm job {t.job_id} is {job.state}" if job is not None
                 else f"Slurm no longer knows job {t.job_id}")
        status = dict(t.sent or {})
        status.update({"reason": "PodDirectoryMissing",
                       "message": f"the pod directory {t.pod_dir} is gone (deleted by hand?); {state}"})
        if known and ended(job):
            status["phase"] = "Failed"
            t.extra["final"] = True
        self._send(t, status)

    def refresh_tokens(self, *, now: float | None = None) -> int:
        """Renew the projected tokens of running pods that are due (after a restart: all of them
        once, since their issue time is unknown). The number of pods refreshed."""
        now = time.time() if now is None else now
        n = 0
        for t in self.table.snapshot():
            if t.pod_dir is None or t.extra.get("final") or t.deleting or not t.job_id:
                continue
            due = t.extra.get("token_due", 0.0)
            after = refresh_after(t.pod)
            if after is None or due > now:
                continue
            try:
                refresh(ApiObjects(self.kube, pod=t.pod), t.pod, t.pod_dir)
                t.extra["token_due"] = now + after
                n += 1
            except (KubeError, KubeUnavailable, OSError) as exc:
                log.warning("pod %s: token refresh failed (next round): %s", t.key, exc)
        return n

    # ------------------------------------------------------------------ cleanup
    def clean(self) -> int:
        """Remove directories and records of pods deleted more than ``keep_pod_dirs`` seconds ago."""
        keep = self.profile.kubelet.keep_pod_dirs
        with self._recs_lock:
            old = [r for r in self._recs.values() if r.state == STOPPED and time.time() - r.stopped >= keep]
        state = Path(os.path.expanduser(self.profile.pods.state_dir)).resolve()
        for rec in old:
            if rec.pod_dir and Path(rec.pod_dir).resolve().is_relative_to(state):
                shutil.rmtree(rec.pod_dir, ignore_errors=True)
            self.records.remove(rec.uid)
            with self._recs_lock:
                self._recs.pop(rec.uid, None)
        self.changes.clean(state / "pods")
        return len(old)


"""API pods to a pod provider and back: the kubelet as a pod controller (watch → queue → provider →
status patch and events).

Every pod the API server binds to the node arrives through the reflector (:meth:`PodManager.on_event`,
:meth:`PodManager.on_sync`) and is handled by :meth:`PodManager.sync` on a bounded pool of workers,
one worker per pod uid at a time (:class:`~hpkctl.kube.workqueue.WorkQueue`). The worker is the pod's
one writer: it creates and deletes through the provider, patches the status and posts the events.
How a pod runs is the provider's business (:class:`~hpkctl.provider.PodProvider`; the daemon gives the
kubelet the job-per-pod one); the kubelet reads the API's objects for it. Nothing here waits for long:
a pull, a grace period or a back-off re-queues the pod for later, so one slow pod never holds the
others up. A pod's status changed alone queues nothing (``Tracked.replace``). A back-off is a gate
(:class:`~hpkctl.kubelet.podstate.PodState`): an event during it creates nothing, so no render, no GET
and no TokenRequest; a pod whose images are being pulled is created when the pulls ended.

Status changes are *detected* in :meth:`PodManager.poll`: the provider reports the pods that changed
(one Slurm query for all of them); each report is handed to the pod's worker and the uid queued.
Every 10 s the poll also queues the pods whose status in the API server no longer says what the
kubelet reported (:mod:`hpkctl.kubelet.statusmgr`).

A per-pod problem never escapes: it becomes the pod's status (a reason and a message) and an event.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from hpkctl.errors import PodError
from hpkctl.jobs import SlurmError
from hpkctl.kube import Kube, KubeError, KubeUnavailable, pod_path
from hpkctl.kube.events import EventSink
from hpkctl.kube.workqueue import WorkQueue
from hpkctl.kubelet.objects import ApiObjects, ServiceCache
from hpkctl.kubelet.objwatch import ObjectWatches
from hpkctl.kubelet.prefetch import Prefetch
from hpkctl.kubelet.podevents import PodEvents
from hpkctl.kubelet.podstate import Phase
from hpkctl.kubelet.podstatus import reported_starts
from hpkctl.kubelet.statusmgr import JOB_ID_ANNOTATION, RECONCILE_EVERY, StatusManager, waiting_containers
from hpkctl.kubelet.table import PodTable, Tracked
from hpkctl.kubelet.tokencache import TokenCache, TokenWriter, renew_tokens, token_due
from hpkctl.provider import (Created, ImagePullFailed, Leftover, Outcome, PodInputs, PodProvider, PodRef,
                             StatusReport, Watched)
from hpkctl.provider.tokens import refresh_after
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.kubelet.pods")


def _meta(pod: dict[str, Any]) -> dict[str, Any]:
    return pod.get("metadata") or {}


class PodManager:
    def __init__(self, *, kube: Kube, provider: PodProvider, profile: SiteProfile, node_name: str,
                 recorder: EventSink, host_ip: str = "", table: PodTable | None = None,
                 watches: ObjectWatches | None = None, prefetch: Kube | None = None) -> None:
        self.kube, self.provider, self.profile, self.node_name = kube, provider, profile, node_name
        self.recorder, self.events, self.host_ip = recorder, PodEvents(recorder), host_ip
        self.table = table or PodTable()
        self.queue = WorkQueue(self.sync, workers=profile.kubelet.workers, urgent=self.table.unsubmitted)
        self.services = ServiceCache(kube)
        self.watches = watches  # the ConfigMaps and Secrets of the pods to start, watched (None: GETs)
        self.tokens = TokenCache()
        # a new pod's objects and tokens read ahead on threads of their own (None: by its worker)
        self.prefetch = Prefetch(prefetch, self.tokens, objects=watches is None) if prefetch is not None else None
        self._left: dict[str, Leftover] = {}  # what the previous kubelet left, by uid
        self._gone: set[str] = set()  # uids whose API object no longer exists
        self.status = StatusManager(kube=kube, events=self.events, host_ip=host_ip)
        self.token_writer = TokenWriter(provider, self.events, self._token_retry)  # tokens written after sbatch
        self._reconciled, self._synced_once = time.monotonic(), False

    def load_records(self) -> None:
        """What a previous kubelet left (the provider's records), before the first list."""
        self._left = {o.ref.uid: o for o in self.provider.leftovers()}

    # ------------------------------------------------------------------ reflector callbacks
    def _upsert(self, pod: dict[str, Any]) -> str:
        meta = _meta(pod)
        uid = str(meta.get("uid") or "")
        t = self.table.get(uid)
        if t is None:
            left = self._left.get(uid)
            t = Tracked(uid=uid, namespace=meta.get("namespace") or "default", name=meta.get("name") or "", pod=pod)
            t.sent = dict(pod.get("status") or {})
            t.state.started = reported_starts(t.sent)  # a restarted kubelet announces only new starts
            t.state.sent_version = str(meta.get("resourceVersion") or "")
            if left is not None:
                t.job_id = left.job_id
                if left.state == "failed":
                    t.state.phase = Phase.FINAL
                elif left.job_id:
                    t.state.phase = Phase.SUBMITTED
            self.table.put(t)
            if self.prefetch is not None and not t.job_id and not t.state.final and not meta.get("deletionTimestamp"):
                self.prefetch.register(pod, since=t.seen)
        else:
            t.pod = pod
        if self.watches is not None and not (t.job_id or t.state.final or t.deleting or meta.get("deletionTimestamp")):
            self.watches.register(uid, pod)  # its objects' watches start at its worker's first read
        return uid

    def on_event(self, typ: str, pod: dict[str, Any]) -> None:
        uid = str(_meta(pod).get("uid") or "")
        t = self.table.get(uid)
        if typ == "DELETED":
            left = self._left.get(uid)
            if t is None and (left is None or left.state == "stopped"):
                return  # unknown, or stopped already (the DELETED of the kubelet's own final delete)
            if t is None:
                self._upsert(pod)
            self._gone.add(uid)
            self.queue.add(uid)
        elif t is None or t.replace(pod):  # not when its status alone changed (mostly its own patch's echo)
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
            for left in [o for u, o in self._left.items() if u not in fresh and o.live]:
                ref = left.ref
                log.info("pod %s (uid %s) was deleted while the kubelet was away: stopping job %s",
                         ref.key, ref.uid, left.job_id or "(none recorded)")
                self.table.put(Tracked(uid=ref.uid, namespace=ref.namespace, name=ref.name, pod=dict(left.saved()),
                                       job_id=left.job_id))
                self._gone.add(ref.uid)
                self.queue.add(ref.uid)

    # ------------------------------------------------------------------ the reconcile step
    def sync(self, uid: str) -> None:
        """The pod's one writer: stop it, act on what the status loop saw, send a status left unsent,
        create it (unless its back-off gate holds), refresh its tokens."""
        t = self.table.get(uid)
        if t is None:
            return
        report: StatusReport | None = None
        try:
            if uid in self._gone:
                self._stop(t, final_delete=False)
            elif _meta(t.pod).get("deletionTimestamp"):
                self._stop(t, final_delete=True)
            else:
                report = t.state.take()
                if report is not None and not t.state.final:
                    self._apply(t, report)
                report = None
                if wait := self.status.retry(t):
                    self.queue.add_after(uid, wait)
                if not t.state.final:
                    self._reconcile(t)
        except (KubeError, KubeUnavailable, SlurmError) as exc:
            log.warning("pod %s: %s: %s (retrying)", t.key, "Slurm" if isinstance(exc, SlurmError) else "API server", exc)
            self._retry(t, report)
        except OSError as exc:  # the pod directory cannot be written (disk full, quota): retry later
            log.warning("pod %s: %s (retrying)", t.key, exc)
            self.events.post(t, "Failed", f"cannot prepare the pod directory: {exc}", warning=True)
            self._retry(t, report)
        except Exception as exc:  # noqa: BLE001 - a bad pod never takes the kubelet down
            log.exception("pod %s: unexpected error", t.key)
            try:
                self._fail(t, "KubeletError", f"{type(exc).__name__}: {exc} (a bug in hpkctl: please report it "
                           "with the kubelet's log)")
            except Exception:  # noqa: BLE001 - the API is down too: the next sync tries again
                self._retry(t, None)

    def _retry(self, t: Tracked, report: StatusReport | None) -> None:  # a report soon, the rest once the gate opens
        if report is not None:
            t.state.give_back(report)
            self.queue.add_after(t.uid, t.state.patch_backoff.next())
        else:
            self.queue.add_after(t.uid, t.state.close_gate(time.monotonic()))

    def _reconcile(self, t: Tracked) -> None:
        if not t.job_id:
            if wait := t.state.gated(time.monotonic()):
                self.queue.add_after(t.uid, wait)  # the gate holds: no render, no GETs, no token, no sbatch
            elif t.state.phase is not Phase.PULLING or t.state.pulled:
                self._create(t)
        else:
            if t.state.annotated != t.job_id and t.state.annotate != t.job_id and \
                    (_meta(t.pod).get("annotations") or {}).get(JOB_ID_ANNOTATION) != t.job_id:
                self._annotate(t, t.job_id)  # killed between sbatch and the annotation: finish the step
            self._refresh_token(t)  # and before the token write: its job waits for it

    def _apply(self, t: Tracked, r: StatusReport) -> None:
        """Act on a report of the provider's status round."""
        self.events.notes(t, r.notes)
        if r.failure is not None:
            self._fail(t, r.failure.reason, r.failure.message)
            return
        if r.status is None:
            return  # a note alone: its job was looked at, nothing read
        if r.keep_containers:  # the pod directory is gone: keep the containers as last reported
            status = dict(t.sent or {})
            status.update({"reason": r.status.reason, "message": r.status.message})
            if r.status.phase:
                status["phase"] = r.status.phase
            accepted = self.status.send(t, status) or t.state.unsent is None
        else:
            accepted = self.status.report(t, r.status, r.probe_kills)
        if not accepted:  # refused: reported again once the patch gate opens
            t.state.give_back(replace(r, notes=()))
            self.queue.add_after(t.uid, max(0.0, t.state.patch_gate - time.monotonic()))
        elif r.final:
            t.state.phase = Phase.FINAL
            self._unwatch_if_ended(t)

    def _pulled(self, uid: str) -> None:
        """From a pull thread: the provider's pulls for ``uid`` ended; its worker creates it again."""
        t = self.table.get(uid)
        if t is not None:
            t.state.pulled = True
        self.queue.add(uid)

    # ------------------------------------------------------------------ create
    def _create(self, t: Tracked) -> None:
        """One create through the provider; runs only with the pod's gate open (a failure closes it
        for the next back-off delay) and, while its images are pulled, only once the pulls ended."""
        t0, first = time.monotonic(), t.state.phase is Phase.NEW
        objects = self._objects(t)
        inputs = PodInputs(objects=objects, services=self.services.for_pod(t.pod), ready=self._pulled)
        t.state.pulled = False  # before create: a pull that ends during the call is not missed
        try:
            created = self.provider.create(t.pod, inputs)
        except ImagePullFailed as exc:
            t.state.phase, t.state.pulling = Phase.WAITING, ()
            reason = "ImagePullBackOff" if t.state.pull_failed else exc.reason
            t.state.pull_failed = True
            self.events.post(t, "Failed", exc.message, warning=True)
            self.status.waiting(t, reason, exc.message)
            self.queue.add_after(t.uid, t.state.close_gate(time.monotonic()))
            return
        except PodError as exc:
            mandatory = exc.reason == "CreateContainerConfigError"
            self.events.missing(t, objects.missing, mandatory=mandatory)
            if mandatory:
                t.state.phase = Phase.WAITING
                self.status.waiting(t, exc.reason, exc.message)
                self.queue.add_after(t.uid, t.state.close_gate(time.monotonic()))
            else:
                self._fail(t, exc.reason, f"{exc.message}" + (f" (fix: {exc.hint})" if exc.hint else ""))
            return
        self.events.missing(t, objects.missing, mandatory=False)
        for w in created.warnings:
            log.info("pod %s: %s", t.key, w)
        if created.outcome == Outcome.PULLING:
            if t.state.phase is not Phase.PULLING:
                t.state.phase, t.state.pulling = Phase.PULLING, created.images
                self.events.post(t, "Pulling", "Pulling image(s) " + ", ".join(created.images))
            if not t.state.pull_failed:  # after a failure the pod shows ImagePullBackOff meanwhile
                self.status.waiting(t, "ContainerCreating", "pulling images")
            return
        if created.outcome == Outcome.RETRY:
            self.queue.add_after(t.uid, created.retry_after)
            return
        if t.state.phase is Phase.PULLING:
            self.events.post(t, "Pulled", "Image(s) pulled: " + ", ".join(t.state.pulling))
        t.state.phase = Phase.FINAL if created.final else Phase.SUBMITTED
        self._unwatch_if_ended(t)
        if created.job_id:
            self._submitted(t, created)
        if created.tokens_later:
            self.token_writer.write(t, objects)
        elif (due := refresh_after(t.pod)) is not None and created.outcome == Outcome.SUBMITTED:
            t.state.token_due = time.time() + due
        if first and created.job_id:  # where a create's time goes (bench/run kubelet reads it)
            log.info("pod %s: created %.3f s after it was seen: queued %.3f, create %.3f (API reads %.3f)", t.key,
                     time.monotonic() - t.seen, t0 - t.seen, time.monotonic() - t0, objects.read_s)

    def _unwatch_if_ended(self, t: Tracked) -> None:  # a final or deleting pod's objects (real kubelet: unregister)
        if self.watches is not None and (t.state.final or t.deleting):
            self.watches.unregister(t.uid)

    def _objects(self, t: Tracked) -> ApiObjects:  # a first create may read what was read since the pod was seen
        since = t.seen if t.state.phase is Phase.NEW else time.monotonic()
        return ApiObjects(self.kube, pod=t.pod, watches=self.watches, tokens=self.tokens, since=since,
                          fresh=self.prefetch.objects if self.prefetch is not None else None)

    def _submitted(self, t: Tracked, created: Created) -> None:
        t.job_id = created.job_id
        t.state.open_gate()
        self.events.notes(t, tuple(n for n in created.notes if n.reason != "TimeLimitLowered"))
        if created.final:
            self._annotate(t, created.job_id)  # no status patch follows for it
        else:
            t.state.annotate = created.job_id  # on its first status patch (issue 23.2: none on the submit path)
            # the scheduler's Scheduled says where the pod went; this is the kubelet's own step
            self.events.post(t, "Submitted", f"Submitted as Slurm job {created.job_id}")
        self.events.notes(t, tuple(n for n in created.notes if n.reason == "TimeLimitLowered"))

    def _annotate(self, t: Tracked, job_id: str) -> None:
        """The job id on the pod, for users (``kubectl describe``) and tools; through ``pods/status``,
        which keeps annotation changes, so the kubelet needs no right to update pods."""
        self.kube.patch(pod_path(t.namespace, t.name, "status"),
                        {"metadata": {"uid": t.uid, "annotations": {JOB_ID_ANNOTATION: job_id}}})
        t.state.annotated = job_id

    def _fail(self, t: Tracked, reason: str, message: str) -> None:
        log.warning("pod %s: %s: %s", t.key, reason, message)
        self.events.post(t, "Failed", f"{reason}: {message}", warning=True)
        t.error = reason
        t.state.phase = Phase.FINAL
        self._unwatch_if_ended(t)
        status = {"phase": "Failed", "reason": reason, "message": message,
                  "containerStatuses": waiting_containers(t.pod, reason, message[:1000])}
        if not t.job_id:
            self.provider.give_up(PodRef(t.uid, t.namespace, t.name))
        self.status.send(t, status)

    # ------------------------------------------------------------------ delete
    def _stop(self, t: Tracked, *, final_delete: bool) -> None:
        """One step of the pod's stop sequence (the provider's ``delete``: TERM to the pod, re-checks, then
        the end), without blocking a worker; once it is done, for a pod the API still has, the final
        ``DELETE`` with grace 0 and the uid as precondition (so nothing stays Terminating)."""
        grace = _meta(t.pod).get("deletionGracePeriodSeconds")
        ref = PodRef(t.uid, t.namespace, t.name)
        t.deleting = True
        self._unwatch_if_ended(t)  # no render follows; and no watch may outlive the pod (objwatch.py)
        d = self.provider.delete(ref, grace=None if grace is None else float(grace), pod=t.pod,
                                 report=t.uid not in self._gone)
        if d.killing:
            self.events.post(t, "Killing", f"Stopping the pod's containers (Slurm job {d.job_id})")
        if not d.done:
            self.queue.add_after(t.uid, d.recheck_after)
            return
        if d.final is not None and d.final.status is not None:
            try:
                self.status.report(t, d.final.status, d.final.probe_kills)
            except (KubeError, KubeUnavailable, OSError) as exc:
                log.debug("pod %s: final status not sent: %s", t.key, exc)
        if final_delete:
            try:
                self.kube.delete(pod_path(t.namespace, t.name), {"gracePeriodSeconds": 0, "preconditions": {"uid": t.uid}},
                                 query={"gracePeriodSeconds": 0})
            except KubeError as exc:
                if exc.code not in (404, 409):  # gone already, or the name is another pod's now
                    raise
        self.table.pop(t.uid)
        self.tokens.forget_pod(t.uid)
        self._gone.discard(t.uid)
        if t.uid in self._left:
            self._left[t.uid] = Leftover(ref=ref, job_id=d.job_id, state="stopped")
        self.recorder.forget(t.uid)
        log.info("pod %s (uid %s) stopped%s", t.key, t.uid, f", job {d.job_id} cancelled" if d.cancelled else "")

    # ------------------------------------------------------------------ status
    def poll(self, *, now: float | None = None) -> int:
        """One status round: the provider reports what changed and each report is handed to its pod's
        worker (this loop never patches or fails a pod itself); every ``RECONCILE_EVERY`` (10 s) the
        pods whose status in the API server lost what the kubelet reported are queued too. The
        number of pods whose status was read."""
        mono = time.monotonic() if now is None else now
        watched = [Watched(PodRef(t.uid, t.namespace, t.name), t.pod, t.job_id)
                   for t in self.table.snapshot() if t.job_id and not t.state.final]
        read = 0
        for r in self.provider.statuses(watched, now=now) if watched else []:
            t = self.table.get(r.uid)
            if t is None:
                continue
            t.state.observe(r)
            self.queue.add(r.uid)
            read += r.status is not None and not r.keep_containers
        if mono - self._reconciled >= RECONCILE_EVERY:
            self._reconciled = mono
            for t in self.table.snapshot():
                if not t.deleting and t.uid not in self._gone and self.status.needs_reconcile(t):
                    t.state.reconcile = True
                    self.queue.add(t.uid)
        return read

    def refresh_tokens(self, *, now: float | None = None) -> int:
        """Queue the running pods whose projected tokens are due (after a restart: all of them once,
        since their issue time is unknown); their workers renew them. The number queued."""
        due = [t.uid for t in self.table.snapshot() if token_due(t, time.time() if now is None else now)]
        for uid in due:
            self.queue.add(uid)
        return len(due)

    def _refresh_token(self, t: Tracked) -> None:
        if token_due(t, time.time()) and not renew_tokens(self.provider, t, self._objects(t), self.events):
            self._token_retry(t)

    def _token_retry(self, t: Tracked) -> None:
        self.queue.add_after(t.uid, t.state.backoff.next())

    def clean(self) -> int:
        """Remove what pods deleted more than ``keep_pod_dirs`` seconds ago left."""
        return self.provider.clean(self.profile.kubelet.keep_pod_dirs)

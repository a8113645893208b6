"""API pods to a pod provider and back: the kubelet's reconcile loop.

Every pod the API server binds to the node arrives through the reflector (:meth:`PodManager.on_event`,
:meth:`PodManager.on_sync`) and is handled by :meth:`PodManager.sync` on a bounded pool of workers,
one worker per pod uid at a time (:class:`~hpkctl.kube.workqueue.WorkQueue`). How a pod runs is the
provider's business (:class:`~hpkctl.provider.PodProvider`; the daemon gives the kubelet the job-per-pod
one); the kubelet reads the API's objects for it, and turns what it answers into status patches and
events. Nothing here waits for long: a pull, a grace period or a back-off re-queues the pod for later,
so one slow pod never holds the others up.

Status flows the other way in :meth:`PodManager.poll`: the provider reports the pods that changed
(one Slurm query for all of them) and a status patch is sent only when something changed.

A per-pod problem never escapes: it becomes the pod's status (a reason and a message) and an event.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from hpkctl.errors import PodError
from hpkctl.jobs import SlurmError
from hpkctl.kube import Kube, KubeError, KubeUnavailable, pod_path
from hpkctl.kube.events import EventSink
from hpkctl.kube.workqueue import WorkQueue
from hpkctl.kubelet.objects import ApiObjects, ServiceCache
from hpkctl.kubelet.podevents import PodEvents
from hpkctl.kubelet.podstatus import api_status, never_regresses, reported_starts, status_patch
from hpkctl.kubelet.table import PodTable, Tracked
from hpkctl.pod.status import PodStatus
from hpkctl.provider import (Created, ImagePullFailed, Leftover, Outcome, PodInputs, PodProvider, PodRef,
                             StatusReport, Watched)
from hpkctl.provider.tokens import refresh_after
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.kubelet.pods")

JOB_ID_ANNOTATION = "hpk.io/slurm-job-id"
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # as the kubelet's CreateContainerConfigError / image back-off


def _meta(pod: dict[str, Any]) -> dict[str, Any]:
    return pod.get("metadata") or {}


def _waiting_containers(pod: dict[str, Any], reason: str, message: str) -> list[dict[str, Any]]:
    """Every main container waiting for ``reason``: the pod never reached Slurm."""
    return [{"name": c.get("name"), "image": c.get("image", ""), "imageID": "", "ready": False, "restartCount": 0,
             "started": False, "state": {"waiting": {"reason": reason, "message": message}}}
            for c in (pod.get("spec") or {}).get("containers") or []]


class PodManager:
    def __init__(self, *, kube: Kube, provider: PodProvider, profile: SiteProfile, node_name: str,
                 recorder: EventSink, host_ip: str = "", table: PodTable | None = None) -> None:
        self.kube = kube
        self.provider = provider
        self.profile = profile
        self.node_name = node_name
        self.recorder = recorder
        self.events = PodEvents(recorder)
        self.host_ip = host_ip
        self.table = table or PodTable()
        self.queue = WorkQueue(self.sync, workers=profile.kubelet.workers)
        self.services = ServiceCache(kube)
        self._left: dict[str, Leftover] = {}  # what the previous kubelet left, by uid
        self._gone: set[str] = set()  # uids whose API object no longer exists
        self._resend: set[str] = set()  # uids whose last status report the API did not take
        self._synced_once = False

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
            t.extra["started"] = reported_starts(t.sent)  # a restarted kubelet announces only new starts
            if left is not None:
                t.job_id = left.job_id
                if left.state == "failed":
                    t.extra["final"] = True
            self.table.put(t)
        else:
            t.pod = pod
        return uid

    def on_event(self, typ: str, pod: dict[str, Any]) -> None:
        if typ == "DELETED":
            uid = str(_meta(pod).get("uid") or "")
            left = self._left.get(uid)
            if self.table.get(uid) is None and (left is None or left.state == "stopped"):
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
            elif not t.job_id:
                self._create(t)
            elif (_meta(t.pod).get("annotations") or {}).get(JOB_ID_ANNOTATION) != t.job_id:
                self._annotate(t, t.job_id)  # killed between sbatch and the annotation: finish the step
        except (KubeError, KubeUnavailable) as exc:
            log.warning("pod %s: API server: %s (retrying)", t.key, exc)
            self.queue.add_after(uid, self._backoff(t))
        except SlurmError as exc:
            log.warning("pod %s: Slurm: %s (retrying)", t.key, exc)
            self.queue.add_after(uid, self._backoff(t))
        except OSError as exc:  # the pod directory cannot be written (disk full, quota): retry later
            log.warning("pod %s: %s (retrying)", t.key, exc)
            self.events.post(t, "Failed", f"cannot prepare the pod directory: {exc}", warning=True)
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

    # ------------------------------------------------------------------ create
    def _create(self, t: Tracked) -> None:
        objects = ApiObjects(self.kube, pod=t.pod)
        inputs = PodInputs(objects=objects, services=self.services.for_pod(t.pod), ready=self.queue.add)
        try:
            created = self.provider.create(t.pod, inputs)
        except ImagePullFailed as exc:
            t.extra.pop("pulling", None)
            reason = "ImagePullBackOff" if t.extra.get("pull_failed") else exc.reason
            t.extra["pull_failed"] = True
            self.events.post(t, "Failed", exc.message, warning=True)
            self._waiting(t, reason, exc.message)
            self.queue.add_after(t.uid, self._backoff(t))
            return
        except PodError as exc:
            mandatory = exc.reason == "CreateContainerConfigError"
            self.events.missing(t, objects.missing, mandatory=mandatory)
            if mandatory:
                self._waiting(t, exc.reason, exc.message)
                self.queue.add_after(t.uid, self._backoff(t))
            else:
                self._fail(t, exc.reason, f"{exc.message}" + (f" (fix: {exc.hint})" if exc.hint else ""))
            return
        self.events.missing(t, objects.missing, mandatory=False)
        for w in created.warnings:
            log.info("pod %s: %s", t.key, w)
        if created.outcome == Outcome.PULLING:
            if not t.extra.get("pulling"):
                t.extra["pulling"] = created.images
                self.events.post(t, "Pulling", "Pulling image(s) " + ", ".join(created.images))
            if not t.extra.get("pull_failed"):  # after a failure the pod shows ImagePullBackOff meanwhile
                self._waiting(t, "ContainerCreating", "pulling images")
            return
        if created.outcome == Outcome.RETRY:
            self.queue.add_after(t.uid, created.retry_after)
            return
        if (images := t.extra.pop("pulling", None)):
            self.events.post(t, "Pulled", "Image(s) pulled: " + ", ".join(images))
        if created.final:
            t.extra["final"] = True
        if created.job_id:
            self._submitted(t, created)
        if (due := refresh_after(t.pod)) is not None and created.outcome == Outcome.SUBMITTED:
            t.extra["token_due"] = time.time() + due

    def _submitted(self, t: Tracked, created: Created) -> None:
        t.job_id = created.job_id
        t.extra.pop("backoff", None)
        self.events.notes(t, tuple(n for n in created.notes if n.reason != "TimeLimitLowered"))
        try:
            self._annotate(t, created.job_id)  # first: the job id is what users and tools wait for (issue 23.2)
        finally:
            if not created.final:
                # the scheduler's Scheduled says where the pod went; this is the kubelet's own step
                self.events.post(t, "Submitted", f"Submitted as Slurm job {created.job_id}")
        self.events.notes(t, tuple(n for n in created.notes if n.reason == "TimeLimitLowered"))

    def _annotate(self, t: Tracked, job_id: str) -> None:
        """The job id on the pod, for users (``kubectl describe``) and tools; through ``pods/status``,
        which keeps annotation changes, so the kubelet needs no right to update pods."""
        self.kube.patch(pod_path(t.namespace, t.name, "status"),
                        {"metadata": {"uid": t.uid, "annotations": {JOB_ID_ANNOTATION: job_id}}})

    def _waiting(self, t: Tracked, reason: str, message: str) -> None:
        self._send(t, {"phase": "Pending", "containerStatuses": _waiting_containers(t.pod, reason, message)})

    def _fail(self, t: Tracked, reason: str, message: str) -> None:
        log.warning("pod %s: %s: %s", t.key, reason, message)
        self.events.post(t, "Failed", f"{reason}: {message}", warning=True)
        t.error = reason
        t.extra["final"] = True
        status = {"phase": "Failed", "reason": reason, "message": message,
                  "containerStatuses": _waiting_containers(t.pod, reason, message[:1000])}
        if not t.job_id:
            self.provider.give_up(PodRef(t.uid, t.namespace, t.name))
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
        """One step of the pod's stop sequence (the provider's ``delete``: TERM to the pod, re-checks, then
        the end), without blocking a worker; once it is done, for a pod the API still has, the final
        ``DELETE`` with grace 0 and the uid as precondition (so nothing stays Terminating)."""
        grace = _meta(t.pod).get("deletionGracePeriodSeconds")
        ref = PodRef(t.uid, t.namespace, t.name)
        t.deleting = True
        d = self.provider.delete(ref, grace=None if grace is None else float(grace), pod=t.pod,
                                 report=t.uid not in self._gone)
        if d.killing:
            self.events.post(t, "Killing", f"Stopping the pod's containers (Slurm job {d.job_id})")
        if not d.done:
            self.queue.add_after(t.uid, d.recheck_after)
            return
        if d.final is not None and d.final.status is not None:
            try:
                self._report(t, d.final.status, d.final)
            except (KubeError, KubeUnavailable, OSError) as exc:
                log.debug("pod %s: final status not sent: %s", t.key, exc)
        if final_delete:
            try:
                self.kube.delete(pod_path(t.namespace, t.name), {"gracePeriodSeconds": 0,
                                                                   "preconditions": {"uid": t.uid}},
                                 query={"gracePeriodSeconds": 0})
            except KubeError as exc:
                if exc.code not in (404, 409):  # gone already, or the name is another pod's now
                    raise
        self.table.pop(t.uid)
        self._gone.discard(t.uid)
        self._resend.discard(t.uid)
        if t.uid in self._left:
            self._left[t.uid] = Leftover(ref=ref, job_id=d.job_id, state="stopped")
        self.recorder.forget(t.uid)
        log.info("pod %s (uid %s) stopped%s", t.key, t.uid, f", job {d.job_id} cancelled" if d.cancelled else "")

    # ------------------------------------------------------------------ status
    def _report(self, t: Tracked, st: PodStatus, report: StatusReport) -> None:
        new = api_status(t.pod, st, job_id=t.job_id, host_ip=self.host_ip, previous=t.sent)
        if not never_regresses(new, t.sent, spec=t.pod.get("spec") or {}):
            log.warning("pod %s: not reporting a terminated container as running again", t.key)
            return
        before = t.status
        self._send(t, new)  # raises when the API cannot be told: then nothing below happens either
        t.status = st
        self.events.transitions(t, before, st, report.probe_kills)

    def poll(self, *, now: float | None = None) -> int:
        """One status round (the provider reports what changed); the number of pods whose status was read."""
        watched = [Watched(PodRef(t.uid, t.namespace, t.name), t.pod, t.job_id, reread=t.uid in self._resend)
                   for t in self.table.snapshot() if t.job_id and not t.extra.get("final")]
        read = 0
        for r in self.provider.statuses(watched, now=now) if watched else []:
            t = self.table.get(r.uid)
            if t is None:
                continue
            try:
                self.events.notes(t, r.notes)
                if r.failure is not None:
                    self._fail(t, r.failure.reason, r.failure.message)
                    continue
                if r.status is None:
                    continue  # a note alone: its job was looked at, nothing read
                if r.keep_containers:  # the pod directory is gone: keep the containers as last reported
                    status = dict(t.sent or {})
                    status.update({"reason": r.status.reason, "message": r.status.message})
                    if r.status.phase:
                        status["phase"] = r.status.phase
                    self._send(t, status)
                else:
                    self._report(t, r.status, r)
            except (KubeError, KubeUnavailable) as exc:
                log.warning("pod %s: status not sent: %s (next round)", t.key, exc)
                self._resend.add(t.uid)
                continue
            self._resend.discard(t.uid)
            if r.final:
                t.extra["final"] = True
            read += not r.keep_containers
        return read

    def refresh_tokens(self, *, now: float | None = None) -> int:
        """Renew the projected tokens of running pods that are due (after a restart: all of them
        once, since their issue time is unknown). The number of pods refreshed."""
        now = time.time() if now is None else now
        n = 0
        for t in self.table.snapshot():
            if t.extra.get("final") or t.deleting or not t.job_id:
                continue
            due = t.extra.get("token_due", 0.0)
            after = refresh_after(t.pod)
            if after is None or due > now:
                continue
            try:
                self.provider.refresh_tokens(PodRef(t.uid, t.namespace, t.name), t.pod, ApiObjects(self.kube, pod=t.pod))
                t.extra["token_due"] = now + after
                n += 1
            except (KubeError, KubeUnavailable, OSError) as exc:
                log.warning("pod %s: token refresh failed (next round): %s", t.key, exc)
        return n

    def clean(self) -> int:
        """Remove what pods deleted more than ``keep_pod_dirs`` seconds ago left."""
        return self.provider.clean(self.profile.kubelet.keep_pod_dirs)

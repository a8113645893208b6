"""``hpkctl scheduler``: the pass-through scheduler. Every pending pod meant for one of our scheduler
names is bound to the hpk node, because Slurm, not Kubernetes, decides where it really runs.

What is left of scheduling is what a user *says* about placement: a pod whose ``nodeSelector``,
required node affinity or missing tolerations exclude the hpk node is not bound — it stays
Pending with ``PodScheduled=False/Unschedulable`` and one ``FailedScheduling`` Warning event, as
kube-scheduler leaves it (see :mod:`hpkctl.scheduler.fit`). It is tried again when the pod or the
Node changes (a label added, a taint removed) and every ``retry_interval`` (kube-scheduler's
5 minutes for unschedulable pods), which bumps the event's count instead of adding events.

Two reflectors feed it (:mod:`hpkctl.kube.reflect`): unbound pods (``spec.nodeName=``) and the
one Node (``metadata.name=<node>``). A small pool of workers does the work, keyed by pod UID
(:class:`hpkctl.kube.workqueue.WorkQueue`), so pods are bound several at a time yet a pod is
never handled twice at once, and a pod deleted and re-created under its name is another pod. The
``Scheduled`` event is posted off that path by an :class:`~hpkctl.kube.events.EventBroadcaster`,
as kube-scheduler's broadcaster does: a bind never waits for its event.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from hpkctl.kube import Kube, KubeError, KubeUnavailable, node_path, pod_path
from hpkctl.kube.events import EventBroadcaster, EventRecorder, rfc3339
from hpkctl.kube.reflect import Backoff, ObjectCache, Reflector
from hpkctl.kube.workqueue import WorkQueue
from hpkctl.scheduler import fit

log = logging.getLogger("hpkctl.scheduler")

Obj = dict[str, Any]
COMPONENT = "hpk-scheduler"
#: kube-scheduler moves unschedulable pods back to its active queue after 5 minutes
RETRY_INTERVAL = 300.0
#: watches are renewed this often (the server closes them after it)
WATCH_TIMEOUT = 300
#: how long ``run`` waits for its reflector threads after ``stop``
JOIN_TIMEOUT = 5.0
#: pods handled (bound) at once: a bind is one round trip to the API server, mostly waiting
WORKERS = 8


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _node_inputs(node: Obj) -> Obj:
    """What of the Node the filters read: a change here makes every unschedulable pod worth a retry."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    return {"name": meta.get("name"), "labels": meta.get("labels"), "taints": spec.get("taints"),
            "unschedulable": spec.get("unschedulable")}


def _pod_inputs(pod: Obj) -> Obj:
    spec = pod.get("spec") or {}
    return {k: spec.get(k) for k in ("nodeSelector", "affinity", "tolerations", "schedulerName", "schedulingGates")}


class Scheduler:
    """Binds the pods of ``scheduler_names`` to ``node_name`` (see the module docstring)."""

    def __init__(self, kube: Kube, *, node_name: str, scheduler_names: list[str], stop: threading.Event,
                 retry_interval: float = RETRY_INTERVAL, watch_timeout: int = WATCH_TIMEOUT,
                 backoff: tuple[float, float] = (0.8, 30.0), workers: int = WORKERS) -> None:
        if not node_name:
            raise ValueError("the scheduler needs a node name")
        if not scheduler_names:
            raise ValueError("the scheduler needs at least one scheduler name to serve")
        self.kube = kube
        self.node_name = node_name
        self.scheduler_names = frozenset(scheduler_names)
        self.stop = stop
        self.retry_interval = retry_interval
        self._backoff = backoff
        self.queue = WorkQueue(self._handle_safely, workers=workers, name="schedule")
        # binds and events each on their own connections: a burst of events never delays a bind
        self._bind_kube = kube.clone(pool_size=workers)
        self._events_kube = kube.clone(pool_size=1)
        self.events = EventRecorder(self._bind_kube, component=COMPONENT)
        self.scheduled_events = EventBroadcaster(EventRecorder(self._events_kube, component=COMPONENT),
                                                 name="scheduler-events")
        self._state_lock = threading.Lock()  # _tried and _retries, shared by the workers
        self.pods = ObjectCache(self._pod_changed)
        self._node: Obj | None = None
        self._node_lock = threading.Lock()
        self._node_missing_logged = False
        # per pod UID (each handled by one worker at a time): the inputs of the last failed attempt and when
        self._tried: dict[str, tuple[str, float]] = {}
        self._retries: dict[str, Backoff] = {}
        # each watch pins a connection for minutes: its own pool, not the one the writes use
        self._watch_clients = [kube.clone(), kube.clone()]
        self.pod_reflector = Reflector(
            self._watch_clients[0], "/api/v1/pods", field_selector="spec.nodeName=", on_event=self.pods.on_event,
            on_sync=self.pods.on_sync, stop=stop, timeout_seconds=watch_timeout,
            backoff=Backoff(initial=backoff[0], cap=backoff[1]), name="unbound pods")
        self.node_reflector = Reflector(
            self._watch_clients[1], node_path(), field_selector=f"metadata.name={node_name}",
            on_event=self._node_event, on_sync=self._node_sync, stop=stop, timeout_seconds=watch_timeout,
            backoff=Backoff(initial=backoff[0], cap=backoff[1]), name=f"node {node_name}")

    # ------------------------------------------------------------------ inputs (reflector threads)
    def _pod_changed(self, typ: str, pod: Obj) -> None:
        self.queue.add(_uid(pod))

    def _node_event(self, typ: str, node: Obj) -> None:
        self._set_node(None if typ == "DELETED" else node)

    def _node_sync(self, items: list[Obj]) -> None:
        self._set_node(items[0] if items else None)

    def _set_node(self, node: Obj | None) -> None:
        with self._node_lock:
            before = None if self._node is None else _node_inputs(self._node)
            self._node = node
        after = None if node is None else _node_inputs(node)
        if before != after:
            if node is not None:
                log.info("node %s: labels %s, taints %s%s", self.node_name, after and after["labels"],
                         after and after["taints"], ", cordoned" if after and after["unschedulable"] else "")
            for pod in self.pods.items():  # anything pending may fit now, or no longer
                self.queue.add(_uid(pod))

    @property
    def node(self) -> Obj | None:
        with self._node_lock:
            return self._node

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        """Until ``stop``: start the reflectors, then, once the Node was read, the workers; every
        ``retry_interval`` queue the unschedulable pods again."""
        self.node_reflector.start()
        self.pod_reflector.start()
        log.info("scheduling pods of %s to node %s", ", ".join(sorted(self.scheduler_names)), self.node_name)
        while not self.stop.is_set() and not self.node_reflector.synced.is_set():
            self.node_reflector.synced.wait(0.2)  # judging pods against a node not yet read is wrong
        if not self.stop.is_set():
            self.queue.start()
        next_sweep = time.monotonic() + self.retry_interval
        while not self.stop.wait(max(0.05, min(1.0, next_sweep - time.monotonic()))):
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + self.retry_interval
                self._sweep()
        self.queue.stop(timeout=JOIN_TIMEOUT)
        for r in (self.pod_reflector, self.node_reflector):
            if not r.join(JOIN_TIMEOUT):
                log.warning("reflector %s did not stop within %.0f s", r.name, JOIN_TIMEOUT)
        if not self.scheduled_events.close(JOIN_TIMEOUT):
            log.warning("Scheduled events still queued after %.0f s were not posted", JOIN_TIMEOUT)
        for k in [*self._watch_clients, self._bind_kube, self._events_kube]:
            k.close()
        log.info("scheduler stopped")

    def _handle_safely(self, uid: str) -> None:
        if self.stop.is_set():
            return
        try:
            self._handle(uid)
        except Exception:  # one pod's surprise must not stop the scheduler
            log.exception("pod uid %s: unexpected error", uid)
            self.queue.add_after(uid, self._retry_delay(uid))

    def _sweep(self) -> None:
        """Unschedulable pods whose last attempt is older than ``retry_interval`` are tried again."""
        now = time.monotonic()
        with self._state_lock:
            tried = list(self._tried.items())
        for uid, (_, at) in tried:
            if now - at >= self.retry_interval:
                self.queue.add(uid)

    def _retry_delay(self, uid: str) -> float:
        with self._state_lock:
            b = self._retries.setdefault(uid, Backoff(initial=self._backoff[0], cap=self._backoff[1]))
            return b.next()

    def _forget(self, uid: str) -> None:
        with self._state_lock:
            self._tried.pop(uid, None)
            self._retries.pop(uid, None)
        self.events.forget(uid)
        self.scheduled_events.recorder.forget(uid)

    def wants(self, pod: Obj) -> bool:
        """A pod this scheduler should place: ours by schedulerName, unbound, not being deleted, not
        finished, and without scheduling gates (kube-scheduler leaves gated pods alone too)."""
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        return (str(spec.get("schedulerName") or "default-scheduler") in self.scheduler_names
                and not spec.get("nodeName") and not meta.get("deletionTimestamp")
                and not spec.get("schedulingGates")
                and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))

    def _handle(self, uid: str) -> None:
        pod = self.pods.get(uid)
        if pod is None or not self.wants(pod):
            self._forget(uid)
            return
        node = self.node
        if node is None:
            if not self._node_missing_logged:
                self._node_missing_logged = True
                log.warning("node %s does not exist (yet): pods stay Pending until it is registered "
                            "(start `hpkctl kubelet --node-name %s`, or pass --node-name)", self.node_name,
                            self.node_name)
            return  # the node's arrival queues every pod again
        self._node_missing_logged = False
        inputs = json.dumps([_pod_inputs(pod), _node_inputs(node)], sort_keys=True)
        with self._state_lock:
            tried = self._tried.get(uid)
        if tried is not None and tried[0] == inputs and time.monotonic() - tried[1] < self.retry_interval:
            return  # nothing it depends on changed (e.g. our own status patch came back)
        reason = fit.unfit_reason(pod, node)
        done = self._bind(pod) if reason is None else self._unschedulable(pod, fit.failed_scheduling_message(reason))
        if done is None:
            self.queue.add_after(uid, self._retry_delay(uid))
            return
        if done:
            self._forget(uid)
        else:
            with self._state_lock:
                self._retries.pop(uid, None)
                self._tried[uid] = (inputs, time.monotonic())

    # ------------------------------------------------------------------ writes
    def _bind(self, pod: Obj) -> bool | None:
        """POST the Binding: True when bound (or no longer ours), None to retry after a pause."""
        meta = pod["metadata"]
        ns, name, uid = meta.get("namespace") or "default", meta["name"], meta.get("uid")
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, **({"uid": uid} if uid else {})},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}}
        try:
            self._bind_kube.post(pod_path(ns, name, "binding"), body)
        except KubeUnavailable as exc:
            log.warning("pod %s/%s: cannot bind (API server unreachable): %s", ns, name, exc)
            return None
        except KubeError as exc:
            if exc.code in (404, 409):  # gone, already bound, being deleted, or re-created: not ours to bind
                log.info("pod %s/%s: not bound: %s", ns, name, exc)
                return True
            if exc.code >= 500 or exc.code == 429:
                log.warning("pod %s/%s: cannot bind: %s", ns, name, exc)
                return None
            log.error("pod %s/%s: binding refused: %s (the scheduler's kubeconfig needs the right to create "
                      "pods/binding)", ns, name, exc)
            return False
        log.info("pod %s/%s bound to %s", ns, name, self.node_name)
        self.scheduled_events.record(pod, reason="Scheduled",
                                     message=f"Successfully assigned {ns}/{name} to {self.node_name}")
        return True

    def _unschedulable(self, pod: Obj, message: str) -> bool | None:
        """PodScheduled=False/Unschedulable and one FailedScheduling event (aggregated when repeated):
        False when recorded, True when the pod is gone, None to retry after a pause."""
        meta = pod["metadata"]
        ns, name, uid = meta.get("namespace") or "default", meta["name"], meta.get("uid")
        cond = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
                    None)
        if not (cond and cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
                and cond.get("message") == message):
            since = cond.get("lastTransitionTime") if cond and cond.get("status") == "False" else None
            patch = {"metadata": {"uid": uid},
                     "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                "message": message, "lastTransitionTime": since or rfc3339()}]}}
            try:
                self._bind_kube.patch(pod_path(ns, name, "status"), patch)
            except KubeUnavailable as exc:
                log.warning("pod %s/%s: cannot record that it is unschedulable: %s", ns, name, exc)
                return None
            except KubeError as exc:
                if exc.code in (404, 409):  # deleted, or re-created under the name (uid precondition)
                    return True
                log.error("pod %s/%s: status patch refused: %s", ns, name, exc)
                if exc.code >= 500 or exc.code == 429:
                    return None
        log.info("pod %s/%s stays Pending: %s", ns, name, message)
        if self.events.record(pod, reason="FailedScheduling", message=message, type="Warning") is None:
            return None
        return False


def run_scheduler(kubeconfig: str, *, node_name: str, scheduler_names: list[str], stop: threading.Event) -> int:
    """``hpkctl scheduler``: run until ``stop`` is set; the exit status (0: stopped as asked)."""
    kube = Kube(kubeconfig)
    try:
        Scheduler(kube, node_name=node_name, scheduler_names=scheduler_names, stop=stop).run()
    finally:
        kube.close()
    return 0

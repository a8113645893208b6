"""core/v1 Events as client-go's recorder writes them (kubelet-api.md §1.6), for the kubelet and the
scheduler: what ``kubectl describe pod`` shows under "Events".

core/v1 rather than events.k8s.io/v1: both are views of one storage, and core/v1 is what
``kubectl describe`` reads and what the kubelet writes. ``eventTime`` is left unset, as the
kubelet's recorder leaves it: a set ``eventTime`` makes the API server apply the newer validation
(``action``, ``reportingController`` required) and must then be a MicroTime with exactly six
fractional digits (``2006-01-02T15:04:05.000000Z``). ``firstTimestamp``/``lastTimestamp`` are
metav1.Time, RFC 3339 in whole seconds.

:class:`EventRecorder` aggregates as client-go does: the same event again (same object, type,
reason and message) bumps ``count`` and ``lastTimestamp`` of the event already posted instead of
adding another, so a retried failure shows as "x12 over 5m" and not as twelve lines.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from datetime import UTC, datetime
from collections.abc import Callable
from typing import Any, Protocol

from hpkctl.kube.client import Kube, KubeError, KubeUnavailable, namespaced
from hpkctl.kube.eventcache import LRU_ENTRIES, Correlated, EventCorrelator, EventKey, Lru, key_uid

log = logging.getLogger("hpkctl.kube.events")

Obj = dict[str, Any]
TYPES = ("Normal", "Warning")
#: events.k8s.io/v1 limits ``note`` (core/v1 ``message``) to 1 kB, and it is the same storage
MESSAGE_LIMIT = 1024
#: client-go's recorder remembers this many distinct events for aggregation
TRACKED = LRU_ENTRIES
_NAME_LIMIT = 253
#: client-go's recordToSink: tries per event while the API server cannot be reached, and the pause
#: between them (maxTriesPerEvent, sleepDuration)
MAX_TRIES = 12
RETRY_PAUSE = 10.0
#: the longest a broadcaster's ``hold`` keeps an event back, and how often it asks
HOLD_MAX = 5.0
HOLD_POLL = 0.05


def rfc3339(when: datetime | None = None) -> str:
    """metav1.Time: RFC 3339 in whole seconds, UTC (``2026-11-24T02:16:36Z``)."""
    return (when or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def involved_object(obj: Obj) -> Obj:
    """The ObjectReference of ``obj``; it needs ``kind`` and ``apiVersion`` (a list's items lack them:
    :class:`hpkctl.kube.reflect.Reflector` fills them in)."""
    meta = obj.get("metadata") or {}
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not kind or not api_version or not meta.get("name"):
        raise ValueError(f"an event needs an object with kind, apiVersion and metadata.name, got kind={kind!r} "
                         f"apiVersion={api_version!r} name={meta.get('name')!r}; set them on objects taken from "
                         "a list's items")
    ref: Obj = {"kind": kind, "apiVersion": api_version, "name": meta["name"]}
    for src, dst in (("namespace", "namespace"), ("uid", "uid"), ("resourceVersion", "resourceVersion")):
        if meta.get(src):
            ref[dst] = meta[src]
    return ref


def _message(message: str) -> str:
    return message if len(message) <= MESSAGE_LIMIT else message[:MESSAGE_LIMIT - 3] + "..."


def event_body(*, obj: Obj, reason: str, message: str, type: str = "Normal", component: str,
               host: str | None = None, when: datetime | None = None) -> Obj:
    """The Event client-go's ``recorder.makeEvent`` builds: named ``<object>.<hex nanoseconds>``, in the
    object's namespace (``default`` for cluster-scoped objects such as Nodes)."""
    if type not in TYPES:
        raise ValueError(f"event type must be one of {TYPES}, not {type!r}")
    if not reason or not component:
        raise ValueError("an event needs a reason and a component")
    ref = involved_object(obj)
    ts = rfc3339(when)
    suffix = f".{time.time_ns():x}"
    source: Obj = {"component": component}
    if host:
        source["host"] = host
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": ref["name"][:_NAME_LIMIT - len(suffix)] + suffix,
                         "namespace": ref.get("namespace") or "default"},
            "involvedObject": ref, "reason": reason, "message": _message(message), "type": type,
            "source": source, "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
            "reportingComponent": component, "reportingInstance": host or ""}


def post_event(kube: Kube, *, obj: Obj, reason: str, message: str, type: str = "Normal", component: str,
               host: str | None = None) -> Obj:
    """Create one Event about ``obj``; the created Event. Raises :class:`KubeError`/:class:`KubeUnavailable`."""
    body = event_body(obj=obj, reason=reason, message=message, type=type, component=component, host=host)
    created: Obj = kube.post(namespaced("events", body["metadata"]["namespace"]), body)
    return created


class EventSink(Protocol):
    """Where a component's events go: an :class:`EventRecorder` (posts on the caller's thread) or an
    :class:`EventBroadcaster` (posts on its own)."""

    def record(self, obj: Obj, *, reason: str, message: str, type: str = "Normal") -> object: ...

    def forget(self, uid: str) -> None: ...


class EventRecorder:
    """Posts Events for one component through client-go's correlation (:mod:`hpkctl.kube.eventcache`):
    similar events aggregated, repeats counted, and at most 25 events per object in a burst, then one
    per 5 minutes. Thread-safe.

    Events are best effort, as in client-go: :meth:`record` logs a failure and returns ``None``
    rather than failing the work the event is about.
    """

    def __init__(self, kube: Kube, *, component: str, host: str | None = None, tracked: int = TRACKED,
                 correlator: EventCorrelator | None = None) -> None:
        self.kube = kube
        self.component = component
        self.host = host
        self.correlator = correlator or EventCorrelator(size=tracked)
        self._lock = threading.Lock()
        self._posted: Lru[EventKey | tuple[str, ...], tuple[str, str]] = Lru(tracked, index=key_uid)  # key -> (ns, name)
        #: events the spam filter dropped (client-go drops them silently; counted for tests and logs)
        self.dropped = 0
        self._sleep: Callable[[float], object] = time.sleep

    def _key(self, obj: Obj, reason: str, message: str, type: str) -> EventKey:
        ref = involved_object(obj)
        return EventKey(self.component, self.host or "", ref["kind"], ref.get("namespace", ""), ref["name"],
                        ref.get("uid", ""), ref["apiVersion"], type, reason, _message(message))

    def record(self, obj: Obj, *, reason: str, message: str, type: str = "Normal", tries: int = 1,
               when: datetime | None = None) -> Obj | None:
        """Post the event, or bump the count of the same one posted before; the Event, or None if the
        spam filter dropped it or the API server refused or could not be reached (logged). ``when`` it
        happened (default: now), as client-go's recorder stamps an event when it is recorded.

        ``tries`` > 1 retries a server that could not be reached (a timeout under load, a restarting API
        server), :data:`RETRY_PAUSE` apart, as client-go's ``recordToSink`` does (``maxTriesPerEvent``);
        a refusal is never retried. Only a recorder on a thread of its own (the broadcaster's) asks for
        it: the pause blocks the caller."""
        key = self._key(obj, reason, message, type)
        with self._lock:
            c = self.correlator.correlate(key)
            posted = self._posted.get(c.key) if c.count > 1 else None
            if c.skip:
                self.dropped += 1
        if c.skip:
            log.debug("event %s %s about %s/%s dropped by the spam filter", type, reason, key.namespace, key.name)
            return None
        # built once: a retried POST whose first try reached the server meets AlreadyExists, not a twin
        body = event_body(obj=obj, reason=reason, message=c.message, type=type, component=self.component,
                          host=self.host, when=when)
        for attempt in range(1, max(1, tries) + 1):
            try:
                return self._send(c, body, posted, when)
            except KubeUnavailable as exc:
                if attempt >= tries:
                    log.warning("event %s %s about %s/%s not recorded after %d tries: %s", type, reason,
                                key.namespace, key.name, attempt, exc)
                    return None
                log.info("event %s %s about %s/%s: %s; trying again", type, reason, key.namespace, key.name, exc)
                # the first pause randomised (client-go: clients that lost the server do not retry in step)
                self._sleep(RETRY_PAUSE * (random.random() if attempt == 1 else 1.0))
            except KubeError as exc:
                log.warning("event %s %s about %s/%s not recorded: %s", type, reason, key.namespace, key.name, exc)
                return None
        return None

    def _send(self, c: Correlated, body: Obj, posted: tuple[str, str] | None, when: datetime | None) -> Obj:
        if posted is not None:
            ns, name = posted
            try:
                bumped: Obj = self.kube.patch(namespaced("events", ns, name),
                                              {"count": c.count, "lastTimestamp": rfc3339(when)})
                return bumped
            except KubeError as exc:
                if exc.code != 404:  # 404: expired (event TTL, 1 h by default): post it anew
                    raise
        meta = body["metadata"]
        try:
            ev: Obj = self.kube.post(namespaced("events", meta["namespace"]), body)
        except KubeError as exc:
            if exc.code != 409:
                raise
            ev = body  # AlreadyExists: an earlier try that timed out had created it
        with self._lock:
            self._posted.put(c.key, (str(meta["namespace"]), str(meta["name"])))
            self.correlator.posted(c.key)
        return ev

    def forget(self, uid: str) -> None:
        """Drop what is remembered about one object (it was deleted): its events are not bumped again."""
        with self._lock:
            self.correlator.forget(uid)
            self._posted.drop(uid)


_Item = tuple[Obj, str, str, str, datetime, float]  # an event to post, when it was recorded (wall and monotonic)


class EventBroadcaster:
    """Records events on a thread of its own, as client-go's broadcaster does, so the work an event
    is about (a bind, a pod's sync) never waits for the event's POST. Best effort like client-go's:
    a full buffer (``size`` events behind) drops the new event with a warning rather than blocking
    the caller. :meth:`close` posts what is still queued, up to ``timeout`` seconds. An event the API
    server could not take (a timeout on a loaded machine, a restart) is tried again ``tries`` times
    before the next one, as client-go's ``recordToSink``: dropping it lost a pod's Unhealthy event
    once while the BackOff after it got through.

    ``hold`` (the kubelet: pods wait to be submitted) keeps each event back while it says so, up to
    ``hold_max`` seconds after the event was recorded: its POST and the API server's work for it then
    come after the submissions they would slow down. The event keeps the time it was recorded."""

    def __init__(self, recorder: EventRecorder, *, size: int = 1000, name: str = "events",
                 tries: int = MAX_TRIES, hold: Callable[[], bool] | None = None, hold_max: float = HOLD_MAX) -> None:
        self.recorder = recorder
        self.tries = tries
        self.hold, self.hold_max = hold, hold_max
        self._closing = threading.Event()
        self._queue: queue.Queue[_Item | str | threading.Event | None] = queue.Queue(maxsize=size)
        self._late: list[str] = []  # uids whose forget found the queue full
        self._late_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def record(self, obj: Obj, *, reason: str, message: str, type: str = "Normal") -> None:
        try:
            self._queue.put_nowait((obj, reason, message, type, datetime.now(UTC), time.monotonic()))
        except queue.Full:
            meta = obj.get("metadata") or {}
            log.warning("event %s %s about %s/%s dropped: %d events are waiting to be posted", type, reason,
                        meta.get("namespace", ""), meta.get("name", ""), self._queue.maxsize)

    def forget(self, uid: str) -> None:
        """:meth:`EventRecorder.forget`, after the events about ``uid`` queued before it. Never waits:
        with the buffer full (an API server that takes no events) the uid is forgotten once the queue
        has run empty, so a pod's deletion never stalls behind ``size`` events' POSTs."""
        try:
            self._queue.put_nowait(uid)
        except queue.Full:
            with self._late_lock:
                self._late.append(uid)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued before this call was posted; False after ``timeout``."""
        done = threading.Event()
        self._queue.put(done, timeout=timeout)
        return done.wait(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            self._item(item)
            if self._late and self._queue.empty():  # what was queued before those forgets is done
                with self._late_lock:
                    late, self._late = self._late, []
                for uid in late:
                    self.recorder.forget(uid)

    def _item(self, item: _Item | str | threading.Event) -> None:
        """Post one event, forget one uid, or answer a flush."""
        if isinstance(item, threading.Event):
            item.set()
        elif isinstance(item, str):
            self.recorder.forget(item)
        else:
            obj, reason, message, type, when, at = item
            # held while the caller says so, at most hold_max, and never while the queue is half full (a
            # fast backlog's events would otherwise be dropped at record)
            while self.hold is not None and self.hold() and time.monotonic() < at + self.hold_max and \
                    self._queue.qsize() < self._queue.maxsize // 2 and not self._closing.wait(HOLD_POLL):
                pass
            self.recorder.record(obj, reason=reason, message=message, type=type, tries=self.tries, when=when)

    def close(self, timeout: float = 5.0) -> bool:
        """Stop after the queued events (none held back any more); False if they were not all posted
        within ``timeout``."""
        self._closing.set()
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return False
        self._thread.join(timeout)
        return not self._thread.is_alive()

"""List + watch, the way a long-running daemon must do it (kubelet-api.md §1.3, §3.2).

:class:`Reflector` keeps a caller's view of one collection (pods with ``spec.nodeName=``, the one
Node...) current: it lists, then watches from the list's resourceVersion, and starts over when it
has to. It is written here rather than taken from ``kubernetes.watch`` or the client's informer
because those hot-loop against an unreachable server (3,835 failed attempts in 3 s, measured) and
raise on the 410 that is a normal part of a watch's life.

Things a watch goes through, all normal, and what the reflector does:

* The server ends every watch after ``timeoutSeconds`` (and at random otherwise): watch again from
  the last resourceVersion seen; nothing is lost.
* The resume point has left the server's history (etcd compaction, a restarted API server, a long
  disconnect): the server answers ``200`` and a single ``ERROR`` event with a 410 Status. The only
  way back is a fresh list; whatever happened in the gap (deletions included) is only visible by
  comparing that list with what the caller knew — :class:`ObjectCache` does that comparison.
* BOOKMARK events carry only a resourceVersion: they keep the resume point fresh on a quiet
  collection, so that a reconnect does not 410.
* The server is unreachable: wait with exponential back-off and jitter (never a hot loop), then
  resume from the last resourceVersion (or list again if that is gone).

Callbacks run on the reflector's thread, one at a time, in order; they should not block for long
(the stream waits) and should not raise (an exception is logged and the event is not redelivered).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from hpkctl.backoff import Backoff as Backoff  # re-exported: the scheduler and tests import it from here
from hpkctl.kube.client import Kube, KubeError, KubeUnavailable
from hpkctl.kube.watchstream import Obj, WatchStream

log = logging.getLogger("hpkctl.kube.reflect")

OnEvent = Callable[[str, Obj], None]
OnSync = Callable[[list[Obj]], None]

#: Pages of a list: small enough that one page is one bounded response, large enough that a node's
#: pods are one or two requests.
LIST_PAGE = 500
#: A watch that ends this soon after it began, having delivered nothing, counts as a failure (so a
#: server or proxy that accepts and closes at once is retried with back-off, not in a loop).
QUICK_CLOSE = 1.0


class _Expired(Exception):
    """The resume point is gone (410): list again."""


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _typed(page: Obj) -> list[Obj]:
    """A list page's items with ``kind`` and ``apiVersion`` set: the server leaves them out of a
    list's items (a watch event's object has them), and an Event's involvedObject needs them."""
    kind = str(page.get("kind") or "").removesuffix("List")
    api_version = str(page.get("apiVersion") or "")
    items = [i for i in page.get("items") or [] if isinstance(i, dict)]
    for item in items:
        if kind:
            item.setdefault("kind", kind)
        if api_version:
            item.setdefault("apiVersion", api_version)
    return items


class Reflector:
    """List, then watch, one collection until ``stop`` is set; see the module docstring.

    ``path`` is a collection (``/api/v1/pods``, ``/api/v1/nodes``). ``on_sync`` gets every item of
    each (re-)list (with ``kind`` and ``apiVersion`` filled in), ``on_event`` each
    ADDED/MODIFIED/DELETED with the raw object in between.
    ``timeout_seconds`` is what the server is asked to close the watch after; the client's own
    read timeout is longer (``timeout_seconds + read_margin``) and only catches a server that went
    silent without closing the connection (a dead peer sends no FIN).
    """

    def __init__(self, kube: Kube, path: str, *, field_selector: str = "", label_selector: str | None = None,
                 on_event: OnEvent, on_sync: OnSync, stop: threading.Event, timeout_seconds: int = 300,
                 read_margin: float = 30.0, backoff: Backoff | None = None, name: str = "") -> None:
        if timeout_seconds < 1:
            raise ValueError("timeout_seconds must be at least 1")
        self.kube = kube
        self.path = path
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.on_event = on_event
        self.on_sync = on_sync
        self.stop = stop
        self.timeout_seconds = timeout_seconds
        self.read_margin = read_margin
        self.backoff = backoff or Backoff()
        self.name = name or f"{path}?{field_selector or label_selector or ''}"
        #: set once the first list has been handed to ``on_sync``
        self.synced = threading.Event()
        #: the resume point: the last list's or event's resourceVersion ("" = list first)
        self.resource_version = ""
        #: successful lists so far (the first one, then one per 410 or unrecoverable error)
        self.lists = 0
        self._stream: WatchStream | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ thread
    def start(self) -> threading.Thread:
        """Run in a daemon thread (plus one that waits for ``stop`` to interrupt a blocked read)."""
        if self._thread is not None:
            raise RuntimeError(f"reflector {self.name} already started")
        self._thread = threading.Thread(target=self.run, name=f"reflector {self.name}", daemon=True)
        self._thread.start()
        threading.Thread(target=self._cancel_on_stop, name=f"reflector-stop {self.name}", daemon=True).start()
        return self._thread

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end after ``stop``; True if it did."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _cancel_on_stop(self) -> None:
        self.stop.wait()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.cancel()

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        """The list/watch loop; returns once ``stop`` is set."""
        expired_in_a_row = 0
        while not self.stop.is_set():
            if not self.resource_version and not self._list():
                self._wait(f"list {self.name}")
                continue
            try:
                progressed = self._watch()
            except _Expired as exc:
                # normal after compaction, a server restart or a long gap: list again. Twice in a row
                # without a single event between means the server cannot keep up: back off first
                expired_in_a_row += 1
                log.info("watch %s: %s; listing again", self.name, exc)
                self.resource_version = ""
                if expired_in_a_row > 1:
                    self._wait(f"watch {self.name}")
                continue
            except KubeUnavailable as exc:
                log.warning("watch %s: %s", self.name, exc)
                self._wait(f"watch {self.name}")  # keep the resume point: after a blip the watch resumes
                continue
            except KubeError as exc:
                # 400 (bad selector), 403 (no rights), 5xx...: list again after a pause; the state is unknown
                log.error("watch %s: %s", self.name, exc)
                self.resource_version = ""
                self._wait(f"watch {self.name}")
                continue
            if progressed:
                expired_in_a_row = 0
                self.backoff.reset()
            elif not self.stop.is_set():
                log.debug("watch %s closed at once without events", self.name)
                self._wait(f"watch {self.name}")

    def _wait(self, what: str) -> None:
        delay = self.backoff.next()
        log.debug("%s: retrying in %.1f s", what, delay)
        self.stop.wait(delay)

    def _selectors(self) -> list[tuple[str, Any]]:
        q: list[tuple[str, Any]] = []
        if self.field_selector:
            q.append(("fieldSelector", self.field_selector))
        if self.label_selector:
            q.append(("labelSelector", self.label_selector))
        return q

    def _list(self) -> bool:
        """One complete (paged) list handed to ``on_sync``; False when it could not be had."""
        items: list[Obj] = []
        cont = ""
        try:
            while True:
                q = [*self._selectors(), ("limit", LIST_PAGE)]
                if cont:
                    q.append(("continue", cont))
                page = self.kube.get(self.path, query=q)
                items.extend(_typed(page))
                meta = page.get("metadata") or {}
                cont = str(meta.get("continue") or "")
                if not cont:
                    rv = str(meta.get("resourceVersion") or "")
                    break
                if self.stop.is_set():
                    return False
        except KubeUnavailable as exc:
            log.warning("list %s: %s", self.name, exc)
            return False
        except KubeError as exc:
            # a 410 here is an expired continue token: the next attempt lists from the start
            (log.info if exc.code == 410 else log.error)("list %s: %s", self.name, exc)
            return False
        if not rv:
            log.error("list %s: the answer has no resourceVersion; cannot watch from it", self.name)
            return False
        self.lists += 1
        self.resource_version = rv
        try:
            self.on_sync(items)
        except Exception:  # a caller's bug must not stop the reflector
            log.exception("reflector %s: on_sync failed", self.name)
        self.synced.set()
        return True

    def _watch(self) -> bool:
        """One watch from ``resource_version`` until the server ends it; True if it delivered anything
        or lasted longer than a quick close."""
        q = [("watch", "true"), *self._selectors(), ("resourceVersion", self.resource_version),
             ("allowWatchBookmarks", "true"), ("timeoutSeconds", self.timeout_seconds)]
        stream = WatchStream(self.kube, self.path, q, read_timeout=self.timeout_seconds + self.read_margin)
        with self._lock:
            self._stream = stream
        if self.stop.is_set():  # set between the loop's check and here: _cancel_on_stop may have missed it
            return False
        began = time.monotonic()
        delivered = False
        events = stream.events()
        try:
            for ev in events:
                if self.stop.is_set():
                    break
                delivered = True
                self._handle(ev)
        finally:
            events.close()  # releases the connection now, also when _handle raised
            with self._lock:
                self._stream = None
        return delivered or time.monotonic() - began >= QUICK_CLOSE

    def _handle(self, ev: Obj) -> None:
        typ = str(ev.get("type") or "")
        obj = ev.get("object")
        if not isinstance(obj, dict):
            raise KubeUnavailable(f"watch {self.name}: event {typ or '?'} without an object")
        if typ == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise _Expired(str(obj.get("message") or "resource version expired (410)"))
            raise KubeError(code, str(obj.get("reason") or ""), str(obj.get("message") or "watch error"), body=obj)
        rv = _rv(obj)
        if typ == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        if typ not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("watch %s: ignoring an event of unknown type %r", self.name, typ)
            return
        if rv:
            self.resource_version = rv
        try:
            self.on_event(typ, obj)
        except Exception:  # a caller's bug must not stop the reflector
            log.exception("reflector %s: on_event(%s) failed", self.name, typ)


class ObjectCache:
    """The last state of each object a :class:`Reflector` delivered, keyed by UID, that turns every
    (re-)list into the events the caller would have seen without the gap.

    Use its :meth:`on_event` and :meth:`on_sync` as the reflector's callbacks; ``on_change`` then gets
    ADDED/MODIFIED/DELETED for watch events and list differences alike: an object missing from a
    re-list was deleted during the gap (it arrives as DELETED with its last known state), a new UID
    under an old name is another object (DELETED old, ADDED new), a changed resourceVersion is
    MODIFIED. Keyed by UID, never by name (kubelet-api.md §0.2). Thread-safe to read.
    """

    def __init__(self, on_change: OnEvent | None = None) -> None:
        self.on_change = on_change
        self._lock = threading.Lock()
        self._objs: dict[str, Obj] = {}

    @staticmethod
    def uid(obj: Obj) -> str:
        return str((obj.get("metadata") or {}).get("uid") or "")

    def get(self, uid: str) -> Obj | None:
        with self._lock:
            return self._objs.get(uid)

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._objs.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._objs)

    def on_event(self, typ: str, obj: Obj) -> None:
        uid = self.uid(obj)
        with self._lock:
            if typ == "DELETED":
                self._objs.pop(uid, None)
            else:
                self._objs[uid] = obj
        self._emit(typ, obj)

    def on_sync(self, items: list[Obj]) -> None:
        fresh = {self.uid(o): o for o in items}
        changes: list[tuple[str, Obj]] = []
        with self._lock:
            old = self._objs
            changes += [("DELETED", o) for u, o in old.items() if u not in fresh]
            for u, o in fresh.items():
                if u not in old:
                    changes.append(("ADDED", o))
                elif _rv(old[u]) != _rv(o):
                    changes.append(("MODIFIED", o))
            self._objs = fresh
        for typ, obj in changes:
            self._emit(typ, obj)

    def _emit(self, typ: str, obj: Obj) -> None:
        if self.on_change is not None:
            self.on_change(typ, obj)

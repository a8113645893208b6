"""Objects, the one global resourceVersion, the bounded watch history and the snapshot.

kube-apiserver (etcd) stamps every write with one cluster-wide, strictly increasing revision and
keeps a bounded history from which watches resume; a resume point older than that history gets
an in-stream 410. Clients (reflectors) depend on exactly that, so the store is one in-memory
map per storage key, a counter and a ring of events. Stored objects are never mutated: writers
put fresh copies, so an event handed to a watcher stays what it was.
"""

from __future__ import annotations

import asyncio
import copy
import json
import marshal
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, TypeVar, cast

from .counts import Counts
from .errors import gone

# after a restart the counter jumps by this much: writes lost with the process (SIGKILL) may have
# handed out revisions that must never be reused for other objects
RESTART_GAP = 1000


@dataclass(frozen=True)
class Event:
    rv: int
    key: str
    type: str  # ADDED MODIFIED DELETED
    obj: dict[str, Any]
    old: dict[str, Any] | None


@dataclass(eq=False)
class Watcher:
    key: str
    queue: "asyncio.Queue[Event | None]" = field(default_factory=asyncio.Queue)


T = TypeVar("T")


def clone(obj: T) -> T:
    """A deep copy of JSON data (dicts, lists, str, int, float, bool, None) through marshal: the same
    result as ``copy.deepcopy``, 4-5x cheaper; anything marshal refuses (a datetime from a YAML body)
    falls back to deepcopy. Every write copies its object a few times (decode, the answer, the view of
    a patch), which was a third of the stand-in's CPU per request."""
    try:
        return cast(T, marshal.loads(marshal.dumps(cast(Any, obj))))
    except ValueError:
        return copy.deepcopy(obj)


def ns_name(obj: dict[str, Any]) -> tuple[str, str]:
    m = obj.get("metadata") or {}
    return (m.get("namespace") or "", m.get("name") or "")


def _without_rv(obj: dict[str, Any]) -> dict[str, Any]:
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    return {**obj, "metadata": meta}


class Store:
    def __init__(self, *, history_size: int = 1000, snapshot: Path | None = None,
                 snapshot_delay: float = 0.2) -> None:
        self.snapshot_delay = snapshot_delay
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.rv = 1
        self.history: deque[Event] = deque(maxlen=max(1, history_size))
        self.floor = self.rv  # every event with rv > floor is in history
        self.watchers: set[Watcher] = set()
        self.counts = Counts()  # requests and watch events by client (GET /standin/requests)
        self.snapshot = snapshot
        self._save_pending = False
        # (key, ns, name) -> (stored object, its JSON): each stored object is encoded once, for the
        # snapshots and every watcher it is sent to (stored objects are never mutated)
        self._texts: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = {}
        self.on_write: list[Callable[[Event], None]] = []
        self.closing = False
        if snapshot is not None and snapshot.exists():
            self._load(snapshot)

    # ------------------------------------------------------------------ reads
    def get(self, key: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(key, {}).get((ns, name))

    def list(self, key: str, ns: str | None = None) -> list[dict[str, Any]]:
        items = self.objects.get(key, {})
        return [o for (n, _), o in sorted(items.items()) if ns is None or n == ns]

    def since(self, key: str, rv: int) -> List[Event]:
        """Events of ``key`` after ``rv``; 410 Expired if the history no longer reaches back."""
        if rv < self.floor:
            raise gone(f"too old resource version: {rv} ({self.floor})")
        return [e for e in self.history if e.rv > rv and e.key == key]

    # ------------------------------------------------------------------ writes
    def put(self, key: str, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Store ``obj`` (ADDED or MODIFIED); an unchanged object is not rewritten (no new rv)."""
        ns, name = ns_name(obj)
        old = self.get(key, ns, name)
        if old is not None and _without_rv(old) == _without_rv(obj):
            return old
        if dry_run:
            return obj
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects.setdefault(key, {})[(ns, name)] = obj
        self._emit(Event(self.rv, key, "MODIFIED" if old is not None else "ADDED", obj, old))
        return obj

    def remove(self, key: str, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Delete; the DELETED event carries the last state stamped with the deletion's rv."""
        ns, name = ns_name(obj)
        if dry_run:
            return obj
        self.objects.get(key, {}).pop((ns, name), None)
        self.rv += 1
        last = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        self._emit(Event(self.rv, key, "DELETED", last, obj))
        return last

    def compact(self) -> int:
        """Forget the whole history (a test hook: the next resume from an old rv gets 410)."""
        self.history.clear()
        self.floor = self.rv
        return self.rv

    def close_watches(self) -> None:
        """Shutdown: end every watch stream now (clients reconnect, as after a real restart)."""
        self.closing = True
        for w in self.watchers:
            w.queue.put_nowait(None)

    def _emit(self, ev: Event) -> None:
        if len(self.history) == self.history.maxlen:
            self.floor = self.history[0].rv
        self.history.append(ev)
        for w in list(self.watchers):
            if w.key == ev.key:
                w.queue.put_nowait(ev)
        for hook in self.on_write:
            hook(ev)
        self._schedule_save()

    # ------------------------------------------------------------------ snapshot
    def _schedule_save(self) -> None:
        if self.snapshot is None or self._save_pending:
            return
        self._save_pending = True
        try:
            asyncio.get_running_loop().call_later(self.snapshot_delay, self.save)
        except RuntimeError:
            self.save()

    def text(self, key: str, obj: dict[str, Any]) -> str:
        """``obj`` as compact JSON, encoded once while it is the stored object of its name."""
        ns, name = ns_name(obj)
        slot = (key, ns, name)
        hit = self._texts.get(slot)
        if hit is not None and hit[0] is obj:
            return hit[1]
        text = json.dumps(obj, separators=(",", ":"))
        if self.get(key, ns, name) is obj:
            self._texts[slot] = (obj, text)
        return text

    def save(self) -> None:
        self._save_pending = False
        if self.snapshot is None:
            return
        # the document {"resourceVersion": rv, "objects": {key: [object, ...]}}, compact, as json.dumps
        # writes it, from each object's cached text: a save re-encodes only what changed since the
        # last one (encoding all of a burst's pods and events every snapshot_delay held up the event
        # loop for ~15-30 ms each time); deleted objects leave the cache here
        texts: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = {}
        cached, parts = self._texts, []
        for key, items in self.objects.items():
            body = []
            for (ns, name), obj in items.items():
                hit = cached.get((key, ns, name))
                text = hit[1] if hit is not None and hit[0] is obj else json.dumps(obj, separators=(",", ":"))
                texts[(key, ns, name)] = (obj, text)
                body.append(text)
            parts.append(f"{json.dumps(key)}:[{','.join(body)}]")
        self._texts = texts
        text = f'{{"resourceVersion":{self.rv},"objects":{{{",".join(parts)}}}}}'
        tmp = self.snapshot.with_name(self.snapshot.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.snapshot)

    def _load(self, path: Path) -> None:
        doc = json.loads(path.read_text(encoding="utf-8"))
        for key, items in doc.get("objects", {}).items():
            self.objects[key] = {ns_name(o): o for o in items}
        self.rv = int(doc.get("resourceVersion", 1)) + RESTART_GAP
        self.floor = self.rv

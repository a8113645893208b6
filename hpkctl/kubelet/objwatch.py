"""The ConfigMaps and Secrets the node's pods refer to, kept current by one watch per object, as the
real kubelet's default ``configMapAndSecretChangeDetectionStrategy: Watch`` does
(``pkg/kubelet/util/manager/watch_based_manager.go``).

Why: rendering a pod read every ConfigMap and Secret it names with a GET, and every pod names
``kube-root-ca.crt`` (its service-account volume), so a burst of 200 pods cost 200 GETs of one
object on the submit path (22 % of a pod's create, profiled). Now the first pod that names an
object to be read starts a watch of that object alone (a list + watch with
``fieldSelector=metadata.name=<name>`` in its namespace, which the Node authorizer allows for objects
its pods reference; a namespace-wide informer it would refuse), and every later pod reads it from
memory: no API read is left on a pod's submit path.

As the real one: references are counted per pod (registered when the kubelet learns of a pod it
has to start, dropped when the pod leaves the node); the watch stops when no pod names the object
any more, and at once for an object marked ``immutable`` (it cannot change; its last copy is kept).
Unlike the real one, the watch starts at the first *read* (a worker about to render a pod), not at
the registration: a pod can be deleted before the kubelet hears of it, and a LIST sent for it then
finds no pod on the node naming the object, which the Node authorizer refuses ("no relationship
found"); a worker renders only pods not known gone, the same moment a GET was sent before (the real
kubelet restarts an idle object's watch at a read too, ``restartReflectorIfNeeded``). For the same
reason the kubelet drops a pod's references before its own final delete of the pod.
A read waits up to :data:`SYNC_WAIT` for the watch's first list; an object the watch does not
hold is *missing*, exactly as a 404 to a GET (the pod then shows ``CreateContainerConfigError``
and its ``…NotFound`` event, as before). A change reaches the cache as a watch event, so the next
pod rendered after it sees it. When the watch has not synced in time (an API server slower than
that, or one that refuses the list), :meth:`ObjectWatches.get` says so and the caller GETs the object
as before; later reads do not wait again until the watch has synced.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hpkctl.kube import Kube, namespaced
from hpkctl.kube.reflect import Reflector
from hpkctl.pod.objects import referenced_objects

log = logging.getLogger("hpkctl.kubelet.objwatch")

#: how long a read waits for a new watch's first list (the real kubelet: 1 s, then an error)
SYNC_WAIT = 1.0
WATCH_TIMEOUT = 300  # seconds the server is asked to keep each object watch open

Key = tuple[str, str, str]  # ("configmaps"|"secrets", namespace, name)


@dataclass
class _Watched:
    """One watched object: who refers to it, its latest copy (``None``: it does not exist)."""

    refs: int = 0
    started: bool = False  # its watch was started (at the first read)
    obj: dict[str, Any] | None = None
    synced: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    immutable: bool = False
    late: bool = False  # a read waited sync_wait in vain: later reads do not wait again until it syncs


class ObjectWatches:
    """Per-object watches for the ConfigMaps and Secrets of the pods registered (see the module
    docstring). Thread-safe: the reflector registers, the workers read, each watch writes its own item.

    ``client`` gives each watch its own connection (a watch pins one for minutes)."""

    def __init__(self, client: Callable[[], Kube], *, sync_wait: float = SYNC_WAIT,
                 timeout_seconds: int = WATCH_TIMEOUT) -> None:
        self.client = client
        self.sync_wait = sync_wait
        self.timeout_seconds = timeout_seconds
        self._lock = threading.Lock()
        self._items: dict[Key, _Watched] = {}
        self._pods: dict[str, frozenset[Key]] = {}  # pod uid -> the objects it registered
        self.started = 0  # watches started so far (tests, logs)

    # ------------------------------------------------------------------ references
    def register(self, uid: str, pod: Mapping[str, Any]) -> None:
        """Count the pod's references (again: a pod's spec may name other objects after an update)."""
        ns = str((pod.get("metadata") or {}).get("namespace") or "default")
        keys = frozenset((plural, ns, name) for plural, name in referenced_objects(pod))
        with self._lock:
            old = self._pods.get(uid, frozenset())
            if keys == old:
                return
            for key in keys - old:
                self._add(key)
            for key in old - keys:
                self._drop(key)
            self._pods[uid] = keys

    def unregister(self, uid: str) -> None:
        """The pod left the node: its references go, and with the last one an object's watch."""
        with self._lock:
            for key in self._pods.pop(uid, frozenset()):
                self._drop(key)

    def _add(self, key: Key) -> None:
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = _Watched()  # its watch starts at the first read (see the module docstring)
        item.refs += 1

    def _drop(self, key: Key) -> None:
        item = self._items.get(key)
        if item is not None:
            item.refs -= 1
            if item.refs <= 0:
                item.stop.set()
                del self._items[key]

    def close(self) -> None:
        with self._lock:
            for item in self._items.values():
                item.stop.set()
            self._items.clear()
            self._pods.clear()

    # ------------------------------------------------------------------ the watches
    def _start(self, key: Key, item: _Watched) -> None:
        plural, ns, name = key

        def on_sync(items: list[dict[str, Any]]) -> None:
            self._keep(key, item, next((o for o in items if _name(o) == name), None))
            item.synced.set()

        def on_event(typ: str, obj: dict[str, Any]) -> None:
            if _name(obj) == name:
                self._keep(key, item, None if typ == "DELETED" else obj)

        Reflector(self.client(), namespaced(plural, ns), field_selector=f"metadata.name={name}",
                  on_event=on_event, on_sync=on_sync, stop=item.stop, timeout_seconds=self.timeout_seconds,
                  name=f"{plural} {ns}/{name}").start()
        self.started += 1

    def _keep(self, key: Key, item: _Watched, obj: dict[str, Any] | None) -> None:
        item.obj = obj
        if obj is not None and obj.get("immutable") is True and not item.immutable:
            item.immutable = True  # it can never change again: keep this copy, end the watch
            item.stop.set()
            log.debug("%s %s/%s is immutable: no longer watched", *key)

    # ------------------------------------------------------------------ reads
    def get(self, plural: str, namespace: str, name: str) -> tuple[bool, dict[str, Any] | None]:
        """``(True, object)`` from the watch (``object`` is ``None`` when it does not exist);
        ``(False, None)`` when no pod registered the object or its watch has not synced within
        ``sync_wait``: then the caller asks the API server itself."""
        key = (plural, namespace, name)
        with self._lock:
            item = self._items.get(key)
            if item is not None and not item.started:
                item.started = True
                self._start(key, item)
        if item is None:
            return False, None
        if not item.synced.wait(0.0 if item.late else self.sync_wait):
            item.late = True  # its list fails or is slow (a 403, an API server far behind): GET meanwhile
            return False, None
        return True, item.obj


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")

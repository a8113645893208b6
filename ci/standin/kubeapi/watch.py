"""Watch streams: NDJSON events with resume by resourceVersion, selector transitions, bookmarks,
server-side timeouts and the in-stream 410.

These are exactly the places where a reflector goes wrong (kubelet-api.md §1.3): an object that
starts matching a field selector arrives as ADDED and one that stops as DELETED; a resume point
older than the history gets ``200`` + an ``ERROR`` event with a 410 Status (never an HTTP 410);
a BOOKMARK never carries a revision below an event still to come.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any, Callable

from aiohttp import web

from . import nodeauth
from .errors import ApiError
from .resources import ResourceType
from .matching import Selector
from .store import Event, Store, Watcher

Encoder = Callable[[dict[str, Any]], dict[str, Any]]


class WatchSettings:
    def __init__(self, *, bookmark_interval: float = 60.0, min_request_timeout: float = 1800.0) -> None:
        self.bookmark_interval = bookmark_interval
        self.min_request_timeout = min_request_timeout


def _in_scope(obj: dict[str, Any] | None, ns: str | None, sel: Selector) -> bool:
    if obj is None:
        return False
    if ns is not None and (obj.get("metadata") or {}).get("namespace", "") != ns:
        return False
    return sel.matches(obj)


def translate(ev: Event, ns: str | None, sel: Selector) -> tuple[str, dict[str, Any]] | None:
    """The event this watcher sees, if any (cacheWatcher.convertToWatchEvent)."""
    if ev.type == "DELETED":
        return ("DELETED", ev.obj) if _in_scope(ev.old, ns, sel) else None
    now, before = _in_scope(ev.obj, ns, sel), _in_scope(ev.old, ns, sel)
    if now and before:
        return ("MODIFIED", ev.obj)
    if now:
        return ("ADDED", ev.obj)
    if before:
        return ("DELETED", ev.obj)
    return None


async def serve(request: web.Request, store: Store, rt: ResourceType, ns: str | None, sel: Selector,
                encode: Encoder, settings: WatchSettings) -> web.StreamResponse:
    q = request.query
    rv_text = q.get("resourceVersion", "")
    bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
    initial = q.get("sendInitialEvents") == "true"
    if "timeoutSeconds" in q:
        timeout = float(q["timeoutSeconds"])
    else:
        timeout = settings.min_request_timeout * (1 + random.random())
    user = nodeauth.CURRENT.get()[0]

    def tally(typ: str) -> None:  # an event written to this client (GET /standin/requests)
        store.counts.event(user, rt.plural, typ)

    watcher = Watcher(rt.key)
    store.watchers.add(watcher)
    backlog: list[tuple[str, dict[str, Any]]] = []
    error: ApiError | None = None
    last = store.rv
    try:
        if rv_text in ("", "0") or initial:
            backlog = [("ADDED", o) for o in store.list(rt.key, ns) if sel.matches(o)]
        else:
            try:
                start = int(rv_text)
            except ValueError:
                raise ApiError(400, "BadRequest", f'invalid resource version "{rv_text}"') from None
            try:
                for ev in store.since(rt.key, start):
                    t = translate(ev, ns, sel)
                    if t:
                        backlog.append(t)
                last = max(start, store.rv)
            except ApiError as e:
                error = e
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                       "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if error is not None:
            await _send(resp, {"type": "ERROR", "object": error.status()})
            return resp
        for typ, obj in backlog:
            await _send_event(resp, store, rt, typ, obj, encode)
            tally(typ)
        if initial and bookmarks:
            await _send(resp, _bookmark(rt, store.rv, initial_end=True))
        await _follow(resp, store, watcher, rt, ns, sel, encode, last, timeout,
                      settings.bookmark_interval if bookmarks else None, tally)
        return resp
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    finally:
        store.watchers.discard(watcher)


async def _follow(resp: web.StreamResponse, store: Store, watcher: Watcher, rt: ResourceType, ns: str | None,
                  sel: Selector, encode: Encoder, last: int, timeout: float, bookmark: float | None,
                  tally: Callable[[str], None]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    next_bookmark = loop.time() + bookmark if bookmark else None
    while True:
        now = loop.time()
        if now >= deadline:
            return
        wait = deadline - now
        if next_bookmark is not None:
            wait = min(wait, max(0.0, next_bookmark - now))
        if not watcher.queue.empty():
            # queued events first: with a bookmark due, wait is 0, and wait_for(timeout=0) cancels the
            # get() before it runs, so the events would never drain and no bookmark ever be due (livelock)
            ev = watcher.queue.get_nowait()
        else:
            try:
                ev = await asyncio.wait_for(watcher.queue.get(), timeout=wait)
            except asyncio.TimeoutError:
                ev = None
        if store.closing:
            return
        if ev is not None:
            if ev.rv <= last:
                continue
            last = ev.rv
            t = translate(ev, ns, sel)
            if t:
                await _send_event(resp, store, rt, t[0], t[1], encode)
                tally(t[0])
            continue
        if next_bookmark is not None and loop.time() >= next_bookmark and watcher.queue.empty():
            # every event up to store.rv has been handled: the bookmark may claim it
            await _send(resp, _bookmark(rt, max(last, store.rv)))
            next_bookmark = loop.time() + (bookmark or 0)


def _bookmark(rt: ResourceType, rv: int, *, initial_end: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}}


async def _send_event(resp: web.StreamResponse, store: Store, rt: ResourceType, typ: str, obj: dict[str, Any],
                      encode: Encoder) -> None:
    """One event, as ``_send`` writes it; an object sent as stored is encoded once for all watchers."""
    out = encode(obj)
    if out is not obj:
        return await _send(resp, {"type": typ, "object": out})
    await resp.write(f'{{"type":{json.dumps(typ)},"object":{store.text(rt.key, obj)}}}\n'.encode())


async def _send(resp: web.StreamResponse, event: dict[str, Any]) -> None:
    await resp.write(json.dumps(event, separators=(",", ":")).encode() + b"\n")

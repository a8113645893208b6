"""One watch request, read as a stream of events, that another thread can end at once.

Split out of :mod:`hpkctl.kube.reflect` because it is the one piece of the reflector that touches
the wire: :meth:`Kube.stream` cannot be interrupted, so a daemon that must stop promptly on SIGTERM
needs a watch whose blocking read can be cut (:meth:`WatchStream.cancel`), and a line decoder that
turns a garbled stream into :class:`KubeUnavailable` (retried with back-off) rather than a crash.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Generator, Sequence
from typing import Any

from hpkctl.kube.client import Kube, KubeUnavailable
from hpkctl.kube.http import Response

#: A Kubernetes object or watch event as decoded JSON.
Obj = dict[str, Any]


class WatchStream:
    """One watch request whose blocking read another thread can end (:meth:`cancel`).

    :meth:`Kube.stream` cannot be interrupted: a quiet watch blocks in ``recv`` until the server
    writes or the read timeout passes. Shutting the socket's read side wakes that ``recv`` at once,
    which is what lets a daemon stop promptly on SIGTERM.
    """

    def __init__(self, kube: Kube, path: str, query: Sequence[tuple[str, Any]], *, read_timeout: float,
                 connect_timeout: float = 5.0) -> None:
        self._kube = kube
        self._path = path
        self._query = list(query)
        self._timeout = (connect_timeout, read_timeout)
        self._lock = threading.Lock()
        self._resp: Response | None = None
        self._cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            resp = self._resp
        if resp is not None:
            resp.shutdown()  # the socket's, not the TLS layer's: safe under a reader in another thread

    def events(self) -> Generator[Obj, None, None]:
        resp = self._kube._send("GET", self._path, query=self._query, body=None, content_type=None,
                                timeout=self._timeout)
        with self._lock:
            self._resp = resp
            cancelled = self._cancelled
        try:
            if cancelled:
                return
            if resp.status >= 400:
                raise Kube._error(resp, "GET", self._path)
            buf = b""
            while chunk := resp.read1(64 * 1024):  # what has come, not a full 64 KiB: events as they arrive
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield _decode(line)
            if buf.strip():
                yield _decode(buf)
        except (http.client.HTTPException, OSError, ValueError) as exc:  # ValueError: read after a cut
            if not self._cancelled:
                raise KubeUnavailable(f"watch {self._path}: {exc}") from exc
        finally:
            with self._lock:
                self._resp = None
            resp.close()  # a watch's connection is never pooled: one left early has unread data


def _decode(line: bytes) -> Obj:
    try:
        ev = json.loads(line)
    except ValueError as exc:
        raise KubeUnavailable(f"watch stream: undecodable line {line[:120]!r}") from exc
    if not isinstance(ev, dict):
        raise KubeUnavailable(f"watch stream: not an event: {line[:120]!r}")
    return ev

"""One watch request, read as a stream of events, that another thread can end at once.

Split out of :mod:`hpkctl.kube.reflect` because it is the one piece of the reflector that touches
the wire: :meth:`Kube.stream` cannot be interrupted, so a daemon that must stop promptly on SIGTERM
needs a watch whose blocking read can be cut (:meth:`WatchStream.cancel`), and a line decoder that
turns a garbled stream into :class:`KubeUnavailable` (retried with back-off) rather than a crash.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Generator, Sequence
from typing import Any

from hpkctl.kube.client import Kube, KubeUnavailable
from hpkctl.kube.http import Cut

#: A Kubernetes object or watch event as decoded JSON.
Obj = dict[str, Any]


class WatchStream:
    """One watch request that another thread can end at any moment (:meth:`cancel`).

    :meth:`Kube.stream` cannot be interrupted: a quiet watch blocks in ``recv`` until the server
    writes or the read timeout passes, and a stuck server (one that accepts and never answers, or
    never accepts) holds a request for its connect timeout plus its read timeout. Shutting the
    request's socket down (:class:`~hpkctl.kube.http.Cut`) wakes it at once wherever it is: connecting,
    in the TLS handshake, waiting for the headers or reading events. That is what lets a daemon stop
    promptly on SIGTERM.
    """

    def __init__(self, kube: Kube, path: str, query: Sequence[tuple[str, Any]], *, read_timeout: float,
                 connect_timeout: float = 5.0) -> None:
        self._kube = kube
        self._path = path
        self._query = list(query)
        self._timeout = (connect_timeout, read_timeout)
        self._cut = Cut()

    def cancel(self) -> None:
        """End the watch now: :meth:`events` returns (no error), whatever it was doing."""
        self._cut.cut()

    def events(self) -> Generator[Obj, None, None]:
        cut = self._cut
        try:
            if cut.cancelled():
                return
            try:
                resp = self._kube._send("GET", self._path, query=self._query, body=None, content_type=None,
                                        timeout=self._timeout, cut=cut)
            except KubeUnavailable:
                if cut.cancelled():
                    return
                raise
            try:
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
                if not cut.cancelled():
                    raise KubeUnavailable(f"watch {self._path}: {exc}") from exc
            finally:
                resp.close()  # a watch's connection is never pooled: one left early has unread data
        finally:
            cut.release()


def _decode(line: bytes) -> Obj:
    try:
        ev = json.loads(line)
    except ValueError as exc:
        raise KubeUnavailable(f"watch stream: undecodable line {line[:120]!r}") from exc
    if not isinstance(ev, dict):
        raise KubeUnavailable(f"watch stream: not an event: {line[:120]!r}")
    return ev

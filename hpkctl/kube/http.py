"""The API client's HTTP/1.1 transport: kept-alive TLS connections from the standard library.

Why not the ``kubernetes`` package's ApiClient and urllib3: their layers cost ~4 ms of CPU per
request under the kubelet's load (of ~7-10 ms per pod created), and the import 0.2 s of its
start-up. What the client needs is small: a few persistent connections, a connect and a read
timeout per call, chunked watch streams that another thread can cut, and one safe retry.

The retry, and why it is safe: a kept-alive connection the server closed while it sat idle is found
before it is used (its socket reads as closed) and replaced, so nothing was sent on it. A closing
that races the request is retried ONCE, on a fresh connection, only when the request cannot have
reached the server (sending it failed) or when it is a GET or HEAD (safe to repeat). A POST, PUT,
PATCH or DELETE whose answer never came is not sent again: the caller gets the error (its back-off
decides, reading the object back where it matters), so nothing is ever created or changed twice.
"""

from __future__ import annotations

import base64
import copy
import errno
import http.client
import os
import select
import socket
import ssl
import threading
from urllib.parse import unquote, urlsplit

#: (connect, read) seconds, or one number for both
Timeout = tuple[float, float] | float
SAFE = frozenset({"GET", "HEAD"})


class Cut:
    """Lets another thread end one request at any moment (:meth:`cut`): connecting, in the TLS
    handshake or a proxy's CONNECT, waiting for the answer's headers or reading its body.

    It holds a duplicate of the request's socket from before its ``connect``: shutting a socket down
    wakes a thread blocked in ``connect`` (Linux aborts it), ``recv`` or ``poll`` on it at once, and the
    duplicate is still this connection's when the TLS layer has swapped the socket object. Only the
    DNS lookup before the socket exists cannot be cut. :meth:`release` once the request is over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dup: socket.socket | None = None
        self._cancelled = False

    def attach(self, sock: socket.socket) -> None:
        """``sock`` (a TLS one too) is the request's from now on; raises if cut already."""
        dup = socket.fromfd(sock.fileno(), sock.family, sock.type)  # SSLSocket has no dup()
        unused: socket.socket | None = dup
        with self._lock:
            if not self._cancelled:
                unused, self._dup = self._dup, dup  # an earlier attempt's is closed
        if unused is not None:
            unused.close()
        if self._cancelled:
            raise ConnectionAbortedError("the request was cancelled")

    def cancelled(self) -> bool:
        return self._cancelled

    def cut(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._dup is not None:
                self._shut(self._dup)

    def release(self) -> None:
        with self._lock:
            dup, self._dup = self._dup, None
        if dup is not None:
            dup.close()

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected yet on a system that refuses, or closed: the caller's read ends anyway


class Conn(http.client.HTTPConnection):
    """One connection to the server (TLS when the server is ``https``); ``tls`` wraps the socket. With
    ``cut``, its socket is shown to it before it connects."""

    def __init__(self, host: str, port: int, *, tls: ssl.SSLContext | None, server_name: str | None,
                 connect_timeout: float, cut: Cut | None = None) -> None:
        super().__init__(host, port, timeout=connect_timeout)
        self.tls = tls
        self.server_name = server_name or host
        if cut is not None:
            self._create_connection = lambda address, timeout, source: _connect(address, timeout, cut)

    def connect(self) -> None:
        super().connect()  # TCP_NODELAY, and the proxy's CONNECT when tunnelled
        if self.tls is not None:
            self.sock = self.tls.wrap_socket(self.sock, server_hostname=self.server_name)

    def dropped(self) -> bool:
        """The server closed this idle connection (or wrote to it out of turn): not reusable."""
        sock = self.sock
        if sock is None:
            return True
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        p = select.poll()  # not select.select: a daemon with many files has descriptors past FD_SETSIZE
        p.register(sock, select.POLLIN)
        return bool(p.poll(0))


def _connect(address: tuple[str, int], timeout: float, cut: Cut) -> socket.socket:
    """``socket.create_connection`` whose socket ``cut`` holds before ``connect``, each address in turn.
    The connect is started non-blocking, then waited for unless cut: a cut before the start is seen
    then, one after it aborts the connect under the wait."""
    error: OSError | None = None
    for family, kind, proto, _name, sockaddr in socket.getaddrinfo(*address, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            cut.attach(sock)
            sock.setblocking(False)
            err = sock.connect_ex(sockaddr)
            if err == errno.EINPROGRESS and not cut.cancelled():
                p = select.poll()
                p.register(sock, select.POLLOUT)
                if not p.poll(timeout * 1000):
                    raise TimeoutError(f"connect to {address[0]}:{address[1]} timed out after {timeout:g} s")
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if cut.cancelled():
                raise ConnectionAbortedError("the request was cancelled")
            if err:
                raise OSError(err, os.strerror(err))
            sock.settimeout(timeout)
            return sock
        except OSError as e:
            sock.close()
            if cut.cancelled():
                raise
            error = e
    raise error or OSError(f"{address[0]}: no address to connect to")


class Response:
    """One answer and the connection it came on, which goes back to the pool only when fully read."""

    def __init__(self, transport: "Transport", conn: Conn, resp: http.client.HTTPResponse) -> None:
        self._transport = transport
        self._conn = conn
        self._resp = resp
        self._done = False  # the connection was pooled or closed: not this answer's any more
        self.status = resp.status
        self.reason = resp.reason

    def read(self) -> bytes:
        """The whole body; the connection goes back to the pool (or is closed if the server said so)."""
        try:
            data = self._resp.read()
        except BaseException:
            self.close()
            raise
        self.release()
        return data

    def read1(self, size: int) -> bytes:
        """What is there of the body, up to ``size`` bytes, once some is (b"" at its end): a watch's read."""
        return self._resp.read1(size)

    def release(self) -> None:
        """The connection to the pool if the answer was read to its end and may be followed, else closed."""
        if self._done:
            return
        self._done = True
        if self._resp.isclosed() and not self._resp.will_close:
            self._transport.put(self._conn)
        else:
            self._conn.close()

    def close(self) -> None:
        """Close the connection (never pooled): a watch, or an answer left unread. No-op once released."""
        if self._done:
            return
        self._done = True
        self._resp.close()
        self._conn.close()


class Transport:
    """Kept-alive connections to one server, at most ``pool_size`` idle ones kept. Thread-safe.

    A request when all are busy opens another connection and closes it after (as urllib3's pool does
    without ``block``): a caller never waits for a connection.
    """

    def __init__(self, host: str, *, pool_size: int, ca_file: str | None, cert_file: str | None,
                 key_file: str | None, verify_tls: bool, tls_server_name: str | None, proxy: str | None) -> None:
        url = urlsplit(host)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"server {host!r} is not an http:// or https:// URL")
        self.prefix = url.path.rstrip("/")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._tls: ssl.SSLContext | None = None
        if url.scheme == "https":
            self._tls = ssl.create_default_context(cafile=ca_file)
            if not verify_tls:
                self._tls.check_hostname = False
                self._tls.verify_mode = ssl.CERT_NONE
            if cert_file:  # a certificate file may hold its key too (the package's loader passes such files)
                self._tls.load_cert_chain(cert_file, key_file or None)
        self._server_name = tls_server_name
        self._proxy = urlsplit(proxy) if proxy else None
        if self._proxy and (self._proxy.scheme != "http" or not self._proxy.hostname):
            raise ValueError(f"proxy {proxy!r}: only an http:// proxy is supported (HTTP CONNECT)")
        self._pool_size = pool_size
        self._idle: list[Conn] = []
        self._lock = threading.Lock()

    def sibling(self, pool_size: int) -> "Transport":
        """A pool of its own to the same server, sharing this one's TLS context (thread-safe)."""
        other = copy.copy(self)
        other._pool_size, other._idle, other._lock = pool_size, [], threading.Lock()
        return other

    def _new(self, connect_timeout: float, cut: Cut | None) -> Conn:
        if self._proxy is None:
            return Conn(self._host, self._port, tls=self._tls, server_name=self._server_name,
                        connect_timeout=connect_timeout, cut=cut)
        p = self._proxy
        conn = Conn(p.hostname or "", p.port or 80, tls=self._tls, server_name=self._server_name or self._host,
                    connect_timeout=connect_timeout, cut=cut)
        headers = {}
        if p.username is not None:
            cred = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
            headers["Proxy-Authorization"] = "Basic " + base64.b64encode(cred).decode()
        conn.set_tunnel(self._host, self._port, headers)
        return conn

    def _take(self) -> Conn | None:
        """A kept-alive idle connection the server has not closed, if any (the closed ones are dropped)."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()  # the most recently used: the least likely to have timed out
            if not conn.dropped():
                return conn
            conn.close()

    def put(self, conn: Conn) -> None:
        with self._lock:
            if len(self._idle) < self._pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def open(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
             timeout: Timeout, cut: Cut | None = None) -> Response:
        """Send one request and read its status line and headers; the body is the caller's to read.
        ``cut`` lets another thread end it at any moment (its caller releases it after).

        Raises OSError (refused, reset, timed out, TLS, cut) or http.client.HTTPException (garbled answer).
        """
        connect_timeout, read_timeout = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        conn = self._take()
        while True:
            reused = conn is not None
            try:
                if conn is None:
                    conn = self._new(connect_timeout, cut)
                    conn.connect()
                elif cut is not None:
                    cut.attach(conn.sock)
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            assert conn.sock is not None
            conn.sock.settimeout(read_timeout)
            sent = False
            try:
                conn.request(method, self.prefix + url, body=body, headers=headers)
                sent = True
                resp = conn.getresponse()
                return Response(self, conn, resp)
            except (ConnectionError, http.client.BadStatusLine, ssl.SSLEOFError, ssl.SSLZeroReturnError):
                conn.close()
                # a kept-alive connection the server closed as it was used: once, on a new connection,
                # if the request did not reach the server or is safe to repeat (see the module's docstring)
                if not reused or (sent and method not in SAFE):
                    raise
            except BaseException:
                conn.close()
                raise
            conn = None

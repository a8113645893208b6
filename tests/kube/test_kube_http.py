"""hpkctl.kube's own transport against a tiny local HTTPS server whose every move the test decides:
a kept-alive connection the server closes between two requests (found before use, or in use: a GET is
retried once, a POST never sent twice), the pool's bound, compact JSON bodies and the credentials sent,
errors as KubeError/KubeUnavailable, a quiet watch cut at once from another thread and its connection
never pooled, a watch cut at once against a stuck server (connecting, in TLS, waiting for headers), and the kubelet on an hpkctl kubeconfig never importing the ``kubernetes`` package."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from ci.standin.kubeapi.certs import Pki
from hpkctl.controlplane.kubeconfig import write_kubeconfig
from hpkctl.kube import Kube, KubeError, KubeUnavailable
from hpkctl.kube.http import Conn
from hpkctl.kube.watchstream import WatchStream
from tests.support.ci import REPO
from tests.support.waiting import wait_for


class Server(ThreadingHTTPServer):
    """Answers ``/ok`` (keeps the connection), ``/close`` (answers as if kept alive, then closes),
    ``/fail`` (a 409 Status), ``/hold`` (answers once six are waiting),
    ``/drop`` (reads the request and closes without an answer), ``/watch`` (one event, then quiet until ``release``); records each request."""

    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), BaseHTTPRequestHandler)  # finish_request makes the Handler
        self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.seen: list[tuple[str, str, int, dict[str, str], bytes]] = []  # method, path, connection, headers, body
        self.connections = 0
        self.closed = 0
        self.open_watches = 0
        self.release = threading.Event()
        self.hold = threading.Barrier(6)  # /hold answers when six of them are in
        self.lock = threading.Lock()

    def finish_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.connections += 1
            conn = self.connections
        Handler(request, client_address, self, conn)

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self.lock:
            self.closed += 1


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def __init__(self, request: Any, client_address: Any, server: Server, conn: int) -> None:
        self.conn = conn
        super().__init__(request, client_address, server)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _any(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.seen.append((self.command, self.path, self.conn, dict(self.headers), body))
        if self.path.startswith("/watch"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            line = b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n'
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            with self.server.lock:
                self.server.open_watches += 1
            self.server.release.wait(60)  # quiet: only the client's cut ends this watch
            self.close_connection = True
            return
        if self.path.startswith("/drop"):  # as a server that dies with the request read, unanswered
            self.close_connection = True
            return
        if self.path.startswith("/hold"):
            self.server.hold.wait(30)
        if self.path.startswith("/fail"):
            self._answer(409, {"kind": "Status", "reason": "Conflict", "message": "it changed", "code": 409})
            return
        self._answer(200, {"path": self.path, "conn": self.conn})
        self.close_connection = self.path.startswith("/close")  # no "Connection: close": the client cannot know

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def serve(pki: Pki, *sans: str) -> Iterator[Server]:
    cert, key = pki.leaf("server-" + "-".join(sans), cn="server", server=True, sans=sans)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    s = Server(tls)
    t = threading.Thread(target=s.serve_forever, daemon=True)
    t.start()
    yield s
    s.release.set()
    s.shutdown()
    s.server_close()


@pytest.fixture
def server(pki: Pki) -> Iterator[Server]:
    yield from serve(pki, "127.0.0.1")


def kubeconfig(pki: Pki, server: Server | int, tmp_path: Path) -> Path:
    """An hpkctl kubeconfig (the control plane writes it: everything embedded) for the server (or a
    port), admin's certificate."""
    cert, key = pki.leaf("user-admin", cn="admin")
    port = server if isinstance(server, int) else server.server_address[1]
    return write_kubeconfig(tmp_path / "kc" / "admin.kubeconfig", server=f"https://127.0.0.1:{port}",
                            ca=pki.dir / "ca.crt", cert=cert, key=key, user="admin")


@pytest.fixture
def kube(pki: Pki, server: Server, tmp_path: Path) -> Iterator[Kube]:
    k = Kube(str(kubeconfig(pki, server, tmp_path)), pool_size=2)
    yield k
    k.close()


def test_requests_reuse_one_kept_alive_connection_and_send_compact_json(kube: Kube, server: Server) -> None:
    assert kube.get("/ok", query={"watch": False, "limit": 5}) == {"path": "/ok?watch=false&limit=5", "conn": 1}
    assert kube.post("/ok", {"a": 1, "b": [1, 2]})["conn"] == 1
    assert kube.patch("/ok", {"c": None})["conn"] == 1
    assert kube.patch("/ok", 'kind: "Pod" # é\n', content_type="application/apply-patch+yaml")["conn"] == 1
    (_, _, _, h1, _), (_, _, _, h2, b2), (_, _, _, h3, b3), (_, _, _, h4, b4) = server.seen
    assert b2 == b'{"a":1,"b":[1,2]}' and h2["Content-Type"] == "application/json"
    assert b3 == b'{"c":null}' and h3["Content-Type"] == "application/strategic-merge-patch+json"
    assert b4 == 'kind: "Pod" # é\n'.encode() and h4["Content-Type"] == "application/apply-patch+yaml"  # text as is
    assert h1["Accept"] == "application/json" and "Authorization" not in h1  # a client certificate authenticates
    assert server.connections == 1


def test_a_connection_the_server_closed_while_idle_is_replaced_before_use(kube: Kube, server: Server) -> None:
    assert kube.get("/close")["conn"] == 1
    wait_for("the server to close the connection", lambda: server.closed == 1, timeout=10)
    assert kube.post("/ok", {"x": 1})["conn"] == 2
    assert [(m, p) for m, p, *_ in server.seen] == [("GET", "/close"), ("POST", "/ok")]


def test_a_close_that_races_a_get_is_retried_once_on_a_new_connection(
        kube: Kube, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the idle check cannot see (the server closed as the request went out), made certain by
    skipping that check: the GET reaches the server once, on a new connection."""
    monkeypatch.setattr(Conn, "dropped", lambda self: False)
    assert kube.get("/close")["conn"] == 1
    wait_for("the server to close the connection", lambda: server.closed == 1, timeout=10)
    assert kube.get("/ok")["conn"] == 2
    assert [(m, p) for m, p, *_ in server.seen] == [("GET", "/close"), ("GET", "/ok")]


def test_a_post_that_could_not_be_sent_is_sent_once_on_a_new_connection(
        kube: Kube, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sending failed, so the server cannot have it: the POST goes once more on a new connection and
    reaches the server once (the kept connection is made unwritable, and the idle check skipped)."""
    assert kube.get("/ok")["conn"] == 1
    monkeypatch.setattr(Conn, "dropped", lambda self: False)
    sock = kube._http._idle[0].sock
    assert sock is not None
    socket.socket.shutdown(sock, socket.SHUT_WR)
    assert kube.post("/ok", {"x": 1})["conn"] == 2
    assert [(m, p, c) for m, p, c, *_ in server.seen] == [("GET", "/ok", 1), ("POST", "/ok", 2)]


def test_a_request_the_server_read_but_never_answered_is_not_sent_again_unless_a_get(
        kube: Kube, server: Server) -> None:
    """A POST whose answer never came may have been done: the caller is told, it is not sent twice. A GET
    on a kept-alive connection is sent once more, on a new connection, and then the caller is told."""
    for method in ("POST", "GET"):
        kube.get("/ok")  # a kept-alive connection to reuse
        with pytest.raises(KubeUnavailable, match=f"{method} /drop"):
            kube.request(method, "/drop", body={"x": 1} if method == "POST" else None)
    assert [(m, p) for m, p, *_ in server.seen if p == "/drop"] == [("POST", "/drop"), ("GET", "/drop"),
                                                                   ("GET", "/drop")]


def test_idle_connections_are_kept_up_to_the_pool_size(kube: Kube, server: Server) -> None:
    """Six requests at once need six connections (none waits for another); the pool keeps two for later."""
    got: list[int] = []

    def call() -> None:
        got.append(kube.get("/hold")["conn"])

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(got) == [1, 2, 3, 4, 5, 6]
    assert len(kube._http._idle) == 2
    before = server.connections
    for _ in range(4):
        kube.get("/ok")
    assert server.connections == before, "later calls reuse the kept connections"


def test_a_clone_has_its_own_pool_with_the_same_credentials_and_reads_no_kubeconfig(
        kube: Kube, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet makes a clone per long-lived user (lease, node, reflector, reads ahead): each its own
    kept-alive connections and pool bound, the TLS context and settings loaded once for all."""
    from hpkctl.kube import kubeconfig as kubeconfig_mod

    def no_load(*a: Any, **kw: Any) -> Any:
        raise AssertionError("a clone parsed the kubeconfig again")

    monkeypatch.setattr(kubeconfig_mod, "load", no_load)
    assert kube.get("/ok")["conn"] == 1
    clone = kube.clone(pool_size=1)
    assert clone.get("/ok")["conn"] == 2 and kube.get("/ok")["conn"] == 1  # pools apart
    assert clone._http._tls is kube._http._tls and clone.host == kube.host
    assert len(clone._http._idle) == 1 and len(kube._http._idle) == 1
    clone.close()
    assert kube.get("/ok")["conn"] == 1 and server.seen[-2][3].get("Authorization") is None


def test_errors_are_kube_errors_with_the_status_and_unavailable_when_nobody_listens(
        kube: Kube, server: Server, pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(KubeError) as e:
        kube.put("/fail", {"x": 1})
    assert (e.value.code, e.value.reason, e.value.body["message"]) == (409, "Conflict", "it changed")
    assert kube.get("/ok")["conn"] == 1, "an error's connection, read to its end, is reused"
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    gone = Kube(kube.kubeconfig)
    with pytest.raises(KubeUnavailable, match="GET /ok"):
        gone.get("/ok", timeout=(2, 2))
    assert gone.host.endswith(f":{port}")


def test_a_quiet_watch_is_cut_at_once_and_its_connection_never_pooled(kube: Kube, server: Server) -> None:
    kube.get("/ok")  # one idle connection in the pool: the watch takes it
    ws = WatchStream(kube, "/watch", [("watch", "true")], read_timeout=60)
    got: list[dict[str, Any]] = []
    done = threading.Event()

    def read() -> None:
        for ev in ws.events():
            got.append(ev)
        done.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    wait_for("the watch's first event", lambda: got and server.open_watches == 1, timeout=10)
    ws.cancel()
    assert done.wait(10), "cancel() ended the quiet watch (its read timeout is 60 s)"
    assert got == [{"type": "ADDED", "object": {"metadata": {"name": "a"}}}]
    assert kube._http._idle == [], "the watch's connection was closed, not pooled"
    assert kube.get("/ok")["conn"] == 2


def _syn_sent(port: int) -> int:
    """Connections to 127.0.0.1:``port`` still connecting (SYN_SENT in /proc/net/tcp)."""
    remote = f"0100007F:{port:04X}"
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return sum(1 for r in rows if r[2] == remote and r[3] == "02")


@pytest.mark.parametrize("stuck", ["never-accepts", "no-tls-answer", "no-headers"])
def test_a_watch_is_cut_at_once_whatever_a_stuck_server_leaves_it_doing(
        pki: Pki, tmp_path: Path, stuck: str) -> None:
    """Against a server that never accepts (the watch connecting), accepts and never answers (in the
    TLS handshake), or reads the request and never answers (waiting for the headers), cancel() ends the
    watch at once, though its connect and read timeouts are 60 s each; events() ends without an error."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []
    at = threading.Event()  # the stuck server has the watch where the case wants it
    if stuck == "never-accepts":  # fill the accept queue: later connections stay in SYN_SENT
        for _ in range(16):  # the queue holds one or two; loopback's handshake is done when connect_ex returns
            if _syn_sent(port):
                break
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            held.append(filler)
        filling = wait_for("a connection left in SYN_SENT (the accept queue full)", lambda: _syn_sent(port), timeout=10)
    else:
        cert, key = pki.leaf("stuck-server", cn="server", server=True, sans=("127.0.0.1",))
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(cert, key)

        def accept() -> None:
            conn, _ = listener.accept()
            if stuck == "no-headers":
                conn = tls.wrap_socket(conn, server_side=True)
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(4096)
            held.append(conn)
            at.set()

        threading.Thread(target=accept, daemon=True).start()
    kube = Kube(str(kubeconfig(pki, port, tmp_path)), pool_size=2)
    ws = WatchStream(kube, "/watch", [("watch", "true")], read_timeout=60, connect_timeout=60)
    got: list[Any] = []
    done = threading.Event()

    def read() -> None:
        try:
            got.extend(ws.events())
        except Exception as e:  # noqa: BLE001 - the test says what came out
            got.append(e)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if stuck == "never-accepts":
            wait_for("the watch connecting", lambda: _syn_sent(port) > filling, timeout=10)
        else:
            assert at.wait(10), f"the stuck server ({stuck}) got the watch"
        assert not done.is_set()
        ws.cancel()
        assert done.wait(10), f"cancel() ended the watch ({stuck}; its timeouts are 60 s)"
        assert got == []
    finally:
        kube.close()
        for s in held:
            s.close()
        listener.close()


def test_a_watch_cancelled_before_it_starts_sends_nothing(kube: Kube, server: Server) -> None:
    ws = WatchStream(kube, "/watch", [("watch", "true")], read_timeout=60)
    ws.cancel()
    assert list(ws.events()) == []
    assert server.seen == [] and server.connections == 0


def test_the_kubelet_on_an_hpkctl_kubeconfig_never_imports_kubernetes(
        pki: Pki, server: Server, tmp_path: Path) -> None:
    """Importing the kubernetes package was 0.2 s of the kubelet's start-up: the daemon's imports, its
    command's logging set-up and a request on the control plane's kubeconfig load no module of it, nor
    urllib3 or pydantic (which it brings), and leave urllib3's logger alone (a fresh interpreter)."""
    path = kubeconfig(pki, server, tmp_path)
    code = ("import logging, sys, hpkctl.kubelet.daemon, hpkctl.scheduler.daemon, hpkctl.cli.controlplane\n"
            "from hpkctl.cli.cluster import _logging\n"
            "from hpkctl.kube import Kube\n"
            "_logging(True)\n"
            f"print(Kube({str(path)!r}).get('/ok')['path'])\n"
            "print(sorted({m.split('.')[0] for m in sys.modules}\n"
            "             & {'kubernetes', 'urllib3', 'requests', 'pydantic', 'pydantic_core'}))\n"
            "print(sorted(n for n in logging.Logger.manager.loggerDict if n.startswith('urllib3')))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["/ok", "[]", "[]"]


def test_the_server_certificate_is_checked_for_tls_server_name_or_not_at_all_when_told(
        pki: Pki, tmp_path: Path) -> None:
    """A server whose certificate names only kubernetes.default, reached at 127.0.0.1: refused as is,
    accepted with ``tls-server-name: kubernetes.default`` (the name checked and sent as SNI), and with
    ``insecure-skip-tls-verify`` (and no CA: kubectl refuses both at once)."""
    for named in serve(pki, "kubernetes.default"):
        plain = kubeconfig(pki, named, tmp_path)
        with pytest.raises(KubeUnavailable, match="GET /ok: .*(certificate|hostname|IP address)"):
            Kube(str(plain)).get("/ok")
        doc = yaml.safe_load(plain.read_text())
        cluster = doc["clusters"][0]["cluster"]
        for key, value in (("tls-server-name", "kubernetes.default"), ("insecure-skip-tls-verify", True)):
            told = tmp_path / f"{key}.kubeconfig"
            base = {k: v for k, v in cluster.items() if not (key.startswith("insecure") and k.startswith("certificate"))}
            told.write_text(yaml.safe_dump({**doc, "clusters": [{"name": "hpk", "cluster": {**base, key: value}}]}))
            assert Kube(str(told)).get("/ok")["path"] == "/ok"
        assert [p for _, p, *_ in named.seen] == ["/ok", "/ok"]

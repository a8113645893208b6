"""The probe functions of a rendered script, run with bash (no Slurm): each try's message and result,
timeouts that kill the whole try, and properties: exec words, HTTP paths and header values reach the
probe byte for byte. The script is sourced without its last line (``hpk_main "$@"``); the container's
``<function>_exec`` runs the words on this machine, and a test server records the raw request."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpkctl.pod import render_pod, write_pod_dir
from tests.support.pods import make_profile, pod_doc
from tests.support.waiting import wait_for, wait_rewritten

HARNESS = r'''
source <(head -n -1 "$1/job/job.sh")
mkdir -p "$HPK_STATUS" "$HPK_LOGS" "$HPK_POD_DIR/run"
HPK_POD_IP=127.0.0.1
hpk_main_0_exec() { "$@"; }
'''
# Each probe of the container tried once: "<kind> <rc> <message>" per line.
ONCE = HARNESS + r'''
hpk_probes() {
  local name=$1 fn=$2 cpid=$3 kind try='' wd='' msg
  shift 3
  for kind; do
    local ref="probe_$kind[@]"
    local -a probe=("${!ref}")  # as hpk_probe_loop does (bash 4.2 has no namerefs)
    hpk_probe_try "${probe[2]}" "${probe[@]:6}"
    printf '%s %s %s\n' "$kind" "$?" "$msg"
  done
}
hpk_main_0_probes 0
'''


def _pod_dir(tmp_path: Path, **probes: Any) -> Path:
    c = {"name": "app", "image": "busybox:1.36", "ports": [{"name": "web", "containerPort": 1}], **probes}
    profile = make_profile(tmp_path)
    return write_pod_dir(render_pod(pod_doc({"containers": [c]}), profile))


def _once(tmp_path: Path, **probes: Any) -> list[tuple[str, int, str]]:
    root = _pod_dir(tmp_path, **probes)
    r = subprocess.run(["bash", "-c", ONCE, "harness", str(root)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [(ln.split(" ", 2)[0], int(ln.split(" ", 2)[1]), ln.split(" ", 2)[2]) for ln in r.stdout.splitlines()]


class Server:
    """A TCP server on 127.0.0.1 answering every request with ``status``, recording the raw requests."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                conn.settimeout(5)
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data)
                conn.sendall(f"HTTP/1.1 {self.status} X\r\nContent-Length: 0\r\n\r\n".encode())

    def close(self) -> None:
        self.sock.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_http_probe_sends_the_kubelets_request_and_judges_the_status(tmp_path: Path) -> None:
    ok, bad = Server(204), Server(500)
    try:
        results = _once(tmp_path, readinessProbe={"httpGet": {"port": ok.port, "path": "/ready?x=1"}},
                        livenessProbe={"httpGet": {"port": bad.port, "path": "healthz", "httpHeaders": [
                            {"name": "Host", "value": "example.org"}, {"name": "X-A", "value": " a  b "}]}})
    finally:
        ok.close()
        bad.close()
    assert results == [("liveness", 1, "HTTP probe failed with statuscode: 500"), ("readiness", 0, "")]
    assert ok.requests == [(f"GET /ready?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{ok.port}\r\nUser-Agent: kube-probe/1.36\r\n"
                            "Accept: */*\r\nConnection: close\r\n\r\n").encode()]
    assert bad.requests == [b"GET /healthz HTTP/1.1\r\nHost: example.org\r\nX-A:  a  b \r\n"
                            b"User-Agent: kube-probe/1.36\r\nAccept: */*\r\nConnection: close\r\n\r\n"]


def test_tcp_and_connection_refused_messages(tmp_path: Path) -> None:
    srv, closed = Server(), _closed_port()
    try:
        # the probe that succeeds gets time to (timeoutSeconds 1 ended it as 'i/o timeout' once, on a busy
        # 2-core machine in a full run); the refused ones end at once, whatever their timeout
        results = _once(tmp_path, livenessProbe={"tcpSocket": {"port": srv.port}, "timeoutSeconds": 10},
                        readinessProbe={"httpGet": {"port": closed, "path": "/x"}},
                        startupProbe={"tcpSocket": {"port": closed}})
    finally:
        srv.close()
    assert results == [
        ("startup", 1, f"dial tcp 127.0.0.1:{closed}: connect: connection refused"),
        ("liveness", 0, ""),
        ("readiness", 1, f'Get "http://127.0.0.1:{closed}/x": dial tcp 127.0.0.1:{closed}: connect: connection refused'),
    ]


def test_exec_probe_output_is_the_message_and_a_timeout_kills_the_try(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    results = _once(tmp_path, livenessProbe={"exec": {"command": ["sh", "-c", "echo not healthy; exit 3"]}},
                    readinessProbe={"exec": {"command": ["sh", "-c", f"sleep 3; touch {marker}"]},
                                    "timeoutSeconds": 1})
    assert results == [("liveness", 1, "not healthy"),
                       ("readiness", 1, f'command "sh -c sleep 3; touch {marker}" timed out')]

    def try_left() -> list[str]:  # processes of the timed-out try still there (their words name the marker)
        return [p.name for p in Path("/proc").glob("[0-9]*") if _cmdline_has(p, str(marker))]

    wait_for("the timed-out try's processes to be gone", lambda: not try_left() or None, timeout=10)
    assert not marker.exists()  # the whole try (sh and its sleep) was killed


def _cmdline_has(proc: Path, word: str) -> bool:
    try:
        return word.encode() in (proc / "cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return False


def test_https_without_a_server_fails_with_a_message(tmp_path: Path) -> None:
    closed = _closed_port()
    [(kind, rc, msg)] = _once(tmp_path, readinessProbe={"httpGet": {"port": closed, "scheme": "HTTPS"}})
    assert rc == 1 and msg.startswith("Get \"https://127.0.0.1:") or "malformed" in msg or "HTTPS" in msg


# --- the timing loop: startup first, then liveness and readiness; kill on failure --------------------------
LOOP = HARNESS + r'''
hpk_stop_container() { kill -TERM "$3"; while kill -0 "$3" 2>/dev/null; do sleep 0.1; done; }
sleep 60 &
cpid=$!
hpk_main_0_probes "$cpid" &
probes=$!
wait "$cpid"
echo "container ended $?"
sleep 0.5
kill -TERM "$probes" 2>/dev/null
wait "$probes"
'''


def _loop(tmp_path: Path, gate: Path, **probes: Any) -> tuple[subprocess.Popen[str], Path]:
    root = _pod_dir(tmp_path, **probes)
    proc = subprocess.Popen(["bash", "-c", LOOP, "harness", str(root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return proc, root


def _kill(proc: subprocess.Popen[str]) -> None:
    """Every process of the harness (probe loops hold its output open)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate(timeout=10)


def _read(root: Path, name: str) -> str | None:
    p = root / "status" / name
    return p.read_text().strip() if p.exists() else None


def test_startup_gates_readiness_and_a_liveness_failure_stops_the_container(tmp_path: Path) -> None:
    started, healthy = tmp_path / "started", tmp_path / "healthy"
    healthy.touch()
    fast = {"periodSeconds": 1, "failureThreshold": 2}
    proc, root = _loop(tmp_path, started,
                       startupProbe={"exec": {"command": ["test", "-e", str(started)]}, "failureThreshold": 30,
                                     "periodSeconds": 1},
                       livenessProbe={"exec": {"command": ["sh", "-c", f"test -e {healthy} || {{ echo gone; exit 1; }}"]}, **fast},
                       readinessProbe={"exec": {"command": ["true"]}, "periodSeconds": 1})
    try:
        tries = root / "run" / "app.startup.probe"  # rewritten as each try starts
        wait_rewritten("the startup probe's try", tries, timeout=20)
        assert _read(root, "app.started-probe") is None and _read(root, "app.ready") is None
        started.touch()
        wait_for("app.ready 1", lambda: _read(root, "app.ready") == "1", timeout=20)
        assert _read(root, "app.started-probe") is not None
        healthy.unlink()
        out, err = proc.communicate(timeout=30)
    finally:
        _kill(proc)
    assert "container ended 143" in out, (out, err)
    assert _read(root, "app.probe-kill") == "Liveness probe failed: gone"
    assert _read(root, "app.ready") == "0"
    log = (root / "logs" / "app.probes.log").read_text().splitlines()
    assert log[-3].endswith("Unhealthy: Liveness probe failed: gone")
    assert log[-1].endswith("Killing: Container app failed liveness probe, will be restarted")
    assert any("Startup probe failed: " in ln for ln in log)


def test_a_failing_startup_probe_stops_the_container(tmp_path: Path) -> None:
    proc, root = _loop(tmp_path, tmp_path, startupProbe={
        "exec": {"command": ["sh", "-c", "echo not yet >&2; exit 1"]}, "periodSeconds": 1, "failureThreshold": 2},
        readinessProbe={"exec": {"command": ["true"]}, "periodSeconds": 1})
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        _kill(proc)
    assert "container ended 143" in out
    assert _read(root, "app.probe-kill") == "Startup probe failed: not yet"
    assert _read(root, "app.ready") is None and _read(root, "app.started-probe") is None


def test_readiness_falls_back_after_failure_threshold(tmp_path: Path) -> None:
    flag = tmp_path / "ok"
    flag.touch()
    proc, root = _loop(tmp_path, flag, readinessProbe={"exec": {"command": ["test", "-e", str(flag)]},
                                                       "periodSeconds": 1, "failureThreshold": 2, "successThreshold": 2})
    try:
        wait_for("app.ready 1", lambda: _read(root, "app.ready") == "1", timeout=20)
        flag.unlink()
        wait_for("app.ready 0", lambda: _read(root, "app.ready") == "0", timeout=20)
        flag.touch()
        wait_for("app.ready 1", lambda: _read(root, "app.ready") == "1", timeout=20)
    finally:
        _kill(proc)


# --- properties: user strings reach the probe byte for byte ------------------------------------------------
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=30)
HEADER_VALUE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0\r\n"), max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(TEXT, min_size=1, max_size=4))
def test_exec_words_reach_the_command_byte_for_byte(tmp_path_factory: pytest.TempPathFactory, words: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("exec")
    out = tmp / "argv"
    cmd = ["python3", "-c", "import sys; open(sys.argv[1], 'wb').write(b'\\0'.join(a.encode('utf-8', "
           "'surrogateescape') for a in sys.argv[2:]))", str(out), *words]
    # the words are the point, not the 1 s default timeout, which a python3 start on a loaded machine exceeds
    [(_, rc, _)] = _once(tmp, livenessProbe={"exec": {"command": cmd}, "timeoutSeconds": 60})
    assert rc == 0
    assert out.read_bytes() == b"\0".join(w.encode() for w in words)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30),
       headers=st.lists(st.tuples(st.from_regex(r"X-[-A-Za-z0-9]{1,10}", fullmatch=True), HEADER_VALUE), max_size=3))
def test_http_paths_and_headers_reach_the_server_byte_for_byte(tmp_path_factory: pytest.TempPathFactory, path: str,
                                                               headers: list[tuple[str, str]]) -> None:
    tmp = tmp_path_factory.mktemp("http")
    srv = Server()
    try:
        [(_, rc, msg)] = _once(tmp, readinessProbe={"httpGet": {"port": srv.port, "path": "/" + path, "httpHeaders": [
            {"name": n, "value": v} for n, v in headers]}, "timeoutSeconds": 60})
    finally:
        srv.close()
    assert rc == 0, msg
    [req] = srv.requests
    lines = req.split(b"\r\n")
    assert lines[0] == f"GET /{path} HTTP/1.1".encode()
    assert lines[2:2 + len(headers)] == [f"{n}: {v}".encode() for n, v in headers]

"""exec into a running pod through the kubelet's HTTPS API, on the real local Slurm, as user hpk.

``hpkctl run --detach`` starts the pod (host network with ``ci``, its own network namespace with
``ci-cni``); a ``KubeletServer`` runs as hpk (only a job's owner may add a step to it) over that
pod; the test speaks v5.channel.k8s.io to it with a client certificate of the cluster CA. The
command runs as a new step of the pod's job (``srun --overlap``) in the container's image, env and
mounts, and in cni mode in the pod's network namespace. The last test goes the whole way: the real
kubectl, through the Kubernetes API stand-in's WebSocket passthrough, to this server."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import select
import shutil
import ssl
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from tests.support.ci import HPK_USER
from tests.support.hpk import STANDIN, VENV_BIN, Hpk, pod, require_standin, unique
from tests.support.kubeapi import KubeApi, require_kubectl, start
from tests.support.kubelet_api import as_hpk_server
from tests.support.slurm import SINGLE_CONF, require_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.standin]

SITES = {"host": "ci", "cni": "ci-cni"}
CONTAINER = {"name": "main", "image": "debian:12", "env": [{"name": "GREETING", "value": "hello from the pod"}],
             "command": ["sh", "-c", "echo marker-$HOSTNAME >/tmp/marker; echo ready; exec sleep 300"]}


@dataclass
class Api:
    port: int
    ca: Path
    client: tuple[Path, Path]

    def ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(*self.client)
        return ctx

    async def exec(self, pod_name: str, command: Sequence[str], *, send: Sequence[bytes] = (), pause: float = 0,
                   **flags: str) -> tuple[bytes, bytes, dict[str, Any]]:
        """stdout, stderr and the status of one exec (``send``: messages after the stream is up)."""
        query = urlencode([("command", c) for c in command] + list(flags.items()))
        url = f"https://127.0.0.1:{self.port}/exec/default/{pod_name}/main?{query}"
        got: dict[int, bytes] = {1: b"", 2: b"", 3: b""}
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(url, ssl=self.ssl(), protocols=("v5.channel.k8s.io",)) as ws:
                assert ws.protocol == "v5.channel.k8s.io"
                first = await ws.receive(timeout=60)
                assert first.type == aiohttp.WSMsgType.BINARY and len(first.data) == 1  # the stream is up
                for data in send:
                    await ws.send_bytes(data)
                    await asyncio.sleep(pause)
                async with asyncio.timeout(120):
                    async for msg in ws:
                        if msg.type == aiohttp.WSMsgType.BINARY:
                            got[msg.data[0]] += msg.data[1:]
        await asyncio.sleep(0.1)
        return got[1], got[2], json.loads(got[3])


def _certs(workdir: Path, cluster: Path) -> tuple[Path, Path, Path, tuple[Path, Path]]:
    """The kubelet's serving certificate, key and client CA (copies hpk can read), and the API
    server's kubelet-client certificate, all from the stand-in's PKI (``cluster``)."""
    workdir.mkdir()
    served = []
    for name in ("kubelet-hpk-serving.crt", "kubelet-hpk-serving.key", "ca.crt"):
        shutil.copy(cluster / name, workdir / name)
        served.append(workdir / name)
    if os.geteuid() == 0:
        user = pwd.getpwnam(HPK_USER)
        for p in (workdir, *served):
            os.chown(p, user.pw_uid, user.pw_gid)
    client = (cluster / "apiserver-kubelet-client.crt", cluster / "apiserver-kubelet-client.key")
    return served[0], served[1], served[2], client


def _wait_running(hpk: Hpk, name: str, site: str) -> Path:
    end = time.monotonic() + 180
    while True:
        st = hpk.status(name, site)
        statuses = st["status"].get("containerStatuses") or []
        log = Path(st["podDir"]) / "logs" / "main.log"
        if statuses and "running" in statuses[0]["state"] and log.exists() and "ready" in log.read_text():
            return Path(st["podDir"])
        assert st["status"]["phase"] in ("Pending", "Running"), st
        assert time.monotonic() < end, st
        time.sleep(0.5)


@pytest.fixture(scope="module")
def hpk_module() -> Iterator[Hpk]:
    """One Hpk for the module (the conftest's is per test; one pod per mode serves every test here)."""
    require_cluster(SINGLE_CONF, 1)
    require_standin()
    d = Path(tempfile.mkdtemp(prefix="hpk-exec-", dir=os.environ.get("HPK_TEST_TMPDIR", "/tmp")))
    d.chmod(0o777)
    yield Hpk(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def kube(hpk_module: Hpk) -> Iterator[KubeApi]:
    """The Kubernetes API stand-in; its CA signs the kubelet's serving and the API server's client
    certificates, as in a cluster."""
    require_kubectl()
    api = start(hpk_module.workdir / "kube")
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="module", params=sorted(SITES))
def running(request: pytest.FixtureRequest, hpk_module: Hpk, kube: KubeApi) -> Iterator[tuple[str, str, Api]]:
    """(network mode, pod name, the API over it): a debian pod running under hpkctl, and the server."""
    mode, hpk = request.param, hpk_module
    site, name = SITES[mode], unique(f"exec-{mode}")
    r = hpk.run(pod(name, [CONTAINER]), site=site, extra=("--detach",))
    assert r.rc == 0, r.output
    server = None
    try:
        pod_dir = _wait_running(hpk, name, site)
        cert, key, ca, client = _certs(hpk.workdir / mode, kube.pki)
        server = as_hpk_server(cert=cert, key=key, ca=ca, slurm_conf=SINGLE_CONF, pod_dirs=[pod_dir],
                               path=f"{STANDIN}:{VENV_BIN}:/usr/bin:/bin")
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 60)
        line = server.stdout.readline() if ready else ""
        assert line.strip().isdigit(), f"the server did not start: {line}{server.stderr.read() if server.stderr else ''}"
        yield mode, name, Api(int(line), ca, client)
    finally:
        if server is not None:
            server.communicate(input="", timeout=30)  # closing its stdin stops it
        hpk.hpkctl("delete", name, "--site", site)


def _interfaces(text: str) -> set[str]:
    return {ln.split(":")[0].strip() for ln in text.splitlines()[2:] if ":" in ln}


def test_exec_runs_in_the_container_and_returns_its_exit_code(running: tuple[str, str, Api]) -> None:
    mode, name, api = running
    script = 'echo $HOSTNAME; cat /etc/os-release; cat /tmp/marker; echo "$GREETING"; echo oops >&2; exit 3'
    out, err, status = asyncio.run(api.exec(name, ["sh", "-c", script], output="1", error="1"))
    lines = out.decode().splitlines()
    assert lines[0] == name  # the pod's hostname
    assert 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' in lines  # the image's file
    assert f"marker-{name}" in lines  # the container's own /tmp, written by its main process
    assert "hello from the pod" in lines  # its environment
    assert err == b"oops\n"  # the command's stderr, nothing of srun's
    assert (status["status"], status["reason"], status["details"]["causes"]) == (
        "Failure", "NonZeroExitCode", [{"reason": "ExitCode", "message": "3"}])
    out, _, status = asyncio.run(api.exec(name, ["cat", "/proc/net/dev"], output="1"))
    assert status["status"] == "Success"
    if mode == "cni":
        assert _interfaces(out.decode()) == {"lo"}  # the pod's own network namespace
    else:
        assert _interfaces(out.decode()) == _interfaces(Path("/proc/net/dev").read_text())  # the node's


def test_exec_passes_stdin_until_it_is_closed(running: tuple[str, str, Api]) -> None:
    _, name, api = running
    out, err, status = asyncio.run(api.exec(name, ["cat"], send=[b"\x00first line\n", b"\x00second", b"\xff\x00"],
                                            input="1", output="1", error="1"))
    assert (out, err, status) == (b"first line\nsecond", b"", {"metadata": {}, "status": "Success"})


def test_exec_with_a_terminal(running: tuple[str, str, Api]) -> None:
    _, name, api = running
    resize = b"\x04" + json.dumps({"Width": 91, "Height": 27}).encode()
    # a resize reaches the terminal on its own path (srun is told by SIGWINCH), as a real kubelet's resize
    # channel is apart from stdin: the shell waits for it, up to 30 s, before it prints the size
    wait_size = 'i=0; while [ "$(stty size)" != "27 91" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done'
    script = f"read x; tty; {wait_size}; stty size; echo got $x; exit 5"
    out, _, status = asyncio.run(api.exec(name, ["sh", "-c", script],
                                          send=[resize, b"\x00go\r"], pause=1.0, input="1", output="1", tty="1"))
    text = out.decode()
    # a terminal: the host's pty is not in the container's own minimal /dev (--contain), where
    # Apptainer's staged /dev (like bubblewrap's) gives the controlling terminal as /dev/console
    assert "not a tty" not in text and ("/dev/pts/" in text or "/dev/console" in text), text
    assert "27 91" in text and "got go" in text, text
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "5"}]


def _node(port: int) -> dict[str, Any]:
    """The Node a kubelet registers, as far as the API server's exec and log proxies read it."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "hpk"}, "spec": {},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                       "declaredFeatures": ["ExtendWebSocketsToKubelet"]}}


def test_kubectl_exec_and_logs_through_the_api_server(running: tuple[str, str, Api], kube: KubeApi) -> None:
    mode, name, api = running
    kube.delete("/api/v1/nodes/hpk")  # the other network mode's server had another port
    code, out = kube.post("/api/v1/nodes", _node(api.port))
    assert code == 201, out
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "hpk", "containers": [{"name": "main", "image": "debian:12"}]}}
    code, out = kube.post("/api/v1/namespaces/default/pods", body)
    assert code == 201, out
    r = kube.kubectl("exec", name, "--", "sh", "-c", 'echo "$HOSTNAME $GREETING"; exit 3', check=False)
    assert (r.returncode, r.stdout) == (3, f"{name} hello from the pod\n"), r.stderr
    assert "command terminated with exit code 3" in r.stderr
    r = kube.kubectl("exec", "-i", name, "--", "sh", "-c", "cat; echo done", input="through kubectl\n")
    assert r.stdout == "through kubectl\ndone\n"
    r = kube.kubectl("logs", name, "--tail=1")
    assert r.stdout == "ready\n"

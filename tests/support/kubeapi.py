"""Running the Kubernetes API stand-in (ci/standin/kube-apiserver) for tests: start it on a free
port in a temporary state directory as the current user, talk to it with raw HTTPS (the admin
client certificate), the real kubectl from ci/kube-tools, or the official Python client."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import requests

from tests.support import lanes
from tests.support.ci import REPO, missing

KUBE_APISERVER = REPO / "ci" / "standin" / "kube-apiserver"
TOOLS = Path(os.environ.get("HPK_TOOLS", "/opt/hpk-tools")) / "bin"
KUBECTL = TOOLS / "kubectl"
HELM = TOOLS / "helm"


def require_modules() -> None:
    """The stand-in runs on the venv: aiohttp, cel-python, cryptography, kubernetes-validate (dev extras)."""
    lanes.need("standin")
    try:
        import aiohttp  # noqa: F401
        import celpy  # noqa: F401
        import cryptography  # noqa: F401
        import kubernetes_validate  # noqa: F401
    except ImportError as e:
        missing(f"the Kubernetes API stand-in needs {e.name}", fix="pip install -e '.[dev]' (ci/setup does)")


def require_kubectl() -> Path:
    lanes.need("standin")
    if not os.access(KUBECTL, os.X_OK):
        missing(f"{KUBECTL} is missing", fix="run ci/setup (ci/kube-tools) as root")
    return KUBECTL


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listen_port() -> int:
    """A free port for a server that binds it later and again after restarts (a test cluster's
    profile): outside the kernel's ephemeral range (``ip_local_port_range``), which :func:`free_port`
    draws from and every outgoing connection on the machine takes its source port from. Such a port,
    free when picked, was taken minutes later by some client's connection ("coredns: TCP port 55949 ...
    is in use on this node", seen once in a loaded run). Random below that range, checked free on all
    addresses (the API server binds 0.0.0.0)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    while True:
        port = random.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port


@dataclass
class KubeApi:
    state: Path
    port: int
    args: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None
    session: requests.Session = field(default_factory=requests.Session)

    # ------------------------------------------------------------------ process
    def start(self) -> "KubeApi":
        lanes.need("standin")
        (self.state / "port").unlink(missing_ok=True)
        log = open(self.state.parent / f"{self.state.name}.log", "ab")
        self.proc = subprocess.Popen([str(KUBE_APISERVER), "--state-dir", str(self.state), "--port", str(self.port),
                                      *self.args], stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kube-apiserver stand-in exited {self.proc.returncode}: "
                                   + (self.state.parent / f"{self.state.name}.log").read_text()[-2000:])
            if (self.state / "port").exists():
                break
            time.sleep(0.05)
        try:
            if not (self.state / "port").exists():
                raise RuntimeError("kube-apiserver stand-in did not come up within 30 s")
            self.session = requests.Session()
            self.session.trust_env = False  # no REQUESTS_CA_BUNDLE or proxy from the environment
            self.session.verify = str(self.pki / "ca.crt")
            self.session.cert = (str(self.pki / "user-admin.crt"), str(self.pki / "user-admin.key"))
            assert self.session.get(f"{self.url}/readyz", timeout=5).text == "ok"
        except BaseException:
            self.stop(signal.SIGKILL)  # never leave a server behind a failed fixture
            raise
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.session.close()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    # ------------------------------------------------------------------ raw HTTP
    def call(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
             params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
             raw: bytes | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        h = dict(headers or {})
        if data is not None and ctype:
            h["Content-Type"] = ctype
        r = self.session.request(method, self.url + path, data=data, params=params, headers=h, timeout=30)
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return self.call("POST", path, body, **kw)

    def put(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return self.call("PUT", path, body, **kw)

    def patch(self, path: str, body: Any, kind: str = "strategic-merge-patch", **kw: Any) -> tuple[int, Any]:
        return self.call("PATCH", path, body, ctype=f"application/{kind}+json", **kw)

    def delete(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.call("DELETE", path, body, **kw)

    def watch(self, path: str, params: dict[str, str], *, count: int = 1000, seconds: float = 5) -> list[dict[str, Any]]:
        """Events of a watch until ``count`` arrived, the server closed it, or ``seconds`` passed."""
        out: list[dict[str, Any]] = []
        with self.session.get(self.url + path, params={"watch": "true", **params}, stream=True,
                              timeout=(5, seconds)) as r:
            assert r.status_code == 200, r.text
            try:
                for line in r.iter_lines():
                    if line:
                        out.append(json.loads(line))
                        if len(out) >= count:
                            break
            except requests.exceptions.ConnectionError:
                pass  # read timeout: no more events within `seconds`
        return out

    def stream(self, path: str, params: dict[str, str]) -> Iterator[dict[str, Any]]:
        with self.session.get(self.url + path, params={"watch": "true", **params}, stream=True,
                              timeout=(5, 10)) as r:
            for line in r.iter_lines():
                if line:
                    yield json.loads(line)

    # ------------------------------------------------------------------ kubectl
    def kubectl(self, *args: str, input: str | None = None, timeout: float = 30, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.state), "KUBECONFIG": str(kubeconfig or self.kubeconfig)}
        r = subprocess.run([str(KUBECTL), *args], input=input, capture_output=True, text=True, env=env,
                           timeout=timeout, check=False)
        if check:
            assert r.returncode == 0, f"kubectl {' '.join(args)}: rc={r.returncode}\n{r.stdout}{r.stderr}"
        return r


def helm(api: KubeApi, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real helm (ci/kube-tools) against the stand-in, with its caches in the state directory."""
    if not os.access(HELM, os.X_OK):
        missing(f"{HELM} is missing", fix="run ci/setup (ci/kube-tools) as root")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(api.state), "KUBECONFIG": str(api.kubeconfig)}
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)


def start(state: Path, *args: str, port: int = 0) -> KubeApi:
    require_modules()
    state.mkdir(parents=True, exist_ok=True)
    api = KubeApi(state, port or free_port(), tuple(args))
    return api.start()


def pod(name: str, *, node: str = "", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], **spec}}
    if node:
        body["spec"]["nodeName"] = node
    return body

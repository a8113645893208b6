"""A whole mini cloud for end-to-end tests: the Kubernetes API stand-in, ``hpkctl scheduler`` and
``hpkctl kubelet`` as the normal user hpk, the real local Slurm, the Apptainer stand-in.

Each cluster gets its own state directory (stand-in objects, kubeconfigs) and its own site profile
file (``extends = "ci"``, a private ``[pods] state_dir``), so kubelet records of other tests never
mix in.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.ci import HPK_USER
from tests.support.hpk import STANDIN, VENV_BIN, require_standin
from tests.support.kubeapi import KubeApi, listen_port, require_kubectl, require_modules
from tests.support.slurm import MULTI_CONF, SINGLE_CONF, node_load, pod_summary, queued_for_capacity, require_cluster
from tests.support.waiting import wait_for


def _as_hpk(argv: list[str], *, home: str) -> list[str]:
    env = {"PATH": f"{STANDIN}:{VENV_BIN}:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8",
           "https_proxy": "http://127.0.0.1:9", "no_proxy": "127.0.0.1,localhost"}
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
    return ["runuser", "-u", HPK_USER, "--", *argv] if os.geteuid() == 0 else argv


def _group_below_runuser(leader: int) -> list[int]:
    """The processes of ``leader``'s process group (a ``start_new_session`` child), without runuser
    when the tests run as root: runuser, signalled itself, sleeps 2 s before it SIGKILLs its child
    (util-linux su's "Session terminated, killing shell... killed"), which cost every stop 2 s."""
    if os.geteuid() != 0:
        return [leader]  # no runuser: env exec-ed the daemon, the leader
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pgrp = int(stat.read_text().rsplit(")", 1)[1].split()[2])  # after "(comm)": state ppid pgrp
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if pgrp == leader and int(stat.parent.name) != leader:
            members.append(int(stat.parent.name))
    return members


class Cluster:
    def __init__(self, root: Path, *, profile_extra: str = "", base: str = "ci") -> None:
        self.root = root
        self.api = KubeApi(root / "api", listen_port(), ("--kubeconfig-owner", HPK_USER))
        self.profile = root / "site.toml"
        self.profile.write_text(f'extends = "{base}"\n\n[pods]\nstate_dir = "{root / "hpk-state"}"\n'
                                f'restart_backoff = 1\n\n[kubelet]\nslurm_poll = 1.0\nstatus_audit = 2.0\nkeep_pod_dirs = 0\nauthz_denied_ttl = 1.0\n'
                                f'{profile_extra}')
        self.profile.chmod(0o644)
        state = root / "hpk-state"
        state.mkdir()
        if os.geteuid() == 0:
            shutil.chown(state, HPK_USER, HPK_USER)
        self.home = os.path.expanduser(f"~{HPK_USER}")
        self.kubelet: subprocess.Popen[bytes] | None = None
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.controllers: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ processes
    def start(self, *, scheduler: bool = True) -> "Cluster":
        require_modules()
        require_kubectl()
        (self.root / "api").mkdir(exist_ok=True)
        self.api.start()
        if scheduler:
            self.start_scheduler()
        self.start_kubelet()
        return self

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")
        return subprocess.Popen(_as_hpk([str(VENV_BIN / "hpkctl"), *args], home=self.home), stdout=log,
                                stderr=log, start_new_session=True)

    def start_kubelet(self) -> None:
        self.kubelet = self._spawn("kubelet", "kubelet", "--site", str(self.profile), "--kubeconfig",
                                   str(self.api.state / "kubelet.kubeconfig"), "--port", "0",
                                   "--address", "127.0.0.1")
        wait_for("the node hpk to be Ready", self.node_ready, timeout=30)

    def start_controllers(self) -> None:
        """The kube-controller-manager stand-in with the admin credential, as ci/kube-up starts it."""
        log = open(self.root / "controllers.log", "ab")
        self.controllers = subprocess.Popen(
            [str(STANDIN / "kube-controller-manager"), "--kubeconfig", str(self.api.kubeconfig),
             "--bind-address", "127.0.0.1", "--secure-port", str(listen_port())],
            stdout=log, stderr=log, start_new_session=True, env={**os.environ, "HPK_VENV": str(VENV_BIN.parent)})

    def start_scheduler(self) -> None:
        self.scheduler = self._spawn("scheduler", "scheduler", "--site", str(self.profile), "--kubeconfig",
                                     str(self.api.state / "scheduler.kubeconfig"))

    def node_ready(self) -> bool:
        if self.kubelet is not None and self.kubelet.poll() is not None:
            raise RuntimeError(f"the kubelet exited {self.kubelet.returncode}:\n{self.log('kubelet')[-3000:]}")
        code, node = self.api.get("/api/v1/nodes/hpk")
        return code == 200 and any(c["type"] == "Ready" and c["status"] == "True"
                                   for c in node.get("status", {}).get("conditions", []))

    def stop_process(self, proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> int | None:
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        for pid in _group_below_runuser(proc.pid):  # the daemon and what it started in its group
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            return proc.wait(timeout=20)  # runuser ends with its child, with the child's status
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait()

    def stop(self) -> None:
        self.stop_process(self.controllers)
        self.stop_process(self.kubelet)
        self.stop_process(self.scheduler)
        self.api.stop()

    def log(self, name: str) -> str:
        p = self.root / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def assert_kubelet_never_refused(self) -> None:
        """No request of the kubelet's credential was refused by the stand-in's Node authorizer or
        NodeRestriction (ci/standin/kubeapi/nodeauth.py) while the module ran: what the kubelet does
        is what a real control plane lets a node do."""
        refused = [line for line in self.log("api").splitlines()
                   if "forbidden for system:node:" in line]
        assert not refused, "the kubelet made requests a real API server refuses:\n" + "\n".join(refused[:20])

    # ------------------------------------------------------------------ API helpers
    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.api.kubectl(*args, **kw)

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        code, body = self.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return body if code == 200 else None

    def create(self, pod: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        code, body = self.api.post(f"/api/v1/namespaces/{namespace}/pods", pod)
        assert code == 201, body
        return dict(body)

    def phase(self, name: str, namespace: str = "default") -> str:
        p = self.pod(name, namespace)
        return p["status"].get("phase", "") if p else ""

    def wait_phase(self, name: str, *phases: str, timeout: float = 90, namespace: str = "default") -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            p = self.pod(name, namespace)
            return p if p and p.get("status", {}).get("phase") in phases else None
        try:
            return wait_for(f"pod {name} to be {'/'.join(phases)}", probe, timeout=timeout,
                            queued=lambda: queued_for_capacity(self.job_id(name, namespace)))
        except AssertionError:
            pod = self.pod(name, namespace)
            raise AssertionError(f"pod {name} is not {phases}: {pod_summary(pod)}\n{node_load()}\n--- pod: {pod}\n"
                                 f"--- kubelet log:\n{self.log('kubelet')[-4000:]}") from None

    def events(self, name: str, namespace: str = "default") -> list[dict[str, Any]]:
        code, body = self.api.get(f"/api/v1/namespaces/{namespace}/events",
                                  params={"fieldSelector": f"involvedObject.name={name}"})
        assert code == 200, body
        return list(body["items"])

    def job_id(self, name: str, namespace: str = "default") -> str:
        p = self.pod(name, namespace) or {}
        return str((p.get("metadata", {}).get("annotations") or {}).get("hpk.io/slurm-job-id", ""))


def make_root() -> Path:
    base = os.environ.get("HPK_TEST_TMPDIR", "/tmp")
    root = Path(tempfile.mkdtemp(prefix="hpk-cluster-", dir=base))
    root.chmod(0o755)
    return root


def remove_root(root: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    else:
        shutil.rmtree(root, ignore_errors=True)


def running_cluster(profile_extra: Callable[[Path], str] | None = None, *,
                    controllers: bool = False, multi: bool = False) -> Iterator[Cluster]:
    """A test module's mini cloud on the single-node Slurm: started, handed out, then checked that
    the kubelet was never refused by the API's Node authorizer, stopped and removed.
    ``profile_extra(root)``: more site profile text, which may name paths under the cluster's root.
    ``controllers``: the kube-controller-manager stand-in runs too (Jobs, Deployments... make pods).
    ``multi``: the kubelet's pods go to the 3-node Slurm (its profile extends ``ci-multi``)."""
    require_cluster(MULTI_CONF if multi else SINGLE_CONF, 2 if multi else 1)
    require_standin()
    root = make_root()
    c = Cluster(root, profile_extra=profile_extra(root) if profile_extra else "", base="ci-multi" if multi else "ci")
    try:
        c.start()
        if controllers:
            c.start_controllers()
        yield c
        c.assert_kubelet_never_refused()
    finally:
        c.stop()
        remove_root(root)

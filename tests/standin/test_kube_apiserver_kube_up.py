"""ci/kube-up and ci/kube-down: idempotent start on loopback, the admin kubeconfig as the last
line and readable by the normal user, kubectl working as that user, stop by pid file."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.ci import HPK_USER, REPO, missing
from tests.support.kubeapi import KUBECTL, free_port, require_kubectl, require_modules

pytestmark = pytest.mark.standin


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        missing("ci/kube-up must run as root", fix="run the tests as root, as CI does")
    try:
        pwd.getpwnam(HPK_USER)
    except KeyError:
        missing(f"user {HPK_USER} does not exist")
    require_modules()
    require_kubectl()
    d = Path(tempfile.mkdtemp(prefix="kube-up-test-"))
    d.chmod(0o755)
    e = {**os.environ, "KUBE_STATE": str(d / "state"), "KUBE_RUN": str(d / "run"),
         "KUBE_LOG": str(d / "kube-apiserver.log"), "KUBE_PORT": str(free_port())}
    try:
        yield e
    finally:
        subprocess.run([str(REPO / "ci" / "kube-down"), "--purge"], env=e, capture_output=True, timeout=30)
        shutil.rmtree(d, ignore_errors=True)


def test_kube_up_is_idempotent_and_kube_down_stops_it(env: dict[str, str]) -> None:
    up = subprocess.run([str(REPO / "ci" / "kube-up")], env=env, capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    kubeconfig = up.stdout.splitlines()[-1]
    assert kubeconfig == f"{env['KUBE_STATE']}/admin.kubeconfig"
    assert oct(os.stat(kubeconfig).st_mode & 0o777) == "0o600"
    pid = Path(env["KUBE_RUN"], "kube-apiserver.pid").read_text().strip()
    r = subprocess.run(["runuser", "-u", HPK_USER, "--", "env", f"KUBECONFIG={kubeconfig}", "HOME=/tmp",
                        str(KUBECTL), "get", "namespace", "kube-node-lease", "-o", "name"],
                       capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == "namespace/kube-node-lease", r.stderr
    again = subprocess.run([str(REPO / "ci" / "kube-up")], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == kubeconfig
    assert Path(env["KUBE_RUN"], "kube-apiserver.pid").read_text().strip() == pid  # left alone
    down = subprocess.run([str(REPO / "ci" / "kube-down")], env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and f"stopped pid {pid}" in down.stdout
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_kube_up_runs_the_controller_manager(env: dict[str, str]) -> None:
    """ci/kube-up starts the kube-controller-manager stand-in next to the API: a ReplicaSet gets its pods
    (no kubelet here: they stay Pending); ci/kube-down stops it by its pid file."""
    up = subprocess.run([str(REPO / "ci" / "kube-up")], env=env, capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    kubeconfig = up.stdout.splitlines()[-1]
    pid = Path(env["KUBE_RUN"], "kube-controller-manager.pid").read_text().strip()
    kenv = {"KUBECONFIG": kubeconfig, "HOME": env["KUBE_STATE"], "PATH": "/usr/bin:/bin"}
    rs = ("apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: two}\nspec:\n  replicas: 2\n"
          "  selector: {matchLabels: {app: two}}\n  template:\n    metadata: {labels: {app: two}}\n"
          "    spec: {containers: [{name: c, image: busybox}]}\n")
    subprocess.run([str(KUBECTL), "apply", "-f", "-"], input=rs, env=kenv, capture_output=True, text=True,
                   timeout=30, check=True)
    deadline = time.monotonic() + 30
    names: list[str] = []
    while time.monotonic() < deadline and len(names) != 2:
        names = subprocess.run([str(KUBECTL), "get", "pods", "-l", "app=two", "-o", "name"], env=kenv,
                               capture_output=True, text=True, timeout=30).stdout.split()
        time.sleep(0.3)
    assert len(names) == 2 and all(n.startswith("pod/two-") for n in names), names
    down = subprocess.run([str(REPO / "ci" / "kube-down")], env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and f"stopped pid {pid}" in down.stdout

"""A job per pod is submitted before its projected service-account token exists (issue 23.2): the
TokenRequest is off the submit path, the kubelet writes the token file right after sbatch, and the job
script waits for it before the pod's first container. A failed TokenRequest is a FailedMount warning
and is tried again; the pod's job keeps waiting meanwhile. Fakes of the API server and Slurm; the
token request is held by a gate, never by sleeps."""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from hpkctl.kube import KubeError
from hpkctl.sites import load_site
from tests.support.kubelet_fakes import FakeKube, FakeSlurm, _pod, pod_manager
from tests.support.waiting import wait_for

TOKEN = "volumes/kube-api-access-x/token"


class TokenKube(FakeKube):
    """FakeKube that answers the ConfigMap GET and TokenRequests; a TokenRequest waits for ``gate``
    and fails with ``refuse`` while that is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.refuse: KubeError | None = None
        self.tokens = 0

    def get(self, path: str, **kw: Any) -> Any:
        self.calls.append(("GET", path, None))
        return {"data": {"ca.crt": "CA"}} if path.endswith("/kube-root-ca.crt") else {"items": []}

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        if not path.endswith("/token"):
            return super().post(path, body, **kw)
        assert self.gate.wait(30), "the test never opened the gate"
        self.calls.append(("POST", path, body))
        if self.refuse is not None:
            raise self.refuse
        self.tokens += 1
        return {"status": {"token": f"secret-token-{self.tokens}"}}


def _written(path: Path) -> bool:
    """What the job's hpk_wait_token waits for: the file there and not empty (its first write is in
    place, made empty before the TokenRequest and filled by one write)."""
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False


def _token_pod() -> dict[str, Any]:
    pod = _pod()
    pod["spec"]["volumes"] = [{"name": "kube-api-access-x", "projected": {"defaultMode": 0o640, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "kube-api-access-x",
                                                     "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    return pod


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)})})
    kube, slurm = TokenKube(), FakeSlurm()
    m = pod_manager(tmp_path, kube, slurm, profile)
    m.load_records()
    yield m, kube, slurm, tmp_path / "pods" / "u-1"
    kube.gate.set()
    m.token_writer.close()


def test_the_job_is_submitted_while_its_token_request_is_still_unanswered(setup: Any) -> None:
    m, kube, slurm, pod_dir = setup
    m.on_event("ADDED", _token_pod())
    m.queue.drain()  # the gate is closed: a create that waited for the TokenRequest would hang here
    assert slurm.submitted == 1
    script = (pod_dir / "job" / "job.sh").read_text()
    assert f'hpk_wait_token "$HPK_POD_DIR"/{TOKEN}\n' in script
    setup = script[script.index("\nhpk_pod_setup() {"):]
    assert f'hpk_wait_token "$HPK_POD_DIR"/{TOKEN}' in setup[:setup.index("\n}")]  # before the containers start
    assert not _written(pod_dir / TOKEN)
    assert (pod_dir / "volumes/kube-api-access-x/ca.crt").read_text() == "CA"
    kube.gate.set()
    wait_for("the token written after sbatch", lambda: _written(pod_dir / TOKEN), timeout=30)
    assert (pod_dir / TOKEN).read_text() == "secret-token-1"
    assert stat.S_IMODE((pod_dir / TOKEN).stat().st_mode) == 0o640  # the projected volume's defaultMode
    assert "secret-token" not in (pod_dir / "job" / "job.sh").read_text()
    assert kube.tokens == 1
    t = m.table.get("u-1")
    wait_for("the token's renewal to be due later", lambda: t.state.token_due > 0, timeout=30)
    assert t.state.token_due != float("inf")


def test_a_failed_token_request_is_a_failed_mount_warning_and_is_tried_again(setup: Any) -> None:
    m, kube, slurm, pod_dir = setup
    kube.refuse = KubeError(403, "Forbidden", 'serviceaccounts "default" is forbidden: no relationship found')
    kube.gate.set()
    m.on_event("ADDED", _token_pod())
    m.queue.drain()
    assert slurm.submitted == 1  # the job is there, waiting for its token
    wait_for("a FailedMount warning", lambda: any(e["reason"] == "FailedMount" for e in kube.events()), timeout=30)
    ev = next(e for e in kube.events() if e["reason"] == "FailedMount")
    assert ev["type"] == "Warning"
    assert ev["message"].startswith('MountVolume.SetUp failed for volume "kube-api-access-x" : failed to fetch token:')
    assert "no relationship found" in ev["message"]
    assert not _written(pod_dir / TOKEN)
    kube.refuse = None
    # the pod is queued again after its back-off; its worker writes the token then
    wait_for("the token written by the retry", lambda: m.queue.drain() >= 0 and _written(pod_dir / TOKEN),
             timeout=60)
    assert (pod_dir / TOKEN).read_text() == "secret-token-1"
    assert slurm.submitted == 1  # never submitted twice


def test_a_kubelet_killed_before_it_wrote_the_token_writes_it_at_its_first_sync(setup: Any, tmp_path: Path) -> None:
    """Killed between sbatch and the token write (and before the job id annotation): the next kubelet
    adopts the job from its record and writes the token at the pod's first sync, so the job, waiting
    for it, goes on."""
    m, kube, slurm, pod_dir = setup
    m.on_event("ADDED", _token_pod())
    m.queue.drain()  # submitted; the TokenRequest is held by the closed gate: no token yet
    assert slurm.submitted == 1 and not _written(pod_dir / TOKEN)
    profile = m.profile
    m.token_writer.close()
    kube2 = TokenKube()
    kube2.gate.set()
    m2 = pod_manager(tmp_path, kube2, slurm, profile)  # the next kubelet: same records
    try:
        m2.load_records()
        m2.on_sync([_token_pod()])
        m2.queue.drain()
        assert (pod_dir / TOKEN).read_text() == "secret-token-1"
        assert slurm.submitted == 1  # adopted, not submitted again
    finally:
        m2.token_writer.close()

"""A volumeMount's subPath/subPathExpr stays inside its volume after expansion and after symlinks are
resolved, checked by the job before anything is created or mounted (Kubernetes' rule)."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod import render_pod, write_pod_dir
from hpkctl.pod.objects import StaticObjects
from tests.support.pods import make_stub, pod_doc, records, stub_environment


def _pod(mount: dict[str, Any], *, init: bool = False) -> dict[str, Any]:
    c = {"name": "app", "image": "b:1", "command": ["x"],
         "env": [{"name": "SUB", "valueFrom": {"secretKeyRef": {"name": "s", "key": "sub"}}}],
         "volumeMounts": [{"name": "scratch", "mountPath": "/m", **mount}]}
    return {"restartPolicy": "Never", "containers": [c], "volumes": [{"name": "scratch", "emptyDir": {}}]}


def _run(tmp: Path, spec: dict[str, Any], sub: str, *, before: Any = None) -> tuple[Path, list[dict[str, Any]], str]:
    stub = make_stub(tmp)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"},
              "data": {"sub": base64.b64encode(sub.encode()).decode()}}
    rendered = render_pod(pod_doc(spec), stub["profile"], objects=StaticObjects.of([secret]))
    root = write_pod_dir(rendered)
    if before:
        before(root)
    record = tmp / "record.jsonl"
    subprocess.run(["bash", str(root / "job" / "job.sh")], env=stub_environment(stub, record),
                   capture_output=True, timeout=60, check=False)
    return root, records(record), rendered.script


@pytest.mark.parametrize("sub", ["../../../../outside", "a/../../b", "/abs/../..", ".."])
def test_sub_path_expr_that_leaves_the_volume_fails_the_pod(tmp_path: Path, sub: str) -> None:
    root, runs, script = _run(tmp_path, _pod({"subPathExpr": "$(SUB)"}), sub)
    assert runs == []  # the container never started
    reason, message = (root / "status" / "pod.failed").read_text().split("\n", 1)
    assert reason == "CreateContainerConfigError" and "resolves outside its volume" in message
    assert message.rstrip("\n").endswith(f" {root}/volumes/scratch")
    assert not (tmp_path / "outside").exists() and not Path("/b").exists()
    assert f"scratch/{sub}" not in script and f"/{sub}" not in script.split("# ==== hpkctl runtime")[0]


def test_a_secret_derived_sub_path_never_reaches_the_pods_status_message(tmp_path: Path) -> None:
    """Issue 20.18: the refusal became the pod's status message with the expanded subPathExpr in it,
    a Secret's value when the variable comes from one."""
    secret = "../../../s3cr3t-t0ken-value"
    root, runs, _ = _run(tmp_path, _pod({"subPathExpr": "$(SUB)"}), secret)
    assert runs == []
    failed = (root / "status" / "pod.failed").read_text()
    assert "outside its volume" in failed and "s3cr3t" not in failed


def test_sub_path_expr_inside_the_volume_is_created_and_bound(tmp_path: Path) -> None:
    root, runs, _ = _run(tmp_path, _pod({"subPathExpr": "$(SUB)"}), "x/../y/z")
    [run] = runs
    binds = [run["flags"][i + 1] for i, f in enumerate(run["flags"]) if f == "--bind"]
    [k] = [i for i, b in enumerate(binds) if b.endswith(":/m")]
    assert binds[k] == str(root / "volumes" / "scratch" / "y" / "z") + ":/m"  # the checked real path
    assert (root / "volumes" / "scratch" / "y" / "z").is_dir()


def test_the_container_inherits_no_descriptor_of_a_host_directory(tmp_path: Path) -> None:
    """A directory descriptor the job opened for the check and left open (bound as /proc/self/fd/N)
    reached the container's process through Apptainer: /proc/self/fd/N/../../.. is the host's
    file system from inside the container (shown with the stand-in)."""
    _, runs, _ = _run(tmp_path, _pod({"subPathExpr": "$(SUB)"}), "x")
    [run] = runs
    assert run["dir_fds"] == []


def test_a_symlink_in_the_volume_cannot_lead_a_sub_path_out(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()

    def plant(root: Path) -> None:  # what an earlier container could have left in the volume
        (root / "volumes" / "scratch").mkdir(parents=True, exist_ok=True)
        os.symlink(target, root / "volumes" / "scratch" / "link")

    root, runs, _ = _run(tmp_path, _pod({"subPath": "link/new"}), "unused", before=plant)
    assert runs == []
    assert (root / "status" / "pod.failed").read_text().startswith("CreateContainerConfigError\n")
    assert not (target / "new").exists()

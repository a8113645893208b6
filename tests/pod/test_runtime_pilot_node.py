"""Pilot mode: what a step learns of its node with a process (its address: ``hostname -I``; that the
memory directory's parent is this user's own 0700 directory: ``stat``) is learnt once per allocation
and node, and a pod's start does not hash the runtime (the kubelet checked it just before): the
processes of every pilot pod's start (bench/run pilot's backlog is CPU-bound on them): the later
steps of an allocation make the pod's memory directory with its other directories, in one mkdir."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod import paths, render_pod, write_pod_dir
from hpkctl.pod.status import read_pod_status
from hpkctl.sites import SiteProfile
from tests.support.pods import pod_doc, records, stub_environment

SPEC = {"restartPolicy": "Never",
        "containers": [{"name": "app", "image": "busybox:1.36", "command": ["true"]}]}


def _pilot(stub_env: dict[str, Any]) -> SiteProfile:
    profile: SiteProfile = stub_env["profile"]
    shm = stub_env["tmp"] / "shm"
    shm.mkdir(exist_ok=True)
    return profile.model_copy(update={"pilot": profile.pilot.model_copy(update={"enabled": True}),
                                      "pods": profile.pods.model_copy(update={"memory_dir": str(shm)})})


def _step(stub_env: dict[str, Any], n: int, *, job: str = "77", node: str = "n1") -> tuple[Path, list[str]]:
    """Pod ``n`` of the pilot profile run as step of allocation ``job`` on ``node`` (the variables
    srun sets), under strace: its pod directory and the programs its script ran (the container's left out)."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is not installed (apt-get install strace)")
    rendered = render_pod(pod_doc(SPEC, name=f"p{n}", uid=f"00000000-0000-0000-0000-{n:012d}"), _pilot(stub_env))
    root = write_pod_dir(rendered)
    for sif in re.findall(r"^  hpk_image (\S+) ", rendered.script, re.M):  # cached: no pull on the way
        Path(sif).parent.mkdir(parents=True, exist_ok=True)
        Path(sif).write_text("sif")
    trace = stub_env["tmp"] / f"trace.{n}"
    env = stub_environment(stub_env, stub_env["tmp"] / "record.jsonl", SLURM_JOB_ID=job, SLURM_STEP_ID=str(n),
                           SLURMD_NODENAME=node)
    r = subprocess.run([strace, "-f", "-qq", "-e", "trace=execve", "-o", str(trace), "bash",
                        str(root / "job" / "job.sh")], env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert (root / "status" / "pod.done").read_text() == "0\n"
    ran = [m.group(1) for m in re.finditer(r'execve\("[^"]*/([^"/]+)"', trace.read_text())]
    return root, ran[:ran.index("setsid")] + ran[ran.index("setsid") + 2:]  # not setsid, the stub apptainer


def test_the_node_is_learnt_once_per_allocation_and_node(stub_env: dict[str, Any]) -> None:
    record = stub_env["tmp"] / "shm" / f"hpk-{os.geteuid()}" / ".pilot-node"
    first, ran = _step(stub_env, 1)
    assert "hostname" in ran and "stat" in ran and "sha256sum" not in ran
    ip = (first / "status" / "host.ip").read_text().strip()
    assert record.read_text() == f"77 n1 {ip or '-'} .\n"
    second, ran = _step(stub_env, 2)
    assert "hostname" not in ran and "stat" not in ran and "sha256sum" not in ran, ran
    assert ran.count("mkdir") == 1, ran  # the memory directory made with the pod's directories
    shm = [r for r in records(stub_env["tmp"] / "record.jsonl") if r["verb"] != "pull"][-1]["resolved"]
    assert any(re.fullmatch(rf"{re.escape(str(record.parent))}/pod\.[0-]+2\.\d+/\.dev-shm", p) for p in shm), shm
    assert not list(record.parent.glob("pod.*"))  # removed at the step's end, as before
    assert (second / "status" / "host.ip").read_text() == (first / "status" / "host.ip").read_text()
    assert (second / "status" / "job.id").read_text() == "77.2\n"
    # another allocation, or another Slurm node of this host, learns it again (and records it for itself)
    _, ran = _step(stub_env, 3, job="78")
    assert "hostname" in ran and "stat" in ran
    _, ran = _step(stub_env, 4, job="78", node="n2")
    assert "hostname" in ran and "stat" in ran
    assert record.read_text().startswith("78 n2 ")


@pytest.mark.parametrize("record_text", ["77 n1 10.9.9.9", "77 n1 10.9", ""])
def test_a_record_cut_short_or_in_a_directory_not_of_this_user_is_not_trusted(stub_env: dict[str, Any],
                                                                            record_text: str) -> None:
    parent = stub_env["tmp"] / "shm" / f"hpk-{os.geteuid()}"
    parent.mkdir(mode=0o700, parents=True)
    (parent / ".pilot-node").write_text(record_text + "\n")
    root, ran = _step(stub_env, 1)
    assert "hostname" in ran and "stat" in ran
    assert "10.9" not in (root / "status" / "host.ip").read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user's needs root to make")
def test_a_record_another_user_planted_is_not_trusted(stub_env: dict[str, Any]) -> None:
    """This user's memory parent, but others may write in it (0777: hpk_own_dir refuses it): a record
    someone else wrote there, with this allocation's job and node from squeue, is not taken (review)."""
    parent = stub_env["tmp"] / "shm" / f"hpk-{os.geteuid()}"
    parent.mkdir(parents=True)
    parent.chmod(0o777)
    planted = parent / ".pilot-node"
    planted.write_text("77 n1 6.6.6.6 .\n")
    os.chown(planted, 65534, 65534)  # nobody's
    root, ran = _step(stub_env, 1)
    assert "stat" in ran and "hostname" in ran  # checked and learnt again, not read from the record
    assert "6.6.6.6" not in (root / "status" / "host.ip").read_text()


def test_a_record_behind_a_link_is_not_trusted(stub_env: dict[str, Any]) -> None:
    """The parent must be this user's own directory, not a link to one (anyone can make a link in /dev/shm)."""
    elsewhere = stub_env["tmp"] / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / ".pilot-node").write_text("77 n1 10.9.9.9 .\n")
    (stub_env["tmp"] / "shm").mkdir()
    (stub_env["tmp"] / "shm" / f"hpk-{os.geteuid()}").symlink_to(elsewhere)
    root, ran = _step(stub_env, 1)
    assert "hostname" in ran  # (hpk_own_dir refuses the link before its stat)
    assert "10.9" not in (root / "status" / "host.ip").read_text()


def test_a_missing_runtime_still_fails_a_pilot_pod_and_exec_still_hashes_it(stub_env: dict[str, Any]) -> None:
    rendered = render_pod(pod_doc(SPEC), _pilot(stub_env))
    root = write_pod_dir(rendered)
    runtime = Path(rendered.runtime)
    env = stub_environment(stub_env, stub_env["tmp"] / "record.jsonl", SLURM_JOB_ID="77", SLURM_STEP_ID="0")
    good = runtime.read_bytes()
    runtime.write_bytes(good.replace(b"hpk_put pod.done 1", b"rm -rf \"$HOME\""))
    r = subprocess.run(["bash", str(root / paths.PodDir.JOB_SCRIPT), "exec", "app", "--", "true"], env=env,
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 125 and "is not the file hpkctl" in r.stderr
    runtime.unlink()
    r = subprocess.run(["bash", str(root / paths.PodDir.JOB_SCRIPT)], env=env, capture_output=True, text=True,
                       timeout=30, check=False)
    assert r.returncode == 1 and records(stub_env["tmp"] / "record.jsonl") == []
    status = read_pod_status(root, [("app", False)], None, job_known=False)
    assert (status.phase, status.reason) == ("Failed", "RuntimeMissing") and str(runtime) in status.message

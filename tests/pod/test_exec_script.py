"""``job.sh exec CONTAINER [--tty] -- WORD...`` (sbatch/runtime.sh, "exec") with the recording
Apptainer stub: what it runs, and what it refuses without touching the pod's status. The real
thing (srun step, host and cni mode, the stand-in) is tests/integration/test_kubelet_exec_slurm.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from hpkctl.pod import render_pod, write_pod_dir
from tests.support.pods import make_profile, pod_doc, records, stub_environment

SPEC = {"restartPolicy": "Never",
        "initContainers": [{"name": "setup", "image": "busybox:1.36", "command": ["true"]}],
        "containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "1000"],
                        "env": [{"name": "GREETING", "value": "hello"}], "workingDir": "/srv"}]}


def _pod(stub: dict[str, Any], *, cni: bool = False) -> Path:
    profile = stub["profile"]
    if cni:
        profile = make_profile(stub["tmp"], apptainer={"binary": str(stub["apptainer"]), "network": "cni",
                                                       "cni_network": "none", "parent_image": "docker://p"})
    root = write_pod_dir(render_pod(pod_doc(SPEC), profile))
    (root / "status").mkdir(exist_ok=True)
    return root


def _exec(stub: dict[str, Any], root: Path, *args: str, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    record = stub["tmp"] / "record.jsonl"
    return subprocess.run(["bash", str(root / "job" / "job.sh"), "exec", *args], text=True, capture_output=True,
                          timeout=60, check=False, env={**stub_environment(stub, record, exit_code=4), **(env or {})})


def _running(root: Path, name: str) -> None:
    (root / "status" / f"{name}.started").write_text("2026-11-24T10:00:00Z\n")


def test_exec_runs_the_words_in_the_container_s_image_env_and_mounts(stub_env) -> None:  # type: ignore[no-untyped-def]
    root = _pod(stub_env)
    _running(root, "app")
    r = _exec(stub_env, root, "app", "--", "sh", "-c", "echo $GREETING")
    assert r.returncode == 4, r.stderr  # the command's exit code (the stub's)
    [rec] = records(stub_env["tmp"] / "record.jsonl")
    assert (rec["verb"], rec["args"], rec["env"]["GREETING"]) == ("exec", ["sh", "-c", "echo $GREETING"], "hello")
    assert rec["image"].endswith(".sif") and ["--pwd", "/srv"] == rec["flags"][rec["flags"].index("--pwd"):][:2]
    assert any(f.endswith("/tmp/app:/tmp") for f in rec["flags"])
    assert sorted(p.name for p in (root / "status").iterdir()) == ["app.started"]  # the pod does not notice


def test_exec_refuses_what_it_cannot_run_with_125_and_a_message(stub_env) -> None:  # type: ignore[no-untyped-def]
    root = _pod(stub_env)
    r = _exec(stub_env, root, "app", "--", "true")
    assert (r.returncode, r.stderr) == (125, "hpkctl exec: container app is not running\n")
    _running(root, "app")
    r = _exec(stub_env, root, "nope", "--", "true")
    assert (r.returncode, r.stderr) == (125, "hpkctl exec: container nope is not in this pod (it has: setup app)\n")
    r = _exec(stub_env, root, "app", "true")
    assert r.returncode == 125 and "usage: job.sh exec CONTAINER [--tty] -- COMMAND" in r.stderr
    (root / "status" / "app.exitcode").write_text("0\n")
    assert _exec(stub_env, root, "app", "--", "true").returncode == 125
    assert not records(stub_env["tmp"] / "record.jsonl")
    assert not (root / "status" / "pod.failed").exists() and not (root / "status" / "pod.done").exists()


def test_exec_in_cni_mode_needs_the_parent_container(stub_env) -> None:  # type: ignore[no-untyped-def]
    root = _pod(stub_env, cni=True)
    _running(root, "app")
    r = _exec(stub_env, root, "app", "--tty", "--", "sh")
    assert r.returncode == 125 and "parent container has not started yet" in r.stderr
    (root / "run").mkdir(exist_ok=True)
    with subprocess.Popen(["sleep", "30"]) as sleeper:  # a "parent" with no process in another namespace
        (root / "run" / "parent.pid").write_text(f"{sleeper.pid}\n")
        r = _exec(stub_env, root, "app", "--", "sh")
        sleeper.kill()
    assert r.returncode == 125 and "no process of the pod's parent container found" in r.stderr
    assert not records(stub_env["tmp"] / "record.jsonl")

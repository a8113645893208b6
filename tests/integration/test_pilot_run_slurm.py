"""``hpkctl run --pilot`` end to end on the real local Slurm, as user hpk, with the Apptainer stand-in:
the pod runs as a step of a held allocation (hpkctl/local/pilotrun.py, hpkctl/pilot/), with the same
job script and runtime as a job of its own."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.support.hpk import STANDIN, VENV_BIN, Hpk, pod, unique
from tests.support.slurm import SINGLE_CONF, as_hpk
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
BUSYBOX = "busybox:1.36"
ALLOCATION = re.compile(r"started as a step of pilot allocation (\d+) on (\S+)")


def c(name: str, script: str, **kw) -> dict:  # type: ignore[no-untyped-def]
    return {"name": name, "image": BUSYBOX, "command": ["sh", "-c", script], **kw}


def release(job: str) -> None:
    as_hpk(["scancel", job], slurm_conf=SINGLE_CONF)


def test_a_pod_runs_as_a_bounded_step_and_the_next_run_reuses_the_allocation(hpk: Hpk) -> None:
    name = unique("pilot")
    doc = pod(name, [c("main", "echo main ran",
                       resources={"requests": {"cpu": "2", "memory": "300Mi"}})],
              initContainers=[c("init", "echo init ran")])
    first = hpk.run(doc, extra=("--pilot",))
    assert first.rc == 0, first.output
    assert first.stdout == "[init] init ran\nmain ran\n"  # init container first, as in a job of its own
    # srun --exact -c2 --mem=300M (test_jobs_pilot_slurm proves that bounds the step)
    assert "on vm (2 CPUs, 300 MB;" in first.stderr, first.stderr
    found = ALLOCATION.search(first.stderr)
    assert found, first.stderr
    job = found.group(1)
    try:
        assert f"(pilot allocation {job}): Succeeded (Completed)" in first.stderr
        st = hpk.status(name)["status"]
        assert st["phase"] == "Succeeded" and st["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        step = hpk.hpkctl("logs", name, "--site", "ci")
        assert step.rc == 0 and step.stdout == "main ran\n", step.output
        second = hpk.run(doc, extra=("--pilot", "--replace"))
        assert second.rc == 0, second.output
        assert ALLOCATION.search(second.stderr).group(1) == job  # type: ignore[union-attr]  # adopted, held
        held = as_hpk(["squeue", "--noheader", f"--jobs={job}", "--format=%T|%k"], slurm_conf=SINGLE_CONF)
        assert held.stdout.strip() == "RUNNING|hpk-pilot kubelet=run node=hpk", held.stdout
    finally:
        release(job)


def test_delete_runs_the_pods_stop_sequence_in_its_step(hpk: Hpk) -> None:
    name = unique("pilot-stop")
    main = c("main", "trap 'echo got TERM; exit 0' TERM; echo up; while :; do sleep 0.2; done",
             lifecycle={"preStop": {"exec": {"command": ["sh", "-c", "echo prestop ran"]}}})
    path = hpk.manifest(pod(name, [main], terminationGracePeriodSeconds=10))
    proc = subprocess.Popen(_hpkctl_argv(hpk, "run", "-f", str(path), "--site", "ci", "--pilot"),
                            cwd=hpk.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = ""
    try:
        wait_for("the pod running", lambda: _phase(hpk, name) == "Running", timeout=120, every=0.5)
        # Running says the container started, not that its shell has set the trap: "up" comes after it
        wait_for("the container's TERM trap", lambda: hpk.hpkctl("logs", name, "--site", "ci").stdout == "up\n",
                 timeout=60, every=0.5)
        deleted = hpk.hpkctl("delete", name, "--site", "ci")
        assert deleted.rc == 0, deleted.output
        out, err = proc.communicate(timeout=60)
        found = ALLOCATION.search(err)
        job = found.group(1) if found else ""
        assert proc.returncode != 0, err
        assert "up\ngot TERM\n" in out, out + err  # SIGTERM reached the container, after preStop
        assert "stopping its containers (step " in deleted.stderr, deleted.output
        assert "Terminated" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
        if job:
            release(job)


def _hpkctl_argv(hpk: Hpk, *args: str) -> list[str]:
    env = {"PATH": f"{STANDIN}:{VENV_BIN}:/usr/bin:/bin", "HOME": str(hpk.home), "LANG": "C.UTF-8"}
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), str(VENV_BIN / "hpkctl"), *args]
    return ["runuser", "-u", "hpk", "--", *argv] if os.geteuid() == 0 else argv


def _phase(hpk: Hpk, name: str) -> str:
    r = hpk.hpkctl("status", name, "--site", "ci", "--json")
    if r.rc != 0:
        return ""
    return str(json.loads(r.stdout)[0]["status"].get("phase", ""))

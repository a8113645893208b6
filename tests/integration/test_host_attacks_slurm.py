"""Another user of the same host, or an administrator, acts on ``hpkctl run``'s jobs behind its back
(issue 20), on the real Slurm: a second Unix user ``hpk2`` (created as root if absent) forges records
in the world-readable jobcomp file; ``scontrol requeue`` and ``scancel`` from outside hpkctl."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import wait_for
from tests.support.hpk import Hpk, Result, pod, unique

pytestmark = [pytest.mark.slurm, pytest.mark.standin]

JOBCOMP = Path("/var/log/slurm/jobcomp.log")
ATTACKER = "hpk2"


def attacker() -> str:
    """The second Unix user, created when absent (root only)."""
    try:
        pwd.getpwnam(ATTACKER)
    except KeyError:
        if os.geteuid() != 0:
            pytest.skip(f"user {ATTACKER} is missing and only root can create it")
        subprocess.run(["useradd", "--create-home", ATTACKER], check=True)
    return ATTACKER


def forged_record(job_id: str, uid: int) -> str:
    """A whole jobcomp record of ``job_id`` (user hpk) saying it ran out of memory, as a line."""
    return (f"JobId={job_id} UserId=hpk({uid}) GroupId=hpk({uid}) Name=forged JobState=OUT_OF_MEMORY "
            "Partition=debug TimeLimit=UNLIMITED StartTime=2026-01-01T00:00:00 EndTime=2026-01-01T00:00:01 "
            "NodeList=vm NodeCnt=1 ProcCnt=1 WorkDir=/tmp ReservationName= Tres=cpu=1 Account= QOS= WcKey= "
            "Cluster=hpk SubmitTime=2026-01-01T00:00:00 EligibleTime=2026-01-01T00:00:00 DerivedExitCode=0:0 "
            "ExitCode=0:125 \n")


def test_a_forged_jobcomp_record_does_not_fail_a_succeeded_run(hpk: Hpk) -> None:
    """Three runs succeed; another user then submits a job whose name holds a line break and a full
    forged record of one of them (OUT_OF_MEMORY), so the jobcomp file's newest line for that job is
    the forgery. ``hpkctl status`` (three finished runs: the jobcomp scan answers first) still says
    Succeeded for every run."""
    if not JOBCOMP.exists():
        pytest.skip(f"{JOBCOMP}: no jobcomp file on this machine")
    user = attacker()
    names = [unique("forged") for _ in range(3)]
    for name in names:
        r = hpk.run(pod(name, [{"name": "main", "image": "busybox", "command": ["true"]}]))
        assert r.rc == 0, r.output
    victim = hpk.status(names[0])["jobId"]
    uid = pwd.getpwnam("hpk").pw_uid
    job = subprocess.run(["runuser", "-u", user, "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null",
                          f"--job-name=x\n{forged_record(victim, uid)}rest", "--wrap=true"],
                         capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    wait_for("the attacker's record in the jobcomp file",
             lambda: f"JobId={job} UserId={user}(" in JOBCOMP.read_text(errors="replace"), timeout=60)
    forged = [ln for ln in JOBCOMP.read_text(errors="replace").splitlines()
              if ln.startswith(f"JobId={victim} UserId=hpk({uid})") and "OUT_OF_MEMORY" in ln]
    assert forged, "the attack did not reach the jobcomp file"
    r = hpk.hpkctl("status", "--site", "ci", "--json")
    assert r.rc == 0, r.output
    phases = {s["name"]: (s["status"]["phase"], s["status"]["reason"]) for s in json.loads(r.stdout) if s["name"] in names}
    assert phases == {n: ("Succeeded", "Completed") for n in names}


def test_requeue_is_refused_and_a_cancel_from_outside_is_cancelled_exit_1(hpk: Hpk) -> None:
    """A running pod's job: an administrator's ``scontrol requeue`` is refused (pods are submitted
    with --no-requeue, so the containers never run again behind a status that said the pod ended);
    a plain ``scancel`` from outside hpkctl then ends it as Cancelled (not DeadlineExceeded, "reached
    its time limit"), and the waiting ``hpkctl run`` exits 1 as the README says (not 143)."""
    name = unique("outside")
    result: list[Result] = []
    runner = threading.Thread(target=lambda: result.append(
        hpk.run(pod(name, [{"name": "main", "image": "busybox", "command": ["sleep", "300"]}],
                       terminationGracePeriodSeconds=2))))
    runner.start()
    try:
        st = wait_for("the pod to run", lambda: _running(hpk, name), timeout=120)
        job, pod_dir = st["jobId"], Path(st["podDir"])
        requeue = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, check=False)
        assert requeue.returncode != 0 and "disabled" in requeue.stderr, requeue
        subprocess.run(["runuser", "-u", "hpk", "--", "scancel", job], check=True)
    finally:
        runner.join(timeout=120)
    assert result, "hpkctl run did not end"
    assert result[0].rc == 1, result[0].output
    assert (pod_dir / "status" / "pod.failed").read_text().split("\n", 1)[0] == "Cancelled"
    final = hpk.status(name)["status"]
    assert (final["phase"], final["reason"]) == ("Failed", "Cancelled"), final
    restarts = subprocess.run(["scontrol", "--oneliner", "show", "job", job], capture_output=True, text=True,
                              check=False).stdout
    assert "Restarts=0" in restarts or not restarts, restarts


def _running(hpk: Hpk, name: str) -> dict[str, Any] | None:
    r = hpk.hpkctl("status", name, "--site", "ci", "--json")
    if r.rc != 0:
        return None
    st: dict[str, Any] = json.loads(r.stdout)[0]
    containers = st["status"].get("containerStatuses") or []
    return st if containers and "running" in (containers[0].get("state") or {}) else None

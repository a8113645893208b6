"""``hpkctl run --pilot`` end to end on the real local Slurm, as user hpk, with the Apptainer stand-in:
the pod runs as a step of a held allocation (hpkctl/local/pilotrun.py, hpkctl/pilot/), with the same
job script and runtime as a job of its own."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.hpk import STANDIN, VENV_BIN, Hpk, hpkctl_pid, pod, unique
from tests.support.slurm import MULTI_CONF, SINGLE_CONF, as_hpk
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
        assert re.fullmatch(r"RUNNING\|hpk-pilot kubelet=run state=[0-9a-f]{12} node=hpk", held.stdout.strip()), \
            held.stdout
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
        # through the pilot provider's delete (issue 21.1): one stop sequence for the kubelet and hpkctl
        assert "stopping its containers (grace period 10s; a step of pilot allocation " in deleted.stderr, deleted.output
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


def _own_pool(hpk: Hpk, node: str, base: str = "ci", **pilot: Any) -> str:
    """A profile whose run allocations are its own (comment ``node=<node>``): other tests' pilot runs
    of user hpk never share them. A failed pod runs again after 1 s, not the default 10 s: these tests
    prove what runs again, not how long the back-off is. Returns its path for --site."""
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in pilot.items())
    path = hpk.workdir / f"{node}.toml"
    path.write_text(f'extends = "{base}"\n\n[pods]\nnode_name = "{node}"\nrestart_backoff = 1\n\n[pilot]\n{extra}')
    path.chmod(0o644)
    return str(path)


def _out_dir() -> Path:
    out = Path(tempfile.mkdtemp(prefix="hpk-pilot-", dir="/tmp"))
    out.chmod(0o777)
    return out


def _out_pod(name: str, script: str, out: Path, cpus: str) -> dict[str, Any]:
    main = c("main", script, resources={"requests": {"cpu": cpus, "memory": "200Mi"}},
             volumeMounts=[{"name": "out", "mountPath": "/out"}])
    return pod(name, [main], volumes=[{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}])


def test_a_run_waits_pending_for_room_another_runs_step_holds_then_runs_there(hpk: Hpk) -> None:
    """Two ``hpkctl run --pilot`` processes share one allocation (max_allocations 1, 2 CPUs): the first,
    ``--detach``ed, returns its step id once its step runs and holds both CPUs; the second sees that
    step (Slurm's steps are the books, not its own) and waits Pending with the reason, in its output
    and in ``hpkctl status``, instead of failing PilotNoRoom; once the first pod ends, the second runs
    in the same allocation. The detached pod's status comes from its files."""
    node = unique("pq")
    site = _own_pool(hpk, node, cpus=2, memory="1G", max_allocations=1)
    out = _out_dir()
    first, second = unique("pilot-a"), unique("pilot-b")
    job = ""
    proc = None
    try:
        a = hpk.run(_out_pod(first, "echo a ran; while [ ! -e /out/go ]; do sleep 0.2; done", out, "2"),
                    site=site, extra=("--pilot", "--detach"))
        assert a.rc == 0, a.output
        step = a.stdout.strip()
        assert re.fullmatch(r"\d+\.\d+", step), a.output  # the step's id, once it runs
        job = step.split(".")[0]
        path = hpk.manifest(_out_pod(second, "echo b ran", out, "1"))
        proc = subprocess.Popen(_hpkctl_argv(hpk, "run", "-f", str(path), "--site", site, "--pilot"),
                                cwd=hpk.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        st = wait_for("the second pod Pending for room", lambda: (s := _status(hpk, second, site))
                      and s.get("reason") == "Unschedulable" and s, timeout=120, every=0.5)
        assert st["phase"] == "Pending" and "no pilot allocation has room for 1 CPU(s)" in st["message"], st
        assert f"{job}: " in st["message"] and "waiting for a step to end" in st["message"], st
        assert _status(hpk, first, site)["phase"] == "Running"
        (out / "go").touch()
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr
        assert stdout == "b ran\n", stdout + stderr
        assert f"pod default/{second}: Pending: no pilot allocation has room" in stderr, stderr
        assert ALLOCATION.search(stderr).group(1) == job  # type: ignore[union-attr]  # the same allocation
        assert "PilotNoRoom" not in stderr
        done = wait_for("the detached pod's end", lambda: (s := _status(hpk, first, site))
                        and s["phase"] == "Succeeded" and s, timeout=60, every=0.5)
        assert done["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        assert hpk.hpkctl("logs", first, "--site", site).stdout == "a ran\n"
    finally:
        (out / "go").touch()
        if proc is not None and proc.poll() is None:
            proc.kill()
        if job:
            release(job)
        for name in (first, second):
            hpk.hpkctl("delete", name, "--site", site)
        shutil.rmtree(out, ignore_errors=True)


def _status(hpk: Hpk, name: str, site: str) -> dict[str, Any]:
    r = hpk.hpkctl("status", name, "--site", site, "--json")
    return dict(json.loads(r.stdout)[0]["status"]) if r.rc == 0 else {}


def test_a_jobs_pods_run_as_steps_with_parallelism_and_backoff_limit(hpk: Hpk) -> None:
    """A Job in pilot mode (Indexed, completions 3, parallelism 2): its pods run as steps of one
    allocation, a failed pod runs again under ``backoffLimit`` (the array's own rules, run as a step:
    each index's first run fails, its second succeeds), and the Job completes; a Job whose pod keeps failing fails BackoffLimitExceeded. ``--detach`` is refused for a
    workload (this process runs it)."""
    node = unique("pj")
    site = _own_pool(hpk, node, cpus=2, memory="1G", max_allocations=1)
    out = _out_dir()
    name = unique("pjob")
    # the first run of each index fails (no marker yet), the second succeeds
    script = ('if [ ! -e "/out/$JOB_COMPLETION_INDEX.ran" ]; then : >"/out/$JOB_COMPLETION_INDEX.ran"; exit 3; fi; '
              'echo "index $JOB_COMPLETION_INDEX ok"')
    job = _indexed_job(name, script, out, backoffLimit=3)
    template = job["spec"]["template"]
    held = ""
    try:
        refused = hpk.run(job, site=site, extra=("--pilot", "--detach"))
        assert refused.rc != 0 and "cannot --detach" in refused.stderr, refused.output
        r = hpk.run(job, site=site, extra=("--pilot",))
        found = ALLOCATION_OF_WORKLOAD.search(r.stderr)
        held = found.group(1) if found else ""
        assert r.rc == 0, r.output
        assert f"job default/{name} (pilot allocation {held}): Complete (CompletionsReached)" in r.stderr, r.stderr
        assert "3/3 succeeded, 3 failed" in r.stderr, r.stderr  # each index failed once, then succeeded
        assert sorted(ln.split("] ", 1)[1] for ln in r.stdout.splitlines() if "ok" in ln) == \
            [f"index {i} ok" for i in range(3)], r.stdout
        st = hpk.status(name, site=site)["status"]
        assert st["succeeded"] == 3 and [p["attempts"] for p in st["pods"]] == [2, 2, 2], st
        bad = dict(job, metadata={"name": name + "-bad"})
        bad["spec"] = dict(job["spec"], completions=1, parallelism=1, backoffLimit=1)
        bad["spec"]["template"] = json.loads(json.dumps(template).replace(script.replace('"', '\\"'), "exit 7"))
        r = hpk.run(bad, site=site, extra=("--pilot",))
        assert r.rc == 1, r.output
        assert "Failed (BackoffLimitExceeded)" in r.stderr, r.stderr
    finally:
        if held:
            release(held)
        for n in (name, name + "-bad"):
            hpk.hpkctl("delete", n, "--site", site)
        shutil.rmtree(out, ignore_errors=True)


ALLOCATION_OF_WORKLOAD = re.compile(r"\(pilot allocation (\d+)\)")


def test_a_pod_whose_allocation_ends_says_so_not_deadline_exceeded(hpk: Hpk) -> None:
    """The pod's allocation reaches its time limit (Slurm's shortest, a minute; the pod, without a
    deadline, was placed with [pilot] renewal_margin left): Slurm TERMs its step while it says
    COMPLETING, reason TimeLimit, not a cancel from outside; the pod's stop sequence runs (its handler
    within the grace period) and its status says which allocation's time limit ended it and what keeps a
    pod out of one that ends before it, Terminated as at a node shutdown, not DeadlineExceeded (the
    pod has no deadline of its own) nor Cancelled."""
    node = unique("pt")
    site = _own_pool(hpk, node, cpus=1, memory="512M", max_allocations=1, time_limit="1", renewal_margin=5)
    out = _out_dir()
    name = unique("pilot-end")
    job = ""
    try:
        a = hpk.run(_out_pod(name, "trap 'echo got TERM >/out/term; exit 0' TERM; : >/out/trapped; "
                             "while :; do sleep 0.2; done", out, "1"), site=site, extra=("--pilot", "--detach"))
        assert a.rc == 0, a.output
        step = a.stdout.strip()
        job = step.split(".")[0]
        wait_for("the container's TERM trap", (out / "trapped").exists, timeout=60)
        st = wait_for("the pod's end at its allocation's time limit", lambda: (s := _status(hpk, name, site))
                      and s["phase"] == "Failed" and s, timeout=150, every=1)
        assert st["reason"] == "Terminated", st
        assert f"pilot allocation {job} reached its Slurm time limit" in st["message"], st
        assert "[pilot] renewal_margin" in st["message"] and "activeDeadlineSeconds" in st["message"], st
        assert (out / "term").read_text() == "got TERM\n"
    finally:
        if job:
            release(job)
        hpk.hpkctl("delete", name, "--site", site)
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("how", ["hpkctl delete", "interrupt"])
def test_deleting_a_pilot_job_from_another_process_stops_its_steps(hpk: Hpk, how: str) -> None:
    """``hpkctl delete`` of a Job that an ``hpkctl run --pilot`` still runs, or an interrupt (SIGINT) of
    that run: each running pod (a step the run process started) gets its stop sequence (its TERM trap
    runs), the pod not yet started never starts, no step of the Job is left in the allocation, and the
    run process ends. Both are the provider's delete of the workload. Before, the delete found no step
    in the Job's own directory and removed the directories under running steps."""
    node = unique("pd")
    site = _own_pool(hpk, node, cpus=2, memory="1G", max_allocations=1)
    out = _out_dir()
    name = unique("pdel")
    script = ('i=$JOB_COMPLETION_INDEX; trap \'echo term >"/out/$i.term"; exit 0\' TERM; '
              ': >"/out/$i.started"; while :; do sleep 0.2; done')
    job = _indexed_job(name, script, out, grace=5)
    path = hpk.manifest(job)
    proc = subprocess.Popen(_hpkctl_argv(hpk, "run", "-f", str(path), "--site", site, "--pilot"),
                            cwd=hpk.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held = ""
    try:
        wait_for("two of the Job's pods running", lambda: (out / "0.started").exists()
                 and (out / "1.started").exists(), timeout=180, every=0.5)
        if how == "interrupt":
            os.kill(hpkctl_pid(proc), signal.SIGINT)
            _, said = proc.communicate(timeout=120)
            assert proc.returncode == 128 + signal.SIGINT and "stopping its running pods" in said, said
        else:
            r = hpk.hpkctl("delete", name, "--site", site)
            assert r.rc == 0, r.output
            said = r.output
            proc.communicate(timeout=120)  # the run process ends with its Job
        assert (out / "0.term").exists() and (out / "1.term").exists(), (said, sorted(os.listdir(out)))
        assert not (out / "2.started").exists(), sorted(os.listdir(out))
        held = _allocation_of(node)
        assert held

        def steps_left() -> str:  # a step whose pod wrote pod.done ends a moment later
            return as_hpk(["squeue", "--steps", "-h", "-j", held, "-o", "%i %j"], slurm_conf=SINGLE_CONF).stdout

        wait_for("no step of the Job left", lambda: name not in steps_left(), timeout=60, every=0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
        if held or (held := _allocation_of(node)):
            release(held)
        hpk.hpkctl("delete", name, "--site", site)
        shutil.rmtree(out, ignore_errors=True)


def _allocation_of(node: str) -> str:
    """The id of the pilot allocation of a pool of its own (``_own_pool``), found by its comment."""
    r = as_hpk(["squeue", "--me", "-h", "-o", "%i %k"], slurm_conf=SINGLE_CONF)
    return next((ln.split()[0] for ln in r.stdout.splitlines() if ln.endswith(f" node={node}")), "")


def _indexed_job(name: str, script: str, out: Path, *, grace: int = 30, **spec: Any) -> dict[str, Any]:
    """An Indexed Job of 3 one-CPU pods, 2 at a time, running ``script`` with ``out`` at /out."""
    template = {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace, "containers": [
        {**c("main", script, resources={"requests": {"cpu": "1", "memory": "100Mi"}}),
         "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
        "volumes": [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completions": 3, "parallelism": 2, "completionMode": "Indexed", "template": template, **spec}}


def test_an_mpi_pods_ranks_span_two_nodes_and_a_two_task_pod_gets_two_tasks(hpk_multi: Hpk) -> None:
    """On the 3-node Slurm, allocations of two whole nodes: the MPI pod's script is a step on one node
    and its ranks a step of their own on both (srun --mpi=pmi2 in the allocation, as in a job of its
    own: PMI tells each rank its rank and the size); a pod of --ntasks=2 without the MPI annotation
    gets its two tasks, in the same allocation."""
    site = _own_pool(hpk_multi, unique("pm"), base="ci-multi", nodes=2, max_allocations=1,
                     time_limit="00:10:00", idle_release=10)
    rank = 'echo "rank=$PMI_RANK size=$PMI_SIZE task=$SLURM_PROCID/$SLURM_NTASKS node=$SLURMD_NODENAME"'
    mpi = pod(unique("pilot-mpi"), [c("ranks", rank)], annotations={
        "slurm-job.hpk.io/flags": "--nodes=2 --ntasks=2", "slurm-job.hpk.io/mpi-flags": "--mpi=pmi2"})
    job = ""
    try:
        r = hpk_multi.run(mpi, site=site, extra=("--pilot",))
        found = ALLOCATION.search(r.stderr)
        job = found.group(1) if found else ""
        assert r.rc == 0, r.output
        assert found and found.group(2) in ("n1,n2", "n1,n3", "n2,n3"), r.stderr  # its two nodes
        lines = sorted(r.stdout.splitlines())
        assert [ln.rsplit(" ", 1)[0] for ln in lines] == ["rank=0 size=2 task=0/2", "rank=1 size=2 task=1/2"], lines
        assert {ln.rsplit("node=", 1)[1] for ln in lines} == set(found.group(2).split(",")), lines
        tasks = hpk_multi.run(pod(unique("pilot-tasks"), [c("tasks", 'echo "task=$SLURM_PROCID/$SLURM_NTASKS"')],
                                  annotations={"slurm-job.hpk.io/flags": "--ntasks=2"}), site=site, extra=("--pilot",))
        assert tasks.rc == 0, tasks.output
        assert sorted(tasks.stdout.splitlines()) == ["task=0/2", "task=1/2"], tasks.output
        assert ALLOCATION.search(tasks.stderr).group(1) == job  # type: ignore[union-attr]  # the held one
    finally:
        if job:
            as_hpk(["scancel", job], slurm_conf=MULTI_CONF)

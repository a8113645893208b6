"""A pod whose job runs: its phase (the kubelet's getPhase), the CrashLoopBackOff state during a
restart back-off, and the job's record of an OOM-killed run against Slurm's OUT_OF_MEMORY."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpkctl.jobs import JobInfo
from hpkctl.pod.status import read_pod_status


def _pod(tmp: Path, policy: str = "Always", *, sidecar: bool = False, startup: bool = False) -> None:
    init = {"name": "init", "image": "busybox"} | ({"restartPolicy": "Always"} if sidecar else {})
    if startup:
        init["startupProbe"] = {"exec": {"command": ["true"]}}
    doc = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
           "spec": {"restartPolicy": policy, "initContainers": [init], "containers": [{"name": "main"}]}}
    (tmp / "job").mkdir(parents=True, exist_ok=True)
    (tmp / "job" / "pod.json").write_text(json.dumps(doc))


def _files(tmp: Path, **values: str) -> None:
    sd = tmp / "status"
    sd.mkdir(parents=True, exist_ok=True)
    (sd / "job.started").write_text("t0\n")
    for name, value in values.items():
        (sd / name.replace("__", ".").replace("_", "-")).write_text(value + "\n")


RUNNING = JobInfo(job_id="7", state="RUNNING", nodes="n1")
CONTAINERS = [("init", True), ("main", False)]


def test_an_init_container_in_back_off_keeps_the_pod_pending(tmp_path: Path) -> None:
    _pod(tmp_path)
    _files(tmp_path, init__started="t1", init__exitcode="3", init__finished="t2", init__backoff="10")
    st = read_pod_status(tmp_path, CONTAINERS, RUNNING)
    assert (st.phase, st.reason) == ("Pending", "Init:CrashLoopBackOff")
    init = st.as_k8s()["initContainerStatuses"][0]
    assert init["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message":
                             "back-off 10s restarting failed container=init pod=p_ns(u-1)"}}
    assert init["lastState"]["terminated"] == {"exitCode": 3, "finishedAt": "t2", "reason": "Error"}


def test_running_init_container_and_not_started_mains_are_pending(tmp_path: Path) -> None:
    _pod(tmp_path)
    _files(tmp_path, init__started="t1")
    st = read_pod_status(tmp_path, CONTAINERS, RUNNING)
    assert (st.phase, st.reason) == ("Pending", "Init:0/1")
    _files(tmp_path, init__started="t1", init__exitcode="0", init__finished="t2")
    assert read_pod_status(tmp_path, CONTAINERS, RUNNING).phase == "Pending"  # main not started yet
    _files(tmp_path, init__started="t1", init__exitcode="0", init__finished="t2", main__started="t3")
    st = read_pod_status(tmp_path, CONTAINERS, RUNNING)
    assert (st.phase, st.reason) == ("Running", "")


def test_a_running_sidecar_alone_does_not_make_the_pod_running(tmp_path: Path) -> None:
    _pod(tmp_path, sidecar=True, startup=True)
    _files(tmp_path, init__started="t1")  # running, its startup probe not passed
    st = read_pod_status(tmp_path, CONTAINERS, RUNNING)
    assert (st.phase, st.reason) == ("Pending", "Init:0/1")
    _files(tmp_path, init__started="t1", init__started_probe="t2")  # started; main not started
    assert read_pod_status(tmp_path, CONTAINERS, RUNNING).phase == "Pending"
    _files(tmp_path, init__started="t1", init__started_probe="t2", main__started="t3")
    assert read_pod_status(tmp_path, CONTAINERS, RUNNING).phase == "Running"


def test_a_main_container_in_back_off_is_waiting_and_the_pod_running(tmp_path: Path) -> None:
    _pod(tmp_path)
    _files(tmp_path, init__started="t1", init__exitcode="0", init__finished="t2", main__started="t3",
           main__exitcode="0", main__finished="t4", main__backoff="300", main__restarts="6")
    st = read_pod_status(tmp_path, CONTAINERS, RUNNING)
    assert (st.phase, st.reason) == ("Running", "CrashLoopBackOff")  # hpkctl status shows kubectl's STATUS
    main = st.as_k8s()["containerStatuses"][0]
    assert main["state"]["waiting"]["message"] == "back-off 5m0s restarting failed container=main pod=p_ns(u-1)"
    assert main["lastState"]["terminated"]["reason"] == "Completed" and main["restartCount"] == 6


@pytest.mark.parametrize("ending", ["pod__terminating", "pod__done"])
def test_no_back_off_once_the_pod_is_stopping(tmp_path: Path, ending: str) -> None:
    _pod(tmp_path)
    _files(tmp_path, main__started="t3", main__exitcode="1", main__finished="t4", main__backoff="10",
           **{ending: "143"})
    main = read_pod_status(tmp_path, CONTAINERS, RUNNING).as_k8s()["containerStatuses"][0]
    assert main["state"]["terminated"]["exitCode"] == 1


def test_the_jobs_record_of_an_oom_killed_run_wins_over_out_of_memory(tmp_path: Path) -> None:
    """Slurm marks the whole job OUT_OF_MEMORY for any OOM kill; the job knows it was the first
    run of main, which was restarted and succeeded."""
    _pod(tmp_path, "OnFailure")
    _files(tmp_path, init__started="t1", init__exitcode="0", init__finished="t2", main__started="t5",
           main__exitcode="0", main__finished="t6", main__last_exitcode="137", main__last_reason="OOMKilled",
           main__restarts="1", pod__done="0")
    oom = JobInfo(job_id="7", state="OUT_OF_MEMORY", exit_code=0)
    st = read_pod_status(tmp_path, CONTAINERS, oom)
    assert st.phase == "Succeeded"
    assert st.as_k8s()["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "OOMKilled"
    # without the job's record, Slurm's verdict stands
    (tmp_path / "status" / "main.last-reason").unlink()
    assert (read_pod_status(tmp_path, CONTAINERS, oom).phase, read_pod_status(tmp_path, CONTAINERS, oom).reason) == (
        "Failed", "OOMKilled")


def test_an_oom_killed_run_of_a_never_pod(tmp_path: Path) -> None:
    _pod(tmp_path, "Never")
    _files(tmp_path, init__started="t1", init__exitcode="0", init__finished="t2", main__started="t3",
           main__exitcode="137", main__finished="t4", main__reason="OOMKilled", pod__done="137")
    st = read_pod_status(tmp_path, CONTAINERS, JobInfo(job_id="7", state="OUT_OF_MEMORY", exit_code=137))
    assert (st.phase, st.reason) == ("Failed", "OOMKilled")
    assert st.as_k8s()["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled"


@pytest.mark.parametrize("policy", ["Always", "OnFailure"])
def test_a_failed_init_container_keeps_the_pod_pending_whatever_the_other_containers_say(policy: str) -> None:
    """getPhase: a regular init container that failed (terminated, or in its back-off after a failed
    run) means the pod is not initialized: Pending under Always/OnFailure, even with a started
    sidecar and a main container whose files already say something (a round between two runs)."""
    from hpkctl.pod.phase import live_phase
    from hpkctl.pod.status import ContainerStatus

    sidecar = ContainerStatus("proxy", True, "running", started_at="t0", started=True, sidecar=True)
    for setup in (ContainerStatus("setup", True, "terminated", exit_code=3),
                  ContainerStatus("setup", True, "waiting", reason="CrashLoopBackOff", last_exit_code=3)):
        main = ContainerStatus("main", False, "terminated", exit_code=0)
        assert live_phase([sidecar, setup, main], restart_policy=policy) == "Pending"


@pytest.mark.parametrize("state", ["RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"])
def test_a_job_slurm_runs_before_its_script_began_is_a_pending_pod(tmp_path: Path, state: str) -> None:
    """Slurm says RUNNING from the allocation on, before the batch script writes job.started (prolog,
    a loaded node): no container has started, so the pod is Pending (getPhase), never Running for a
    moment before its init containers ran (issue 22.2: a Running patch of a pod whose init container
    then failed for ever)."""
    _pod(tmp_path)
    st = read_pod_status(tmp_path, CONTAINERS, JobInfo(job_id="7", state=state, nodes="n1"))
    assert st.phase == "Pending", st
    _files(tmp_path)  # job.started: the containers' files decide from now on
    assert read_pod_status(tmp_path, CONTAINERS, JobInfo(job_id="7", state=state, nodes="n1")).phase == "Pending"


def test_no_mix_of_a_failing_init_containers_files_reads_as_running(tmp_path: Path) -> None:
    """Any combination of the files sbatch/runtime.sh's hpk_run writes, renames (exitcode ->
    last-exitcode...) and removes for a regular init container that only ever exits 3, as a reader
    may see them between its steps or across them (it reads one file at a time): the pod stays
    Pending, whatever its sidecar's and main container's files say."""
    import itertools
    import shutil

    doc = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
           "spec": {"restartPolicy": "Always", "containers": [{"name": "main"}], "initContainers": [
               {"name": "proxy", "restartPolicy": "Always"}, {"name": "setup"}]}}
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "pod.json").write_text(json.dumps(doc))
    # (its finished, last-finished and ready files are times and 0: no read of them can start anything)
    setup = {"setup.started": "t1", "setup.exitcode": "3", "setup.backoff": "10", "setup.restarts": "1",
             "setup.last-exitcode": "3"}
    others = [{}, {"proxy.started": "t0"}, {"proxy.started": "t0", "proxy.ready": "1"}]
    mains = [{}, {"main.started": "t3"}, {"main.started": "t3", "main.exitcode": "0", "main.finished": "t4"}]
    containers = [("proxy", True), ("setup", True), ("main", False)]
    seen = 0
    for n in range(len(setup) + 1):
        for names in itertools.combinations(setup, n):
            for extra in (dict(a, **b) for a in others for b in mains):
                shutil.rmtree(tmp_path / "status", ignore_errors=True)
                _files(tmp_path, **{k.replace(".", "__").replace("-", "_"): v
                                    for k, v in ({k: setup[k] for k in names} | extra).items()})
                st = read_pod_status(tmp_path, containers, RUNNING)
                assert st.phase == "Pending", (names, extra, st.as_k8s())
                seen += 1
    assert seen == 2 ** len(setup) * 9

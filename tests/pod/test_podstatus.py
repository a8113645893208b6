"""Pod status = the job's status files + Slurm's view; Slurm wins for what only Slurm knows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpkctl.jobs import JobInfo
from hpkctl.pod.status import read_pod_status

CONTAINERS = [("init", True), ("main", False)]


def files(pod_dir: Path, **values: str) -> Path:
    sd = pod_dir / "status"
    sd.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (sd / name.replace("__", ".")).write_text(value + "\n")
    return pod_dir


def job(state: str, **kw) -> JobInfo:  # type: ignore[no-untyped-def]
    return JobInfo(job_id="7", state=state, **kw)


def test_pending_in_slurm_queue(tmp_path: Path) -> None:
    st = read_pod_status(tmp_path, CONTAINERS, job("PENDING", reason="Resources"))
    assert (st.phase, st.reason) == ("Pending", "Resources")
    assert "Resources" in st.message


def test_running_with_container_states(tmp_path: Path) -> None:
    files(tmp_path, job__started="2026-01-01T00:00:00Z", pod__ip="10.0.0.5", init__started="t1",
          init__exitcode="0", init__finished="t2", main__started="t3")
    st = read_pod_status(tmp_path, CONTAINERS, job("RUNNING", nodes="n1"))
    assert st.phase == "Running" and st.pod_ip == "10.0.0.5"
    init, main = st.containers
    assert (init.state, init.reason, main.state) == ("terminated", "Completed", "running")
    k8s = st.as_k8s()
    assert k8s["containerStatuses"][0]["state"] == {"running": {"startedAt": "t3"}}
    assert k8s["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_succeeded_from_files_even_after_the_job_left_squeue(tmp_path: Path) -> None:
    files(tmp_path, job__started="t", main__started="t", main__exitcode="0", pod__done="0")
    st = read_pod_status(tmp_path, [("main", False)], job("COMPLETED", exit_code=0))
    assert (st.phase, st.reason, st.exit_code) == ("Succeeded", "Completed", 0)


def test_container_failure(tmp_path: Path) -> None:
    files(tmp_path, job__started="t", main__started="t", main__exitcode="3", pod__done="3")
    st = read_pod_status(tmp_path, [("main", False)], job("FAILED", exit_code=3))
    assert (st.phase, st.reason, st.exit_code) == ("Failed", "Error", 3)
    assert "container main exited with code 3" in st.message


def test_pod_level_failure_reason_from_the_job(tmp_path: Path) -> None:
    files(tmp_path, job__started="t", pod__failed="HostPathCheckFailed\nvolume d: /x is not a Directory",
          pod__done="1")
    st = read_pod_status(tmp_path, CONTAINERS, job("FAILED", exit_code=1))
    assert (st.phase, st.reason) == ("Failed", "HostPathCheckFailed")
    assert st.message == "volume d: /x is not a Directory"
    assert [c.reason for c in st.containers] == ["NotStarted", "NotStarted"]


@pytest.mark.parametrize("state, reason", [("TIMEOUT", "DeadlineExceeded"), ("OUT_OF_MEMORY", "OOMKilled"),
                                           ("NODE_FAIL", "NodeLost"), ("PREEMPTED", "Preempted"),
                                           ("CANCELLED", "Cancelled"), ("BOOT_FAIL", "BootFailure")])
def test_slurm_wins_for_what_only_slurm_knows(tmp_path: Path, state: str, reason: str) -> None:
    files(tmp_path, job__started="t", main__started="t", main__exitcode="137", pod__done="143",
          pod__failed="Terminated\nthe job was cancelled or reached its time limit")
    st = read_pod_status(tmp_path, [("main", False)], job(state, exit_code=0, signal=9))
    assert (st.phase, st.reason) == ("Failed", reason)
    if reason == "OOMKilled":
        assert st.containers[0].reason == "OOMKilled"


@pytest.mark.parametrize("state", ["OUT_OF_MEMORY", "CANCELLED", "TIMEOUT"])
def test_a_jobcomp_record_never_overrides_the_pods_own_status_files(tmp_path: Path, state: str) -> None:
    """Any user can forge lines in the world-readable jobcomp file (issue 20.4): a record from there
    does not turn a pod whose script wrote pod.done 0 into a failure; the same fact from
    scontrol/sacct still wins."""
    files(tmp_path, job__started="t", main__started="t", main__exitcode="0", pod__done="0")
    st = read_pod_status(tmp_path, [("main", False)], job(state, exit_code=0, signal=9, source="jobcomp"))
    assert (st.phase, st.reason, st.containers[0].reason) == ("Succeeded", "Completed", "Completed")
    st = read_pod_status(tmp_path, [("main", False)], job(state, exit_code=0, signal=9, source="scontrol"))
    assert st.phase == "Failed"


def test_job_died_before_its_script_could_write_anything(tmp_path: Path) -> None:
    st = read_pod_status(tmp_path, CONTAINERS, job("FAILED", exit_code=1))
    assert (st.phase, st.reason) == ("Failed", "Error")


def test_job_vanished_without_record(tmp_path: Path) -> None:
    st = read_pod_status(tmp_path, CONTAINERS, None)
    assert (st.phase, st.reason) == ("Failed", "JobVanished")


def test_restarts_and_last_state(tmp_path: Path) -> None:
    files(tmp_path, job__started="t", main__started="t2", main__restarts="2", main__last__exitcode="1",
          main__last__finished="t1")
    # "last__exitcode" → "last.exitcode"; the job writes "main.last-exitcode"
    sd = tmp_path / "status"
    (sd / "main.last.exitcode").rename(sd / "main.last-exitcode")
    (sd / "main.last.finished").rename(sd / "main.last-finished")
    st = read_pod_status(tmp_path, [("main", False)], job("RUNNING"))
    [c] = st.as_k8s()["containerStatuses"]
    assert c["restartCount"] == 2 and c["lastState"]["terminated"]["exitCode"] == 1


@pytest.mark.parametrize("deadline", [None, 600])
@pytest.mark.parametrize("wrote", ["nothing", "terminated"])
def test_a_pilot_pod_whose_allocation_reached_its_time_limit_was_terminated_as_at_a_node_shutdown(
        tmp_path: Path, deadline: int | None, wrote: str) -> None:
    """A pilot pod's job is its allocation (status/job.id is the pod's step J.S): the allocation's
    TIMEOUT is not the pod's deadline (it may have none) but its node going away, reason Terminated as
    the kubelet's node shutdown says, naming the allocation and the profile fields (or the pod's
    activeDeadlineSeconds) that keep a pod out of an allocation ending before it."""
    spec: dict[str, object] = {"containers": [{"name": "main"}]} | (
        {"activeDeadlineSeconds": deadline} if deadline else {})
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "pod.json").write_text(json.dumps({"spec": spec}))
    files(tmp_path, job__id="7.3", job__started="t", main__started="t")
    if wrote == "terminated":  # the time limit's TERM reached the step's script: its stop sequence ran
        files(tmp_path, main__exitcode="143", pod__done="143",
              pod__failed="Terminated\nthe pilot allocation it ran in ended")
    st = read_pod_status(tmp_path, [("main", False)], job("TIMEOUT", exit_code=0, signal=15))
    assert (st.phase, st.reason) == ("Failed", "Terminated"), st
    assert "pilot allocation 7 reached its Slurm time limit" in st.message, st.message
    assert "activeDeadlineSeconds" in st.message and "[pilot] " in st.message, st.message
    assert ("renewal_margin" in st.message) == (deadline is None), st.message
    assert "deadline" not in st.message.replace("activeDeadlineSeconds", ""), st.message


def test_a_pilot_pod_that_finished_before_its_allocation_timed_out_keeps_its_own_status(tmp_path: Path) -> None:
    files(tmp_path, job__id="7.3", job__started="t", main__started="t", main__exitcode="0", pod__done="0")
    st = read_pod_status(tmp_path, [("main", False)], job("TIMEOUT", exit_code=0, signal=15))
    assert (st.phase, st.reason) == ("Succeeded", "Completed")
    files(tmp_path, main__exitcode="143", pod__done="143", pod__deleting="t",
          pod__failed="Terminated\nthe pod was deleted; its containers were stopped with their grace period")
    st = read_pod_status(tmp_path, [("main", False)], job("TIMEOUT", exit_code=0, signal=15))
    assert (st.phase, st.reason, st.message) == (
        "Failed", "Terminated", "the pod was deleted; its containers were stopped with their grace period")


def test_a_job_per_pod_time_limit_is_still_deadline_exceeded(tmp_path: Path) -> None:
    files(tmp_path, job__id="7", job__started="t", main__started="t")
    st = read_pod_status(tmp_path, [("main", False)], job("TIMEOUT", exit_code=0, signal=15))
    assert st.reason == "DeadlineExceeded"


def test_a_status_read_opens_only_the_status_files_that_are_there(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """status/ is listed once: of the ~20 names per container a read asks for, only those written are
    opened (before the job starts, when status/ does not exist yet, none), and the status is the same."""
    opened: list[str] = []
    real = Path.open

    def counting(self: Path, *a, **k):  # type: ignore[no-untyped-def]
        opened.append(self.parent.name + "/" + self.name)
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "open", counting)
    st = read_pod_status(tmp_path, CONTAINERS, job("PENDING", reason="Priority"))
    assert st.phase == "Pending" and [p for p in opened if p.startswith("status/")] == []
    files(tmp_path, job__started="2026-01-01T00:00:00Z", init__started="t1", init__exitcode="0", main__started="t3")
    opened.clear()
    st = read_pod_status(tmp_path, CONTAINERS, job("RUNNING", nodes="n1"))
    assert [c.state for c in st.containers] == ["terminated", "running"]
    assert sorted(p for p in opened if p.startswith("status/")) == [
        "status/init.exitcode", "status/init.started", "status/job.started", "status/main.started"]

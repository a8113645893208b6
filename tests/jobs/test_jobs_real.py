"""``Slurm`` against the real local Slurm (``ci/slurm-up``), run as the normal user ``hpk``.

Each test drives a real ``Slurm`` object in a process of user hpk (``hpk_driver.py``) and asserts
on what it returned. Nothing here measures time; waits are bounded polls.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slurm

JOB_NAME = "hpkctl-jobs-test"  # conftest cancels this session's leftovers of this name (run in hpk_dir)

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL"}


def submit(script: Path, *extra: str) -> dict[str, Any]:
    out = script.parent / "%j.out"
    return {"method": "submit", "args": [str(script)], "kwargs": {"extra_args": [f"--job-name={JOB_NAME}", f"--output={out}", "--time=5", *extra]}}


def wait_for_file(path: Path, what: str) -> None:
    for _ in range(600):
        if path.exists():
            return
        time.sleep(0.1)
    pytest.fail(f"{what}: {path} never appeared")


def test_completed_job_end_to_end(as_hpk, job_script) -> None:
    script = job_script("ok", "echo hello from $SLURM_JOB_ID")
    job, queried, waited, final, outcome = as_hpk(
        [
            submit(script),
            {"method": "query", "args": [["$0"]]},
            {"method": "wait_for", "args": [["$0"]]},
            {"method": "final", "args": ["$0"]},
            {"method": "pod_outcome", "args": ["$0"]},
        ]
    )
    assert isinstance(job, str) and job.isdigit(), job
    assert queried[job]["state"] in {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED"}
    assert queried[job]["source"] == "squeue" and queried[job]["exit_code"] is None
    assert waited[job]["state"] == "COMPLETED" and waited[job]["exit_code"] == 0
    assert final["source"] == "scontrol" and final["state"] == "COMPLETED"
    assert final["start_time"] and final["end_time"] and final["nodes"]
    assert outcome == {"phase": "Succeeded", "reason": "Completed", "message": "the job completed successfully", "exit_code": 0}
    assert (script.parent / f"{job}.out").read_text().strip() == f"hello from {job}"


def test_exit_code_reaches_the_pod(as_hpk, job_script) -> None:
    script = job_script("exit3", "exit 3")
    job, waited, outcome = as_hpk(
        [submit(script), {"method": "wait_for", "args": [["$0"]]}, {"method": "pod_outcome", "args": ["$0"]}]
    )
    assert (waited[job]["state"], waited[job]["exit_code"], waited[job]["signal"]) == ("FAILED", 3, 0)
    assert (outcome["phase"], outcome["reason"], outcome["exit_code"]) == ("Failed", "Error", 3)
    assert "exit code 3" in outcome["message"]


def test_cancel_running_job_and_cancel_again(as_hpk, job_script) -> None:
    script = job_script("sleeper", "sleep 300")
    job, started, c1, waited, c2, c3, outcome = as_hpk(
        [
            submit(script),
            {"method": "wait_started", "args": [["$0"]]},
            {"method": "cancel", "args": ["$0"]},
            {"method": "wait_for", "args": [["$0"]]},
            {"method": "cancel", "args": ["$0"]},
            {"method": "cancel", "args": ["$0"], "kwargs": {"signal": "TERM"}},
            {"method": "pod_outcome", "args": ["$0"]},
        ]
    )
    assert started[job]["state"] in {"RUNNING", "CONFIGURING"}
    assert c1 is None and c2 is None and c3 is None  # already-finished jobs cancel quietly
    assert waited[job]["state"] == "CANCELLED"
    assert (outcome["phase"], outcome["reason"]) == ("Failed", "Cancelled")


def test_signal_reaches_the_batch_script(as_hpk, job_script, hpk_dir) -> None:
    ready = hpk_dir / "trap-ready"
    script = job_script(
        "trap",
        f"""
trap 'echo got USR1; exit 42' USR1
touch {ready}
for _ in $(seq 3000); do sleep 0.1; done
""",
    )
    (job,) = as_hpk([submit(script)])
    wait_for_file(ready, "the job never set its trap")
    signalled, waited = as_hpk(
        [{"method": "cancel", "args": [job], "kwargs": {"signal": "USR1"}}, {"method": "wait_for", "args": [[job]]}]
    )
    assert signalled is None
    assert (waited[job]["state"], waited[job]["exit_code"]) == ("FAILED", 42)
    assert "got USR1" in (hpk_dir / f"{job}.out").read_text()


def test_out_of_memory_is_oomkilled(as_hpk, job_script, cluster) -> None:
    if not cluster["memory_enforced"]:
        pytest.skip("this Slurm does not enforce --mem (needs task/cgroup with ConstrainRAMSpace=yes)")
    script = job_script("oom", "python3 -c 'x = bytearray(400 * 1024 * 1024); import time; time.sleep(5)'")
    job, waited, outcome = as_hpk(
        [submit(script, "--mem=50M"), {"method": "wait_for", "args": [["$0"]]}, {"method": "pod_outcome", "args": ["$0"]}]
    )
    assert waited[job]["state"] == "OUT_OF_MEMORY"
    assert (outcome["phase"], outcome["reason"], outcome["exit_code"]) == ("Failed", "OOMKilled", 137)


def test_invalid_partition_is_typed(as_hpk, job_script) -> None:
    script = job_script("never", "exit 0")
    (err,) = as_hpk([submit(script, "--partition=nosuch-hpk")])
    assert err["error"] == "InvalidPartition" and err["reason"] == "InvalidPartition"
    assert "SubmitError" in err["mro"] and "HpkError" in err["mro"]
    assert "invalid partition specified: nosuch-hpk" in err["message"]
    assert "Invalid partition name specified" in err["message"]
    assert "slurm.partition" in err["hint"]


def test_unsatisfiable_memory_is_typed(as_hpk, job_script) -> None:
    script = job_script("never", "exit 0")
    (err,) = as_hpk([submit(script, "--mem=100000000")])  # 100 TB
    assert err["error"] == "ResourcesUnavailable"
    assert "Requested node configuration is not available" in err["message"]


def test_inherited_slurm_variables_do_not_leak(as_hpk, job_script) -> None:
    # As if the kubelet ran inside a Slurm job of another partition, with a user's squeue format.
    env = {
        "SLURM_JOB_ID": "1",
        "SLURM_CONF": "/nonexistent/slurm.conf",
        "SBATCH_PARTITION": "nosuch-hpk",
        "SBATCH_TIMELIMIT": "not-a-time",
        "SQUEUE_FORMAT": "%i",
        "SLURM_TIME_FORMAT": "relative",
    }
    script = job_script("env", "env | grep -c '^SBATCH_PARTITION=' || true")
    seen, job, queried, waited = as_hpk(
        [
            {"method": "environ"},
            submit(script),
            {"method": "query", "args": [["$1"]]},
            {"method": "wait_for", "args": [["$1"]]},
        ],
        env=env,
    )
    assert seen["SBATCH_PARTITION"] == "nosuch-hpk"  # the driver really had them
    assert isinstance(job, str) and job.isdigit(), job
    assert queried[job]["start_time"] is not None or queried[job]["state"] == "PENDING"
    assert waited[job]["state"] == "COMPLETED"


def test_query_many_jobs_in_one_call_and_pending_reasons(as_hpk, job_script) -> None:
    script = job_script("held", "exit 0")
    results = as_hpk(
        [
            submit(script, "--hold"),
            submit(script, "--hold"),
            submit(script, "--hold"),
            {"method": "query", "args": [["$0", "$1", "$2", "4000001"]]},
            {"method": "query", "args": [["4000002"]]},
            {"method": "pod_outcome", "args": ["$0"]},
            {"method": "cancel", "args": ["$0"]},
            {"method": "cancel", "args": ["$1"]},
            {"method": "cancel", "args": ["$2"]},
            {"method": "wait_for", "args": [["$0", "$1", "$2"]]},
        ]
    )
    ids, queried, unknown, pending, waited = results[:3], results[3], results[4], results[5], results[9]
    assert sorted(queried) == sorted(ids)
    assert all(queried[j]["state"] == "PENDING" and queried[j]["reason"] == "JobHeldUser" for j in ids)
    assert unknown == {}
    assert (pending["phase"], pending["reason"]) == ("Pending", "JobHeldUser")
    assert all(waited[j]["state"] == "CANCELLED" for j in ids)


def test_final_sources_on_this_cluster(as_hpk, job_script, cluster) -> None:
    script = job_script("rc7", "exit 7")
    job, waited, accounting = as_hpk(
        [submit(script), {"method": "wait_for", "args": [["$0"]]}, {"method": "probe_accounting"}]
    )
    assert waited[job]["exit_code"] == 7
    assert accounting is cluster["accounting"]
    path = cluster["jobcomp_file"]
    if not path:
        pytest.skip("this cluster has no jobcomp/filetxt file")
    record = None
    for _ in range(100):  # slurmctld appends the line as the job completes
        (record,) = as_hpk([{"method": "jobcomp", "args": [path, job]}])
        if record:
            break
        time.sleep(0.1)
    assert record is not None, f"job {job} not in {path}"
    assert (record["source"], record["state"], record["exit_code"]) == ("jobcomp", "FAILED", 7)


def test_user_jobs_lists_this_users_jobs_with_their_comments(as_hpk, job_script) -> None:
    script = job_script("held", "exit 0")
    comment = "hpk-uid=0f0e-test hpk-pod=default/x a|b \"quoted\" #not-a-comment"
    job, listed, _ = as_hpk(
        [
            submit(script, "--hold", f"--comment={comment}"),
            {"method": "user_jobs"},
            {"method": "cancel", "args": ["$0"]},
        ]
    )
    mine = [j for j in listed if j["job_id"] == job]
    assert mine == [{"job_id": job, "state": "PENDING", "comment": comment}], listed

"""Pilot allocations and pod steps (hpkctl/jobs/alloc.py, steps.py) on the real local Slurm, as user
hpk: what those modules' docstrings say was measured is proven here on every run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs.alloc import hold_args
from hpkctl.resources import data_dir

from tests.support.slurm import MULTI_CONF, SINGLE_CONF, require_cluster

pytestmark = pytest.mark.slurm

DRIVER = Path(__file__).parent / "pilot_driver.py"
HOLDER = str(data_dir("sbatch") / "pilot-holder.sh")
COMMENT = "hpk-pilot kubelet=test node=pilot-test"
TEST_JOB_NAME = "hpkctl-jobs-test"  # the jobs conftest cancels this session's leftovers of this name (run in hpk_dir)


def drive(hpk_dir: Path, conf: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    argv = [sys.executable, str(DRIVER), json.dumps({"conf": conf, "calls": calls})]
    if os.geteuid() == 0:
        argv = ["runuser", "-u", "hpk", "--", *argv]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=hpk_dir, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


def holder(hpk_dir: Path, **shape: Any) -> tuple[str, dict[str, Any]]:
    args = hold_args(name=TEST_JOB_NAME, comment=COMMENT, partition="", time_limit="10",
                     output=hpk_dir / "holder-%j.out", gres_name="gpu", **shape)
    return ("hold", {"script": HOLDER, "args": args, "script_args": ["5"]})


def step(hpk_dir: Path, name: str, body: str, *, cpus: int, node: str = "") -> tuple[str, dict[str, Any]]:
    return ("start_step", {"job_id": "$job", "argv": ["bash", "-c", body], "name": name, "node": node, "cpus": cpus,
                           "memory_mb": 200, "output": str(hpk_dir / f"{name}.out"), "workdir": str(hpk_dir),
                           "srun_log": str(hpk_dir / f"{name}.srun")})


def test_steps_are_bounded_listed_signalled_and_the_idle_holder_releases_itself(hpk_dir: Path) -> None:
    require_cluster(SINGLE_CONF, 1)
    # SLURM_CPUS_ON_NODE: the step's CPUs as Slurm allotted them (nproc can say fewer here: slurm.conf
    # gives this 2-core machine 16 CPUs, and a cpuset keeps only the CPU ids that exist)
    # the trap first: {n}.id, which the test waits for before it sends TERM, then says it is set
    body = ('trap "echo TERM >{n}.term; exit 143" TERM; '
            'echo "$SLURM_JOB_ID.$SLURM_STEP_ID $SLURM_CPUS_ON_NODE $(nproc)" >{n}.id; '
            "while :; do sleep 0.1; done")
    (job, running, _, _, a_ids, b_ids, _, c_exit, a_step, b_step, listed, _, term, a_exit, _, b_exit,
     gone) = drive(hpk_dir, SINGLE_CONF, [
        holder(hpk_dir, nodes=0, cpus=4, memory_mb=1000, gpus=0),
        ("wait_running", {"job_id": "$job"}),
        step(hpk_dir, "pod-a", body.format(n="pod-a"), cpus=2),
        step(hpk_dir, "pod-b", body.format(n="pod-b"), cpus=2),
        ("wait_file", {"path": str(hpk_dir / "pod-a.id")}),
        ("wait_file", {"path": str(hpk_dir / "pod-b.id")}),
        step(hpk_dir, "pod-c", "true", cpus=1),  # the allocation's 4 CPUs are taken: srun fails at once
        ("step_exit", {"name": "pod-c"}),
        ("step_id", {"job_id": "$job", "name": "pod-a"}),
        ("step_id", {"job_id": "$job", "name": "pod-b"}),
        ("steps", {}),
        ("cancel_step", {"step_id": "$8", "signal": "TERM"}),
        ("wait_file", {"path": str(hpk_dir / "pod-a.term")}),
        ("step_exit", {"name": "pod-a"}),
        ("cancel_step", {"step_id": "$9"}),
        ("step_exit", {"name": "pod-b"}),
        ("wait_gone", {"job_id": "$job", "timeout": 60}),
    ])
    assert isinstance(job, str) and job.isdigit(), job
    assert running["nodes"] == {"vm": {"cpus": 4, "memory_mb": 1000, "gpus": 0}}
    assert running["comment"] == COMMENT and running["end"] is not None
    assert a_ids.split()[:2] == [a_step, "2"] and b_ids.split()[:2] == [b_step, "2"]  # own step, own 2 CPUs
    assert int(a_ids.split()[2]) <= 2 and int(b_ids.split()[2]) <= 2  # the cpuset holds no more
    assert c_exit == 1 and "busy" in (hpk_dir / "pod-c.srun").read_text()
    mine = {s["name"]: s["step_id"] for s in listed if s["job_id"] == job}
    assert mine == {"pod-a": a_step, "pod-b": b_step}
    assert term.strip() == "TERM" and a_exit == 143  # the task trapped TERM and ended by itself
    assert b_exit != 0 and not (hpk_dir / "pod-b.term").exists()  # killed: no TERM to trap
    assert gone is True or gone["state"] == "COMPLETED", gone  # the holder ended itself once idle
    assert "releasing the allocation" in (hpk_dir / f"holder-{job}.out").read_text()


def test_a_whole_node_allocation_holds_each_node_whole_and_a_step_runs_on_the_node_named(hpk_dir: Path) -> None:
    require_cluster(MULTI_CONF, 3)
    job, running = drive(hpk_dir, MULTI_CONF, [holder(hpk_dir, nodes=2, cpus=0, memory_mb=0, gpus=0),
                                               ("wait_running", {"job_id": "$job"})])
    try:
        # --mem=0: each node's memory, not DefMemPerCPU x CPUs
        assert list(running["nodes"].values()) == [{"cpus": 8, "memory_mb": 6600, "gpus": 0}] * 2, running
        second = sorted(running["nodes"])[1]
        _, _, node, code = drive(hpk_dir, MULTI_CONF, [
            ("allocation", {"job_id": job}),
            ("start_step", {"job_id": job, "argv": ["bash", "-c", "echo $SLURMD_NODENAME >where"], "name": "pod-n",
                            "node": second, "cpus": 8, "memory_mb": 6600, "output": str(hpk_dir / "pod-n.out"),
                            "workdir": str(hpk_dir), "srun_log": str(hpk_dir / "pod-n.srun")}),
            ("wait_file", {"path": str(hpk_dir / "where")}),
            ("step_exit", {"name": "pod-n"}),
        ])
        assert node.strip() == second and code == 0  # a whole node's CPUs and memory, on the node asked for
    finally:
        drive(hpk_dir, MULTI_CONF, [("cancel", {"job_id": job})])

"""The kubelet under attack and faults (issue 20: nothing run twice, no other user or tenant gets
in): lost records, Slurm requeues, a second kubelet, pods named like the cluster's own jobs, the
HTTPS API's authorisation. Real Slurm, the API stand-in, one mini cloud for the module."""

from __future__ import annotations

import shutil
import signal
import subprocess
from typing import Any

import pytest

from tests.support.cluster import Cluster, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.standin]


def jobs_of(uid: str) -> list[str]:
    """The ids of every job slurmctld knows (pending, running, finished until MinJobAge) whose comment
    carries pod ``uid``."""
    out = subprocess.run(["squeue", "--noheader", "--all", "--states=all", "--format=%i %k"], capture_output=True,
                         text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if f" hpk-uid={uid} " in f"{line} "]


def short_pod(name: str, command: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", command]}]}}


def test_lost_records_never_run_a_pod_twice(cluster: Cluster) -> None:
    """The kubelet's records vanish while it is down (a purged scratch, a changed state_dir): the
    restarted kubelet adopts the running pod's job (found by its uid) instead of submitting a second
    one, and never submits the finished pod again."""
    done = cluster.create(short_pod("lost-done", "echo once"))["metadata"]["uid"]
    running = cluster.create(short_pod("lost-running", "sleep 300"))["metadata"]["uid"]
    cluster.wait_phase("lost-done", "Succeeded")
    cluster.wait_phase("lost-running", "Running")
    job = cluster.job_id("lost-running")
    cluster.stop_process(cluster.kubelet, signal.SIGKILL)
    shutil.rmtree(cluster.root / "hpk-state" / "kubelet")
    # the finished pod's directory goes too: only the API's terminal phase is left to stop a rerun
    shutil.rmtree(cluster.root / "hpk-state" / "pods" / done)
    cluster.start_kubelet()
    wait_for("the running pod's job to be adopted", lambda: "adopting job" in cluster.log("kubelet")
             and "lost-running" in cluster.log("kubelet"), timeout=60)
    assert jobs_of(running) == [job]
    assert len(jobs_of(done)) == 1
    assert cluster.phase("lost-done") == "Succeeded"
    assert cluster.phase("lost-running") == "Running"
    cluster.kubectl("delete", "pod", "lost-running", "--wait=false")
    wait_for("the adopted job to be cancelled by the delete", lambda: cluster.pod("lost-running") is None,
             timeout=60)
    state = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={job}", "--format=%T"],
                           capture_output=True, text=True, check=False).stdout.strip()
    assert state in ("CANCELLED", "COMPLETED", "COMPLETING"), state

"""The pilot kubelet's pods of several tasks and nodes on the 3-node Slurm (``ci-multi``): an MPI
pod's ranks are a step of their own across two nodes of an allocation the kubelet holds, as a job of
its own runs them (``srun --mpi=...``); a pod of two tasks gets two; a pod of more nodes than the
profile's allocations span fails with a reason and an event that name the profile field."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster, running_cluster
from tests.support.slurm import MULTI_CONF, as_hpk
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.standin]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # allocations of two whole nodes of the three (8 CPUs each), given back soon after the test
    for c in running_cluster(lambda root: "\n[pilot]\nenabled = true\nnodes = 2\nmax_allocations = 1\n"
                             "time_limit = \"00:10:00\"\nidle_release = 10\n", multi=True):
        try:
            yield c
        finally:
            job = c.job_id("pilot-mpi")
            if job:  # the holder would give it back itself after 2 x idle_release
                as_hpk(["scancel", job], slurm_conf=MULTI_CONF)


def tasks_pod(name: str, flags: str, script: str, **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"slurm-job.hpk.io/flags": flags, **annotations}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script]}]}}


RANK = 'echo "rank=$PMI_RANK size=$PMI_SIZE task=$SLURM_PROCID/$SLURM_NTASKS node=$SLURMD_NODENAME"'


def test_an_mpi_pod_and_a_two_task_pod_run_their_tasks_as_steps_of_a_held_allocation(cluster: Cluster) -> None:
    cluster.create(tasks_pod("pilot-mpi", "--nodes=2 --ntasks=2", RANK, **{"slurm-job.hpk.io/mpi-flags": "--mpi=pmi2"}))
    cluster.create(tasks_pod("pilot-tasks", "--ntasks=2", 'echo "task=$SLURM_PROCID/$SLURM_NTASKS"'))
    for name in ("pilot-mpi", "pilot-tasks"):
        p = cluster.wait_phase(name, "Succeeded", "Failed", timeout=180)
        assert p["status"]["phase"] == "Succeeded", p["status"]
    job = cluster.job_id("pilot-mpi")
    assert job and cluster.job_id("pilot-tasks") == job  # both packed into the one allocation
    logs = cluster.kubectl("logs", "pilot-mpi", "-c", "c").stdout.splitlines()
    ranks = sorted(line.rsplit(" ", 1)[0] for line in logs)
    # PMI (srun --mpi=pmi2) tells each rank its rank and the size, as it tells a job's ranks
    assert ranks == ["rank=0 size=2 task=0/2", "rank=1 size=2 task=1/2"], logs
    assert len({line.rsplit("node=", 1)[1] for line in logs}) == 2, logs  # one rank on each of two nodes
    tasks = cluster.kubectl("logs", "pilot-tasks", "-c", "c").stdout.splitlines()
    assert sorted(tasks) == ["task=0/2", "task=1/2"], tasks


def test_a_restarted_kubelet_books_a_running_mpi_pod_on_each_of_its_nodes(cluster: Cluster) -> None:
    """The kubelet restarts while an MPI pod's ranks run on two nodes of its allocation: the next one
    books the pod again on both (Slurm's node names, which its script recorded in status/job.node; all
    of ci-multi's nodes share one host name), so no new pod is packed onto the cores its ranks hold;
    the pod runs on and succeeds, having run once."""
    out = Path(tempfile.mkdtemp(prefix="hpk-pilot-", dir="/tmp"))
    out.chmod(0o777)
    try:
        pod = tasks_pod("pilot-mpi-adopt", "--nodes=2 --ntasks=2", 'echo ran >>/out/ran-$PMI_RANK; '
                        "while [ ! -e /out/go ]; do sleep 0.2; done", **{"slurm-job.hpk.io/mpi-flags": "--mpi=pmi2"})
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
        pod["spec"]["volumes"] = [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}]
        uid = cluster.create(pod)["metadata"]["uid"]
        wait_for("both ranks", lambda: all((out / f"ran-{r}").exists() for r in (0, 1)), timeout=180)
        job = cluster.job_id("pilot-mpi-adopt")
        recorded = (cluster.root / "hpk-state" / "pods" / uid / "status" / "job.node").read_text().strip()
        nodes = recorded.split(",")
        assert len(set(nodes)) == 2 and set(nodes) <= {"n1", "n2", "n3"}, recorded  # Slurm's names, not 'vm'
        assert cluster.stop_process(cluster.kubelet) is not None
        cluster.start_kubelet()
        line = f"pod default/pilot-mpi-adopt booked again in allocation {job} on {recorded} (1 CPUs, "
        wait_for("the adopted pod booked on both nodes", lambda: line in cluster.log("kubelet"), timeout=60)
        (out / "go").touch()
        p = cluster.wait_phase("pilot-mpi-adopt", "Succeeded", "Failed", timeout=90)
        assert p["status"]["phase"] == "Succeeded", p["status"]
        assert [(out / f"ran-{r}").read_text() for r in (0, 1)] == ["ran\n", "ran\n"]  # once: adopted
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_an_mpi_rank_oom_killed_on_its_second_node_makes_the_pod_oomkilled(cluster: Cluster) -> None:
    """Rank 1 runs on the pod's second node, away from its script's step, and outgrows the ranks' memory
    there (the cgroup's OOM killer, Slurm's ConstrainRAMSpace): the container and the pod say
    OOMKilled, as for a container killed on the first node."""
    grow = ('if [ "$SLURM_PROCID" = 1 ]; then head -c 419430400 /dev/zero | tail -c 314572800 >/dev/null; fi; '
            'echo "rank $SLURM_PROCID on $SLURMD_NODENAME: $?"')
    cluster.create(tasks_pod("pilot-mpi-oom", "--nodes=2 --ntasks=2 --mem=100M", grow,
                             **{"slurm-job.hpk.io/mpi-flags": "--mpi=pmi2"}))
    p = cluster.wait_phase("pilot-mpi-oom", "Succeeded", "Failed", timeout=180)
    [c] = p["status"]["containerStatuses"]
    assert (p["status"]["phase"], p["status"].get("reason"), c["state"]["terminated"]["reason"]) == \
        ("Failed", "OOMKilled", "OOMKilled"), (p["status"], cluster.kubectl("logs", "pilot-mpi-oom").stdout)


def test_a_pod_of_more_nodes_than_an_allocation_spans_fails_naming_the_profile_field(cluster: Cluster) -> None:
    cluster.create(tasks_pod("pilot-wide", "--nodes=3 --ntasks=3", "true"))
    p = cluster.wait_phase("pilot-wide", "Failed", timeout=60)
    assert p["status"]["reason"] == "PilotTooLarge", p["status"]
    assert "[pilot] nodes = 3" in p["status"]["message"], p["status"]
    # events are posted on a thread of their own, after the status
    event = wait_for("the pod's Failed event", lambda: next((e for e in cluster.events("pilot-wide")
                                                              if e["reason"] == "Failed"), None), timeout=30)
    assert event["message"].startswith("PilotTooLarge: ") and "[pilot] nodes = 3" in event["message"], event

"""A restarted pilot kubelet books the pods an earlier one left running with their whole room: an MPI
pod's ranks hold CPUs and memory on each of its nodes, so it is booked on all of them (from its
script's status/job.node, Slurm's node names; else, for a pod directory whose job.node is the host
name, from Slurm's running steps), and new pods are not packed onto the cores its ranks still use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs.alloc import NodeShare
from hpkctl.jobs.steps import StepShare
from hpkctl.pilot.plan import Held, Need
from hpkctl.provider.pilotpod import PilotPodProvider
from hpkctl.provider.records import PodRecord, Records
from hpkctl.sites import load_site
from tests.support.kubelet_fakes import FakeSlurm


class Steps(FakeSlurm):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def step_shares(self) -> list[StepShare]:
        self.asked += 1
        return [StepShare("41.4", "41", "n1", 0, 0, 0, "mpi"),  # the script's step (--overlap: no room)
                StepShare("41.5", "41", "n1,n2", 1, 512, 0, "mpi-ranks")]


def _mpi_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "mpi", "namespace": "default", "uid": "u-m",
                         "annotations": {"slurm-job.hpk.io/flags": "--nodes=2 --ntasks=2 --mem=512M",
                                         "slurm-job.hpk.io/mpi-flags": "--mpi=pmi2"}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "100"]}]}}


@pytest.mark.parametrize("job_node", ["n1,n2", "vm"])
def test_an_adopted_mpi_pod_is_booked_on_each_of_its_nodes(tmp_path: Path, job_node: str) -> None:
    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)})})
    slurm = Steps()
    provider = PilotPodProvider(slurm=slurm, profile=profile, records=Records(tmp_path / "kubelet"),  # type: ignore[arg-type]
                                node="n", state_dir=tmp_path)
    # the allocation the next kubelet adopted: two nodes of 4 CPUs
    provider.pool._helds["41"] = Held("41", "RUNNING", {"n1": NodeShare(4, 4000), "n2": NodeShare(4, 4000)})
    pod_dir = tmp_path / "pods" / "u-m"
    (pod_dir / "job").mkdir(parents=True)
    (pod_dir / "status").mkdir()
    (pod_dir / "job" / "pod.json").write_text(json.dumps(_mpi_pod()))
    (pod_dir / "status" / "job.id").write_text("41.4\n")
    (pod_dir / "status" / "job.node").write_text(job_node + "\n")  # "vm": an older runtime's host name
    Records(tmp_path / "kubelet").save(PodRecord(uid="u-m", namespace="default", name="mpi", pod_dir=str(pod_dir),
                                                 job_id="41"))
    provider.leftovers()
    assert provider.pool.where("u-m") == ("41", "n1,n2")
    [held] = provider.pool.helds()
    # one rank on each node, 1 CPU and 512 MB each: both nodes hold it, as its ranks do
    assert [held.used(n) for n in ("n1", "n2")] == [NodeShare(1, 512), NodeShare(1, 512)]
    assert slurm.asked == (job_node == "vm")  # Slurm asked only when the files cannot say
    # the rest of each node is free, and no more: a 4-CPU pod fits on neither
    assert provider.pool.place(Need("big", 4, 100)) is None
    assert provider.pool.place(Need("small", 3, 100)) is not None

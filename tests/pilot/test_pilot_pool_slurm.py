"""hpkctl/pilot/pool.py on the real local Slurm, as user hpk: an allocation reaching its time limit
with a successor in place (issue 23's proof, about 35 s), and pods packed across the nodes of a
whole-node allocation on the 3-node cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.pilot.pool_driver import MARGIN
from tests.support.slurm import MULTI_CONF, SINGLE_CONF, require_cluster

pytestmark = pytest.mark.slurm
DRIVER = Path(__file__).parent / "pool_driver.py"


def drive(scenario: str) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="hpk-pilot-pool-", dir="/tmp"))
    state.chmod(0o777)
    argv = [sys.executable, str(DRIVER), scenario, str(state), f"test-{uuid.uuid4().hex[:6]}"]
    if os.geteuid() == 0:
        argv = ["runuser", "-u", "hpk", "--", *argv]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(Path(__file__).parents[2]),
           "HOME": os.path.expanduser("~hpk")}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=state, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return dict(json.loads(proc.stdout))
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_a_successor_takes_new_pods_before_the_first_allocation_ends() -> None:
    """The first allocation (1 minute) runs a pod until its last margin; a successor is requested and
    runs while the first still has more than the renewal margin; the first pod finishes where it ran; a pod placed in the
    first allocation's last margin goes to the successor, and the first, now empty and too short for
    any pod, is released: nothing lost, nothing orphaned."""
    require_cluster(SINGLE_CONF, 1)
    got = drive("renewal")
    first, successor = got["first"], got["successor"]
    assert successor != first
    assert got["first_left_when_successor_ran"] >= MARGIN  # in place before the first stopped taking pods
    assert got["p1_exit"] == 0  # the first pod finished in the first allocation
    assert got["second_pod_in"] == successor and got["p2_exit"] == 0  # and ran there
    assert got["released"] == [first] and got["held_after"] == [successor]


def test_pods_are_packed_across_the_nodes_of_a_whole_node_allocation() -> None:
    """Whole-node allocations of two nodes (--exclusive --mem=0) on the 3-node cluster: two pods of 5
    CPUs each go to different nodes of one allocation (a node has 8) and their steps run there; exec
    reaches each on its node (not only the allocation's first); a third finds no room and, with
    max_allocations 1, no place."""
    require_cluster(MULTI_CONF, 3)
    got = drive("across")
    assert got["shape"] == [2, 8]  # a node's CPUs from sinfo
    (job_a, node_a), (job_b, node_b) = got["spots"]
    assert job_a == job_b and node_a != node_b
    assert got["exits"] == [0, 0] and got["ran_on"] == [node_a, node_b]
    assert got["exec_on"] == [node_a, node_b]  # exec reaches each pod's step on its own node
    assert got["third"] is None

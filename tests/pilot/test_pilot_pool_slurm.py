"""hpkctl/pilot/pool.py on the real local Slurm, as user hpk: an allocation reaching its time limit
with a successor in place (issue 23's proof), in about 70 s."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.support.slurm import SINGLE_CONF, require_cluster

pytestmark = pytest.mark.slurm
DRIVER = Path(__file__).parent / "pool_driver.py"


def test_a_successor_takes_new_pods_before_the_first_allocation_ends() -> None:
    """The first allocation (2 minutes) runs a pod; a successor is requested and runs while the first
    still has more than the 55 s margin; the first pod finishes where it ran; a pod placed in the first
    allocation's last 55 s goes to the successor, and the first, now empty and too short for any pod,
    is released: nothing lost, nothing orphaned."""
    require_cluster(SINGLE_CONF, 1)
    state = Path(tempfile.mkdtemp(prefix="hpk-pilot-pool-", dir="/tmp"))
    state.chmod(0o777)
    argv = [sys.executable, str(DRIVER), str(state), f"test-{uuid.uuid4().hex[:6]}"]
    if os.geteuid() == 0:
        argv = ["runuser", "-u", "hpk", "--", *argv]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(Path(__file__).parents[2]),
           "HOME": os.path.expanduser("~hpk")}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=state, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(proc.stdout)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    first, successor = got["first"], got["successor"]
    assert successor != first
    assert got["first_left_when_successor_ran"] >= 55  # in place before the first stopped taking pods
    assert got["p1_exit"] == 0  # the first pod finished in the first allocation
    assert got["second_pod_in"] == successor
    assert got["released"] == [first] and got["held_after"] == [successor]

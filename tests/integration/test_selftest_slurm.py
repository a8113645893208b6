"""``hpkctl selftest``: the battery through the real local Slurm as user hpk must pass entirely (what
an admin runs on a new site), and each case's check refuses what a broken site would give."""

from __future__ import annotations

import pytest

from hpkctl.local.selftest import ARGS, ENV_VALUE, cases
from hpkctl.pod.status import ContainerStatus, PodStatus
from tests.support.hpk import Hpk

NAMES = ["hello", "env and args", "volumes", "init order", "probe", "delete with grace"]


def _rows(stdout: str) -> dict[str, str]:
    rows = {}
    for line in stdout.splitlines():
        for name in NAMES + ["mpi on two nodes", "exec and logs"]:
            if line.startswith(name + " "):
                rows[name] = line[len(name):].split()[0]
    return rows


@pytest.mark.slurm
@pytest.mark.standin
def test_selftest_passes_on_the_local_slurm(hpk: Hpk) -> None:
    r = hpk.hpkctl("selftest", "--site", "ci", timeout=700)
    rows = _rows(r.stdout)
    assert r.rc == 0, r.output
    assert all(rows.get(n) == "PASS" for n in NAMES), r.output
    assert rows.get("mpi on two nodes") == "SKIP", r.output  # the ci partition has one node
    assert "/logs/c.log" in r.stdout


@pytest.mark.slurm
@pytest.mark.standin
def test_selftest_runs_the_mpi_step_on_two_nodes_where_the_partition_has_them(hpk_multi: Hpk) -> None:
    r = hpk_multi.hpkctl("selftest", "--site", "ci-multi", timeout=700)
    assert r.rc == 0, r.output
    assert _rows(r.stdout).get("mpi on two nodes") == "PASS", r.output


def _done(phase: str = "Succeeded", restarts: int = 0) -> PodStatus:
    c = ContainerStatus(name="c", init=False, state="terminated", restart_count=restarts) if restarts else None
    return PodStatus(phase, "", "", 0, None, None, None, [c] if c else [])


def test_each_check_refuses_what_a_broken_site_gives() -> None:
    by_name = {c.name: c for c in cases(multi_node=True)}
    good = f"[{ENV_VALUE}]\n" + "".join(f"<{a}>\n" for a in ARGS)
    assert by_name["env and args"].check(_done(), good) == ""
    assert by_name["env and args"].check(_done(), good.replace("ü", "?"))  # a byte changed on the way
    assert by_name["hello"].check(_done("Failed"), "hello world\n")
    assert by_name["init order"].check(_done(), "213\n")
    assert by_name["volumes"].check(_done(), "config-value\n\nfrom-init\n")  # the Secret did not arrive
    assert by_name["probe"].check(_done(), "second run\n")  # ended without the probe's restart
    assert by_name["probe"].check(_done(restarts=1), "second run\n") == ""
    assert by_name["delete with grace"].check(_done(), "up\n")  # killed without its TERM
    assert by_name["mpi on two nodes"].check(_done(), "rank=0 n1\nrank=1 n1\n")
    assert by_name["mpi on two nodes"].check(_done(), "rank=0 n1\nrank=1 n2\n") == ""

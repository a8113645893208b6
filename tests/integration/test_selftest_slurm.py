"""``hpkctl selftest``: the battery through the real local Slurm as user hpk must pass entirely (what
an admin runs on a new site), and each case's check refuses what a broken site would give."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpkctl.local.selftest import ARGS, ENV_VALUE, cases
from hpkctl.pod.status import ContainerStatus, PodStatus
from tests.support.ci import missing
from tests.support.hpk import Hpk

NAMES = ["hello", "env and args", "volumes", "init order", "probe", "delete with grace"]


def _rows(stdout: str) -> dict[str, str]:
    rows = {}
    for line in stdout.splitlines():
        for name in NAMES + ["mpi on two nodes", "exec and logs", "termination message"]:
            if line.startswith(name + " "):
                rows[name] = line[len(name):].split()[0]
    return rows


@pytest.mark.slurm
@pytest.mark.standin
def test_selftest_passes_on_the_local_slurm(hpk: Hpk) -> None:
    # a site that prepares /dev/termination-log on its nodes (README, "Stopping a pod"; the node's
    # file is made by tests/integration/test_lifecycle_slurm.py's or the kubelet runcases' setup as root)
    if not Path("/dev/termination-log").exists():
        missing("a host file /dev/termination-log", fix="run the tests as root, as .ci/run does")
    profile = hpk.workdir / "selftest-termlog.toml"
    profile.write_text('extends = "ci"\n[apptainer]\nbinds = ["/dev/termination-log"]\n')
    profile.chmod(0o644)
    r = hpk.hpkctl("selftest", "--site", str(profile), timeout=700)
    rows = _rows(r.stdout)
    assert r.rc == 0, r.output
    assert all(rows.get(n) == "PASS" for n in NAMES + ["termination message"]), r.output
    assert rows.get("mpi on two nodes") == "SKIP", r.output  # the ci partition has one node
    assert "/logs/c.log" in r.stdout


@pytest.mark.slurm
@pytest.mark.standin
def test_selftest_runs_the_mpi_step_on_two_nodes_where_the_partition_has_them(hpk_multi: Hpk) -> None:
    r = hpk_multi.hpkctl("selftest", "--site", "ci-multi", timeout=700)
    assert r.rc == 0, r.output
    assert _rows(r.stdout).get("mpi on two nodes") == "PASS", r.output
    assert _rows(r.stdout).get("termination message") == "SKIP", r.output  # ci-multi binds no /dev/termination-log


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
    assert "termination message" not in by_name  # the profile binds no /dev/termination-log
    message = {c.name: c for c in cases(multi_node=False, dev_message=True)}["termination message"]
    wrote = ContainerStatus(name="c", init=False, state="terminated", message="Sleep expired\n")
    assert message.check(PodStatus("Succeeded", "", "", 0, None, None, None, [wrote]), "written\n") == ""
    assert message.check(_done(), "written\n")  # written to the container's own /dev: not collected

"""What Slurm's accounting (``sacct``) shows of hpkctl's pods, on the real local Slurm with slurmdbd
(ci/slurm-up brings up MariaDB + slurmdbd for the single-node cluster, as every site runs one):

* pilot mode: the pod is a step of the held allocation, named after the pod, with the pod's CPUs and
  memory; the allocation's job comment names its owner (``kubelet=run`` for ``hpkctl run``) and node;
* job-per-pod: the pod is a job named after the pod, with its resources, its comment naming the pod.

Without accounting the tests skip, saying so; under CI=true they fail (ci/setup must provide it).
``HPK_TEST_ACCOUNTING_CONF`` points them at another cluster's slurm.conf (a private one of
``ci/slurm-up --root``, to develop the set-up beside the shared cluster's tests)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.support.ci import missing
from tests.support.hpk import Hpk, pod, unique
from tests.support.slurm import SINGLE_CONF, as_hpk, require_cluster
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
CONF = os.environ.get("HPK_TEST_ACCOUNTING_CONF") or SINGLE_CONF
ALLOCATION = re.compile(r"started as a step of pilot allocation (\d+) on (\S+)")
FIELDS = "JobID,JobName,State,AllocTRES,Comment"  # Comment last: free text


@pytest.fixture
def acct(hpk: Hpk) -> Hpk:
    """``hpk``, on a cluster whose sacct answers (else ``missing``)."""
    require_cluster(CONF, 1)
    probe = as_hpk(["sacct", "--noheader", "--jobs=1"], slurm_conf=CONF, timeout=60)
    if probe.returncode != 0:
        missing(f"Slurm accounting does not answer on the cluster of {CONF}: sacct says "
                f"{(probe.stderr or probe.stdout).strip()!r}",
                fix="run ci/setup as root: ci/slurm-up brings up MariaDB and slurmdbd")
    return hpk


def profile(hpk: Hpk, node: str) -> str:
    """A profile on ``ci`` whose pilot allocations are this test's own (comment ``node=<node>``), on the
    cluster of ``CONF``; its path, for --site."""
    path = hpk.workdir / f"{node}.toml"
    jobcomp = re.search(r"^JobCompLoc=(\S+)", Path(CONF).read_text(), re.M)
    path.write_text(f'extends = "ci"\n\n[slurm]\nconf_file = "{CONF}"\n'
                    f'jobcomp_file = "{jobcomp.group(1) if jobcomp else ""}"\n\n[pods]\nnode_name = "{node}"\n')
    path.chmod(0o644)
    return str(path)


def sacct(*args: str) -> list[list[str]]:
    """sacct's lines (``FIELDS``, split) for ``args``, as user hpk."""
    r = as_hpk(["sacct", "--noheader", "--parsable2", f"--format={FIELDS}", *args], slurm_conf=CONF, timeout=60)
    assert r.returncode == 0, r.stderr
    return [line.split("|", FIELDS.count(",")) for line in r.stdout.splitlines()]


def test_a_pilot_pod_is_a_step_named_after_it_with_its_resources_under_its_owners_comment(acct: Hpk) -> None:
    name, node = unique("acct-pilot"), unique("acctnode")
    doc = pod(name, [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", "echo ran"],
                      "resources": {"requests": {"cpu": "2", "memory": "300Mi"}}}])
    run = acct.run(doc, site=profile(acct, node), extra=("--pilot",))
    found = ALLOCATION.search(run.stderr)
    assert run.rc == 0 and found, run.output
    job = found.group(1)
    try:
        def step_recorded() -> list[str] | None:  # slurmdbd has a step once it ended: a moment later
            return next((f for f in sacct(f"--jobs={job}") if f[1] == name and f[2] == "COMPLETED"), None)

        step = wait_for(f"sacct to show the step of {name} in allocation {job}", step_recorded, timeout=60, every=0.5)
        assert re.fullmatch(rf"{job}\.\d+", step[0]), step
        tres = dict(kv.split("=", 1) for kv in step[3].split(","))
        assert (tres["cpu"], tres["mem"]) == ("2", "300M"), step  # the pod's requests (the allocation: 4, 2G)
    finally:
        as_hpk(["scancel", job], slurm_conf=CONF)

    def ended() -> list[str] | None:
        # Slurm 22.05 hands slurmdbd a job's comment with its end record, and until the job's own record
        # is in, sacct shows a job whose steps it has as "allocation", without resources or comment
        return next((f for f in sacct("--allocations", f"--jobs={job}")
                     if f[0] == job and f[1] == f"hpk_pilot_{node}" and f[2] not in ("PENDING", "RUNNING")), None)

    alloc = wait_for(f"sacct to show allocation {job} (hpk_pilot_{node}) ended", ended, timeout=60, every=0.5)
    assert re.fullmatch(rf"hpk-pilot kubelet=run state=[0-9a-f]{{12}} node={node}", alloc[4]), alloc


def test_a_job_per_pod_pod_is_a_job_named_after_it_with_its_resources_and_comment(acct: Hpk) -> None:
    name = unique("acct-job")
    doc = pod(name, [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", "echo ran"],
                      "resources": {"requests": {"cpu": "1", "memory": "200Mi"}}}])
    run = acct.run(doc, site=profile(acct, unique("acctnode")))
    assert run.rc == 0 and run.stdout == "ran\n", run.output

    def recorded() -> list[list[str]] | None:
        lines = sacct("--allocations", f"--name={name}", "--starttime=now-1hour")
        return lines if lines and lines[0][2] == "COMPLETED" else None

    (job,) = wait_for(f"sacct to show the job of {name}", recorded, timeout=60, every=0.5)
    tres = dict(kv.split("=", 1) for kv in job[3].split(","))
    assert (job[1], tres["cpu"], tres["mem"]) == (name, "1", "200M"), job
    assert re.match(rf"hpk-uid=[0-9a-f-]{{36}} hpk-pod=default/{name}(?: |$)", job[4]), job

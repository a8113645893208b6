"""The flags annotations on the real local Slurm, as user hpk: an allowed option reaches the job,
a refused one never reaches sbatch (no job is created)."""

from __future__ import annotations

import re

import pytest

from tests.support.hpk import Hpk, pod, unique
from tests.support.slurm import SINGLE_CONF, as_hpk

pytestmark = pytest.mark.slurm
FLAGS = "slurm-job.hpk.io/flags"
MPI = "slurm-job.hpk.io/mpi-flags"


def _jobs_named(name: str) -> list[str]:
    q = as_hpk(["squeue", "--noheader", "--me", "--states=all", f"--name={name}", "--format=%i"],
               slurm_conf=SINGLE_CONF)
    assert q.returncode == 0, q.stderr
    return q.stdout.split()


@pytest.mark.standin
def test_allowed_options_reach_the_job(hpk: Hpk) -> None:
    name = unique("flags")
    p = pod(name, [{"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 30"]}],
            annotations={FLAGS: "--nice=7 -N 1 --comment='my run #1'"})
    r = hpk.run(p, extra=("--detach",))
    assert r.rc == 0, r.output
    job_id = r.stdout.strip()
    try:
        show = as_hpk(["scontrol", "show", "job", "-o", job_id], slurm_conf=SINGLE_CONF)
        assert show.returncode == 0, show.stderr
        assert re.search(r"\bNice=7\b", show.stdout) and re.search(r"\bNumNodes=1\b", show.stdout), show.stdout
        assert f" JobName={name} " in show.stdout or f" Name={name} " in show.stdout, show.stdout
        comment = re.search(r"\bComment=(.*?)\s+StdErr=", show.stdout)
        assert comment and comment.group(1).startswith("hpk-uid="), show.stdout
        assert comment.group(1).endswith(f"hpk-pod=default/{name} my run #1"), show.stdout
        assert _jobs_named(name) == [job_id]  # squeue finds the job by the pod's name
    finally:
        hpk.hpkctl("delete", name, "--site", "ci")


@pytest.mark.parametrize("annotations, message", [
    ({FLAGS: "--output=/tmp/hpk-flags-evil"}, "--output is not allowed"),
    ({FLAGS: "'--time=1 --chdir=/tmp'"}, "is not a valid value of --time"),
    ({FLAGS: "--nodes=1 $'\\n'touch /tmp/hpk-flags-evil"}, "not an option"),
    ({MPI: "touch /tmp/hpk-flags-evil"}, "a program or its arguments cannot be given here"),
    ({MPI: "--label --output=/tmp/hpk-flags-evil"}, "--output is not allowed"),
])
def test_refused_options_never_reach_sbatch(hpk_slurm_only: Hpk, annotations: dict[str, str], message: str) -> None:
    name = unique("refused")
    p = pod(name, [{"name": "c", "image": "busybox:1.36", "command": ["true"]}], annotations=annotations)
    r = hpk_slurm_only.run(p)
    assert r.rc != 0 and message in r.stderr, r.output
    assert "fix:" in r.stderr, r.output
    assert _jobs_named(name) == []

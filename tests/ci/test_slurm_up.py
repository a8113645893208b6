"""The local Slurm clusters that ci/slurm-up brings up behave as the rest of the project assumes."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def write_script(d: Path, name: str, body: str) -> Path:
    p = d / name
    p.write_text("#!/bin/bash\n" + body)
    p.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(p, d.stat().st_uid, d.stat().st_gid)
    return p


def sbatch_wait(as_hpk, conf: str, d: Path, *args: str) -> tuple[str, str]:
    """sbatch --wait as hpk; returns (job id, output of the job)."""
    r = as_hpk(["sbatch", "--parsable", "--wait", f"--output={d}/out.%j", *args],
               slurm_conf=conf, cwd=d)
    m = re.match(r"(\d+)", r.stdout)
    assert m, f"sbatch failed: {r.stdout} {r.stderr}"
    job = m.group(1)
    return job, (d / f"out.{job}").read_text() if (d / f"out.{job}").exists() else ""


def jobcomp_state(as_hpk, conf: str, job: str) -> str:
    """JobState= of the job's newest line in the cluster's jobcomp file (waits up to 5 s)."""
    r = as_hpk(["scontrol", "show", "config"], slurm_conf=conf, timeout=30)
    logfile = re.search(r"^JobCompLoc\s*=\s*(\S+)", r.stdout, re.M).group(1)
    for _ in range(50):
        for line in reversed(Path(logfile).read_text().splitlines()):
            if line.startswith(f"JobId={job} "):
                return re.search(r" JobState=(\S+)", line).group(1)
        time.sleep(0.1)
    return ""


def test_trivial_job_completes_on_single_node(single_cluster, hpk_dir, as_hpk):
    job, out = sbatch_wait(as_hpk, single_cluster, hpk_dir,
                           "--wrap", 'echo "hello from $SLURMD_NODENAME as $(id -un)"')
    nodes = as_hpk(["sinfo", "-h", "-N", "-o", "%N"], slurm_conf=single_cluster).stdout.split()
    m = re.fullmatch(r"hello from (\S+) as hpk", out.strip())
    assert m and m.group(1) in nodes, out
    assert jobcomp_state(as_hpk, single_cluster, job) == "COMPLETED"


@pytest.mark.skipif(os.environ.get("HPK_SLURM_NO_MEMORY_LIMITS") == "1",
                    reason="this cluster does not enforce --mem (HPK_SLURM_NO_MEMORY_LIMITS=1)")
def test_memory_limit_is_enforced(single_cluster, hpk_dir, as_hpk):
    job, out = sbatch_wait(as_hpk, single_cluster, hpk_dir, "--mem=50M", "--wrap",
                           "python3 -c 'b = b\"x\" * (200 << 20); print(\"survived\")'")
    assert "survived" not in out
    assert jobcomp_state(as_hpk, single_cluster, job) == "OUT_OF_MEMORY"


def test_two_node_job_runs_ranks_on_two_nodes(multi_cluster, hpk_dir, as_hpk):
    # srun inside the job finds the multi cluster without SLURM_CONF from us: slurmd puts its own
    # SLURM_CONF into the job's environment (even with --export=NONE) and sbatch sets
    # SLURM_WORKING_CLUSTER, which srun uses first.
    script = write_script(hpk_dir, "ranks.sh", (
        "export PATH=/usr/bin:/bin\n"  # --export=NONE: no PATH (and srun inherits SLURM_EXPORT_ENV=NONE)
        'echo "conf=$SLURM_CONF"\n'
        'env -u SLURM_CONF srun /bin/bash -c \'echo "rank $SLURM_PROCID node $SLURMD_NODENAME"\'\n'))
    job, out = sbatch_wait(as_hpk, multi_cluster, hpk_dir,
                           "--nodes=2", "--ntasks=4", "--export=NONE", str(script))
    ranks = dict(re.findall(r"^rank (\d+) node (\S+)$", out, re.M))
    assert sorted(ranks) == ["0", "1", "2", "3"], out
    assert len(set(ranks.values())) == 2, out
    conf = re.search(r"^conf=(\S+)$", out, re.M)
    assert conf and os.path.realpath(conf.group(1)) == os.path.realpath(multi_cluster), out
    assert jobcomp_state(as_hpk, multi_cluster, job) == "COMPLETED"

"""sbatch/runtime.sh hpk_oom_kills on fake cgroup trees: the OOM killer's count where a pod's
containers run (Slurm's job cgroup under cgroup v1 and v2, and the slice where rootless Apptainer
puts a container it gives cgroup limits), as hpk_run reads it before and after each run. Run with
the real bash on the function as the job has it; the real cgroups are in
tests/integration/test_run_fidelity_slurm.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from hpkctl.pod.render import apptainer_cgroups

RUNTIME = Path(__file__).resolve().parents[2] / "sbatch" / "runtime.sh"


def count(root: Path, proc_cgroup: str, apptainer_cgroups: bool = False) -> str:
    text = RUNTIME.read_text()
    funcs = [re.search(rf"^{f}\(\) \{{\n.*?^\}}\n", text, re.S | re.M) for f in ("hpk_oom_kills", "hpk_oom_count",
                                                                               "hpk_oom_v1")]
    assert all(funcs), "hpk_oom_kills, hpk_oom_count or hpk_oom_v1 is missing from sbatch/runtime.sh"
    (root / "self.cgroup").write_text(proc_cgroup)
    r = subprocess.run(["bash", "-c", "set -u\n" + "".join(m.group(0) for m in funcs if m) + "hpk_oom_kills"], capture_output=True, text=True,
                       check=True, env={"HPK_CGROUP_ROOT": str(root), "HPK_PROC_CGROUP": str(root / "self.cgroup"),
                                        "PATH": "/usr/bin:/bin", "HPK_APPTAINER_CGROUPS": str(int(apptainer_cgroups))})
    return r.stdout


def put(path: Path, text: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    name = "memory.oom_control" if "memory/" in str(path) else "memory.events"
    (path / name).write_text(text)


def test_cgroup_v1_adds_up_the_job_subtree(tmp_path: Path) -> None:
    job = tmp_path / "memory" / "slurm" / "uid_1001" / "job_42"
    put(job, "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    put(job / "step_batch" / "task_0", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    put(job / "step_0" / "task_0", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    put(tmp_path / "memory" / "slurm" / "uid_1001" / "job_43", "oom_kill 7\n")  # another job
    hybrid = "9:name=systemd:/\n4:memory:/slurm/uid_1001/job_42/step_batch/task_0\n0::/\n"
    assert count(tmp_path, hybrid) == "3\n"


def test_cgroup_v2_reads_the_job_and_apptainers_slice(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    job = tmp_path / "system.slice" / "slurmstepd.scope" / "job_42"
    put(job, "low 0\nhigh 0\nmax 3\noom 3\noom_kill 2\n")  # hierarchical: the steps' kills too
    put(job / "step_batch" / "user" / "task_0", "oom_kill 2\n")
    uid = os.getuid()
    put(tmp_path / "user.slice" / f"user-{uid}.slice" / f"user@{uid}.service" / "user.slice", "oom 1\noom_kill 1\n")
    job_cgroup = "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n"
    assert count(tmp_path, job_cgroup, apptainer_cgroups=True) == "3\n"
    # without cgroup flags in exec_flags no container of this pod is there, but other pods' may be
    assert count(tmp_path, job_cgroup) == "2\n"


def test_the_job_script_says_when_apptainer_makes_cgroups() -> None:
    assert apptainer_cgroups(["--memory=1G"]) and apptainer_cgroups(["--apply-cgroups", "/etc/c.toml"])
    assert not apptainer_cgroups([]) and not apptainer_cgroups(["--cleanenv", "--nv"])


def test_nothing_readable_counts_zero(tmp_path: Path) -> None:
    assert count(tmp_path, "0::/\n") == "0\n"
    assert count(tmp_path, "4:memory:/gone/job_1/step_batch\n") == "0\n"

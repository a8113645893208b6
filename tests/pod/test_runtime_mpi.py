"""sbatch/runtime.sh hpk_rank: what each rank of an MPI container does on its node before Apptainer
starts (issue 20.2), run with the real bash exactly as srun runs it (``bash -c "$HPK_MPI_ENV" hpk-mpi
COMMAND...`` with the batch script's exported variables). The ranks on the 3-node Slurm are in
tests/integration/test_run_slurm.py (test_mpi_style_pod_runs_ranks_on_two_nodes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.waiting import wait_for

RUNTIME = Path(__file__).resolve().parents[2] / "sbatch" / "runtime.sh"

# what a rank's "apptainer" sees: the directories its binds name, the variables srun set for it
PROBE = ('out=$1; shift; { [ -d "$HPK_MEMORY_REAL/.dev-shm" ] && [ -d "$HPK_MEMORY_REAL/cache" ] && echo dirs; '
         'echo "procid=$APPTAINERENV_SLURM_PROCID"; } >"$out"; while [ ! -e "$HPK_MEMORY_ROOT/go" ]; do sleep 0.05; done')


class Node:
    """A node's tmpfs (HPK_MEMORY_ROOT) and a pod directory whose run/memory links to the batch node's
    memory directory, a path that does not exist on this node until a rank makes it."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "shm"
        self.root.mkdir(mode=0o1777)
        self.real = self.root / f"hpk-{os.getuid()}" / "pod.Ab3dE5gH"
        self.pod = tmp / "pod"
        (self.pod / "run").mkdir(parents=True)
        (self.pod / "run" / "memory").symlink_to(self.real)

    def rank(self, procid: int, out: Path) -> subprocess.Popen[str]:
        text = RUNTIME.read_text()
        mpi_env = text.split("HPK_MPI_ENV='", 1)[1].split("'", 1)[0]
        env = {"PATH": "/usr/bin:/bin", "HPK_RUNTIME": str(RUNTIME), "HPK_POD_DIR": str(self.pod),
               "HPK_MEMORY_ROOT": str(self.root), "HPK_MEMORY_REAL": str(self.real),
               "HPK_MEMORY_DIR": str(self.pod / "run" / "memory"), "SLURM_PROCID": str(procid)}
        memory = self.pod / "run" / "memory"
        return subprocess.Popen(["bash", "-c", mpi_env, "hpk-mpi", "bash", "-c", PROBE, "probe", str(out),
                                 "--bind", f"{memory}/.dev-shm:/dev/shm", "--bind", f"{memory}/cache:/cache"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ranks_on_another_node_make_the_pods_memory_directory_share_it_and_the_last_removes_it(
        tmp_path: Path) -> None:
    node = Node(tmp_path)
    first, second = node.rank(0, tmp_path / "r0"), node.rank(1, tmp_path / "r1")
    wait_for("both ranks running", lambda: (tmp_path / "r0").exists() and (tmp_path / "r1").exists(), timeout=30)
    assert (tmp_path / "r0").read_text() == "dirs\nprocid=0\n"
    assert (tmp_path / "r1").read_text() == "dirs\nprocid=1\n"
    assert (node.real / ".ranks").read_text() == "2\n"
    assert oct(node.real.stat().st_mode & 0o777) == oct(0o700)
    assert oct(node.real.parent.stat().st_mode & 0o777) == oct(0o700)
    (node.root / "go").write_text("")
    for rank in (first, second):
        _, err = rank.communicate(timeout=30)
        assert rank.returncode == 0, err
    assert not node.real.exists()  # the last rank out removed what the ranks made
    assert node.real.parent.exists()


def test_on_the_batch_scripts_node_the_ranks_use_its_directory_and_leave_it(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.real.mkdir(parents=True, mode=0o700)
    node.real.parent.chmod(0o700)
    (node.real / ".dev-shm").mkdir()
    (node.real / ".dev-shm" / "from-the-pod").write_text("")
    (node.root / "go").write_text("")
    rank = node.rank(3, tmp_path / "r3")
    _, err = rank.communicate(timeout=30)
    assert rank.returncode == 0, err
    assert (tmp_path / "r3").read_text() == "dirs\nprocid=3\n"
    assert (node.real / ".dev-shm" / "from-the-pod").exists()  # the batch script removes it when the job ends


def test_a_parent_that_is_not_the_users_own_0700_directory_is_not_used(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.real.parent.mkdir(mode=0o755)  # as another user could have made it first
    node.real.parent.chmod(0o755)
    (node.root / "go").write_text("")
    rank = node.rank(0, tmp_path / "r0")
    _, err = rank.communicate(timeout=30)
    assert rank.returncode == 1
    assert f"hpkctl: {node.real.parent} on " in err and "with mode 0700 (another user may have made it)" in err
    assert not (tmp_path / "r0").exists() and not node.real.exists()  # the rank's container never started

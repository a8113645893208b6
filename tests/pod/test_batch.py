"""Pods submitted together as one job array (hpkctl/pod/batch.py, sbatch/batch.sh.j2): the script is
small, shellcheck clean and runs each element as its pod's own job; which pods may go together; how a
job's comment names the pods (pod_of_job)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpkctl.pod import render_pod
from hpkctl.pod.batch import batch_key, render_batch
from hpkctl.pod.flags import pod_of_job
from tests.support.pods import make_profile, pod_doc
from tests.support.shellcheck import shellcheck

UIDS = [f"00000000-0000-0000-0000-00000000000{i}" for i in range(1, 4)]


def _plan(uid: str, *, cpu: str = "1", annotations: dict[str, str] | None = None, state: str = "/hpk-state"):  # type: ignore[no-untyped-def]
    spec = {"containers": [{"name": "c", "image": "busybox", "command": ["true"],
                            "resources": {"requests": {"cpu": cpu}}}]}
    profile = make_profile(pods={"state_dir": state, "hostpath_allow": ["/srv"]})
    return render_pod(pod_doc(spec, name=f"p-{uid[-1]}", uid=uid, annotations=annotations), profile).plan


def test_golden_batch_script(snapshot) -> None:  # type: ignore[no-untyped-def]
    plans = [_plan(u) for u in UIDS]
    assert render_batch(plans, "/hpk-state/pods", version="0.0.0") == snapshot


def test_batch_script_passes_shellcheck_and_bash_42(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    script = tmp_path / "batch.sh"
    script.write_text(render_batch([_plan(u) for u in UIDS], "/hpk-state/pods"))
    r = shellcheck(script, "-S", "style", config=pytestconfig)
    assert r.returncode == 0, r.stdout
    for bash in ("bash", "/opt/bash-4.2/bin/bash"):
        if bash.startswith("/") and not Path(bash).exists():
            continue
        r2 = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True, check=False)
        assert r2.returncode == 0, r2.stderr


@pytest.mark.parametrize("bash", ["bash", "/opt/bash-4.2/bin/bash"])
def test_an_element_runs_its_pods_own_script_as_its_batch_shell(tmp_path: Path, bash: str) -> None:
    if bash.startswith("/") and not Path(bash).exists():
        pytest.skip(f"{bash} is not installed here")
    state = tmp_path / "st ate'$x"  # a state directory a shell would split or expand: quoted
    plans = [_plan(u, state=str(state)) for u in UIDS]
    for p in plans:
        d = Path(p.pod_dir)
        (d / "job").mkdir(parents=True)
        (d / "logs").mkdir()
        (d / "job" / "job.sh").write_text(
            'printf "%s|%s|%s|%s\\n" "$PWD" "$HPK_SLURM_JOB" "${SLURM_ARRAY_TASK_ID-unset}" "$$"\nexit 7\n')
    script = tmp_path / "batch.sh"
    script.write_text(render_batch(plans, str(state / "pods")))
    env = {**os.environ, "SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"}
    proc = subprocess.Popen([bash, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 7, err  # the pod's exit code is the element's
    assert out == "" and err == ""
    cwd, job, task, pid = (Path(plans[1].pod_dir) / "logs" / "slurm.out").read_text().rstrip("\n").split("|")
    assert (cwd, job, task, int(pid)) == (plans[1].pod_dir, "77_1", "unset", proc.pid)  # exec: the same process
    assert not (Path(plans[0].pod_dir) / "logs" / "slurm.out").exists()


def test_which_pods_go_together() -> None:
    one, two = _plan(UIDS[0]), _plan(UIDS[1])
    assert batch_key(one) == batch_key(two) and batch_key(one) is not None
    assert batch_key(_plan(UIDS[2], cpu="2")) != batch_key(one)  # other resources: another array
    for flags in ("--comment=mine", "--mail-type=END", "--dependency=singleton"):  # a job of its own
        assert batch_key(_plan(UIDS[2], annotations={"slurm-job.hpk.io/flags": flags})) is None, flags
    assert batch_key(_plan(UIDS[2], annotations={"slurm-job.hpk.io/flags": "--qos=low"})) not in (None, batch_key(one))
    assert not any(w.startswith(("--job-name", "--output", "--chdir", "--comment")) for w in batch_key(one) or ())


def test_pod_of_job_names_each_element_of_a_batch() -> None:
    batch = "hpk-uids=" + ",".join(UIDS)
    assert pod_of_job("9_0", batch) == (UIDS[0], "9_0")
    assert pod_of_job("9_2", batch) == (UIDS[2], "9_2")
    assert pod_of_job("9_3", batch) is None and pod_of_job("9", batch) is None  # no such element
    assert pod_of_job("9_[0-2]", batch) is None  # a pending range names no one pod
    single = f"hpk-uid={UIDS[0]} hpk-pod=default/p"
    assert pod_of_job("12", single) == (UIDS[0], "12")
    assert pod_of_job("12_4", single) == (UIDS[0], "12")  # a workload's element stands for its array
    assert pod_of_job("12", "someone else's") is None and pod_of_job("12", "") is None

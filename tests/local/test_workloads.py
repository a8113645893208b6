"""Workloads in ``hpkctl run`` without Slurm: the workload's rules, its pods, the array script's text,
and the array script's behaviour (retries, backoff limits, deadline) with fake pods and a fake
``scancel`` (the real-Slurm proof is tests/integration/test_workloads_slurm.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpkctl.errors import ManifestError
from hpkctl.local.workload import Workload, job_workload, member_pods, replica_workload
from hpkctl.pod.array import NO_LIMIT, ArrayPlan, array_options, render_array
from hpkctl.pod.flags import SlurmOption
from hpkctl.sites import load_site
from tests.support.waiting import wait_for

TEMPLATE = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36",
                                                                 "env": [{"name": "A", "value": "1"}]}],
                     "initContainers": [{"name": "i", "image": "busybox:1.36"}]}}


# ------------------------------------------------------------------------------------- the Job's rules
def test_job_defaults_are_the_api_servers() -> None:
    w = job_workload({}, name="j", where="f: spec.")
    assert (w.count, w.parallelism, w.indexed, w.backoff_limit, w.backoff_limit_per_index, w.active_deadline) == \
        (1, 1, False, 6, None, None)


def test_indexed_job() -> None:
    w = job_workload({"completions": 20, "parallelism": 4, "completionMode": "Indexed", "backoffLimitPerIndex": 1,
                      "maxFailedIndexes": 2, "activeDeadlineSeconds": 60}, name="j", where="")
    assert (w.count, w.parallelism, w.indexed, w.backoff_limit, w.backoff_limit_per_index, w.max_failed_indexes,
            w.active_deadline) == (20, 4, True, None, 1, 2, 60)


def test_parallelism_above_completions_is_capped() -> None:
    assert job_workload({"completions": 2, "parallelism": 8}, name="j", where="").parallelism == 2


@pytest.mark.parametrize("spec, message", [
    ({"completionMode": "Indexed"}, "f: spec.completions: required when completionMode is Indexed"),
    ({"completions": 100001, "completionMode": "Indexed"}, "f: spec.completions: must be less than or equal to 100000"),
    ({"parallelism": 0}, "f: spec.parallelism: 0 runs no pod"),
    ({"completions": 0}, "f: spec.completions: 0 runs no pod"),
    ({"backoffLimit": -1}, "f: spec.backoffLimit: must be greater than or equal to 0, got -1"),
    ({"backoffLimit": "2"}, "f: spec.backoffLimit: must be an integer, got"),
    ({"completions": True}, "f: spec.completions: must be an integer"),
    ({"backoffLimitPerIndex": 1}, "f: spec.backoffLimitPerIndex: requires completionMode: Indexed"),
    ({"completions": 2, "completionMode": "Indexed", "maxFailedIndexes": 1},
     "f: spec.maxFailedIndexes: requires backoffLimitPerIndex"),
    ({"completionMode": "Ordered"}, "f: spec.completionMode: 'Ordered' is not supported"),
    ({"activeDeadlineSeconds": 0}, "f: spec.activeDeadlineSeconds: must be greater than or equal to 1"),
])
def test_job_rules_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError) as e:
        job_workload(spec, name="j", where="f: spec.")
    assert str(e.value).startswith(message), str(e.value)


def test_replicas() -> None:
    assert replica_workload("Deployment", {}, name="d", where="") is None  # one replica: a plain pod
    assert replica_workload("Deployment", {"replicas": 1}, name="d", where="") is None
    w = replica_workload("Deployment", {"replicas": 3}, name="d", where="")
    assert w is not None and (w.count, w.parallelism, w.retries) == (3, None, False)
    sts = replica_workload("StatefulSet", {"replicas": 1}, name="s", where="")
    assert sts is not None and sts.count == 1  # a StatefulSet's pod is s-0 even alone
    with pytest.raises(ManifestError, match="f: spec.replicas: 0 runs no pod"):
        replica_workload("Deployment", {"replicas": 0}, name="d", where="f: spec.")


# ------------------------------------------------------------------------------------ the workload's pods
def test_indexed_job_pods() -> None:
    w = Workload(kind="Job", name="train", count=3, indexed=True)
    pods = member_pods(w, TEMPLATE, {"spec": {}})
    assert w.pods == ["train-0", "train-1", "train-2"]
    p2 = pods[2]
    assert p2["metadata"]["name"] == "train-2"
    assert p2["spec"]["hostname"] == "train-2"
    assert p2["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "2"
    assert p2["metadata"]["labels"] == {"batch.kubernetes.io/job-name": "train", "job-name": "train",
                                        "batch.kubernetes.io/job-completion-index": "2"}
    assert p2["spec"]["containers"][0]["env"] == [{"name": "JOB_COMPLETION_INDEX", "value": "2"},
                                                  {"name": "A", "value": "1"}]
    assert p2["spec"]["initContainers"][0]["env"] == [{"name": "JOB_COMPLETION_INDEX", "value": "2"}]
    assert TEMPLATE["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]  # the template is untouched


def test_non_indexed_job_pods_have_no_index() -> None:
    pods = member_pods(Workload(kind="Job", name="j", count=2), TEMPLATE, {"spec": {}})
    assert [p["metadata"]["name"] for p in pods] == ["j-0", "j-1"]
    assert "hostname" not in pods[1]["spec"]
    assert pods[1]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]


def test_statefulset_pods_get_stable_names_and_one_claim_per_ordinal() -> None:
    owner = {"spec": {"serviceName": "db", "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}
    pods = member_pods(Workload(kind="StatefulSet", name="pg", count=2), TEMPLATE, owner)
    p1 = pods[1]
    assert (p1["metadata"]["name"], p1["spec"]["hostname"], p1["spec"]["subdomain"]) == ("pg-1", "pg-1", "db")
    assert p1["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "data-pg-1"}}]
    assert p1["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "pg-1"
    assert pods[0]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "data-pg-0"


# ----------------------------------------------------------------------------------------- the script
def _plan(tmp: Path, n: int, **kw: Any) -> ArrayPlan:
    profile = load_site("ci")
    return ArrayPlan(profile=profile, kind="Job", namespace="default", name="train", uid="u-1",
                     array_dir=str(tmp / "w"), pod_dirs=[str(tmp / f"p{i}") for i in range(n)],
                     options=[SlurmOption("--job-name", "train-0"), SlurmOption("--time", "10"),
                              SlurmOption("--output", "/x/slurm.out"), SlurmOption("--mem", "100M")], **kw)


def test_array_options_replace_the_pods_own() -> None:
    plan = _plan(Path("/s"), 20, parallelism=4)
    assert [(o.name, o.value) for o in array_options(plan)] == [
        ("--job-name", "train"), ("--output", "/s/w/logs/slurm-%a.out"), ("--chdir", "/s/w"),
        ("--comment", "hpk-uid=u-1 hpk-pod=default/train"), ("--array", "0-19%4"),
        ("--time", "10"), ("--mem", "100M")]
    assert array_options(_plan(Path("/s"), 3, parallelism=3))[4].value == "0-2"  # no %limit when all fit


def test_array_script_passes_bash_n_and_shellcheck(tmp_path: Path) -> None:
    script = tmp_path / "a.sh"
    plan = _plan(tmp_path, 3, parallelism=2, retries=True, backoff_limit=2)
    plan.pod_dirs = [f"{tmp_path}/it's $(x) `y`/{i}" for i in range(3)]
    script.write_text(render_array(plan))
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    r = subprocess.run(["shellcheck", "-s", "bash", str(script)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout


@settings(max_examples=25, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0/"), min_size=1,
               max_size=20))
def test_pod_directories_reach_the_script_byte_for_byte(tmp_path_factory: pytest.TempPathFactory, part: str) -> None:
    tmp = tmp_path_factory.mktemp("a")
    plan = _plan(Path("/s"), 2)
    plan.pod_dirs = [f"/s/{part}/{i}" for i in range(2)]  # (the array's own directory is an #SBATCH value)
    script = tmp / "a.sh"
    script.write_text(render_array(plan).replace("hpk_array_main\n", "") + 'printf "%s\\0" "${HPK_PODS[@]}"\n')
    out = subprocess.run(["bash", str(script)], capture_output=True, check=True).stdout
    assert out.decode("utf-8", "surrogateescape").split("\0")[:-1] == plan.pod_dirs


# ------------------------------------------------------------------------------ the script's behaviour
def _fake_pods(tmp: Path, codes: list[str]) -> list[str]:
    """Pod directories whose job.sh exits with codes[i] (a list "3 3 0" is consumed one per run)."""
    dirs = []
    for i, code in enumerate(codes):
        d = tmp / f"p{i}"
        (d / "job").mkdir(parents=True)
        (d / "codes").write_text(code)
        (d / "job" / "job.sh").write_text(
            'd=$(dirname "$(dirname "$0")"); read -r -a c <"$d/codes"; rc=${c[0]}; printf "%s " "${c[@]:1}" '
            '>"$d/codes"; mkdir -p "$d/status"; echo "$rc" >"$d/status/pod.done"; echo run >>"$d/runs"; '
            'sleep "${HPK_FAKE_SLEEP:-0}"; exit "$rc"\n')
        dirs.append(str(d))
    return dirs


def _element(tmp: Path, plan: ArrayPlan, index: int, *, env: dict[str, str] | None = None,
             wait: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    script = tmp / "array.sh"
    script.write_text(render_array(plan))
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$@" >>{tmp}/scancel.log\n')
    (bin_dir / "scancel").chmod(0o755)
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": str(index), "SLURM_ARRAY_JOB_ID": "77",
            "SLURM_JOB_NAME": "train", **(env or {})}
    if not wait:
        return subprocess.Popen(["bash", str(script)], env=full, text=True, stderr=subprocess.PIPE,
                                start_new_session=True)  # its group: what it left running can be ended
    return subprocess.run(["bash", str(script)], env=full, capture_output=True, text=True, check=False,
                          timeout=timeout)


def _status(plan: ArrayPlan, name: str) -> str:
    return (Path(plan.array_dir) / "status" / name).read_text().strip()


def _fast(plan: ArrayPlan) -> ArrayPlan:
    plan.profile = plan.profile.model_copy(update={"pods": plan.profile.pods.model_copy(
        update={"restart_backoff": 0, "restart_backoff_max": 0})})
    return plan


def test_backoff_limit_two_gives_three_runs_then_the_job_fails(tmp_path: Path) -> None:
    plan = _fast(_plan(tmp_path, 1, retries=True, backoff_limit=2))
    plan.pod_dirs = _fake_pods(tmp_path, ["3 3 3 0"])
    r = _element(tmp_path, plan, 0)
    assert r.returncode == 3, r.stderr
    assert (Path(plan.pod_dirs[0]) / "runs").read_text() == "run\n" * 3
    assert (_status(plan, "index.0"), _status(plan, "index.0.attempts"), _status(plan, "failures")) == \
        ("Failed", "3", "3")
    assert _status(plan, "job.failed") == "BackoffLimitExceeded\nJob has reached the specified backoff limit"
    assert sorted(os.listdir(Path(plan.pod_dirs[0]) / "attempts")) == ["1", "2"]  # earlier runs kept
    assert (Path(plan.pod_dirs[0]) / "attempts" / "1" / "status" / "pod.done").read_text() == "3\n"
    assert not (tmp_path / "scancel.log").exists()  # no other element to cancel


def test_a_failed_index_is_run_again_and_succeeds(tmp_path: Path) -> None:
    plan = _fast(_plan(tmp_path, 2, retries=True, backoff_limit=6))
    plan.pod_dirs = _fake_pods(tmp_path, ["1 0", "0"])
    assert _element(tmp_path, plan, 0).returncode == 0
    assert (_status(plan, "index.0"), _status(plan, "index.0.attempts"), _status(plan, "failures")) == \
        ("Succeeded", "2", "1")
    assert not (Path(plan.array_dir) / "status" / "job.failed").exists()


def test_the_job_failing_cancels_the_other_elements_only(tmp_path: Path) -> None:
    plan = _fast(_plan(tmp_path, 4, retries=True, backoff_limit=0))
    plan.pod_dirs = _fake_pods(tmp_path, ["0", "0", "5", "0"])
    assert _element(tmp_path, plan, 2).returncode == 5
    assert (tmp_path / "scancel.log").read_text() == "77_0 77_1 77_3\n"
    # an element that starts after the Job failed does not run its pod
    r = _element(tmp_path, plan, 1)
    assert r.returncode == 1 and "the Job has failed already" in r.stderr
    assert not (Path(plan.pod_dirs[1]) / "runs").exists()


def test_backoff_limit_per_index_and_max_failed_indexes(tmp_path: Path) -> None:
    plan = _fast(_plan(tmp_path, 3, retries=True, backoff_limit=NO_LIMIT, backoff_limit_per_index=1,
                       max_failed_indexes=1))
    plan.pod_dirs = _fake_pods(tmp_path, ["4 4", "4 4", "0"])
    assert _element(tmp_path, plan, 0).returncode == 4
    assert (_status(plan, "index.0"), _status(plan, "index.0.attempts")) == ("Failed", "2")
    assert not (Path(plan.array_dir) / "status" / "job.failed").exists()  # one failed index is allowed
    assert _element(tmp_path, plan, 1).returncode == 4
    assert _status(plan, "failed-indexes") == "2"
    assert _status(plan, "job.failed").startswith("MaxFailedIndexesExceeded\n")


def test_deployments_run_each_pod_once(tmp_path: Path) -> None:
    plan = _fast(_plan(tmp_path, 2, retries=False))
    plan.pod_dirs = _fake_pods(tmp_path, ["2 0", "0"])
    assert _element(tmp_path, plan, 0).returncode == 2
    assert (Path(plan.pod_dirs[0]) / "runs").read_text() == "run\n"
    assert _status(plan, "index.0") == "Failed"


def test_active_deadline_fails_the_job_and_stops_the_running_pod(tmp_path: Path) -> None:
    plan = _fast(_plan(tmp_path, 2, retries=True, backoff_limit=6, active_deadline=1))
    plan.pod_dirs = _fake_pods(tmp_path, ["0", "0"])
    # stopped at the 1 s deadline: a pod sleeping its 900 s would exceed _element's 60 s timeout
    r = _element(tmp_path, plan, 0, env={"HPK_FAKE_SLEEP": "900"})
    assert r.returncode != 0
    assert _status(plan, "job.failed") == "DeadlineExceeded\nJob was active longer than specified deadline"
    assert _status(plan, "index.0") == "Failed"
    assert (tmp_path / "scancel.log").read_text() == "77_1\n"


def _element_with_timer(tmp: Path, plan: ArrayPlan) -> tuple[int, str]:
    """Element 0 to its end; its deadline timer, still sleeping then, is ended with the element's group
    (Slurm ends a job's or step's leftover processes the same way). Its exit code and stderr."""
    proc = _element(tmp, plan, 0, wait=False)
    assert isinstance(proc, subprocess.Popen)
    try:
        rc = proc.wait(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    return rc, proc.stderr.read() if proc.stderr else ""


def test_a_second_boundary_at_the_first_element_start_does_not_cut_its_deadline(tmp_path: Path) -> None:
    """The deadline's start and the time left are one clock reading: with two, a second boundary between
    them (any busy machine, now and then) left a 1 s deadline 0 and the first element failed the Job before
    its pod started, with no index result (seen as FileNotFoundError: status/index.0). A ``date`` that moves
    on 60 s at each call makes every such boundary happen; the 60 s deadline leaves the element all the
    time it needs."""
    plan = _fast(_plan(tmp_path, 1, retries=True, backoff_limit=6, active_deadline=60))
    plan.pod_dirs = _fake_pods(tmp_path, ["0"])
    (tmp_path / "bin").mkdir()
    (tmp_path / "clock").write_text("1800000000")
    (tmp_path / "bin" / "date").write_text(f'#!/bin/sh\nread -r t <{tmp_path}/clock; echo "$t"; '
                                           f'echo $((t + 60)) >{tmp_path}/clock\n')
    (tmp_path / "bin" / "date").chmod(0o755)
    rc, stderr = _element_with_timer(tmp_path, plan)
    assert rc == 0, stderr
    assert _status(plan, "index.0") == "Succeeded"
    assert not (Path(plan.array_dir) / "status" / "job.failed").exists()
    assert (Path(plan.pod_dirs[0]) / "runs").read_text() == "run\n"


def test_an_empty_deadline_start_is_not_the_epoch(tmp_path: Path) -> None:
    """``job.started`` is created, then written: an element that reads it in between (another node, a
    crash in the gap) counts from its own start, not from 0, which failed the Job at once."""
    plan = _fast(_plan(tmp_path, 1, retries=True, backoff_limit=6, active_deadline=60))
    plan.pod_dirs = _fake_pods(tmp_path, ["0"])
    (Path(plan.array_dir) / "status").mkdir(parents=True)
    (Path(plan.array_dir) / "status" / "job.started").write_text("")
    rc, stderr = _element_with_timer(tmp_path, plan)
    assert rc == 0, stderr
    assert _status(plan, "index.0") == "Succeeded"


def test_term_is_passed_on_to_the_pod(tmp_path: Path) -> None:
    plan = _fast(_plan(tmp_path, 1, retries=True, backoff_limit=6))
    plan.pod_dirs = _fake_pods(tmp_path, ["0"])
    job = Path(plan.pod_dirs[0]) / "job" / "job.sh"
    job.write_text('d=$(dirname "$(dirname "$0")"); trap \'echo stopped >"$d/stopped"; exit 143\' TERM\n'
                   ': >"$d/trapped"; sleep 30 & wait\n')
    proc = _element(tmp_path, plan, 0, wait=False)
    assert isinstance(proc, subprocess.Popen)
    wait_for("the pod's TERM trap", (Path(plan.pod_dirs[0]) / "trapped").exists, timeout=20, every=0.05)
    proc.terminate()
    assert proc.wait(timeout=20) == 143
    assert (Path(plan.pod_dirs[0]) / "stopped").read_text() == "stopped\n"
    assert _status(plan, "index.0") == "Failed"  # stopped, not retried


def test_a_deleted_pilot_element_ends_with_its_pod(tmp_path: Path) -> None:
    """A deleted pod's element waits (TERM untrapped, up to 60 s) for the scancel that follows a job
    array's delete; in pilot mode (``HPK_PILOT=1``) nobody cancels a step whose pod ended, so it ends
    with its pod and gives the allocation its CPUs back (before, the step stayed 60 s)."""
    plan = _fast(_plan(tmp_path, 1, retries=True, backoff_limit=6))
    plan.pod_dirs = _fake_pods(tmp_path, ["0"])
    pod = Path(plan.pod_dirs[0])
    (pod / "job" / "job.sh").write_text('d=$(dirname "$(dirname "$0")"); trap \'exit 143\' TERM\n'
                                        ': >"$d/trapped"; sleep 30 & wait\n')
    proc = _element(tmp_path, plan, 0, env={"HPK_PILOT": "1"}, wait=False)
    assert isinstance(proc, subprocess.Popen)
    wait_for("the pod's TERM trap", (pod / "trapped").exists, timeout=20, every=0.05)
    (pod / "status").mkdir(exist_ok=True)  # the element made it before the pod's script ran
    (pod / "status" / "pod.deleting").write_text("now\n")  # the delete marks the pod, then TERM
    proc.terminate()
    assert proc.wait(timeout=30) == 143  # the 60 s linger would outlast this
    assert _status(plan, "index.0") == "Failed"


def test_an_element_the_failed_job_cancels_says_its_job_stopped_it(tmp_path: Path) -> None:
    """hpk_a_fail_job cancels the other elements; their pods' stop sequence saw a job no longer
    RUNNING and wrote Cancelled, "cancelled from outside hpkctl": the pod says its Job stopped it."""
    plan = _fast(_plan(tmp_path, 2, retries=True, backoff_limit=6))
    plan.pod_dirs = _fake_pods(tmp_path, ["0", "0"])
    job = Path(plan.pod_dirs[1]) / "job" / "job.sh"
    job.write_text('d=$(dirname "$(dirname "$0")"); mkdir -p "$d/status"\n'
                   'trap \'cp "$d/status/pod.failed" "$d/seen"; exit 143\' TERM\n'
                   ': >"$d/trapped"; sleep 30 & wait\n')
    proc = _element(tmp_path, plan, 1, wait=False)
    assert isinstance(proc, subprocess.Popen)
    wait_for("the pod's TERM trap", (Path(plan.pod_dirs[1]) / "trapped").exists, timeout=20, every=0.05)
    (Path(plan.array_dir) / "status" / "job.failed").write_text(
        "BackoffLimitExceeded\nJob has reached the specified backoff limit\n")  # element 0's hpk_a_fail_job
    proc.terminate()  # its scancel
    assert proc.wait(timeout=20) == 143
    assert (Path(plan.pod_dirs[1]) / "seen").read_text() == \
        "Terminated\nits Job failed (BackoffLimitExceeded); its containers were stopped with their grace period\n"


def test_outside_an_array_the_script_says_so(tmp_path: Path) -> None:
    plan = _plan(tmp_path, 2)
    script = tmp_path / "array.sh"
    script.write_text(render_array(plan))
    r = subprocess.run(["bash", str(script)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 2 and "runs as the elements 0-1 of a Slurm job array" in r.stderr


def test_render_of_a_job_shows_the_array_script_then_its_first_pods(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from hpkctl.cli import main

    f = tmp_path / "j.yaml"
    f.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}\nspec:\n  completions: 5\n"
                 "  parallelism: 2\n  completionMode: Indexed\n  template:\n    spec:\n      containers:\n"
                 "      - {name: c, image: 'busybox:1.36', command: [echo, hi]}\n")
    assert main(["render", "-f", str(f), "--site", "ci"]) == 0
    first = capsys.readouterr().out
    assert main(["render", "-f", str(f), "--site", "ci"]) == 0
    assert capsys.readouterr().out == first  # a dry run is deterministic
    array, _, pod0 = first.partition("# ==== pod 0 of 5, train-0:")
    assert "#SBATCH --array=0-4%2\n" in array and "#SBATCH --job-name=train\n" in array
    assert "HPK_RETRIES=1\nHPK_BACKOFF_LIMIT=6\n" in array
    assert "#SBATCH --job-name=train-0\n" in pod0
    assert "/env/c.env (" in pod0  # the files of pod 0 are listed as for any pod
    from hpkctl.local.arrays import build_array, workload_of
    from hpkctl.local.manifest import load_manifest, select_pod

    m = load_manifest(f)
    template = select_pod(m)
    workload = workload_of(m, template)
    assert workload is not None
    _, rendered, _, info, _, _ = build_array(load_site("ci"), m, template, workload, namespace="default",
                                             create=False)
    env = rendered[3].files["env/c.env"][0].decode()
    assert env.splitlines()[1:] == ["JOB_COMPLETION_INDEX=3", "HOSTNAME=train-3"], env
    assert [p.name for p in info.pods] == [f"train-{i}" for i in range(5)]


@pytest.mark.parametrize("done, text", [([], ""), ([0], "0"), ([0, 1, 2, 5], "0-2,5"), ([5, 3, 4, 9, 0], "0,3-5,9"),
                                        ([1, 3, 5], "1,3,5")])
def test_completed_indexes_notation(done: list[int], text: str) -> None:
    from hpkctl.local.arrays import _ranges

    assert _ranges(done) == text


def test_generate_name_as_the_api_servers_simple_name_generator(tmp_path: Path) -> None:
    from hpkctl.local.manifest import generate_name, load_manifest

    long = "a" * 70
    name = generate_name(long)
    assert len(name) == 63 and name.startswith("a" * 58) and set(name[58:]) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert generate_name("x-", seed="s") == generate_name("x-", seed="s") != generate_name("x-", seed="t")
    f = tmp_path / "p.yaml"
    f.write_text("kind: Pod\nmetadata: {generateName: web-}\nspec: {containers: [{name: c, image: busybox}]}\n")
    dry = [load_manifest(f, dry_run=True).pods[0][1]["metadata"]["name"] for _ in range(2)]
    assert dry[0] == dry[1] and dry[0].startswith("web-") and len(dry[0]) == 9  # a dry run renders alike twice
    assert load_manifest(f).pods[0][1]["metadata"]["name"].startswith("web-")


def test_a_term_before_the_elements_pod_started_stops_it_before_it_runs(tmp_path: Path) -> None:
    """A delete's TERM that lands after the element's trap is set (hpkctl sends it once
    index.I.attempts is there) but before its pod's script started: the pod never starts, and the
    element waits for the scancel that follows (Slurm then records CANCELLED). Before, hpk_a_stop
    found no child to hand the TERM on to and the pod ran in full."""
    plan = _fast(_plan(tmp_path, 1, retries=True, backoff_limit=6))
    plan.pod_dirs = _fake_pods(tmp_path, ["0"])
    pod = Path(plan.pod_dirs[0])
    (pod / "status").mkdir()
    (pod / "status" / "pod.deleting").write_text("now\n")  # the delete marks the pod, then TERM
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # the attempts marker's mv holds the element there until the test has sent its TERM
    (bin_dir / "mv").write_text(f'#!/bin/sh\n/bin/mv "$@" || exit\ncase "$*" in *index.0.attempts*)\n'
                                f'  : >{tmp_path}/reached; while [ ! -e {tmp_path}/go ]; do sleep 0.05; done ;;\nesac\n')
    (bin_dir / "mv").chmod(0o755)
    proc = _element(tmp_path, plan, 0, wait=False)
    assert isinstance(proc, subprocess.Popen)
    wait_for("the attempts marker", (tmp_path / "reached").exists, timeout=20, every=0.05)
    proc.send_signal(signal.SIGTERM)  # to the element's batch shell alone, as scancel --batch
    (tmp_path / "go").touch()
    wait_for("the index's result", (Path(plan.array_dir) / "status" / "index.0").exists, timeout=20, every=0.05)
    assert _status(plan, "index.0") == "Failed"
    assert not (pod / "runs").exists()  # the pod never ran
    assert proc.poll() is None  # it lingers for the scancel (TERM no longer trapped)
    proc.terminate()
    assert proc.wait(timeout=20) == -signal.SIGTERM


def test_the_pods_status_dir_is_there_once_a_delete_may_mark_it(tmp_path: Path) -> None:
    """A delete writes ``status/pod.deleting`` into the element's pod, then sends TERM, as soon as
    ``index.I.attempts`` exists: the pod's ``status/`` must be there by then (hpkctl no longer makes it
    before submitting). A ``mv`` wrapper records, as each status file is put in place, whether it was."""
    plan = _fast(_plan(tmp_path, 1, retries=False))
    plan.pod_dirs = _fake_pods(tmp_path, ["0"])
    pod_status = Path(plan.pod_dirs[0]) / "status"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mv").write_text(f'#!/bin/sh\n[ -d {pod_status} ] && s=yes || s=no\n'
                                f'echo "${{3##*/}} $s" >>{tmp_path}/mv.log\nexec /bin/mv "$@"\n')
    (bin_dir / "mv").chmod(0o755)
    done = _element(tmp_path, plan, 0)
    assert isinstance(done, subprocess.CompletedProcess) and done.returncode == 0, done
    assert "index.0.attempts yes" in (tmp_path / "mv.log").read_text().splitlines()

"""What the generated script does, run with bash and the recording stub (no Slurm needed).

These prove the job-side logic (restarts with back-off, termination, pod-level failures, volume
checks, eviction); the same behaviours are proven on the real Slurm in tests/integration.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod import render_pod, write_pod_dir
from hpkctl.runtime.pull import is_fresh
from hpkctl.sites import SiteProfile
from tests.support.pods import pod_doc, records, stub_environment
from tests.support.waiting import wait_for


def _fast(profile: SiteProfile) -> SiteProfile:
    """The stub's profile with the job's policy timers at their minimum, so restarts and the
    sizeLimit watch happen within a second instead of the production 10 s."""
    pods = profile.pods.model_copy(update={"restart_backoff": 1, "restart_backoff_max": 2, "size_check_interval": 1})
    return profile.model_copy(update={"pods": pods})


def _start(stub: dict[str, Any], spec: dict[str, Any], **extra: str) -> tuple[subprocess.Popen, Path, Path]:
    rendered = render_pod(pod_doc(spec), _fast(stub["profile"]))
    root = write_pod_dir(rendered)
    record = stub["tmp"] / "record.jsonl"
    proc = subprocess.Popen(["bash", str(root / "job" / "job.sh")], env=stub_environment(stub, record, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    return proc, root, record


def _read(root: Path, name: str) -> str:
    return (root / "status" / name).read_text().strip()


def test_always_restarts_with_back_off_and_sigterm_records_the_end(stub_env) -> None:  # type: ignore[no-untyped-def]
    spec = {"restartPolicy": "Always", "containers": [{"name": "app", "image": "busybox:1.36", "command": ["x"]}]}
    proc, root, record = _start(stub_env, spec, HPK_STUB_EXIT="2")
    end = time.monotonic() + 40
    while len(records(record)) < 3:  # runs 2 and 3 come after back-offs of 1 s and 2 s
        assert time.monotonic() < end, "the container was not restarted"
        time.sleep(0.05)
    assert int(_read(root, "app.restarts")) >= 2 and _read(root, "app.last-exitcode") == "2"
    (root / "status" / "pod.deleting").write_text("now\n")  # hpkctl delete marks it before it signals
    os.killpg(proc.pid, signal.SIGTERM)  # what scancel does: every process of the job
    end = time.monotonic() + 30
    while not (root / "status" / "pod.done").exists():
        assert time.monotonic() < end, "the stop sequence did not finish"
        time.sleep(0.05)
    with pytest.raises(subprocess.TimeoutExpired):  # after a delete it waits for the scancel that follows
        proc.communicate(timeout=0.5)
    os.killpg(proc.pid, signal.SIGTERM)  # that scancel
    proc.communicate(timeout=30)
    assert _read(root, "pod.done") == "143"
    assert _read(root, "pod.failed").splitlines()[0] == "Terminated"
    assert len(records(record)) >= 3


def test_on_failure_restarts_until_success(stub_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    codes = tmp_path / "codes"
    codes.write_text("1 0")
    spec = {"restartPolicy": "OnFailure", "containers": [{"name": "app", "image": "b:1", "command": ["x"]}]}
    proc, root, record = _start(stub_env, spec, HPK_STUB_EXIT_FILE=str(codes))
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert (_read(root, "app.restarts"), _read(root, "app.last-exitcode"), _read(root, "app.exitcode")) == ("1", "1", "0")
    assert _read(root, "pod.done") == "0" and len(records(record)) == 2


def test_failed_init_container_stops_the_pod(stub_env) -> None:  # type: ignore[no-untyped-def]
    spec = {"restartPolicy": "Never", "initContainers": [{"name": "init", "image": "b:1", "command": ["x"]}],
            "containers": [{"name": "app", "image": "b:1", "command": ["y"]}]}
    proc, root, record = _start(stub_env, spec, HPK_STUB_EXIT="5")
    proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert _read(root, "pod.failed").splitlines() == ["InitContainerFailed", "init container init exited with code 5"]
    assert [r["args"] for r in records(record)] == [["x"]]  # the main container never ran


def test_image_pull_failure_is_a_pod_failure(stub_env) -> None:  # type: ignore[no-untyped-def]
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "nope:1", "command": ["x"]}]}
    proc, root, record = _start(stub_env, spec, HPK_STUB_PULL_FAIL="1")
    proc.communicate(timeout=30)
    reason, message = _read(root, "pod.failed").split("\n", 1)
    assert reason == "ErrImagePull" and "docker://docker.io/library/nope:1" in message and "refused" in message
    assert not records(record)


def test_never_pull_policy_with_missing_image(stub_env) -> None:  # type: ignore[no-untyped-def]
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "nope:1", "command": ["x"],
                                                      "imagePullPolicy": "Never"}]}
    proc, root, _ = _start(stub_env, spec)
    proc.communicate(timeout=30)
    assert _read(root, "pod.failed").splitlines()[0] == "ErrImageNeverPull"


def test_host_path_types(stub_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    created = tmp_path / "made" / "here"
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "b:1", "command": ["x"], "volumeMounts": [
        {"name": "a", "mountPath": "/a"}, {"name": "b", "mountPath": "/b"}]}],
        "volumes": [{"name": "a", "hostPath": {"path": str(created), "type": "DirectoryOrCreate"}},
                    {"name": "b", "hostPath": {"path": str(tmp_path / "missing.txt"), "type": "File"}}]}
    proc, root, _ = _start(stub_env, spec)
    proc.communicate(timeout=30)
    assert created.is_dir()
    reason, message = _read(root, "pod.failed").split("\n", 1)
    assert reason == "HostPathCheckFailed" and "missing.txt is not a File" in message


def test_empty_dir_over_its_size_limit_evicts_the_pod(stub_env) -> None:  # type: ignore[no-untyped-def]
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "b:1", "command": ["x"],
                                                      "volumeMounts": [{"name": "s", "mountPath": "/s"}]}],
            "volumes": [{"name": "s", "emptyDir": {"sizeLimit": "64Ki"}}]}
    proc, root, _ = _start(stub_env, spec, HPK_STUB_SLEEP="60")
    wait_for("app.started", (root / "status" / "app.started").exists, timeout=40)
    (root / "volumes" / "s" / "big").write_bytes(b"x" * 300_000)
    proc.communicate(timeout=60)
    reason, message = _read(root, "pod.failed").split("\n", 1)
    assert reason == "Evicted" and message.startswith('Usage of EmptyDir volume "s" exceeds the limit "64Ki".')
    assert _read(root, "pod.done") == "143"


def test_job_dying_before_containers_start_is_recorded(stub_env) -> None:  # type: ignore[no-untyped-def]
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "b:1", "command": ["x"]}]}
    rendered = render_pod(pod_doc(spec), stub_env["profile"])
    root = write_pod_dir(rendered)
    (root / "etc").write_text("a file where the pod's etc/ directory must go")
    r = subprocess.run(["bash", str(root / "job" / "job.sh")], env=stub_environment(stub_env, stub_env["tmp"] / "r"),
                       capture_output=True, timeout=30, check=False)
    assert r.returncode != 0
    assert _read(root, "pod.failed").splitlines()[0] == "PodSetupFailed"
    assert _read(root, "pod.done") == "1"
    assert not (stub_env["tmp"] / "r").exists()  # no container ran


def test_image_pull_secrets_reach_the_pull_only(stub_env) -> None:  # type: ignore[no-untyped-def]
    import base64
    import json

    from hpkctl.pod.objects import StaticObjects

    cfg = {"auths": {"ghcr.io": {"auth": base64.b64encode(b"robot:p@ss 'w0rd'").decode()},
                     "https://index.docker.io/v1/": {"username": "hub", "password": "x"}}}
    secret = {"kind": "Secret", "metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
              "data": {".dockerconfigjson": base64.b64encode(json.dumps(cfg).encode()).decode()}}
    spec = {"restartPolicy": "Never", "imagePullSecrets": [{"name": "regcred"}, {"name": "absent"}],
            "containers": [{"name": "app", "image": "ghcr.io/org/private:1", "command": ["x"]},
                           {"name": "pub", "image": "quay.io/org/public:1", "command": ["y"]}]}
    rendered = render_pod(pod_doc(spec), stub_env["profile"], objects=StaticObjects.of([secret]))
    assert "p@ss" not in rendered.script
    assert any("absent" in w for w in rendered.warnings)
    root = write_pod_dir(rendered)
    [cred] = list((root / "env").glob("pull-*.cred"))
    assert oct(cred.stat().st_mode & 0o777) == "0o600"
    record = stub_env["tmp"] / "record.jsonl"
    r = subprocess.run(["bash", str(root / "job" / "job.sh")], env=stub_environment(stub_env, record),
                       capture_output=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    pulls = {p["source"]: (p["user"], p["password"]) for p in records(record, pulls=True)}
    assert pulls == {"docker://ghcr.io/org/private:1": ("robot", "p@ss 'w0rd'"),
                     "docker://quay.io/org/public:1": (None, None)}
    assert all("APPTAINER_DOCKER_PASSWORD" not in rec["env"] for rec in records(record))


@pytest.mark.parametrize(("age", "pulled"), [(10, False), (400, True)])
def test_always_image_is_reused_within_the_profiles_window_like_the_submit_host_pull(
        stub_env, age: int, pulled: bool) -> None:  # type: ignore[no-untyped-def]
    spec = {"restartPolicy": "Never",
            "containers": [{"name": "app", "image": "b:1", "imagePullPolicy": "Always", "command": ["x"]}]}
    rendered = render_pod(pod_doc(spec), stub_env["profile"])
    assert "HPK_ALWAYS_PULL_WINDOW=300\n" in rendered.script  # the profile's default
    [(_, sif, policy)] = rendered.plan.images
    assert policy == "Always"
    Path(sif).parent.mkdir(parents=True, exist_ok=True)
    Path(sif).write_bytes(b"cached")
    os.utime(sif, (time.time() - age, time.time() - age))
    # hpkctl's own pull on the submit host (profiles with pull = "submit") decides the same way
    assert is_fresh(sif, policy="Always", window=300) is not pulled
    root = write_pod_dir(rendered)
    record = stub_env["tmp"] / "record.jsonl"
    r = subprocess.run(["bash", str(root / "job" / "job.sh")], env=stub_environment(stub_env, record),
                       capture_output=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    assert [p["source"] for p in records(record, pulls=True)] == (["docker://docker.io/library/b:1"] if pulled else [])


def test_policy_timers_come_from_the_profile(stub_env) -> None:  # type: ignore[no-untyped-def]
    spec = {"containers": [{"name": "app", "image": "b:1"}]}
    script = render_pod(pod_doc(spec), _fast(stub_env["profile"])).script
    assert {line for line in script.splitlines() if line.startswith(("HPK_RESTART", "HPK_SIZE"))} == {
        "HPK_RESTART_BACKOFF=1", "HPK_RESTART_BACKOFF_MAX=2", "HPK_SIZE_CHECK_INTERVAL=1"}


def test_asking_slurm_whether_it_cancelled_the_job_runs_beside_the_stop_sequence(stub_env) -> None:  # type: ignore[no-untyped-def]
    """A TERM without pod.deleting: the job asks squeue whether Slurm cancelled it. This squeue answers
    only once the container has been stopped (its exit code written), so a job that asked first and
    stopped its containers after would wait out squeue's bound, write no verdict, and eat the seconds
    the time limit's --signal leaves it; here the question runs during the stop sequence."""
    fake = stub_env["tmp"] / "slow-squeue"
    fake.mkdir()
    (fake / "squeue").write_text('#!/bin/bash\nfor _ in $(seq 300); do\n'
                                 '  [ -e "$HPK_STATUS/app.exitcode" ] && { echo CANCELLED/None; exit 0; }\n'
                                 '  sleep 0.1\ndone\nexit 1\n')
    (fake / "squeue").chmod(0o755)
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "b:1", "command": ["x"]}]}
    rendered = render_pod(pod_doc(spec), _fast(stub_env["profile"]))
    root = write_pod_dir(rendered)
    env = stub_environment(stub_env, stub_env["tmp"] / "record.jsonl", HPK_STUB_SLEEP="120")
    env["PATH"] = f"{fake}:{env['PATH']}"
    proc = subprocess.Popen(["bash", str(root / "job" / "job.sh")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    wait_for("app.started", (root / "status" / "app.started").exists, timeout=40)
    proc.send_signal(signal.SIGTERM)  # to the batch shell only, as --signal=B:TERM; no pod.deleting
    proc.communicate(timeout=60)
    assert _read(root, "app.exitcode") == "143" and _read(root, "pod.done") == "143"
    assert _read(root, "pod.failed").splitlines()[0] == "Cancelled"


@pytest.mark.parametrize(("dns", "resolv"), [
    ({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.0.0.53"], "searches": ["a.example"]}},
     "nameserver 10.0.0.53\nsearch a.example\n"),
    ({"dnsPolicy": "Default"}, "{node}"),
    ({"dnsPolicy": "Default", "dnsConfig": {"nameservers": ["10.0.0.53"]}}, "{node}nameserver 10.0.0.53\n"),
])
def test_the_pods_hosts_and_resolv_conf_as_the_job_writes_them(stub_env, dns: dict[str, Any], resolv: str) -> None:  # type: ignore[no-untyped-def]
    spec = {"restartPolicy": "Never", "hostname": "db-0", "subdomain": "db",
            "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.local", "bar.local"]}],
            "containers": [{"name": "app", "image": "b:1", "command": ["x"]}], **dns}
    rendered = render_pod(pod_doc(spec), stub_env["profile"])
    root = write_pod_dir(rendered)
    r = subprocess.run(["bash", str(root / "job" / "job.sh")], env=stub_environment(stub_env, stub_env["tmp"] / "r"),
                       capture_output=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    ip = _read(root, "pod.ip")
    assert (root / "etc" / "hosts").read_text() == (
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        f"{ip}\tdb-0.db.default.svc.cluster.local db-0\n10.1.2.3\tfoo.local bar.local\n")
    assert (root / "etc" / "resolv.conf").read_text() == resolv.format(node=Path("/etc/resolv.conf").read_text())


@pytest.mark.parametrize("state, reason", [("RUNNING", "DeadlineExceeded"), ("SIGNALING", "DeadlineExceeded"),
                                           ("CANCELLED", "Cancelled"), ("COMPLETING", "Cancelled")])
def test_a_term_without_a_delete_is_the_time_limit_while_slurm_runs_the_job(stub_env, state: str,  # type: ignore[no-untyped-def]
                                                                            reason: str) -> None:
    """A SIGTERM no delete announced: the job asks Slurm for its own state. RUNNING, or SIGNALING (the
    time limit's --signal not yet seen delivered by slurmctld, on a busy node), is the time limit
    (DeadlineExceeded); a job Slurm already ends is a cancel from outside (Cancelled, naming the state)."""
    squeue = stub_env["bin"] / "squeue"
    squeue.write_text(f"#!/bin/sh\necho {state}/None\n")
    squeue.chmod(0o755)
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox:1.36", "command": ["x"]}]}
    proc, root, record = _start(stub_env, spec, HPK_STUB_SLEEP="300", SLURM_JOB_ID="42")
    wait_for("the container to run", lambda: (root / "status" / "app.started").exists(), timeout=30)
    proc.send_signal(signal.SIGTERM)  # to the batch shell only, as --signal=B:TERM; no pod.deleting
    proc.communicate(timeout=60)
    failed = _read(root, "pod.failed")
    assert failed.splitlines()[0] == reason, failed
    assert (f"Slurm says {state}" in failed) is (reason == "Cancelled"), failed


def test_a_delete_before_the_stop_sequence_is_set_up_still_waits_for_the_scancel(stub_env) -> None:  # type: ignore[no-untyped-def]
    """A delete's TERM that reaches the batch shell while the host part still sets up (no TERM trap of
    the runtime yet) stops the pod as any delete does: pod.failed Terminated, no container started, and
    the job waits for the scancel that follows, so Slurm records it CANCELLED, not FAILED (killed by
    the TERM's default action; the full suite saw it). Here `hostname -I` holds the host part."""
    fake = stub_env["tmp"] / "slow-hostname"
    fake.mkdir()
    held, release = stub_env["tmp"] / "held", stub_env["tmp"] / "release"
    (fake / "hostname").write_text(f'#!/bin/bash\n[ "${{1:-}}" = -I ] || exec /usr/bin/hostname "$@"\n: >"{held}"\n'
                                   f'for _ in $(seq 600); do [ -e "{release}" ] && break; sleep 0.05; done\n'
                                   'echo 127.0.0.1\n')
    (fake / "hostname").chmod(0o755)
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "b:1", "command": ["x"]}]}
    root = write_pod_dir(render_pod(pod_doc(spec), _fast(stub_env["profile"])))
    record = stub_env["tmp"] / "record.jsonl"
    env = stub_environment(stub_env, record, HPK_STUB_SLEEP="120")
    env["PATH"] = f"{fake}:{env['PATH']}"
    proc = subprocess.Popen(["bash", str(root / "job" / "job.sh")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    wait_for("the host part in hostname -I", held.exists, timeout=30)
    (root / "status" / "pod.deleting").write_text("now\n")  # hpkctl delete marks it before it signals
    proc.send_signal(signal.SIGTERM)  # scancel --signal=TERM --batch: the batch shell alone
    release.write_text("")
    wait_for("pod.done", (root / "status" / "pod.done").exists, timeout=30)
    with pytest.raises(subprocess.TimeoutExpired):  # it waits for the scancel that follows
        proc.communicate(timeout=0.5)
    os.killpg(proc.pid, signal.SIGTERM)  # that scancel
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert _read(root, "pod.done") == "143" and _read(root, "pod.failed").splitlines()[0] == "Terminated"
    assert records(record) == []  # a pod deleted before its containers started never starts them


@pytest.mark.parametrize("env, node", [({"SLURMD_NODENAME": "n2"}, "n2"),
                                       ({"SLURMD_NODENAME": "n1", "HPK_RANKS_NODES": "n1,n3"}, "n1,n3")])
def test_a_pilot_pods_script_records_the_slurm_nodes_it_was_placed_on(stub_env, env: dict[str, str],  # type: ignore[no-untyped-def]
                                                                     node: str) -> None:
    """status/job.node of a pilot pod is the Slurm node its step runs on, an MPI pod's every rank node
    (HPK_RANKS_NODES), not the host name several Slurm nodes may share: a restarted kubelet books the
    pod again where it runs from it."""
    profile = stub_env["profile"]
    stub = dict(stub_env, profile=profile.model_copy(update={"pilot": profile.pilot.model_copy(update={"enabled": True})}))
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox:1.36", "command": ["x"]}]}
    proc, root, _ = _start(stub, spec, SLURM_JOB_ID="41", SLURM_STEP_ID="4", **env)
    proc.communicate(timeout=60)
    assert (_read(root, "job.id"), _read(root, "job.node")) == ("41.4", node)


@pytest.mark.parametrize("pilot", [False, True])
@pytest.mark.parametrize("said, reason", [("srun: error: n2: task 1: Out Of Memory", "OOMKilled"),
                                          ("srun: error: n2: task 1: Exited with exit code 1", "Error")])
def test_an_mpi_rank_the_oom_killer_struck_on_any_node_makes_the_container_oomkilled(
        stub_env, pilot: bool, said: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    """The ranks are a step of their own on every node of the pod; this node's memory cgroup (in pilot
    mode: this step's) never sees another node's, so srun's own words say which task the OOM killer
    struck (and srun exits 1, not 137): the container is OOMKilled, in both providers, as for a
    container killed on the batch node."""
    from hpkctl.pod.status import containers_of, read_pod_status

    profile = stub_env["profile"]
    if pilot:
        profile = profile.model_copy(update={"pilot": profile.pilot.model_copy(update={"enabled": True})})
    srun = stub_env["tmp"] / "srun-bin"
    srun.mkdir()
    (srun / "srun").write_text(f'#!/bin/sh\necho "0: rank output"\necho "{said}" >&2\nexit 1\n')
    (srun / "srun").chmod(0o755)
    pod = pod_doc({"restartPolicy": "Never", "containers": [{"name": "ranks", "image": "busybox:1.36", "command": ["x"]}]})
    pod["metadata"]["annotations"] = {"slurm-job.hpk.io/flags": "--nodes=2 --ntasks=2",
                                      "slurm-job.hpk.io/mpi-flags": "--mpi=pmi2"}
    root = write_pod_dir(render_pod(pod, _fast(profile)))
    env = stub_environment(stub_env, stub_env["tmp"] / "record.jsonl", SLURM_JOB_ID="41", SLURM_STEP_ID="4")
    env["PATH"] = f"{srun}:{env['PATH']}"
    subprocess.run(["bash", str(root / "job" / "job.sh")], env=env, capture_output=True, timeout=60, check=False)
    assert _read(root, "ranks.exitcode") == "1"
    st = read_pod_status(root, containers_of(pod), None, job_known=False)
    assert (st.phase, st.reason, st.containers[0].reason) == ("Failed", reason, reason)


@pytest.mark.parametrize("deadline", [0, 600])
def test_a_pilot_pod_whose_allocation_reached_its_time_limit_says_so_in_its_own_files(
        stub_env, deadline: int) -> None:  # type: ignore[no-untyped-def]
    """The allocation's time limit TERMs its steps while Slurm says COMPLETING, reason TimeLimit (22.05,
    measured): not a cancel from outside, but the pod's node going away; the script writes the words
    the status reader gives when Slurm says TIMEOUT (a kubelet round may read the files first)."""
    from hpkctl.pod.outcome import PodOutcome, allocation_ended

    profile = stub_env["profile"]
    stub = dict(stub_env, profile=profile.model_copy(update={"pilot": profile.pilot.model_copy(update={"enabled": True})}))
    (stub_env["bin"] / "squeue").write_text('#!/bin/sh\necho "COMPLETING/TimeLimit"\n')
    (stub_env["bin"] / "squeue").chmod(0o755)
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox:1.36", "command": ["x"]}]}
    if deadline:
        spec["activeDeadlineSeconds"] = deadline
    proc, root, _ = _start(stub, spec, SLURM_JOB_ID="41", SLURM_STEP_ID="4", HPK_STUB_SLEEP="60")
    wait_for("the container", lambda: (root / "status" / "app.started").exists(), timeout=30, every=0.05)
    os.killpg(proc.pid, signal.SIGTERM)  # Slurm's TERM to the step's processes at the allocation's end
    proc.communicate(timeout=60)
    want = allocation_ended(PodOutcome("Failed", "DeadlineExceeded", ""), None, spec).message.replace("?", "41")
    assert _read(root, "pod.failed") == "Terminated\n" + want

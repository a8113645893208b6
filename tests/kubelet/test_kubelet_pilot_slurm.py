"""The kubelet in pilot mode end to end ([pilot] enabled: hpkctl/provider/pilotpod.py): the API
stand-in + ``hpkctl scheduler`` + ``hpkctl kubelet`` as user hpk + the real local Slurm + the Apptainer
stand-in. Pods run as job steps of an allocation the kubelet holds, with the job script of a job of
their own."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster, _as_hpk, running_cluster
from tests.support.hpk import VENV_BIN
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.standin]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    held: set[str] = set()
    for c in running_cluster(lambda root: "\n[pilot]\nenabled = true\nmax_allocations = 2\n"):
        c.held = held  # type: ignore[attr-defined]
        try:
            yield c
        finally:
            for job in held:  # the holder would give them back itself after 2 x idle_release
                subprocess.run(["scancel", job], capture_output=True, check=False)


def squeue(*args: str) -> str:
    return subprocess.run(["squeue", "--noheader", *args], capture_output=True, text=True, check=False).stdout


def bpod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("restartPolicy", "Never")
    containers = spec.pop("containers", None) or [{"name": "c", "image": "busybox", "command": ["sh", "-c", script]}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": containers, **spec}}


def out_pod(name: str, script: str, out: Path, **spec: Any) -> dict[str, Any]:
    """A pod whose container writes to ``out`` (a hostPath at /out)."""
    return bpod(name, "", containers=[{"name": "c", "image": "busybox", "command": ["sh", "-c", script],
                                       "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
                volumes=[{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}], **spec)


def test_the_node_offers_what_its_allocations_can_hold(cluster: Cluster) -> None:
    """In pilot mode the node's capacity is the held allocations plus what could still be requested:
    2 allocations of ci's [pilot] shape (4 CPUs, 2G), not the partition's 16 CPUs."""
    st = wait_for("the node's capacity", lambda: (n := cluster.api.get("/api/v1/nodes/hpk"))[0] == 200
                  and n[1]["status"].get("capacity"), timeout=30)
    assert (st["cpu"], st["memory"]) == ("8", f"{2 * 2048 * 1024}Ki"), st


def test_a_pod_runs_as_a_step_of_the_kubelet_s_allocation(cluster: Cluster) -> None:
    """The pod is bound, placed in an allocation the kubelet requested (its comment names the kubelet
    and node; the pod's job id annotation is the allocation's), its init container runs first, it
    succeeds with its exit code, and the allocation stays held for the next pod."""
    pod = bpod("pilot-hello", "echo main ran",
               initContainers=[{"name": "init", "image": "busybox", "command": ["sh", "-c", "echo init ran"]}])
    cluster.create(pod)
    p = cluster.wait_phase("pilot-hello", "Succeeded", "Failed", timeout=120)
    job = cluster.job_id("pilot-hello")
    cluster.held.add(job)  # type: ignore[attr-defined]
    assert p["status"]["phase"] == "Succeeded", p["status"]
    [cs] = p["status"]["containerStatuses"]
    assert cs["state"]["terminated"]["exitCode"] == 0
    [init] = p["status"]["initContainerStatuses"]
    assert init["state"]["terminated"]["exitCode"] == 0
    line = squeue(f"--jobs={job}", "--format=%j|%T|%k").strip()
    assert re.fullmatch(r"hpk_pilot_hpk\|RUNNING\|hpk-pilot kubelet=kubelet state=[0-9a-f]{12} node=hpk", line), line
    logs = cluster.kubectl("logs", "pilot-hello", "-c", "c")
    assert logs.stdout == "main ran\n", logs.stdout + logs.stderr


def test_delete_stops_the_pod_s_step_with_its_grace_period(cluster: Cluster) -> None:
    """kubectl exec into the running pod gives the command's output and exit code; deleting it: TERM
    reaches the container through the pod's own stop sequence (not a kill of the step), the pod goes
    from the API, and its step is gone from Slurm."""
    out = Path(tempfile.mkdtemp(prefix="hpk-pilot-", dir="/tmp"))
    out.chmod(0o777)
    try:
        pod = out_pod("pilot-stop", "trap 'echo got TERM >/out/term; exit 0' TERM; : >/out/trapped; "
                      "while :; do sleep 0.2; done", out, terminationGracePeriodSeconds=10)
        cluster.create(pod)
        cluster.wait_phase("pilot-stop", "Running", timeout=120)
        # Running says the container started, not that its shell has set the trap yet
        wait_for("the container's TERM trap", (out / "trapped").exists, timeout=60)
        job = cluster.job_id("pilot-stop")
        cluster.held.add(job)  # type: ignore[attr-defined]
        steps = squeue("--steps", f"--jobs={job}", "--format=%i|%j")
        assert any(s.endswith("|pilot-stop") for s in steps.splitlines()), steps  # a step named after the pod
        # kubectl exec reaches the container through a step of the allocation (srun --overlap)
        r = cluster.kubectl("exec", "pilot-stop", "--", "sh", "-c", "echo hi from exec; exit 3", check=False)
        assert (r.returncode, r.stdout) == (3, "hi from exec\n"), r.stderr
        code, _ = cluster.api.delete("/api/v1/namespaces/default/pods/pilot-stop")
        assert code == 200
        wait_for("the pod to go", lambda: cluster.pod("pilot-stop") is None, timeout=60)
        assert (out / "term").read_text() == "got TERM\n"
        assert not any(s.endswith("|pilot-stop") for s in squeue("--steps", f"--jobs={job}", "--format=%i|%j")
                       .splitlines())
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_a_pod_whose_step_is_killed_fails_as_a_pod_whose_node_lost_it(cluster: Cluster) -> None:
    """``scancel --signal=KILL`` of a running pod's step (as a node or allocation failure ends it) while
    another pod keeps the allocation busy: the script never writes how the pod ended, yet within a
    status round the pod fails ``Cancelled`` with a message naming the step and a warning event, and its
    container reads terminated, not ready (as the kubelet reports a container it cannot find once the
    pod ended), instead of Running for ever; the other pod runs on."""
    out = Path(tempfile.mkdtemp(prefix="hpk-pilot-", dir="/tmp"))
    out.chmod(0o777)
    try:
        cluster.create(out_pod("pilot-keeper", "while [ ! -e /out/go ]; do sleep 0.2; done", out))
        cluster.create(bpod("pilot-killed", "while :; do sleep 0.2; done", terminationGracePeriodSeconds=1))
        cluster.wait_phase("pilot-keeper", "Running", timeout=120)
        cluster.wait_phase("pilot-killed", "Running", timeout=120)
        job = cluster.job_id("pilot-killed")
        cluster.held.add(job)  # type: ignore[attr-defined]
        cluster.held.add(cluster.job_id("pilot-keeper"))  # type: ignore[attr-defined]
        [step] = [s.split("|")[0] for s in squeue("--steps", f"--jobs={job}", "--format=%i|%j").splitlines()
                  if s.endswith("|pilot-killed")]
        subprocess.run(_as_hpk(["scancel", "--signal=KILL", step], home=cluster.home), check=True, timeout=30)
        st = cluster.wait_phase("pilot-killed", "Failed", "Succeeded", timeout=60)["status"]
        assert (st["phase"], st.get("reason")) == ("Failed", "Cancelled"), st
        assert f"pilot step {step} ended" in st["message"], st
        [cs] = st["containerStatuses"]
        assert not cs["ready"] and cs["state"]["terminated"]["reason"] == "ContainerStatusUnknown", cs
        assert [c["status"] for c in st["conditions"] if c["type"] == "Ready"] == ["False"], st["conditions"]
        ev = wait_for("the pod's Failed event", lambda: [e for e in cluster.events("pilot-killed")
                                                          if e["reason"] == "Failed" and step in e["message"]],
                      timeout=60)
        assert ev[0]["type"] == "Warning", ev
        assert (cluster.pod("pilot-keeper") or {})["status"]["phase"] == "Running"
        (out / "go").touch()
        p = cluster.wait_phase("pilot-keeper", "Succeeded", "Failed", timeout=90)
        assert p["status"]["phase"] == "Succeeded", p["status"]
        # a lost pod's delete ends (the API keeps it until the kubelet's stop sequence is over)
        code, _ = cluster.api.delete("/api/v1/namespaces/default/pods/pilot-killed")
        assert code == 200
        wait_for("the killed pod to go", lambda: cluster.pod("pilot-killed") is None, timeout=60)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_a_pod_created_once_its_allocations_were_cancelled_runs_in_a_new_one(cluster: Cluster) -> None:
    """``scancel`` of every allocation the kubelet holds (as preemption or failing nodes end them)
    while they all run, with ``[kubelet] slurm_poll = 10`` (the pool's books are then asked about only
    that often): the running pod's step ends with its allocation (its srun's end asks Slurm about the
    books), and a pod created then runs in a new allocation, not started in a dead one to fail with it."""
    fast = cluster.profile.read_text()
    assert "slurm_poll = 1.0" in fast
    assert cluster.stop_process(cluster.kubelet) is not None
    cluster.profile.write_text(fast.replace("slurm_poll = 1.0", "slurm_poll = 10.0"))
    try:
        cluster.start_kubelet()
        uid = cluster.create(bpod("pilot-doomed", "while :; do sleep 0.2; done",
                                  terminationGracePeriodSeconds=1))["metadata"]["uid"]
        cluster.wait_phase("pilot-doomed", "Running", timeout=120)
        job = cluster.job_id("pilot-doomed")
        cluster.held.add(job)  # type: ignore[attr-defined]
        [comment] = [line.split("|", 1)[1] for line in squeue(f"--jobs={job}", "--format=%i|%k").splitlines()]
        mine = [i for i, _, k in (line.partition("|") for line in squeue("--format=%i|%k").splitlines())
                if k == comment]  # this kubelet's allocations, by their comment (its state directory's mark)
        cluster.held.update(mine)  # type: ignore[attr-defined]
        subprocess.run(_as_hpk(["scancel", *mine], home=cluster.home), check=True, timeout=30)
        st = cluster.wait_phase("pilot-doomed", "Failed", "Succeeded", timeout=90)["status"]
        assert st["phase"] == "Failed", st
        wait_for("the kubelet to see the doomed pod's srun end",
                 lambda: f"the step of pod uid {uid} ended" in cluster.log("kubelet"), timeout=60)
        cluster.create(bpod("pilot-after", "echo ran"))
        p = cluster.wait_phase("pilot-after", "Succeeded", "Failed", timeout=120)
        after = cluster.job_id("pilot-after")
        cluster.held.add(after)  # type: ignore[attr-defined]
        assert p["status"]["phase"] == "Succeeded", p["status"]
        assert after not in ("", *mine), (after, mine)
        for name in ("pilot-doomed", "pilot-after"):
            assert cluster.api.delete(f"/api/v1/namespaces/default/pods/{name}")[0] == 200
            wait_for(f"pod {name} to go", lambda: cluster.pod(name) is None, timeout=60)  # noqa: B023
    finally:
        cluster.stop_process(cluster.kubelet)
        cluster.profile.write_text(fast)
        cluster.start_kubelet()


def test_a_restarted_kubelet_adopts_its_allocation_and_the_running_step(cluster: Cluster) -> None:
    """The kubelet stops while a pod's step runs: the step runs on (its srun is in a session of its
    own), the next kubelet adopts the allocation and the pod, which succeeds having run once."""
    out = Path(tempfile.mkdtemp(prefix="hpk-pilot-", dir="/tmp"))
    out.chmod(0o777)
    try:
        # the step runs until the test says so: it is certainly running across the restart, however
        # long stopping and starting the kubelet takes on a loaded machine
        pod = out_pod("pilot-adopt", "echo ran >>/out/runs; while [ ! -e /out/go ]; do sleep 0.2; done", out)
        cluster.create(pod)
        cluster.wait_phase("pilot-adopt", "Running", timeout=120)
        job = cluster.job_id("pilot-adopt")
        cluster.held.add(job)  # type: ignore[attr-defined]
        wait_for("the container's first line", lambda: (out / "runs").exists(), timeout=60)
        assert cluster.stop_process(cluster.kubelet) is not None
        cluster.start_kubelet()
        assert any(s.endswith("|pilot-adopt") for s in squeue("--steps", f"--jobs={job}", "--format=%i|%j")
                   .splitlines()), "the pod's step did not run on while the kubelet was away"
        (out / "go").touch()
        p = cluster.wait_phase("pilot-adopt", "Succeeded", "Failed", timeout=90)
        assert p["status"]["phase"] == "Succeeded", p["status"]
        assert (out / "runs").read_text() == "ran\n"  # once: adopted, not started again
        assert cluster.job_id("pilot-adopt") == job
        assert squeue(f"--jobs={job}", "--format=%T").strip() == "RUNNING"  # still held, not orphaned twice
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_stop_all_ends_the_pilot_pods_with_their_grace_then_releases_the_allocations(cluster: Cluster) -> None:
    """``hpkctl stop --all`` after a pilot kubelet: its pod's recorded job is the allocation (whose
    comment names no pod), and it is stopped all the same, through the pilot provider: the delete
    marker (its status says deleted, not a time limit), TERM to its step (the container's handler
    runs within the grace period), the step cancelled; then the kubelet's allocations are released.
    Last in the module: the kubelet is stopped first, as stop --all stops it."""
    out = Path(tempfile.mkdtemp(prefix="hpk-pilot-", dir="/tmp"))
    out.chmod(0o777)
    try:
        pod = out_pod("pilot-stopall", "trap 'echo got TERM >/out/term; exit 0' TERM; : >/out/trapped; "
                      "while :; do sleep 0.2; done", out, terminationGracePeriodSeconds=20)
        uid = cluster.create(pod)["metadata"]["uid"]
        cluster.wait_phase("pilot-stopall", "Running", timeout=120)
        wait_for("the container's TERM trap", (out / "trapped").exists, timeout=60)
        job = cluster.job_id("pilot-stopall")
        cluster.held.add(job)  # type: ignore[attr-defined]
        assert cluster.stop_process(cluster.kubelet) is not None
        # its own [controlplane] state_dir: stop --all must never reach another cluster of user hpk
        site = cluster.root / "site-stop.toml"
        site.write_text(cluster.profile.read_text() + f'\n[controlplane]\nstate_dir = "{cluster.root / "cp"}"\n')
        site.chmod(0o644)
        r = subprocess.run(_as_hpk([str(VENV_BIN / "hpkctl"), "stop", "--site", str(site), "--all"],
                                   home=cluster.home), capture_output=True, text=True, timeout=180, check=False)
        assert r.returncode == 0, r.stderr
        assert "pods: stopping 1 pilot step(s) of the node's pods, each with its grace period: " f"{job}." \
            in r.stderr, r.stderr
        assert f"released the kubelet's pilot allocation(s) {job}" in r.stderr, r.stderr
        assert (out / "term").read_text() == "got TERM\n"  # the pod's own stop sequence, not a kill
        status = cluster.root / "hpk-state" / "pods" / uid / "status"
        reason, _, message = (status / "pod.failed").read_text().partition("\n")
        assert reason == "Terminated" and "the pod was deleted" in message, (reason, message)
        assert (status / "c.exitcode").read_text().strip() == "0"
        assert squeue(f"--jobs={job}", "--states=PENDING,RUNNING", "--format=%i").strip() == ""  # released
    finally:
        shutil.rmtree(out, ignore_errors=True)

"""The kubelet under attack and faults (issue 20: nothing run twice, no other user or tenant gets
in): lost records, Slurm requeues, a second kubelet, pods named like the cluster's own jobs, the
HTTPS API's authorisation. Real Slurm, the API stand-in, one mini cloud for the module."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
import yaml

from hpkctl.kube.address import host_address
from hpkctl.pod.flags import pod_of_job

from tests.support.cluster import Cluster, _as_hpk, wait_for
from tests.support.hpk import VENV_BIN, unique

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the kubelet's self-signed serving cert


def jobs_of(uid: str) -> list[str]:
    """The ids of every job slurmctld knows (pending, running, finished until MinJobAge) whose comment
    names pod ``uid`` (its own job's ``hpk-uid=``, or its place in a batch's ``hpk-uids=`` list)."""
    out = subprocess.run(["squeue", "--noheader", "--all", "--states=all", "--array", "--format=%i|%k"],
                         capture_output=True, text=True, check=True).stdout
    return [found[1] for line in out.splitlines() if (found := pod_of_job(*line.split("|", 1))) and found[0] == uid]


def short_pod(name: str, command: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", command]}]}}


def delete_and_wait(cluster: Cluster, name: str) -> None:
    """Delete a pod and wait until the kubelet has stopped its job and removed it (no job outlives the test)."""
    cluster.kubectl("delete", "pod", name, "--wait=false")
    wait_for(f"pod {name} to be gone", lambda: cluster.pod(name) is None, timeout=60)


def test_lost_records_never_run_a_pod_twice(cluster: Cluster) -> None:
    """The kubelet's records vanish while it is down (a purged scratch, a changed state_dir): the
    restarted kubelet adopts the running pod's job (found by its uid) instead of submitting a second
    one, and never submits the finished pod again."""
    done = cluster.create(short_pod("lost-done", "echo once"))["metadata"]["uid"]
    running = cluster.create(short_pod("lost-running", "sleep 300"))["metadata"]["uid"]
    cluster.wait_phase("lost-done", "Succeeded")
    cluster.wait_phase("lost-running", "Running")
    job = cluster.job_id("lost-running")
    cluster.stop_process(cluster.kubelet, signal.SIGKILL)
    shutil.rmtree(cluster.root / "hpk-state" / "kubelet")
    # the finished pod's directory goes too: only the API's terminal phase is left to stop a rerun
    shutil.rmtree(cluster.root / "hpk-state" / "pods" / done)
    cluster.start_kubelet()
    wait_for("the running pod's job to be adopted", lambda: "adopting job" in cluster.log("kubelet")
             and "lost-running" in cluster.log("kubelet"), timeout=60)
    assert jobs_of(running) == [job]
    assert len(jobs_of(done)) == 1
    assert cluster.phase("lost-done") == "Succeeded"
    assert cluster.phase("lost-running") == "Running"
    cluster.kubectl("delete", "pod", "lost-running", "--wait=false")
    wait_for("the adopted job to be cancelled by the delete", lambda: cluster.pod("lost-running") is None,
             timeout=60)
    state = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={job}", "--format=%T"],
                           capture_output=True, text=True, check=False).stdout.strip()
    assert state in ("CANCELLED", "COMPLETED", "COMPLETING"), state


def _client_cert(kubeconfig: Path, where: Path) -> tuple[str, str]:
    """The client certificate and key a kubeconfig holds, as files."""
    user = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    cert, key = where / "client.crt", where / "client.key"
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    return str(cert), str(key)


def test_the_kubelet_api_serves_only_the_api_server(cluster: Cluster, tmp_path: Path) -> None:
    """Issue 20.9: the scheduler's certificate, signed by the same cluster CA, can no longer list the
    node's pods or exec into one (the real kubelet's 403); ``kubectl exec`` through the API server
    still works; an RBAC binding to nodes/proxy lets the scheduler's identity in (SubjectAccessReview).
    The API listens on the configured address (127.0.0.1) only."""
    cluster.create(short_pod("authz-target", "sleep 300"))
    cluster.wait_phase("authz-target", "Running")
    node = cluster.api.get("/api/v1/nodes/hpk")[1]
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    scheduler = _client_cert(cluster.api.state / "scheduler.kubeconfig", tmp_path)
    url = f"https://127.0.0.1:{port}"
    r = requests.get(f"{url}/pods", cert=scheduler, verify=False, timeout=20)
    assert r.status_code == 403 and "user=system:kube-scheduler" in r.text, r.text
    r = requests.post(f"{url}/exec/default/authz-target/c?command=id&stdout=1", cert=scheduler, verify=False,
                      timeout=20)
    assert r.status_code == 403 and "subresource(s)=[proxy]" in r.text, r.text
    assert "authz-target" not in r.text
    out = cluster.kubectl("exec", "authz-target", "--", "echo", "through-the-api-server")
    assert out.returncode == 0 and out.stdout.strip() == "through-the-api-server", out
    # RBAC decides for anyone else, as for the real kubelet (SubjectAccessReview): bound to nodes/proxy,
    # the scheduler's identity gets in (once the kubelet's cache of the denial has passed: 30 s by default,
    # [kubelet] authz_denied_ttl = 1 s in the tests' profile)
    for argv in (("create", "clusterrole", "node-proxy", "--verb=get,create", "--resource=nodes/proxy"),
                 ("create", "clusterrolebinding", "scheduler-node-proxy", "--clusterrole=node-proxy",
                  "--user=system:kube-scheduler")):
        made = cluster.kubectl(*argv)
        assert made.returncode == 0, made
    wait_for("RBAC to let the scheduler's identity list the node's pods", lambda: requests.get(
        f"{url}/pods", cert=scheduler, verify=False, timeout=20).status_code == 200, timeout=60, every=2)
    other = host_address()
    if other != "127.0.0.1":
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"https://{other}:{port}/healthz", cert=scheduler, verify=False, timeout=5)
    delete_and_wait(cluster, "authz-target")


def test_a_second_kubelet_for_the_same_node_is_refused_with_the_holders_pid(cluster: Cluster) -> None:
    """Issue 20.17: two kubelets for one node and state directory would each submit a job for every
    pod. The second is refused at start, naming the first one's pid; the first keeps serving."""
    assert cluster.kubelet is not None
    second = cluster._spawn("kubelet2", "kubelet", "--site", str(cluster.profile), "--kubeconfig",
                            str(cluster.api.state / "kubelet.kubeconfig"), "--port", "0", "--address", "127.0.0.1")
    try:
        rc = second.wait(timeout=60)
    finally:
        cluster.stop_process(second)
    out = cluster.log("kubelet2")
    holder = (cluster.root / "hpk-state" / "kubelet" / "hpk" / "kubelet.lock").read_text().strip()
    assert rc != 0 and f"another kubelet (pid {holder}) already serves node hpk" in out, out
    assert cluster.kubelet.poll() is None and cluster.node_ready()
    assert oct((cluster.root / "hpk-state" / "kubelet").stat().st_mode & 0o777) == "0o700"


def test_status_and_delete_tell_the_kubelets_pods_from_runs(cluster: Cluster) -> None:
    """Issue 20.13: with the same profile, ``hpkctl status -A`` listed the kubelet's running pod as a
    lost run ("'hpkctl delete' cancels it"), and following that cancelled the API pod's job. Now the
    kubelet's pods are no runs: status does not list them, delete does not cancel them."""
    name = unique("served-by-kubelet")
    uid = cluster.create(short_pod(name, "sleep 300"))["metadata"]["uid"]
    cluster.wait_phase(name, "Running")
    job = cluster.job_id(name)

    def hpkctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(_as_hpk([str(VENV_BIN / "hpkctl"), *args, "--site", str(cluster.profile)],
                                      home=cluster.home), capture_output=True, text=True, timeout=120, check=False)

    status = hpkctl("status", "-A", "--json")
    assert status.returncode == 0, status.stderr
    assert uid not in status.stdout, status.stdout
    delete = hpkctl("delete", name)
    assert delete.returncode == 125, delete
    assert jobs_of(uid) == [job]
    state = subprocess.run(["squeue", "--noheader", f"--jobs={job}", "--format=%T"], capture_output=True, text=True,
                           check=False).stdout.strip()
    assert state == "RUNNING", state
    delete_and_wait(cluster, name)


def test_a_full_state_disk_at_kubelet_start_is_a_clear_error(cluster: Cluster) -> None:
    """Issue 20.7: the kubelet's state directory on a full file system (a 1 MiB tmpfs, filled) ends its
    start with a message naming the path and the fix, not a traceback."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = cluster.root / "full-disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(disk)], check=True)
    try:
        shutil.chown(disk, "hpk", "hpk")
        subprocess.run(["runuser", "-u", "hpk", "--", "dd", "if=/dev/zero", f"of={disk / 'filler'}", "bs=64k"],
                       capture_output=True, check=False)  # until the disk is full
        site = cluster.root / "full-site.toml"
        site.write_text(f'extends = "ci"\n\n[pods]\nstate_dir = "{disk / "state"}"\n')
        site.chmod(0o644)
        kubelet = cluster._spawn("kubelet-full", "kubelet", "--site", str(site), "--kubeconfig",
                                 str(cluster.api.state / "kubelet.kubeconfig"), "--node-name", "full-disk",
                                 "--port", "0", "--address", "127.0.0.1")
        try:
            rc = kubelet.wait(timeout=60)
        finally:
            cluster.stop_process(kubelet)
        out = cluster.log("kubelet-full")
        assert rc == 125 and "the kubelet cannot write its state" in out and "No space left on device" in out, out
        assert "Traceback" not in out, out
    finally:
        subprocess.run(["umount", str(disk)], check=False)

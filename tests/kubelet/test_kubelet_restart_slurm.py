"""Robustness end to end: the kubelet killed with SIGKILL in the middle of a burst and restarted;
the API stand-in restarted under a running kubelet. Real Slurm, real jobs."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from typing import Any

import pytest

from hpkctl.pod.flags import pod_of_job
from tests.support.cluster import Cluster
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.standin, pytest.mark.whole_node]  # pods at once: xdistgroups


def jobs_by_uid() -> Counter[str]:
    """How many Slurm jobs name each pod uid in their comment (``hpk-uid=<uid> ...``, or its place in a
    batch's ``hpk-uids=`` list for an array element), pending, running and finished ones still in
    slurmctld's memory (MinJobAge) alike."""
    out = subprocess.run(["squeue", "--noheader", "--all", "--states=all", "--array", "--format=%i|%k"],
                         capture_output=True, text=True, check=True).stdout
    return Counter(found[0] for line in out.splitlines()
                   if (found := pod_of_job(*line.split("|", 1))) is not None)


def burst_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"burst": "yes"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 2; echo ok"]}]}}


def test_sigkill_during_burst_of_50_then_restart(cluster: Cluster) -> None:
    """50 pods created at once; the kubelet is killed with SIGKILL while it submits them and started
    again: every pod ends Succeeded, each with exactly one Slurm job (no duplicate, none orphaned)."""
    names = [f"burst-{i:02d}" for i in range(50)]
    uids = {}
    for n in names:
        uids[n] = cluster.create(burst_pod(n))["metadata"]["uid"]
    records = cluster.root / "hpk-state" / "kubelet" / "hpk" / "records.log"
    # the kubelet's intent records are the cheapest sign of progress (a line per pod being submitted)
    wait_for("some pods being submitted", lambda: records.exists() and records.read_bytes().count(b"\n") >= 3,
             timeout=60, every=0.02)
    cluster.stop_process(cluster.kubelet, signal.SIGKILL)
    submitted_before = sum(1 for n in names if cluster.job_id(n))
    cluster.start_kubelet()
    assert submitted_before < 50, "the kill came too late to test anything"

    def all_done() -> bool:
        return all(cluster.phase(n) in ("Succeeded", "Failed") for n in names)

    try:
        wait_for("all 50 pods to finish", all_done, timeout=600, every=2)
    except AssertionError:
        phases = Counter(cluster.phase(n) for n in names)
        raise AssertionError(f"phases {phases}\n{cluster.log('kubelet')[-3000:]}") from None
    assert Counter(cluster.phase(n) for n in names) == Counter({"Succeeded": 50})
    counts = jobs_by_uid()
    assert {n: counts[u] for n, u in uids.items()} == {n: 1 for n in names}
    assert len({cluster.job_id(n) for n in names}) == 50


def test_api_server_restart_under_the_kubelet(cluster: Cluster) -> None:
    """The API stand-in stops for a while and comes back (its objects kept, old watch positions gone):
    the kubelet keeps its node Ready, reports a pod that finished meanwhile and runs a new one."""
    uid = cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "through-outage"},
                          "spec": {"restartPolicy": "Never", "containers": [
                              {"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 4; exit 0"]}]}}
                         )["metadata"]["uid"]
    cluster.wait_phase("through-outage", "Running")
    cluster.api.stop()
    done = cluster.root / "hpk-state" / "pods" / uid / "status" / "pod.done"
    wait_for("the pod to finish while nobody can be told", done.exists, timeout=60)
    cluster.api.start()
    cluster.wait_phase("through-outage", "Succeeded", timeout=90)
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-outage"},
                    "spec": {"restartPolicy": "Never", "containers": [
                        {"name": "c", "image": "busybox", "command": ["true"]}]}})
    cluster.wait_phase("after-outage", "Succeeded", timeout=90)
    assert cluster.node_ready()
    assert cluster.kubelet is not None and cluster.kubelet.poll() is None


def test_pod_deleted_while_the_kubelet_is_down(cluster: Cluster) -> None:
    """A running pod is deleted while the kubelet is down (it stays Terminating: only the kubelet may
    finish a graceful delete); the restarted kubelet stops its job and removes it."""
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orphan-to-be"},
                    "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 3, "containers": [
                        {"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}})
    cluster.wait_phase("orphan-to-be", "Running")
    job = cluster.job_id("orphan-to-be")
    cluster.stop_process(cluster.kubelet, signal.SIGTERM)
    cluster.kubectl("delete", "pod", "orphan-to-be", "--wait=false")  # returns once the API marked it
    p = cluster.pod("orphan-to-be")
    assert p is not None and p["metadata"].get("deletionTimestamp"), "a bound pod waits for its kubelet"
    cluster.start_kubelet()
    wait_for("the pod to be gone", lambda: cluster.pod("orphan-to-be") is None, timeout=60)
    state = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={job}", "--format=%T"],
                           capture_output=True, text=True, check=False).stdout.strip()
    assert state in ("CANCELLED", "COMPLETING"), state


def test_events_say_submitted_once_and_a_restarted_kubelet_announces_only_new_starts(cluster: Cluster) -> None:
    """Issue 22.11: one Scheduled event (the scheduler's) and the kubelet's own Submitted ("Submitted
    as Slurm job N"); a kubelet restarted while the containers run sends no second Started for
    them (it reports the pod on to Succeeded, so it did look at it)."""
    two = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "announced"},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "containers": [
               {"name": n, "image": "busybox", "command": ["sh", "-c", "sleep 8"]} for n in ("a", "b")]}}
    cluster.create(two)
    cluster.wait_phase("announced", "Running")

    def counts() -> Counter[str]:
        out: Counter[str] = Counter()
        for e in cluster.events("announced"):
            out[f"{e['reason']}: {e['message']}"] += int(e.get("count") or 1)
        return out

    wait_for("both Started events", lambda: counts()["Started: Started container b"] >= 1
             and counts()["Started: Started container a"] >= 1, timeout=30)
    cluster.stop_process(cluster.kubelet, signal.SIGTERM)
    cluster.start_kubelet()
    cluster.wait_phase("announced", "Succeeded", timeout=90)
    got = counts()
    job = cluster.job_id("announced")
    assert got[f"Submitted: Submitted as Slurm job {job}"] == 1, got
    assert sum(n for k, n in got.items() if k.startswith("Scheduled:")) == 1, got
    assert (got["Started: Started container a"], got["Started: Started container b"]) == (1, 1), got


def test_pods_ready_together_go_to_slurm_as_one_array_each_element_its_pods_job(cluster: Cluster) -> None:
    """Issue 23: pods that reach sbatch while one runs go next as one job array (one sbatch). Each
    element is its pod's job: the pod runs, ``kubectl exec`` reaches its container, and a delete's
    TERM reaches the pod's own trap within its grace period. The first sbatch is held (slurm.bin_dir:
    a gated sbatch) until every other pod's script is written, so the batch does not hang on timing."""
    bin_dir, terms = cluster.root / "gated-bin", cluster.root / "terms"
    bin_dir.mkdir()
    terms.mkdir(mode=0o1777)
    terms.chmod(0o1777)
    (cluster.root / "gates").mkdir()
    (cluster.root / "gates").chmod(0o1777)  # the sbatch shim (user hpk) says it holds a call there
    gate, held = cluster.root / "gates" / "open", cluster.root / "gates" / "held"
    for cmd in ("squeue", "scancel", "scontrol", "sacct", "srun", "sinfo"):
        (bin_dir / cmd).symlink_to(subprocess.run(["which", cmd], capture_output=True, text=True,
                                                  check=True).stdout.strip())
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!/bin/bash\nif [ ! -e {gate} ]; then\n  : >{held}\n  n=0\n"
                      f"  while [ ! -e {gate} ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done\nfi\n"
                      f"exec {subprocess.run(['which', 'sbatch'], capture_output=True, text=True).stdout.strip()} \"$@\"\n")
    sbatch.chmod(0o755)
    for p in (cluster.root, bin_dir):
        p.chmod(0o755)
    names = [f"together-{i}" for i in range(5)]
    profile = cluster.profile.read_text()
    cluster.stop_process(cluster.kubelet, signal.SIGTERM)
    try:
        cluster.profile.write_text(profile + f'\n[slurm]\nbin_dir = "{bin_dir}"\n')
        uids = {}
        for n in names:
            uids[n] = cluster.create({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": n},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                         "volumes": [{"name": "t", "hostPath": {"path": str(terms)}}],
                         "containers": [{"name": "c", "image": "busybox", "volumeMounts": [
                             {"name": "t", "mountPath": "/terms"}], "command": [
                             "sh", "-c", f"trap 'echo TERM >/terms/{n}; exit 0' TERM; echo up; "
                                         "i=0; while [ $i -lt 900 ]; do sleep 0.2; i=$((i + 1)); done"]}]}})["metadata"]["uid"]
        cluster.start_kubelet()
        scripts = [cluster.root / "hpk-state" / "pods" / u / "job" / "job.sh" for u in uids.values()]
        try:
            wait_for("one sbatch held and every pod's script written",
                     lambda: held.exists() and all(s.exists() for s in scripts), timeout=60, every=0.02)
        except AssertionError:
            raise AssertionError(f"held {held.exists()}, scripts {[s.exists() for s in scripts]}\n"
                                 f"{cluster.log('kubelet')[-3000:]}") from None
        gate.touch()
        for n in names:
            cluster.wait_phase(n, "Running", timeout=120)
    except BaseException:
        cluster.kubectl("delete", "pod", *names, "--wait=false", check=False)
        raise
    finally:
        cluster.profile.write_text(profile)
        gate.touch()
    jobs = {n: cluster.job_id(n) for n in names}
    arrays = Counter(j.partition("_")[0] for j in jobs.values() if "_" in j)
    assert arrays and max(arrays.values()) >= 2, jobs  # the pods held behind the first sbatch: one array
    assert jobs_by_uid() >= Counter(uids.values()) and all(jobs_by_uid()[u] == 1 for u in uids.values())
    element = next(n for n, j in jobs.items() if "_" in j)
    name = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={jobs[element]}", "--format=%j"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert name == "hpk-pods"
    out = cluster.kubectl("exec", element, "--", "sh", "-c", "echo inside $((6 * 7))")
    assert out.stdout == "inside 42\n", out
    cluster.kubectl("delete", "pod", *names, "--wait=true", timeout=120)
    assert sorted(p.name for p in terms.iterdir()) == sorted(names)  # every pod's own TERM trap ran

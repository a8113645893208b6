"""Pods made by the workload controllers, end to end: the kube-controller-manager stand-in's Job,
ReplicaSet/Deployment and StatefulSet controllers, garbage collector and pod GC (ci/standin/kcm/)
create the pods as the real ones do (generateName, controller ownerReferences, the Job's
job-tracking finalizer, Indexed Jobs' index), the real kubectl and helm drive them, and the kubelet
runs each pod as a Slurm job on the real local Slurm.

Two clusters run the same workloads: the mini cloud of ``ci/kube-up`` (the API stand-in and the
controller-manager stand-in, ``hpkctl scheduler`` and ``hpkctl kubelet`` as user hpk), and the private
cluster of ``hpkctl start`` with the ``ci`` profile's own ``[controlplane] bin_dir`` (ci/controlplane-bins,
which ci/setup runs). All workloads are applied at once per cluster, so their pods run side by side.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.ci import missing
from tests.support.ci import HPK_USER
from tests.support.cluster import make_root, remove_root, running_cluster, wait_for
from tests.support.hpk import STANDIN, VENV_BIN
from tests.support.kubeapi import HELM, KUBECTL
from tests.support.launch import jobcomp_states
from tests.support.slurm import node_load, pod_job, queued_for_capacity

pytestmark = [pytest.mark.slurm, pytest.mark.standin, pytest.mark.whole_node]  # pods at once: xdistgroups

CI_BIN = Path("/opt/hpk-controlplane/bin")
SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"
TIMEOUT = 240

WORKLOADS = """\
apiVersion: batch/v1
kind: Job
metadata: {name: hello}
spec:
  completions: 2
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, command: [sh, -c, 'echo hello']}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: idx}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      subdomain: idx
      containers: [{name: c, image: busybox, command: [sh, -c, 'echo "index=$JOB_COMPLETION_INDEX"']}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: bad}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, command: [sh, -c, 'echo failing; exit 3']}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{name: c, image: busybox, command: [sh, -c, 'echo serving; exec sleep 600']}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'echo "db $POD"; exec sleep 600']
        env: [{name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
"""

CHART = {
    "Chart.yaml": "apiVersion: v2\nname: webapp\nversion: 0.1.0\n",
    "templates/deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: {{ .Release.Name }}-web}
spec:
  replicas: 1
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{name: c, image: busybox, command: [sh, -c, 'echo chart {{ .Release.Name }}; exec sleep 600']}]
""",
}


@dataclass
class Kube:
    """kubectl and helm with one admin kubeconfig."""

    kubeconfig: Path
    home: Path
    no_proxy: str = "127.0.0.1,localhost"
    site: Any = None  # the hpkctl-start cluster's Site (its profile, hpkctl as user hpk)

    def _run(self, tool: Path, *args: str, input: str | None = None, check: bool = True,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "KUBECONFIG": str(self.kubeconfig),
               "no_proxy": self.no_proxy}
        r = subprocess.run([str(tool), *args], input=input, capture_output=True, text=True, env=env,
                           timeout=timeout, check=False)
        if check:
            assert r.returncode == 0, f"{tool.name} {' '.join(args)}: rc={r.returncode}\n{r.stdout}{r.stderr}"
        return r

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self._run(KUBECTL, *args, **kw)

    def helm(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        if not os.access(HELM, os.X_OK):
            missing(f"{HELM} is missing", fix="run ci/setup (ci/kube-tools) as root")
        return self._run(HELM, *args, **kw)

    def get(self, *what: str) -> Any:
        r = self.kubectl("get", *what, "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def pods(self, selector: str = "") -> list[dict[str, Any]]:
        return list(self.get("pods", *(("-l", selector) if selector else ()))["items"])

    def owned(self, uid: str) -> list[dict[str, Any]]:
        return [p for p in self.pods() if any(r["uid"] == uid for r in p["metadata"].get("ownerReferences") or [])]

    def clean_up(self) -> None:
        """Never leave a pod's job behind: delete the workloads, wait for their pods, cancel what is left."""
        jobs = [p["metadata"].get("annotations", {}).get("hpk.io/slurm-job-id", "") for p in self.pods()]
        self.kubectl("delete", "jobs,deployments,statefulsets,pods", "--all", "--wait=false", check=False)
        try:
            wait_for("the pods to be gone", lambda: self.pods() == [], timeout=90, every=1)
        finally:
            if any(jobs):
                subprocess.run(["scancel", *filter(None, jobs)], capture_output=True, timeout=30, check=False)

    def wait(self, what: str, probe: Any, timeout: float = TIMEOUT) -> Any:
        try:
            return wait_for(what, probe, timeout=timeout, every=1,
                            queued=lambda: queued_for_capacity(*map(pod_job, self.pods())))
        except AssertionError as e:
            # pods ContainerCreating are Slurm jobs not started yet: node_load says whether for capacity
            raise AssertionError(f"{e}\n--- pods:\n{self.kubectl('get', 'pods', '-o', 'wide', check=False).stdout}"
                                 f"{node_load()}") from None


def _start_site(root: Path) -> Iterator[Kube]:
    from tests.controlplane.test_controlplane_start_slurm import Site, _requirements
    _requirements()
    if not all(os.access(CI_BIN / b, os.X_OK) for b in ("etcd", "kube-apiserver", "kube-controller-manager", "coredns")):
        missing(f"{CI_BIN} lacks the ci profile's control-plane binaries", fix="run ci/setup (ci/controlplane-bins)")
    site = Site(root, host_bins=True)
    try:
        r = site.start()
        assert r.returncode == 0, r.stdout + r.stderr
        yield Kube(site.admin, site.dir, no_proxy=site.env()["no_proxy"], site=site)
        assert site.refused_node_requests() == [], "the kubelet made requests a real API server refuses"
    finally:
        site.cleanup()


@pytest.fixture(scope="module", params=["kube-up", "hpkctl-start"])
def kube(request: pytest.FixtureRequest) -> Iterator[Kube]:
    root = make_root()
    try:
        if request.param == "kube-up":
            for c in running_cluster(controllers=True):
                k = Kube(c.api.kubeconfig, c.root)
                try:
                    k.kubectl("apply", "-f", "-", input=WORKLOADS)
                    yield k
                finally:
                    k.clean_up()
        else:
            for k in _start_site(root):
                k.kubectl("apply", "-f", "-", input=WORKLOADS)
                yield k
    finally:
        remove_root(root)


def test_doctor_passes_for_the_ci_profile_after_ci_setup() -> None:
    """What the README promises after ci/setup: ``hpkctl doctor --site ci`` as user hpk, every check OK, the
    control plane's binaries from the profile's bin_dir (no image)."""
    if not os.access(CI_BIN / "kube-apiserver", os.X_OK):
        missing(f"{CI_BIN} lacks the ci profile's control-plane binaries", fix="run ci/setup (ci/controlplane-bins)")
    home = os.path.expanduser(f"~{HPK_USER}")
    argv = ["env", "-i", f"PATH={STANDIN}:{VENV_BIN}:/usr/bin:/bin", f"HOME={home}", "LANG=C.UTF-8",
            str(VENV_BIN / "hpkctl"), "doctor", "--site", "ci"]
    r = subprocess.run(["runuser", "-u", HPK_USER, "--", *argv] if os.geteuid() == 0 else argv, cwd="/tmp",
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"OK    binaries     [controlplane] bin_dir {CI_BIN}: etcd, kube-apiserver" in r.stdout, r.stdout
    assert not re.search(r"^FAIL ", r.stdout, re.M) and re.search(r"\n(\d+) of \1 checks passed\n$", r.stdout), r.stdout


def _job_done(k: Kube, name: str, ctype: str) -> Any:
    def probe() -> Any:
        job = k.get("job", name)
        types = {c["type"] for c in (job or {}).get("status", {}).get("conditions") or [] if c["status"] == "True"}
        return job if ctype in types else None
    return k.wait(f"job {name} {ctype}", probe)


def _slurm_state(pod: dict[str, Any]) -> str:
    job = pod["metadata"].get("annotations", {}).get("hpk.io/slurm-job-id")
    assert job, f"pod {pod['metadata']['name']} has no Slurm job: {pod}"
    return (jobcomp_states(job) or ["?"])[-1]


def _running_in_slurm(pod: dict[str, Any]) -> bool:
    job = pod["metadata"].get("annotations", {}).get("hpk.io/slurm-job-id", "")
    q = subprocess.run(["squeue", "--noheader", "--jobs", job, "--format=%T"], capture_output=True, text=True,
                       check=False)
    return bool(job) and q.stdout.strip() == "RUNNING"


def _controlled_by(pod: dict[str, Any], kind: str, owner: dict[str, Any]) -> None:
    assert pod["metadata"]["ownerReferences"] == [{
        "apiVersion": "batch/v1" if kind == "Job" else "apps/v1", "kind": kind, "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]


def test_a_job_runs_its_pods_as_slurm_jobs_and_completes(kube: Kube) -> None:
    job = _job_done(kube, "hello", "Complete")
    st = job["status"]
    assert (st["succeeded"], st.get("active", 0), st.get("failed", 0)) == (2, 0, 0)
    assert {c["type"]: c["reason"] for c in st["conditions"]} == {"SuccessCriteriaMet": "CompletionsReached",
                                                                   "Complete": "CompletionsReached"}
    assert st["completionTime"] and st["uncountedTerminatedPods"] == {}
    pods = kube.owned(job["metadata"]["uid"])
    assert len(pods) == 2
    for p in pods:
        assert re.fullmatch(f"hello-{SUFFIX}", p["metadata"]["name"]) and p["metadata"]["generateName"] == "hello-"
        _controlled_by(p, "Job", job)
        assert p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "hello"
        assert not p["metadata"].get("finalizers"), "the job-tracking finalizer goes once the pod is counted"
        assert p["status"]["phase"] == "Succeeded" and _slurm_state(p) == "COMPLETED"
        assert kube.kubectl("logs", p["metadata"]["name"]).stdout == "hello\n"


def test_an_indexed_job_gives_each_pod_its_index_and_hostname(kube: Kube) -> None:
    job = _job_done(kube, "idx", "Complete")
    assert job["status"]["completedIndexes"] == "0-2" and job["status"]["succeeded"] == 3
    pods = sorted(kube.owned(job["metadata"]["uid"]), key=lambda p: p["metadata"]["name"])
    assert len(pods) == 3
    for i, p in enumerate(pods):
        m = p["metadata"]
        assert re.fullmatch(f"idx-{i}-{SUFFIX}", m["name"])
        assert m["annotations"]["batch.kubernetes.io/job-completion-index"] == str(i)
        assert m["labels"]["batch.kubernetes.io/job-completion-index"] == str(i)
        assert (p["spec"]["hostname"], p["spec"]["subdomain"]) == (f"idx-{i}", "idx")
        assert _slurm_state(p) == "COMPLETED"
        assert kube.kubectl("logs", m["name"]).stdout == f"index={i}\n"


def test_a_deployment_scaled_from_three_to_one_stops_two_pods(kube: Kube) -> None:
    def available(n: int) -> Any:
        def probe() -> Any:
            d = kube.get("deployment", "web")
            st = (d or {}).get("status", {})
            return d if st.get("availableReplicas") == n and st.get("replicas") == n else None
        return kube.wait(f"deployment web with {n} available replicas", probe)
    dep = available(3)
    rs = [r for r in kube.get("replicasets")["items"] if r["metadata"]["ownerReferences"][0]["uid"] == dep["metadata"]["uid"]]
    assert len(rs) == 1 and re.fullmatch(r"web-[bcdfghjklmnpqrstvwxz2456789]+", rs[0]["metadata"]["name"])
    pods = kube.owned(rs[0]["metadata"]["uid"])
    assert len(pods) == 3
    for p in pods:
        _controlled_by(p, "ReplicaSet", rs[0])
        assert p["metadata"]["generateName"] == rs[0]["metadata"]["name"] + "-" and _running_in_slurm(p)
    kube.kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    kube.kubectl("scale", "deployment/web", "--replicas=1")
    kube.wait("two of web's pods to be gone (not Terminating)",
              lambda: len(kube.owned(rs[0]["metadata"]["uid"])) == 1)
    available(1)
    left = kube.owned(rs[0]["metadata"]["uid"])
    assert left[0]["status"]["phase"] == "Running" and not left[0]["metadata"].get("deletionTimestamp")
    gone = [p for p in pods if p["metadata"]["uid"] != left[0]["metadata"]["uid"]]
    assert len(gone) == 2
    for p in gone:  # each stopped pod's Slurm job ended
        assert _slurm_state(p) in ("COMPLETED", "CANCELLED", "FAILED"), p["metadata"]["name"]


def test_a_statefulset_starts_its_pods_in_order(kube: Kube) -> None:
    def ready() -> Any:
        s = kube.get("statefulset", "db")
        return s if (s or {}).get("status", {}).get("readyReplicas") == 2 else None
    sts = kube.wait("statefulset db with 2 ready replicas", ready)
    pods = {p["metadata"]["name"]: p for p in kube.owned(sts["metadata"]["uid"])}
    assert sorted(pods) == ["db-0", "db-1"]
    for i, (name, p) in enumerate(sorted(pods.items())):
        _controlled_by(p, "StatefulSet", sts)
        assert (p["spec"]["hostname"], p["spec"]["subdomain"]) == (name, "db")
        assert p["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == str(i)
        assert kube.kubectl("logs", name).stdout == f"db {name}\n"
    ready0 = next(c for c in pods["db-0"]["status"]["conditions"] if c["type"] == "Ready")["lastTransitionTime"]
    assert pods["db-1"]["metadata"]["creationTimestamp"] >= ready0, "OrderedReady: db-1 only once db-0 is Ready"


def test_helm_installs_a_chart_with_a_deployment_and_uninstalls_it(kube: Kube) -> None:
    chart = kube.home / "webapp"
    for rel, text in CHART.items():
        (chart / rel).parent.mkdir(parents=True, exist_ok=True)
        (chart / rel).write_text(text)
    kube.helm("install", "shop", str(chart), "--wait", "--timeout", "180s", timeout=200)
    pods = kube.pods("app=shop")
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Running"
    assert pods[0]["metadata"]["name"].startswith("shop-web-")
    assert kube.kubectl("logs", pods[0]["metadata"]["name"]).stdout == "chart shop\n"
    kube.helm("uninstall", "shop", "--wait", "--timeout", "120s", timeout=150)
    kube.wait("the chart's pod to be gone", lambda: kube.pods("app=shop") == [])
    assert _slurm_state(pods[0]) in ("COMPLETED", "CANCELLED", "FAILED")


def test_a_failing_job_is_retried_within_its_backoff_limit_then_fails(kube: Kube) -> None:
    job = _job_done(kube, "bad", "Failed")
    st = job["status"]
    assert (st["failed"], st.get("succeeded", 0), st.get("active", 0)) == (2, 0, 0)  # backoffLimit 1: two tries
    assert [(c["type"], c["reason"]) for c in st["conditions"]] == [("FailureTarget", "BackoffLimitExceeded"),
                                                                     ("Failed", "BackoffLimitExceeded")]
    assert "completionTime" not in st
    pods = sorted(kube.owned(job["metadata"]["uid"]), key=lambda p: p["metadata"]["creationTimestamp"])
    assert len(pods) == 2
    for p in pods:
        assert p["status"]["phase"] == "Failed" and not p["metadata"].get("finalizers")
        assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
        assert _slurm_state(p) == "FAILED"
    # the second try was made only after the first had failed (the controller's back-off)
    first_end = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    assert pods[1]["metadata"]["creationTimestamp"] >= first_end


def test_selftest_runs_exec_and_logs_through_the_running_cluster(kube: Kube) -> None:
    """``hpkctl selftest --site X`` while ``hpkctl start --site X``'s cluster runs: its "exec and logs" row
    runs a pod through the cluster's API (logs byte for byte, exec's output and exit code) and PASSes; the
    rest of the battery passes too (MPI: SKIP, one node; the termination message: SKIP, this profile does
    not bind the node's /dev/termination-log), and the row's pod is deleted."""
    if kube.site is None:
        pytest.skip("the row needs a profile's own cluster (hpkctl start); ci/kube-up's is none")
    r = kube.site.hpkctl("selftest", "--site", str(kube.site.profile), "--timeout", "300", timeout=360)
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^(\S(?:.*?\S)?)\s{2,}(PASS|FAIL|SKIP)\s", r.stdout, re.M)}
    assert r.returncode == 0 and rows.get("exec and logs") == "PASS", r.stdout + r.stderr
    assert set(rows) >= {"hello", "env and args", "volumes", "init order", "probe", "delete with grace",
                         "mpi on two nodes"}, r.stdout
    skipped = {"mpi on two nodes", "termination message"}  # each says why (one node; no bind of the file)
    assert all(v == "PASS" for n, v in rows.items() if n not in skipped), r.stdout
    assert all(rows[n] in ("PASS", "SKIP") for n in skipped), r.stdout
    log = Path(kube.site.dir / "pods" / "selftest" / "exec-logs.log")
    assert f"{log}" in r.stdout, r.stdout
    assert kube.get("pod", "exec-logs", "-n", "hpk-selftest") is None, "the row's pod was not deleted"


def test_zz_deleting_the_workloads_leaves_no_pod_behind(kube: Kube) -> None:
    pods = kube.pods()
    kube.kubectl("delete", "job/hello", "job/idx", "job/bad", "deployment/web", "statefulset/db", "--wait=false")
    kube.wait("every pod to be gone (none left Terminating)", lambda: kube.pods() == [])
    assert kube.get("replicasets")["items"] == []
    for p in pods:
        assert _slurm_state(p) in ("COMPLETED", "CANCELLED", "FAILED"), p["metadata"]["name"]

"""The kube-controller-manager stand-in's controllers (ci/standin/kcm/) against the API stand-in, with
no kubelet: what they create, delete and wait for is seen in the API alone. Pods are bound in their
template (``nodeName``), so a delete stays graceful (Terminating) as it would until a kubelet acts, and
the tests play the kubelet's part by writing pod status. End to end with the kubelet and Slurm:
tests/kubelet/test_kubelet_controllers_slurm.py."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import wait_for
from tests.support.hpk import STANDIN, VENV_BIN
from tests.support.kubeapi import KubeApi, free_port, start

pytestmark = pytest.mark.standin

NS = "/api/v1/namespaces/default"
APPS = "/apis/apps/v1/namespaces/default"
SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    root = tmp_path_factory.mktemp("kcm")
    a = start(root / "api", "--node-name", "hpk")
    log = open(root / "kcm.log", "ab")
    kcm = subprocess.Popen([str(STANDIN / "kube-controller-manager"), "--kubeconfig", str(a.kubeconfig),
                            "--bind-address", "127.0.0.1", f"--secure-port={free_port()}",
                            "--terminated-pod-gc-threshold=2"], stdout=log, stderr=log,
                           env={"PATH": "/usr/bin:/bin", "HPK_VENV": str(VENV_BIN.parent)})
    try:
        yield a
    finally:
        kcm.terminate()
        kcm.wait(timeout=20)
        a.stop()
        print(Path(root / "kcm.log").read_text()[-3000:])


def _pods(api: KubeApi, selector: str) -> list[dict[str, Any]]:
    code, body = api.get(f"{NS}/pods", params={"labelSelector": selector})
    assert code == 200, body
    return sorted(body["items"], key=lambda p: p["metadata"]["name"])


def _template(app: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": app}},
            "spec": {"nodeName": "hpk", "terminationGracePeriodSeconds": 7,
                     "containers": [{"name": "c", "image": "busybox"}], **spec}}


def _set_phase(api: KubeApi, pod: dict[str, Any], phase: str, ready: bool = False) -> None:
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    code, body = api.patch(f"{NS}/pods/{pod['metadata']['name']}/status", {"status": status}, "merge-patch")
    assert code == 200, body


def test_the_api_draws_generated_names_and_checks_owner_references(api: KubeApi) -> None:
    code, p = api.post(f"{NS}/pods", {"metadata": {"generateName": "gen-"}, "spec": _template("gen")["spec"]})
    assert code == 201 and re.fullmatch(f"gen-{SUFFIX}", p["metadata"]["name"]), p
    refs = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": n, "uid": n, "controller": True}
            for n in ("a", "b")]
    code, body = api.post(f"{NS}/pods", {"metadata": {"name": "two-owners", "ownerReferences": refs},
                                         "spec": _template("x")["spec"]})
    assert code == 422 and "Only one reference can have Controller set to true" in body["message"], body
    code, body = api.post(f"{NS}/pods", {"metadata": {"name": "no-uid", "ownerReferences": [{**refs[0], "uid": ""}]},
                                         "spec": _template("x")["spec"]})
    assert code == 422 and "metadata.ownerReferences[0].uid" in body["message"], body
    api.delete(f"{NS}/pods/{p['metadata']['name']}", {"gracePeriodSeconds": 0})


def test_a_replicaset_scaled_down_deletes_pods_with_their_grace_period(api: KubeApi) -> None:
    rs = {"metadata": {"name": "web"}, "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                                                "template": _template("web")}}
    code, made = api.post(f"{APPS}/replicasets", rs)
    assert code == 201, made
    pods = wait_for("3 pods", lambda: (lambda ps: ps if len(ps) == 3 else None)(_pods(api, "app=web")))
    for p in pods:
        assert re.fullmatch(f"web-{SUFFIX}", p["metadata"]["name"]) and p["metadata"]["generateName"] == "web-"
        assert p["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                                     "uid": made["metadata"]["uid"], "controller": True,
                                                     "blockOwnerDeletion": True}]
    _set_phase(api, pods[0], "Running", ready=True)  # the ready one is kept
    code, body = api.patch(f"{APPS}/replicasets/web", {"spec": {"replicas": 1}}, "merge-patch")
    assert code == 200, body

    def terminating() -> list[dict[str, Any]] | None:
        t = [p for p in _pods(api, "app=web") if p["metadata"].get("deletionTimestamp")]
        return t if len(t) == 2 else None
    gone = wait_for("2 pods Terminating", terminating)
    assert {p["metadata"]["deletionGracePeriodSeconds"] for p in gone} == {7}  # the kubelet would stop them now
    assert pods[0]["metadata"]["uid"] not in {p["metadata"]["uid"] for p in gone}
    wait_for("status.replicas 1", lambda: api.get(f"{APPS}/replicasets/web")[1].get("status", {}).get("replicas") == 1)


def test_a_statefulset_creates_the_next_pod_only_when_the_previous_is_ready(api: KubeApi) -> None:
    sts = {"metadata": {"name": "db"}, "spec": {"replicas": 2, "serviceName": "db", "selector": {
        "matchLabels": {"app": "db"}}, "template": _template("db")}}
    assert api.post(f"{APPS}/statefulsets", sts)[0] == 201
    first = wait_for("db-0", lambda: _pods(api, "app=db"))
    assert [p["metadata"]["name"] for p in first] == ["db-0"]
    assert (first[0]["spec"]["hostname"], first[0]["spec"]["subdomain"]) == ("db-0", "db")
    _set_phase(api, first[0], "Running", ready=False)
    code, body = api.patch(f"{APPS}/statefulsets/db", {"metadata": {"labels": {"poke": "1"}}}, "merge-patch")
    assert code == 200, body  # a change the controller sees: still no db-1 while db-0 is not Ready
    wait_for("the controller's status", lambda: api.get(f"{APPS}/statefulsets/db")[1].get("status", {}).get("replicas") == 1)
    assert [p["metadata"]["name"] for p in _pods(api, "app=db")] == ["db-0"]
    _set_phase(api, first[0], "Running", ready=True)
    both = wait_for("db-1", lambda: (lambda ps: ps if len(ps) == 2 else None)(_pods(api, "app=db")))
    assert [p["metadata"]["name"] for p in both] == ["db-0", "db-1"]
    # scale-down: the highest ordinal first, the next one only once it is gone
    _set_phase(api, both[1], "Running", ready=True)
    assert api.patch(f"{APPS}/statefulsets/db", {"spec": {"replicas": 0}}, "merge-patch")[0] == 200
    wait_for("db-1 Terminating", lambda: bool(_pods(api, "app=db")[-1]["metadata"].get("deletionTimestamp")))
    api.patch(f"{APPS}/statefulsets/db", {"metadata": {"labels": {"poke": "2"}}}, "merge-patch")
    wait_for("the controller's round", lambda: api.get(f"{APPS}/statefulsets/db")[1]["status"].get("replicas") == 1)
    assert not _pods(api, "app=db")[0]["metadata"].get("deletionTimestamp"), "db-0 waits for db-1 to be gone"
    api.delete(f"{NS}/pods/db-1", {"gracePeriodSeconds": 0})  # what the kubelet does once db-1 stopped
    wait_for("db-0 Terminating", lambda: bool(_pods(api, "app=db")[0]["metadata"].get("deletionTimestamp")))


def test_a_deployment_makes_one_replicaset_per_template(api: KubeApi) -> None:
    dep = {"metadata": {"name": "app"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "app"}},
                                                 "template": _template("app")}}
    code, made = api.post(f"{APPS}/deployments", dep)
    assert code == 201, made

    def sets() -> list[dict[str, Any]]:
        return sorted(api.get(f"{APPS}/replicasets", params={"labelSelector": "app=app"})[1]["items"],
                      key=lambda r: r["metadata"]["annotations"]["deployment.kubernetes.io/revision"])
    first = wait_for("a replicaset", sets)[0]
    h = first["metadata"]["labels"]["pod-template-hash"]
    assert first["metadata"]["name"] == f"app-{h}" and first["spec"]["replicas"] == 2
    assert first["spec"]["selector"]["matchLabels"] == {"app": "app", "pod-template-hash": h}
    wait_for("2 pods", lambda: len(_pods(api, f"pod-template-hash={h}")) == 2)
    template = {**_template("app"), "metadata": {"labels": {"app": "app"}, "annotations": {"v": "2"}}}
    assert api.patch(f"{APPS}/deployments/app", {"spec": {"template": template}}, "merge-patch")[0] == 200
    two = wait_for("a second replicaset", lambda: (lambda r: r if len(r) == 2 else None)(sets()))
    assert two[0]["metadata"]["uid"] == first["metadata"]["uid"] and two[1]["metadata"]["name"] != first["metadata"]["name"]
    wait_for("the old one at 0", lambda: sets()[0]["spec"]["replicas"] == 0 and sets()[1]["spec"]["replicas"] == 2)
    assert sets()[1]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"


def test_pods_of_a_missing_owner_and_terminated_pods_over_the_threshold_are_deleted(api: KubeApi) -> None:
    spec = {**_template("gc")["spec"], "nodeName": ""}
    orphan = {"metadata": {"name": "orphan", "labels": {"app": "gc"}, "finalizers": ["batch.kubernetes.io/job-tracking"],
                           "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "gone",
                                                "uid": "0000", "controller": True}]}, "spec": spec}
    foreign = {"metadata": {"name": "foreign", "labels": {"app": "gc"}, "ownerReferences": [
        {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t", "uid": "1111"}]}, "spec": spec}
    for body in (orphan, foreign):
        assert api.post(f"{NS}/pods", body)[0] == 201
    wait_for("the orphan to be gone (its finalizer removed)",
             lambda: [p["metadata"]["name"] for p in _pods(api, "app=gc")] == ["foreign"])
    created = {}
    for i in range(4):  # threshold 2: the two oldest terminated pods go
        code, p = api.post(f"{NS}/pods", {"metadata": {"name": f"done-{i}", "labels": {"app": "done"}}, "spec": spec})
        assert code == 201, p
        created[p["metadata"]["name"]] = p["metadata"]["creationTimestamp"]
        _set_phase(api, p, "Succeeded")
    left = wait_for("2 terminated pods left",
                    lambda: (lambda ps: ps if len(ps) == 2 else None)(_pods(api, "app=done")))
    kept = {p["metadata"]["name"] for p in left}
    assert max(created[n] for n in created if n not in kept) <= min(created[n] for n in kept)
    api.delete(f"{NS}/pods/foreign", {"gracePeriodSeconds": 0})


def test_a_job_pod_is_counted_once_terminal_and_then_loses_its_finalizer(api: KubeApi) -> None:
    """podReplacementPolicy Failed: a deleted pod is not replaced while Terminating; once the kubelet
    writes it Failed, it is recorded, freed of the job-tracking finalizer and counted (backoffLimit 0:
    the Job fails)."""
    job = {"metadata": {"name": "once"}, "spec": {"backoffLimit": 0, "podReplacementPolicy": "Failed",
                                                  "template": {**_template("once"), "spec": {
                                                      **_template("once")["spec"], "restartPolicy": "Never"}}}}
    code, made = api.post("/apis/batch/v1/namespaces/default/jobs", job)
    assert code == 201, made
    assert made["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": made["metadata"]["uid"]}}
    pod = wait_for("the job's pod", lambda: _pods(api, "app=once"))[0]
    assert re.fullmatch(f"once-{SUFFIX}", pod["metadata"]["name"])
    assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
    api.delete(f"{NS}/pods/{pod['metadata']['name']}", {})  # bound: Terminating until the kubelet acts
    jobs = "/apis/batch/v1/namespaces/default/jobs/once"
    wait_for("status.terminating 1", lambda: api.get(jobs)[1].get("status", {}).get("terminating") == 1)
    assert [p["metadata"]["name"] for p in _pods(api, "app=once")] == [pod["metadata"]["name"]]  # not replaced
    _set_phase(api, pod, "Failed")
    done = wait_for("the job Failed", lambda: (lambda j: j if any(
        c["type"] == "Failed" for c in j.get("status", {}).get("conditions") or []) else None)(api.get(jobs)[1]))
    assert done["status"]["failed"] == 1 and done["status"]["uncountedTerminatedPods"] == {}
    left = _pods(api, "app=once")
    assert left == [] or left[0]["metadata"].get("finalizers") in (None, [])

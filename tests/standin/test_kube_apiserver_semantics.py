"""The Kubernetes API stand-in (ci/standin/kube-apiserver) against the traps of kubelet-api.md §4.1,
over raw HTTPS: each test asserts the exact code, reason and values a real kube-apiserver 1.37
answers, so a kubelet that passes here does not rely on the stand-in being lax."""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from ci.standin.kubeapi.resources import VERSION
from tests.support.kubeapi import KubeApi, pod, start

pytestmark = pytest.mark.standin
NS = "/api/v1/namespaces/default"


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeApi]:
    d = Path(tempfile.mkdtemp(prefix="kubeapi-test-"))
    api = start(d / "state", "--bookmark-interval", "0.5", "--history-size", "200")
    try:
        yield api
    finally:
        api.stop()
        shutil.rmtree(d, ignore_errors=True)


def create(kube: KubeApi, body: dict[str, Any], path: str = f"{NS}/pods") -> dict[str, Any]:
    code, out = kube.post(path, body)
    assert code == 201, out
    return out


# ---------------------------------------------------------------------- discovery, errors
def test_discovery_and_version(kube: KubeApi) -> None:
    assert kube.get("/version")[1] == VERSION
    code, out = kube.get("/apis/coordination.k8s.io/v1")
    assert code == 200 and [r["name"] for r in out["resources"]] == ["leases"]
    code, out = kube.get("/api/v1")
    names = {r["name"] for r in out["resources"]}
    assert {"pods", "pods/status", "pods/binding", "pods/log", "pods/exec", "nodes/status", "nodes/proxy",
            "serviceaccounts/token", "events", "namespaces"} <= names


def test_unauthenticated_is_401(kube: KubeApi) -> None:
    import requests
    r = requests.Session()
    r.trust_env = False
    r = r.get(f"{kube.url}/api/v1/pods", verify=str(kube.pki / "ca.crt"), timeout=5)
    assert (r.status_code, r.json()["reason"]) == (401, "Unauthorized")


def test_not_found_and_already_exists_are_status_objects(kube: KubeApi) -> None:
    code, out = kube.get(f"{NS}/pods/nope")
    assert code == 404
    assert out == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": 'pods "nope" not found', "reason": "NotFound", "code": 404,
                   "details": {"name": "nope", "kind": "pods"}}
    create(kube, pod("dup"))
    code, out = kube.post(f"{NS}/pods", pod("dup"))
    assert (code, out["reason"], out["message"]) == (409, "AlreadyExists", 'pods "dup" already exists')


def test_system_namespaces_and_their_objects(kube: KubeApi) -> None:
    code, out = kube.get("/api/v1/namespaces")
    assert {n["metadata"]["name"] for n in out["items"]} >= {"default", "kube-system", "kube-public", "kube-node-lease"}
    for ns in ("default", "kube-system"):
        assert kube.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200
        code, cm = kube.get(f"/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt")
        assert cm["data"]["ca.crt"] == (kube.pki / "ca.crt").read_text()


# ---------------------------------------------------------------------- validation
def test_strict_unknown_field_is_400_warn_drops_it(kube: KubeApi) -> None:
    body = pod("strict")
    body["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    code, out = kube.post(f"{NS}/pods", body, params={"fieldValidation": "Strict"})
    assert (code, out["reason"]) == (400, "BadRequest")
    assert out["message"] == ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                              'unknown field "spec.containers[0].imagePullPolicyy"')
    r = kube.session.post(f"{kube.url}{NS}/pods", json=body, timeout=5)
    assert r.status_code == 201
    assert r.headers["Warning"] == '299 - "unknown field \\"spec.containers[0].imagePullPolicyy\\""'
    assert "imagePullPolicyy" not in r.json()["spec"]["containers"][0]


@pytest.mark.parametrize("name, field", [("Upper", "metadata.name"), ("a_b", "metadata.name")])
def test_invalid_names_are_422(kube: KubeApi, name: str, field: str) -> None:
    code, out = kube.post(f"{NS}/pods", pod(name))
    assert (code, out["reason"]) == (422, "Invalid")
    assert out["details"]["causes"][0]["field"] == field
    assert out["message"].startswith(f'Pod "{name}" is invalid: metadata.name: Invalid value: "{name}": '
                                     "a lowercase RFC 1123 subdomain")


def test_missing_required_fields_are_422_with_causes(kube: KubeApi) -> None:
    code, out = kube.post(f"{NS}/pods", {"metadata": {"name": "noimg"}, "spec": {"containers": [{"name": "c"}]}})
    assert (code, out["reason"]) == (422, "Invalid")
    assert out["details"]["causes"] == [{"reason": "FieldValueRequired", "message": "Required value",
                                         "field": "spec.containers[0].image"}]


def test_generate_name_uid_timestamp_generation(kube: KubeApi) -> None:
    out = create(kube, {"metadata": {"generateName": "gen-"}, "spec": pod("x")["spec"]})
    meta = out["metadata"]
    assert meta["name"].startswith("gen-") and len(meta["name"]) == 9
    assert len(meta["uid"]) == 36 and meta["generation"] == 1
    assert meta["creationTimestamp"].endswith("Z") and len(meta["creationTimestamp"]) == 20


def test_pod_defaults_and_service_account_admission(kube: KubeApi) -> None:
    body = pod("defaults")
    body["spec"]["containers"].append({"name": "latest", "image": "busybox", "ports": [{"containerPort": 80}],
                                       "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}})
    out = create(kube, body)
    spec = out["spec"]
    assert (spec["restartPolicy"], spec["dnsPolicy"], spec["schedulerName"]) == ("Always", "ClusterFirst",
                                                                                 "default-scheduler")
    assert (spec["terminationGracePeriodSeconds"], spec["enableServiceLinks"], spec["priority"]) == (30, True, 0)
    assert spec["serviceAccountName"] == "default"
    c0, c1 = spec["containers"]
    assert (c0["imagePullPolicy"], c1["imagePullPolicy"]) == ("IfNotPresent", "Always")
    assert (c0["terminationMessagePath"], c0["terminationMessagePolicy"]) == ("/dev/termination-log", "File")
    assert c1["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert c1["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    vol = spec["volumes"][0]
    assert vol["name"].startswith("kube-api-access-") and len(vol["name"]) == len("kube-api-access-") + 5
    srcs = vol["projected"]["sources"]
    assert srcs[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert srcs[1]["configMap"]["name"] == "kube-root-ca.crt"
    for c in (c0, c1):
        assert c["volumeMounts"] == [{"name": vol["name"], "readOnly": True,
                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    assert {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 300} in spec["tolerations"]
    assert out["status"] == {"phase": "Pending", "qosClass": "Burstable"}


def test_missing_service_account_is_403(kube: KubeApi) -> None:
    code, out = kube.post(f"{NS}/pods", pod("nosa", serviceAccountName="ghost"))
    assert (code, out["reason"]) == (403, "Forbidden")
    assert "serviceaccount \"ghost\" not found" in out["message"]


# ---------------------------------------------------------------------- concurrency, status
def test_stale_put_is_409_and_no_op_keeps_rv(kube: KubeApi) -> None:
    cm = create(kube, {"metadata": {"name": "cm1"}, "data": {"a": "1"}}, f"{NS}/configmaps")
    code, same = kube.put(f"{NS}/configmaps/cm1", cm)
    assert code == 200 and same["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]
    cm2 = dict(cm, data={"a": "2"})
    code, new = kube.put(f"{NS}/configmaps/cm1", cm2)
    assert code == 200 and int(new["metadata"]["resourceVersion"]) > int(cm["metadata"]["resourceVersion"])
    code, out = kube.put(f"{NS}/configmaps/cm1", dict(cm, data={"a": "3"}))
    assert (code, out["reason"]) == (409, "Conflict")
    assert out["message"] == ('Operation cannot be fulfilled on configmaps "cm1": the object has been modified; '
                              'please apply your changes to the latest version and try again')
    code, out = kube.patch(f"{NS}/configmaps/cm1", {"metadata": {"resourceVersion": cm["metadata"]["resourceVersion"]},
                                                    "data": {"b": "1"}})
    assert (code, out["reason"]) == (409, "Conflict")


def test_lease_needs_resource_version_and_microtime(kube: KubeApi) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    lease = {"metadata": {"name": "hpk"}, "spec": {"holderIdentity": "hpk", "leaseDurationSeconds": 40,
                                                  "renewTime": "2026-11-24T10:00:00.000000Z"}}
    out = create(kube, lease, path)
    out["spec"]["renewTime"] = "2026-11-24T10:00:10.103Z"
    code, err = kube.put(f"{path}/hpk", out)
    assert code == 400 and err["message"].endswith('cannot parse ".103Z" as ".000000"')
    unconditional = json.loads(json.dumps(out))
    del unconditional["metadata"]["resourceVersion"]
    unconditional["spec"]["renewTime"] = "2026-11-24T10:00:10.000000Z"
    code, err = kube.put(f"{path}/hpk", unconditional)
    assert (code, err["reason"]) == (422, "Invalid")
    assert err["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    out["spec"]["renewTime"] = "2026-11-24T10:00:10.000000Z"
    assert kube.put(f"{path}/hpk", out)[0] == 200


def test_status_subresource_separation(kube: KubeApi) -> None:
    p = create(kube, pod("st"))
    p["status"] = {"phase": "Running"}
    p["metadata"]["labels"] = {"via": "main"}
    code, out = kube.put(f"{NS}/pods/st", p)
    assert code == 200 and out["status"]["phase"] == "Pending" and out["metadata"]["labels"] == {"via": "main"}
    code, out = kube.patch(f"{NS}/pods/st/status", {"metadata": {"labels": {"via": "status"}},
                                                    "spec": {"activeDeadlineSeconds": 5},
                                                    "status": {"phase": "Running", "podIP": "10.0.0.1"}})
    assert code == 200
    assert out["status"]["phase"] == "Running" and out["status"]["qosClass"] == "BestEffort"
    assert "activeDeadlineSeconds" not in out["spec"] and out["metadata"]["labels"] == {"via": "status"}


def test_node_status_accepted_on_create_only(kube: KubeApi) -> None:
    node = {"metadata": {"name": "n-status"}, "status": {"capacity": {"pods": "10"}}}
    assert create(kube, node, "/api/v1/nodes")["status"] == {"capacity": {"pods": "10"}}
    code, out = kube.patch("/api/v1/nodes/n-status", {"status": {"capacity": {"pods": "20"}}})
    assert code == 200 and out["status"]["capacity"]["pods"] == "10"
    code, out = kube.patch("/api/v1/nodes/n-status/status", {"status": {"capacity": {"pods": "20"}}})
    assert code == 200 and out["status"]["capacity"]["pods"] == "20"


def test_container_may_not_leave_terminated_with_restart_never(kube: KubeApi) -> None:
    create(kube, pod("never", restartPolicy="Never"))
    term = {"containerStatuses": [{"name": "c", "image": "busybox:1.36", "imageID": "", "ready": False,
                                   "restartCount": 0, "state": {"terminated": {"exitCode": 1}}}]}
    assert kube.patch(f"{NS}/pods/never/status", {"status": term})[0] == 200
    running = {"containerStatuses": [{"name": "c", "image": "busybox:1.36", "imageID": "", "ready": True,
                                      "restartCount": 0, "state": {"running": {}}}]}
    code, out = kube.patch(f"{NS}/pods/never/status", {"status": running})
    assert (code, out["reason"]) == (422, "Invalid")
    assert out["details"]["causes"][0]["field"] == "status.containerStatuses[0].state"


GATED = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
         "message": "Scheduling is blocked due to non-empty scheduling gates"}


def test_scheduling_gates(kube: KubeApi) -> None:
    """strategy.go applySchedulingGatedCondition on create; validateOnlyDeletedSchedulingGates on update;
    the binding refuses a gated pod."""
    out = create(kube, pod("gated", schedulingGates=[{"name": "example.com/a"}, {"name": "example.com/b"}]))
    assert out["status"]["conditions"] == [GATED]
    assert create(kube, pod("ungated"))["status"].get("conditions") is None
    code, out = kube.patch(f"{NS}/pods/gated", {"spec": {"schedulingGates": [{"name": "example.com/c"}]}},
                           kind="merge-patch")
    assert (code, out["reason"]) == (422, "Invalid")
    assert out["details"]["causes"] == [{"reason": "FieldValueForbidden", "field": "spec.schedulingGates[0].name",
                                         "message": "Forbidden: only deletion is allowed, but found new "
                                                    "scheduling gate 'example.com/c'"}]
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "gated"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    code, out = kube.post(f"{NS}/pods/gated/binding", binding)
    assert (code, out["reason"]) == (409, "Conflict") and "has non-empty .spec.schedulingGates" in out["message"]
    code, out = kube.patch(f"{NS}/pods/gated", {"spec": {"schedulingGates": [{"name": "example.com/b"}]}},
                           kind="merge-patch")
    assert code == 200 and out["spec"]["schedulingGates"] == [{"name": "example.com/b"}]
    assert out["status"]["conditions"] == [GATED]  # the condition stays until the pod is scheduled
    code, out = kube.patch(f"{NS}/pods/gated", {"spec": {"schedulingGates": None}}, kind="merge-patch")
    assert code == 200 and "schedulingGates" not in out["spec"]
    code, out = kube.post(f"{NS}/pods/gated/binding", binding)
    assert code == 201, out
    [cond] = kube.get(f"{NS}/pods/gated")[1]["status"]["conditions"]
    assert (cond["type"], cond["status"]) == ("PodScheduled", "True")


def test_pod_spec_update_limits(kube: KubeApi) -> None:
    create(kube, pod("upd"))
    code, out = kube.patch(f"{NS}/pods/upd", {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}})
    assert code == 200 and out["spec"]["containers"][0]["image"] == "busybox:1.37"
    assert out["metadata"]["generation"] == 2
    code, out = kube.patch(f"{NS}/pods/upd", {"spec": {"containers": [{"name": "c", "env": [{"name": "A"}]}]}})
    assert (code, out["reason"]) == (422, "Invalid")
    assert "pod updates may not change fields other than" in out["message"]


# ---------------------------------------------------------------------- patches
def test_strategic_merge_uses_schema_merge_keys(kube: KubeApi) -> None:
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
            "containers": [{"name": "a", "image": "i:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                            "ports": [{"containerPort": 80}]},
                           {"name": "b", "image": "j:1"}],
            "tolerations": [{"key": "t1", "operator": "Exists"}]}}}}
    path = "/apis/apps/v1/namespaces/default/deployments"
    create(kube, dep, path)
    code, out = kube.patch(f"{path}/web", {"spec": {"template": {"spec": {
        "containers": [{"name": "a", "env": [{"name": "Y", "value": "3"}, {"name": "X", "$patch": "delete"}],
                        "ports": [{"containerPort": 81}]},
                       {"name": "b", "$patch": "delete"}, {"name": "c", "image": "k:1"}],
        "tolerations": [{"key": "t2", "operator": "Exists"}]}}}})
    assert code == 200, out
    spec = out["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["a", "c"]
    a = spec["containers"][0]
    assert (a["image"], a["env"]) == ("i:1", [{"name": "Y", "value": "3"}])
    assert [p["containerPort"] for p in a["ports"]] == [80, 81]
    assert spec["tolerations"] == [{"key": "t2", "operator": "Exists"}]  # atomic list: replaced
    assert out["metadata"]["generation"] == 2
    code, out = kube.patch(f"{path}/web", {"spec": {"template": {"spec": {"containers": [
        {"name": "z", "image": "z"}, {"$patch": "replace"}]}}}})
    assert [c["name"] for c in out["spec"]["template"]["spec"]["containers"]] == ["z"]


def test_json_merge_and_json_patch_and_415(kube: KubeApi) -> None:
    create(kube, {"metadata": {"name": "cmp", "labels": {"a": "1"}}, "data": {"k": "v"}}, f"{NS}/configmaps")
    code, out = kube.patch(f"{NS}/configmaps/cmp", {"metadata": {"labels": {"a": None, "b": "2"}}}, "merge-patch")
    assert code == 200 and out["metadata"]["labels"] == {"b": "2"}
    code, out = kube.patch(f"{NS}/configmaps/cmp", [{"op": "add", "path": "/data/k2", "value": "v2"},
                                                    {"op": "test", "path": "/data/k", "value": "v"}], "json-patch")
    assert code == 200 and out["data"] == {"k": "v", "k2": "v2"}
    code, out = kube.call("PATCH", f"{NS}/configmaps/cmp", {"data": {}}, ctype="application/xml")
    assert (code, out["reason"]) == (415, "UnsupportedMediaType")
    code, out = kube.patch(f"{NS}/configmaps/cmp", {"metadata": {"uid": "other"}})
    assert (code, out["reason"]) == (422, "Invalid")


# ---------------------------------------------------------------------- deletion
def test_unbound_pod_is_deleted_at_once(kube: KubeApi) -> None:
    create(kube, pod("unbound"))
    code, out = kube.delete(f"{NS}/pods/unbound")
    assert code == 200 and out["kind"] == "Pod"
    assert kube.get(f"{NS}/pods/unbound")[0] == 404


def test_bound_pod_graceful_then_kubelet_final_delete_with_uid(kube: KubeApi) -> None:
    p = create(kube, pod("bound", node="hpk"))
    uid = p["metadata"]["uid"]
    code, out = kube.delete(f"{NS}/pods/bound")
    assert code == 200
    assert out["metadata"]["deletionGracePeriodSeconds"] == 30 and out["metadata"]["generation"] == 2
    assert out["metadata"]["deletionTimestamp"]
    code, out = kube.delete(f"{NS}/pods/bound", {"gracePeriodSeconds": 60})
    assert out["metadata"]["deletionGracePeriodSeconds"] == 30  # only shortened, never extended
    code, out = kube.delete(f"{NS}/pods/bound", {"gracePeriodSeconds": 0, "preconditions": {"uid": "wrong"}})
    assert (code, out["reason"]) == (409, "Conflict")
    assert out["message"].endswith(f"Precondition failed: UID in precondition: wrong, UID in object meta: {uid}")
    # the Python client sends the body without a Content-Type
    r = kube.session.delete(f"{kube.url}{NS}/pods/bound?gracePeriodSeconds=0",
                            data=json.dumps({"preconditions": {"uid": uid}}), timeout=5)
    assert r.status_code == 200
    assert kube.get(f"{NS}/pods/bound")[0] == 404


def test_finalizers_hold_the_object(kube: KubeApi) -> None:
    create(kube, {"metadata": {"name": "fin", "finalizers": ["example.com/x"]}}, f"{NS}/configmaps")
    code, out = kube.delete(f"{NS}/configmaps/fin")
    assert code == 202 and out["metadata"]["deletionTimestamp"]
    code, out = kube.patch(f"{NS}/configmaps/fin", {"metadata": {"finalizers": ["example.com/x", "example.com/y"]}})
    assert (code, out["reason"]) == (422, "Invalid")
    code, _ = kube.patch(f"{NS}/configmaps/fin", {"metadata": {"finalizers": None}})
    assert code == 200
    assert kube.get(f"{NS}/configmaps/fin")[0] == 404


# ---------------------------------------------------------------------- list, selectors, watch
def test_field_and_label_selectors(kube: KubeApi) -> None:
    for name, node, labels in (("sel-a", "hpk", {"app": "x", "tier": "1"}), ("sel-b", "other", {"app": "y"}),
                               ("sel-c", "", {"app": "x"})):
        body = pod(name, node=node)
        body["metadata"]["labels"] = labels
        create(kube, body)

    def names(**params: str) -> list[str]:
        code, out = kube.get("/api/v1/pods", params=params)
        assert code == 200, out
        return sorted(p["metadata"]["name"] for p in out["items"] if p["metadata"]["name"].startswith("sel-"))

    assert names(fieldSelector="spec.nodeName=hpk") == ["sel-a"]
    assert names(fieldSelector="spec.nodeName!=hpk,metadata.namespace=default") == ["sel-b", "sel-c"]
    assert names(labelSelector="app in (x),!tier") == ["sel-c"]
    assert names(labelSelector="app notin (x)") == ["sel-b"]
    assert names(labelSelector="tier") == ["sel-a"]
    code, out = kube.get("/api/v1/pods", params={"fieldSelector": "spec.image=x"})
    assert (code, out["message"]) == (400, "field label not supported: spec.image")


def test_limit_and_continue(kube: KubeApi) -> None:
    for i in range(3):
        create(kube, {"metadata": {"name": f"page-{i}"}}, "/api/v1/namespaces/kube-public/configmaps")
    code, first = kube.get("/api/v1/namespaces/kube-public/configmaps", params={"limit": "2"})
    assert len(first["items"]) == 2 and first["metadata"]["continue"]
    code, rest = kube.get("/api/v1/namespaces/kube-public/configmaps",
                          params={"limit": "2", "continue": first["metadata"]["continue"]})
    got = [o["metadata"]["name"] for o in first["items"] + rest["items"]]
    assert got == ["kube-root-ca.crt", "page-0", "page-1", "page-2"] and "continue" not in rest["metadata"]


def test_watch_resume_transitions_and_deleted_rv(kube: KubeApi) -> None:
    code, lst = kube.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=hpk"})
    rv0 = lst["metadata"]["resourceVersion"]
    create(kube, pod("w1"))
    code, _ = kube.post(f"{NS}/pods/w1/binding", {"target": {"kind": "Node", "name": "hpk"}})
    assert code == 201
    kube.patch(f"{NS}/pods/w1/status", {"status": {"phase": "Running"}})
    code, deleted = kube.delete(f"{NS}/pods/w1", {"gracePeriodSeconds": 0})
    events = kube.watch("/api/v1/pods", {"fieldSelector": "spec.nodeName=hpk", "resourceVersion": rv0}, count=3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == \
        [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
    assert events[0]["object"]["spec"]["nodeName"] == "hpk"  # bound: starts matching -> ADDED
    assert events[2]["object"]["metadata"]["resourceVersion"] == deleted["metadata"]["resourceVersion"]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv0)


def test_watch_bookmarks_and_timeout(kube: KubeApi) -> None:
    t0 = time.monotonic()
    # stream() ends only when the server closes the watch (a read timeout raises), so it closed it
    events = list(kube.stream("/api/v1/namespaces/kube-system/pods",
                              {"allowWatchBookmarks": "true", "timeoutSeconds": "2",
                               "resourceVersion": kube.get("/api/v1/pods")[1]["metadata"]["resourceVersion"]}))
    assert time.monotonic() - t0 > 1.8  # ... and not before its timeoutSeconds
    assert events and {e["type"] for e in events} == {"BOOKMARK"}
    assert events[0]["object"] == {"kind": "Pod", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": events[0]["object"]["metadata"]["resourceVersion"]}}


def test_watch_too_old_rv_is_in_stream_410(kube: KubeApi) -> None:
    code, out = kube.get("/api/v1/pods")
    old = out["metadata"]["resourceVersion"]
    create(kube, {"metadata": {"name": "after-compact"}}, f"{NS}/configmaps")
    assert kube.post("/standin/compact", None)[0] == 200
    events = kube.watch("/api/v1/pods", {"resourceVersion": old}, seconds=3)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {old} (")


def test_watch_without_rv_sends_synthetic_added(kube: KubeApi) -> None:
    create(kube, {"metadata": {"name": "syn"}}, "/api/v1/namespaces/kube-node-lease/configmaps")
    events = kube.watch("/api/v1/namespaces/kube-node-lease/configmaps", {"timeoutSeconds": "1"}, seconds=3)
    assert sorted((e["type"], e["object"]["metadata"]["name"]) for e in events) == \
        [("ADDED", "kube-root-ca.crt"), ("ADDED", "syn")]


# ---------------------------------------------------------------------- binding, token, events
def test_binding_sets_node_once(kube: KubeApi) -> None:
    create(kube, pod("bindme"))
    code, out = kube.post(f"{NS}/pods/bindme/binding", {"apiVersion": "v1", "kind": "Binding",
                                                         "metadata": {"name": "bindme"},
                                                         "target": {"kind": "Node", "name": "hpk"}})
    assert (code, out["status"]) == (201, "Success")
    p = kube.get(f"{NS}/pods/bindme")[1]
    assert p["spec"]["nodeName"] == "hpk"
    assert [c["type"] for c in p["status"]["conditions"]] == ["PodScheduled"]
    code, out = kube.post(f"{NS}/pods/bindme/binding", {"target": {"kind": "Node", "name": "other"}})
    assert (code, out["reason"]) == (409, "Conflict")
    assert 'is already assigned to node "hpk"' in out["message"]


def test_token_request_is_a_bound_signed_jwt(kube: KubeApi) -> None:
    p = create(kube, pod("tok", node="hpk"))
    code, out = kube.post(f"{NS}/serviceaccounts/default/token", {"spec": {
        "audiences": ["api"], "expirationSeconds": 3607,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "tok", "uid": p["metadata"]["uid"]}}})
    assert code == 201 and out["kind"] == "TokenRequest"
    claims = json.loads(base64.urlsafe_b64decode(out["status"]["token"].split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:default:default" and claims["aud"] == ["api"]
    assert claims["exp"] - claims["iat"] == 3607
    assert claims["kubernetes.io"]["pod"] == {"name": "tok", "uid": p["metadata"]["uid"]}
    import requests
    anon = requests.Session()
    anon.trust_env = False
    r = anon.get(f"{kube.url}/api/v1/namespaces", verify=str(kube.pki / "ca.crt"), timeout=5,
                 headers={"Authorization": f"Bearer {out['status']['token']}"})
    assert r.status_code == 200
    code, out = kube.post(f"{NS}/serviceaccounts/default/token", {"spec": {"expirationSeconds": 60}})
    assert (code, out["reason"]) == (422, "Invalid")
    code, out = kube.post(f"{NS}/serviceaccounts/default/token", {"spec": {"boundObjectRef": {
        "kind": "Pod", "apiVersion": "v1", "name": "tok", "uid": "stale"}}})
    assert (code, out["reason"]) == (409, "Conflict")


def test_events_core_and_events_k8s_io_share_storage(kube: KubeApi) -> None:
    ev = {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "namespace": "default", "name": "tok"},
          "reason": "Started", "message": "hello", "type": "Normal", "source": {"component": "kubelet", "host": "hpk"},
          "firstTimestamp": "2026-11-24T10:00:00Z", "lastTimestamp": "2026-11-24T10:00:00Z", "count": 1}
    create(kube, ev, f"{NS}/events")
    code, out = kube.get("/apis/events.k8s.io/v1/namespaces/default/events/e1")
    assert code == 200 and out["apiVersion"] == "events.k8s.io/v1"
    assert (out["note"], out["regarding"]["name"], out["deprecatedCount"]) == ("hello", "tok", 1)
    code, out = kube.get(f"{NS}/events", params={"fieldSelector": "involvedObject.name=tok,reason=Started"})
    assert [e["metadata"]["name"] for e in out["items"]] == ["e1"]
    code, out = kube.post(f"{NS}/events", dict(ev, metadata={"name": "e2"}, eventTime="2026-11-24T10:00:00Z"))
    assert code == 400


def test_table_output_for_pods(kube: KubeApi) -> None:
    create(kube, pod("tabled"))
    code, out = kube.get(f"{NS}/pods", headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert code == 200 and out["kind"] == "Table"
    assert [c["name"] for c in out["columnDefinitions"]][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    row = next(r for r in out["rows"] if r["cells"][0] == "tabled")
    assert row["cells"][1:4] == ["0/1", "Pending", 0]
    assert row["object"]["kind"] == "PartialObjectMetadata"


def test_watch_list_initial_events_end_with_an_annotated_bookmark(kube: KubeApi) -> None:
    create(kube, {"metadata": {"name": "initial"}}, "/api/v1/namespaces/kube-system/configmaps")
    events = kube.watch("/api/v1/namespaces/kube-system/configmaps", {
        "sendInitialEvents": "true", "allowWatchBookmarks": "true", "resourceVersionMatch": "NotOlderThan",
        "resourceVersion": "", "timeoutSeconds": "1"}, count=3)
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events[:2]] == \
        [("ADDED", "initial"), ("ADDED", "kube-root-ca.crt")]
    assert events[2]["type"] == "BOOKMARK"
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_dry_run_stores_nothing(kube: KubeApi) -> None:
    code, out = kube.post(f"{NS}/configmaps", {"metadata": {"name": "dry"}}, params={"dryRun": "All"})
    assert code == 201 and out["metadata"]["name"] == "dry"
    assert kube.get(f"{NS}/configmaps/dry")[0] == 404
    code, out = kube.post(f"{NS}/configmaps", {"metadata": {"name": "dry"}}, params={"dryRun": "Maybe"})
    assert code == 400


def test_delete_collection_by_label(kube: KubeApi) -> None:
    for name, team in (("dc-1", "a"), ("dc-2", "a"), ("dc-3", "b")):
        create(kube, {"metadata": {"name": name, "labels": {"team": team}}}, f"{NS}/configmaps")
    code, out = kube.call("DELETE", f"{NS}/configmaps", params={"labelSelector": "team=a"})
    assert code == 200
    left = [c["metadata"]["name"] for c in kube.get(f"{NS}/configmaps")[1]["items"]
            if c["metadata"]["name"].startswith("dc-")]
    assert left == ["dc-3"]


def test_status_fields_without_omitempty_get_zero_values(kube: KubeApi) -> None:
    create(kube, pod("zero", node="hpk"))
    code, out = kube.patch(f"{NS}/pods/zero/status", {"status": {"containerStatuses": [
        {"name": "c", "state": {"running": {"startedAt": "2026-11-24T10:00:00Z"}}}]}})
    assert code == 200, out
    assert out["status"]["containerStatuses"] == [{"name": "c", "state": {"running": {"startedAt": "2026-11-24T10:00:00Z"}},
                                                   "ready": False, "restartCount": 0, "image": "", "imageID": ""}]


def test_eviction_is_a_graceful_delete(kube: KubeApi) -> None:
    create(kube, pod("evict", node="hpk"))
    code, out = kube.post(f"{NS}/pods/evict/eviction", {"apiVersion": "policy/v1", "kind": "Eviction",
                                                         "metadata": {"name": "evict"},
                                                         "deleteOptions": {"gracePeriodSeconds": 7}})
    assert (code, out["status"]) == (201, "Success")
    p = kube.get(f"{NS}/pods/evict")[1]
    assert p["metadata"]["deletionGracePeriodSeconds"] == 7 and p["metadata"]["deletionTimestamp"]


def test_fields_equal_to_the_stored_ones_are_not_walked_but_changed_ones_are(kube: KubeApi) -> None:
    """An update or patch validates only the top-level fields it changes (the rest passed when stored):
    a change anywhere is still checked, with the full path in the answer."""
    create(kube, pod("reval", node="hpk"))
    code, out = kube.patch(f"{NS}/pods/reval/status", {"status": {"phase": "Running", "conditions": [
        {"type": "Initialized", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}})
    assert code == 200 and out["spec"]["containers"][0]["image"] == "busybox:1.36"
    code, out = kube.patch(f"{NS}/pods/reval/status", {"status": {"hostIPx": "10.0.0.1"}},
                           params={"fieldValidation": "Strict"})
    assert (code, out["reason"]) == (400, "BadRequest")
    assert out["message"].endswith('strict decoding error: unknown field "status.hostIPx"')
    code, out = kube.patch(f"{NS}/pods/reval/status", [{"op": "add", "path": "/status/conditions/-",
                                                        "value": {"type": "Ready", "status": 1}}], kind="json-patch")
    assert (code, out["reason"]) == (400, "BadRequest")
    assert "Pod.status.conditions[2].status of type string" in out["message"]
    code, out = kube.patch(f"{NS}/pods/reval", {"spec": {"activeDeadlineSeconds": "soon"}}, kind="merge-patch")
    assert (code, out["reason"]) == (400, "BadRequest")
    assert "Pod.spec.activeDeadlineSeconds of type int64" in out["message"]
    p = kube.get(f"{NS}/pods/reval")[1]
    p["metadata"]["labels"] = {"a": "b"}
    p["spec"]["containers"][0]["image"] = 7
    code, out = kube.put(f"{NS}/pods/reval", p)
    assert (code, out["reason"]) == (400, "BadRequest")
    assert "Pod.spec.containers[0].image of type string" in out["message"]


def test_a_part_equal_to_the_stored_one_but_of_another_type_is_still_checked(kube: KubeApi) -> None:
    """Python's True == 1 and False == 0 do not make a changed type equal to the stored part: a kubelet
    that sends ``ready: 1`` for the stored ``ready: true`` gets the decode error the real server answers,
    and nothing is stored."""
    ctx = {"runAsUser": 0, "runAsNonRoot": False}
    create(kube, pod("retype", node="hpk", securityContext=ctx))
    status = {"name": "c", "image": "busybox:1.36", "imageID": "", "ready": True, "restartCount": 0,
              "state": {"running": {"startedAt": "2026-11-27T06:00:00Z"}}}
    code, out = kube.patch(f"{NS}/pods/retype/status", {"status": {"phase": "Running", "containerStatuses": [status]}})
    assert code == 200 and out["status"]["containerStatuses"][0]["ready"] is True
    code, out = kube.patch(f"{NS}/pods/retype/status", {"status": {"phase": "Running", "containerStatuses": [
        {**status, "ready": 1}]}})
    assert (code, out.get("reason")) == (400, "BadRequest"), out
    assert "Pod.status.containerStatuses[0].ready of type bool" in out["message"]
    assert kube.get(f"{NS}/pods/retype")[1]["status"]["containerStatuses"][0]["ready"] is True
    p = kube.get(f"{NS}/pods/retype")[1]
    p["spec"]["securityContext"] = {"runAsUser": False, "runAsNonRoot": False}
    code, out = kube.put(f"{NS}/pods/retype", p)
    assert (code, out.get("reason")) == (400, "BadRequest"), out
    assert "Pod.spec.securityContext.runAsUser of type int64" in out["message"]


def test_a_yaml_alias_of_an_unchanged_part_is_checked_where_it_is_used(kube: KubeApi) -> None:
    """A YAML body that reuses an unchanged part (an anchor) at another path is checked there as the
    same body written out: ``finalizers: *labels`` is a map where a list of strings belongs."""
    create(kube, {**pod("realias"), "metadata": {"name": "realias", "labels": {"app": "x"}}})
    p = kube.get(f"{NS}/pods/realias")[1]
    p["metadata"]["finalizers"] = p["metadata"]["labels"]  # one object twice: safe_dump writes &id001 / *id001
    aliased, plain = yaml.safe_dump(p).encode(), json.dumps(p).encode()
    assert b"*id001" in aliased
    answers = [kube.call("PUT", f"{NS}/pods/realias", raw=body, ctype=ctype, params={"fieldValidation": "Strict"})
               for body, ctype in ((aliased, "application/yaml"), (plain, "application/json"))]
    for code, out in answers:
        assert (code, out.get("reason")) == (400, "BadRequest"), out
        assert "Pod.metadata.finalizers of type" in out["message"]
    assert answers[0][1]["message"] == answers[1][1]["message"]
    assert "finalizers" not in kube.get(f"{NS}/pods/realias")[1]["metadata"]
    p["metadata"]["finalizers"] = []
    p["metadata"]["finalizers"].append(p["metadata"]["finalizers"])  # a list that holds itself: &id001 [*id001]
    code, out = kube.call("PUT", f"{NS}/pods/realias", raw=yaml.safe_dump(p).encode(), ctype="application/yaml")
    assert (code, out.get("reason")) == (400, "BadRequest"), out
    assert "Pod.metadata.finalizers[0] of type string" in out["message"]


def test_request_counts_by_client_and_kind(kube: KubeApi) -> None:
    """GET /standin/requests (a benchmark's hook): requests as they arrive by user, verb and
    resource[/subresource], errors with their code, watch events sent by user."""
    before = kube.get("/standin/requests")[1]
    create(kube, pod("counted"))
    kube.post(f"{NS}/pods/counted/binding", {"target": {"kind": "Node", "name": "hpk"}})
    kube.get(f"{NS}/pods/not-there")
    events = kube.watch(f"{NS}/pods", {"fieldSelector": "metadata.name=counted"}, count=1)
    assert [e["type"] for e in events] == ["ADDED"]
    after = kube.get("/standin/requests")[1]

    def delta(part: str) -> dict[str, int]:
        return {k: n - before[part].get(k, 0) for k, n in after[part].items() if n != before[part].get(k, 0)}

    assert delta("requests") == {"kubernetes-admin create pods": 1, "kubernetes-admin create pods/binding": 1,
                                 "kubernetes-admin get pods": 1, "kubernetes-admin watch pods": 1}
    assert delta("errors") == {"kubernetes-admin get pods 404": 1}
    assert delta("events") == {"kubernetes-admin pods ADDED": 1}

"""The API stand-in's Node authorizer and NodeRestriction (ci/standin/kubeapi/nodeauth.py): a kubelet
credential (system:node:hpk, group system:nodes) gets what a real kube-apiserver with
``--authorization-mode=Node,RBAC`` and NodeRestriction grants, over real HTTPS and with the real
kubectl, so the kubelet tests, which run under these rules, prove the kubelet needs no more."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from tests.support.kubeapi import KubeApi, pod, start

pytestmark = pytest.mark.standin
NS = "/api/v1/namespaces/default"


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeApi]:
    d = Path(tempfile.mkdtemp(prefix="kubeapi-nodeauth-"))
    api = start(d / "state")
    try:
        yield api
    finally:
        api.stop()
        shutil.rmtree(d, ignore_errors=True)


class Node:
    """Raw HTTPS as the kubelet's identity (the stand-in's kubelet.kubeconfig certificate)."""

    def __init__(self, kube: KubeApi) -> None:
        self.kube = kube
        self.s = requests.Session()
        self.s.trust_env = False
        self.s.verify = str(kube.pki / "ca.crt")
        self.s.cert = (str(kube.pki / "user-kubelet.crt"), str(kube.pki / "user-kubelet.key"))

    def call(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
             params: dict[str, str] | None = None) -> tuple[int, Any]:
        r = self.s.request(method, self.kube.url + path, json=body, params=params, timeout=30,
                           headers={"Content-Type": ctype} if body is not None else {})
        return r.status_code, r.json()


@pytest.fixture(scope="module")
def node(kube: KubeApi) -> Iterator[Node]:
    n = Node(kube)
    yield n
    n.s.close()


def _make(kube: KubeApi, path: str, body: dict[str, Any]) -> dict[str, Any]:
    code, out = kube.post(path, body)
    assert code == 201, out
    return out


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def _secret(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"k": "v"}}


def test_pods_are_listed_only_with_the_node_selector(kube: KubeApi, node: Node) -> None:
    _make(kube, f"{NS}/pods", pod("mine", node="hpk"))
    _make(kube, f"{NS}/pods", pod("theirs", node="other"))
    code, out = node.call("GET", "/api/v1/pods")
    assert code == 403 and out["reason"] == "Forbidden"
    assert out["message"] == ('pods is forbidden: User "system:node:hpk" cannot list resource "pods" in API group "" '
                              'at the cluster scope: can only list/watch pods with spec.nodeName field selector')
    code, out = node.call("GET", "/api/v1/pods", params={"fieldSelector": "spec.nodeName=hpk"})
    assert code == 200 and [p["metadata"]["name"] for p in out["items"]] == ["mine"]
    code, _ = node.call("GET", "/api/v1/pods", params={"fieldSelector": "spec.nodeName=other"})
    assert code == 403
    assert node.call("GET", f"{NS}/pods/mine")[0] == 200
    code, out = node.call("GET", f"{NS}/pods/theirs")
    assert code == 403 and out["message"].endswith("no relationship found between node 'hpk' and this object")


def test_the_node_reads_and_writes_only_its_own_node(kube: KubeApi, node: Node) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "hpk", "labels": {"type": "virtual-kubelet"}}}
    assert node.call("POST", "/api/v1/nodes", body)[0] == 201
    other = {**body, "metadata": {"name": "other"}}
    code, out = node.call("POST", "/api/v1/nodes", other)
    assert code == 403 and 'node "hpk" is not allowed to modify node "other"' in out["message"]
    code, out = node.call("GET", "/api/v1/nodes")
    assert code == 403 and out["message"].endswith("node 'hpk' cannot read all nodes, only its own Node object")
    assert node.call("GET", "/api/v1/nodes", params={"fieldSelector": "metadata.name=hpk"})[0] == 200
    code, out = node.call("PATCH", "/api/v1/nodes/hpk/status",
                          {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}},
                          ctype="application/merge-patch+json")
    assert code == 403 and "node-role.kubernetes.io/control-plane" in out["message"]
    code, out = node.call("PATCH", "/api/v1/nodes/hpk",
                          {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}},
                          ctype="application/merge-patch+json")
    assert code == 403 and out["message"].endswith('node "hpk" is not allowed to modify taints')
    ok = node.call("PATCH", "/api/v1/nodes/hpk/status", {"metadata": {"labels": {"hpk.io/site": "ci"}}},
                   ctype="application/merge-patch+json")
    assert ok[0] == 200, ok


def test_configmaps_and_secrets_only_when_a_bound_pod_uses_them(kube: KubeApi, node: Node) -> None:
    for name in ("used", "unused"):
        _make(kube, f"{NS}/configmaps", _cm(f"cm-{name}"))
        _make(kube, f"{NS}/secrets", _secret(f"s-{name}"))
    spec = {"volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "s-used"}}]}}],
            "containers": [{"name": "c", "image": "busybox", "env": [
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-used", "key": "k"}}}]}]}
    unbound = pod("refs")
    unbound["spec"].update(spec)
    _make(kube, f"{NS}/pods", unbound)
    code, out = node.call("GET", f"{NS}/secrets/s-used")
    assert code == 403, "a pod not bound to the node gives it no right"
    assert out["message"] == ('secrets "s-used" is forbidden: User "system:node:hpk" cannot get resource "secrets" '
                              'in API group "" in the namespace "default": no relationship found between node \'hpk\' '
                              'and this object')
    code, out = kube.post(f"{NS}/pods/refs/binding", {"apiVersion": "v1", "kind": "Binding",
                                                      "metadata": {"name": "refs"},
                                                      "target": {"kind": "Node", "name": "hpk"}})
    assert code == 201, out
    assert node.call("GET", f"{NS}/secrets/s-used")[0] == 200
    assert node.call("GET", f"{NS}/configmaps/cm-used")[0] == 200
    assert node.call("GET", f"{NS}/secrets/s-unused")[0] == 403
    assert node.call("GET", f"{NS}/configmaps/cm-unused")[0] == 403
    assert node.call("GET", f"{NS}/secrets")[0] == 403
    code, out = node.call("PUT", f"{NS}/configmaps/cm-used", _cm("cm-used"))
    assert code == 403 and out["message"].endswith("can only read resources of this type")


def test_tokens_only_bound_to_a_pod_on_the_node(kube: KubeApi, node: Node) -> None:
    mine = _make(kube, f"{NS}/pods", pod("tok-mine", node="hpk"))
    theirs = _make(kube, f"{NS}/pods", pod("tok-theirs", node="other"))
    path = f"{NS}/serviceaccounts/default/token"

    def request(p: dict[str, Any] | None, uid: str | None = None) -> tuple[int, Any]:
        spec: dict[str, Any] = {"expirationSeconds": 3607}
        if p is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
                                      "uid": p["metadata"]["uid"] if uid is None else uid}
        return node.call("POST", path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                        "spec": spec})

    code, out = request(mine)
    assert code == 201 and out["status"]["token"]
    code, out = request(None)
    assert code == 403 and out["message"].endswith("node requested token not bound to a pod")
    code, out = request(mine, uid="")
    assert code == 403 and out["message"].endswith("node requested token with a pod binding without a uid")
    code, out = request(theirs)
    assert code == 403  # the service account is used by a pod on the node, the pod is not
    assert out["message"].endswith("node requested token bound to a pod scheduled on a different node")
    code, out = node.call("POST", f"{NS}/serviceaccounts/nobody/token", {"spec": {}})
    assert code == 403 and out["message"].endswith("no relationship found between node 'hpk' and this object")


def test_pod_status_delete_and_eviction_only_for_bound_pods(kube: KubeApi, node: Node) -> None:
    _make(kube, f"{NS}/pods", pod("st-mine", node="hpk"))
    _make(kube, f"{NS}/pods", pod("st-theirs", node="other"))
    ok = node.call("PATCH", f"{NS}/pods/st-mine/status",
                   {"metadata": {"annotations": {"hpk.io/slurm-job-id": "7"}}, "status": {"phase": "Running"}},
                   ctype="application/strategic-merge-patch+json")
    assert ok[0] == 200 and ok[1]["metadata"]["annotations"]["hpk.io/slurm-job-id"] == "7"
    code, out = node.call("PATCH", f"{NS}/pods/st-mine/status", {"metadata": {"labels": {"a": "b"}}},
                          ctype="application/merge-patch+json")
    assert code == 403 and out["message"].endswith('node "hpk" cannot update labels through pod status')
    code, out = node.call("PATCH", f"{NS}/pods/st-theirs/status", {"status": {"phase": "Running"}},
                          ctype="application/merge-patch+json")
    assert code == 403 and "pods with spec.nodeName set to itself" in out["message"]
    code, out = node.call("PATCH", f"{NS}/pods/st-mine", {"metadata": {"labels": {"a": "b"}}},
                          ctype="application/merge-patch+json")
    assert code == 403 and 'cannot patch resource "pods"' in out["message"]
    code, out = node.call("DELETE", f"{NS}/pods/st-theirs", {"gracePeriodSeconds": 0})
    assert code == 403 and out["message"].endswith('node "hpk" can only delete pods with spec.nodeName set to itself')
    code, out = node.call("POST", f"{NS}/pods", pod("made-by-node", node="hpk"))
    assert code == 403 and "can only create mirror pods" in out["message"]
    assert node.call("DELETE", f"{NS}/pods/st-mine", {"gracePeriodSeconds": 0})[0] == 200
    code, out = node.call("POST", f"{NS}/pods/st-theirs/binding", {"target": {"kind": "Node", "name": "hpk"}})
    assert code == 403 and 'cannot create resource "pods/binding"' in out["message"]


def test_leases_events_services_and_the_rest(kube: KubeApi, node: Node) -> None:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "hpk", "namespace": "kube-node-lease"}, "spec": {"holderIdentity": "hpk"}}
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    assert node.call("POST", leases, lease)[0] == 201
    code, out = node.call("POST", leases, {**lease, "metadata": {"name": "other", "namespace": "kube-node-lease"}})
    assert code == 403 and out["message"].endswith("can only access node lease with the same name as the requesting node")
    code, out = node.call("GET", leases)
    assert code == 403 and out["message"].startswith('leases.coordination.k8s.io is forbidden: User "system:node:hpk"')
    assert node.call("GET", f"{leases}/hpk")[0] == 200
    code, out = node.call("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/hpk")
    assert code == 403 and 'can only access leases in the "kube-node-lease" system namespace' in out["message"]
    assert node.call("GET", f"{NS}/services")[0] == 200
    assert node.call("GET", "/api/v1/services")[0] == 200
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"}, "reason": "Started",
             "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"}}
    assert node.call("POST", f"{NS}/events", event)[0] == 201
    assert node.call("GET", f"{NS}/events")[0] == 403
    assert node.call("GET", "/api/v1/namespaces")[0] == 403
    assert node.call("GET", "/apis/apps/v1/deployments")[0] == 403
    assert node.call("DELETE", f"{NS}/pods")[0] == 403  # deletecollection


def test_kubectl_with_the_kubelet_credentials_is_refused_like_a_real_cluster(kube: KubeApi) -> None:
    r = kube.kubectl("get", "pods", "-A", check=False, kubeconfig=kube.state / "kubelet.kubeconfig")
    assert r.returncode == 1
    assert ('User "system:node:hpk" cannot list resource "pods" in API group "" at the cluster scope: '
            "can only list/watch pods with spec.nodeName field selector") in r.stderr
    r = kube.kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName=hpk", check=False,
                     kubeconfig=kube.state / "kubelet.kubeconfig")
    assert r.returncode == 0, r.stderr
    r = kube.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}",
                     kubeconfig=kube.state / "kubelet.kubeconfig")
    assert r.stdout == "system:node:hpk"


def test_the_admin_is_not_restricted(kube: KubeApi) -> None:
    assert kube.get("/api/v1/pods")[0] == 200
    assert kube.get(f"{NS}/secrets")[0] == 200


def test_what_a_real_node_authorizer_also_allows(kube: KubeApi, node: Node) -> None:
    """Corners where a too strict model would fail a correct kubelet: both field selectors at once,
    an empty taint list for none, Secrets reached through csi/azureFile, an ephemeral volume's claim."""
    _make(kube, f"{NS}/pods", pod("both", node="hpk"))
    code, out = node.call("GET", "/api/v1/pods", params={"fieldSelector": "metadata.name=both,spec.nodeName=hpk"})
    assert code == 200 and [p["metadata"]["name"] for p in out["items"]] == ["both"]
    ok = node.call("PATCH", "/api/v1/nodes/hpk", {"spec": {"taints": []}}, ctype="application/merge-patch+json")
    assert ok[0] == 200, ok
    _make(kube, f"{NS}/secrets", _secret("csi-creds"))
    _make(kube, f"{NS}/secrets", _secret("azure-creds"))
    eph = pod("eph", node="hpk")
    eph["spec"]["volumes"] = [
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}},
        {"name": "c", "csi": {"driver": "d.example", "nodePublishSecretRef": {"name": "csi-creds"}}},
        {"name": "a", "azureFile": {"secretName": "azure-creds", "shareName": "s"}}]
    _make(kube, f"{NS}/pods", eph)
    assert node.call("GET", f"{NS}/secrets/csi-creds")[0] == 200
    assert node.call("GET", f"{NS}/secrets/azure-creds")[0] == 200
    code, out = node.call("GET", f"{NS}/persistentvolumeclaims/eph-scratch")
    assert code == 404, out  # allowed (the graph knows the claim), and there is none
    code, out = node.call("GET", f"{NS}/persistentvolumeclaims/eph-scratch/status")
    assert code == 403 and out["message"].endswith("can only update or patch a persistentvolumeclaim status")


def test_subject_access_review_is_rbac_over_the_stored_cluster_role_bindings() -> None:
    """What the kubelet asks about a client it does not serve at once (issue 20.9): system:masters
    may, a binding to a ClusterRole with nodes/proxy (or nodes/*) lets a user or group in, nothing
    else does."""
    from ci.standin.kubeapi import rbac

    class Store:
        def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
            self.objects = objects

        def list(self, key: str) -> list[dict[str, Any]]:
            return self.objects.get(key, [])

    def spec(user: str, sub: str = "proxy", groups: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"user": user, "groups": list(groups),
                "resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": sub, "name": "hpk"}}

    store = Store({
        "clusterroles.rbac.authorization.k8s.io": [
            {"metadata": {"name": "proxy"}, "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"],
                                                       "verbs": ["get", "create"]}]},
            {"metadata": {"name": "all-node"}, "rules": [{"apiGroups": [""], "resources": ["nodes/*"],
                                                          "verbs": ["*"]}]}],
        "clusterrolebindings.rbac.authorization.k8s.io": [
            {"metadata": {"name": "a"}, "roleRef": {"name": "proxy"}, "subjects": [{"kind": "User", "name": "alice"}]},
            {"metadata": {"name": "b"}, "roleRef": {"name": "all-node"},
             "subjects": [{"kind": "Group", "name": "ops"}]}]})
    assert rbac.review(store, spec("system:kube-scheduler"))["allowed"] is False
    assert rbac.review(store, spec("anyone", groups=("system:masters",)))["allowed"] is True
    assert rbac.review(store, spec("alice"))["allowed"] is True
    assert rbac.review(store, spec("alice", "stats"))["allowed"] is False
    assert rbac.review(store, spec("bob", "stats", ("ops",)))["allowed"] is True

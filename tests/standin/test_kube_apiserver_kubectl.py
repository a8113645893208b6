"""The Kubernetes API stand-in driven by a real client-go: kubectl v1.37 from ci/kube-tools
(/opt/hpk-tools/bin/kubectl), with a fake kubelet behind the log/exec/proxy routes. What kubectl
accepts here it accepts from a real kube-apiserver (discovery, OpenAPI v3, Tables, client-side
apply's strategic merge, delete --wait, WebSocket exec)."""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from ci.standin.kubeapi.resources import VERSION
from tests.support.fake_kubelet import FakeKubelet
from tests.support.kubeapi import KubeApi, helm, pod, require_kubectl, start

pytestmark = pytest.mark.standin
NS = "/api/v1/namespaces/default"

POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: c
    image: busybox:1.36
    command: [sleep, "3600"]
    env: [{name: A, value: "1"}]
"""


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeApi]:
    require_kubectl()
    d = Path(tempfile.mkdtemp(prefix="kubeapi-kubectl-"))
    api = start(d / "state")
    try:
        yield api
    finally:
        api.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def kubelet(kube: KubeApi) -> Iterator[FakeKubelet]:
    fk = FakeKubelet(kube.pki).start()
    code, out = kube.post("/api/v1/nodes", fk.node())
    assert code == 201, out
    code, out = kube.post(f"{NS}/pods", pod("onnode", node="hpk"))  # the pod the proxy tests talk to
    assert code == 201, out
    try:
        yield fk
    finally:
        fk.stop()


def test_version_and_api_resources(kube: KubeApi) -> None:
    r = kube.kubectl("version")
    assert f"Server Version: {VERSION['gitVersion']}" in r.stdout
    r = kube.kubectl("api-resources", "--api-group=coordination.k8s.io", "-o", "name")
    assert r.stdout.split() == ["leases.coordination.k8s.io"]


@pytest.mark.parametrize("user, name, group", [("admin", "kubernetes-admin", "system:masters"),
                                               ("kubelet", "system:node:hpk", "system:nodes"),
                                               ("scheduler", "system:kube-scheduler", None)])
def test_kubeconfigs_authenticate_by_client_certificate(kube: KubeApi, user: str, name: str, group: str | None) -> None:
    r = kube.kubectl("auth", "whoami", "-o", "json", kubeconfig=kube.state / f"{user}.kubeconfig")
    info = json.loads(r.stdout)["status"]["userInfo"]
    assert info["username"] == name
    assert info["groups"] == ([group] if group else []) + ["system:authenticated"]
    assert oct((kube.state / f"{user}.kubeconfig").stat().st_mode & 0o777) == "0o600"


UNSERVED = [("argoproj.io/v1alpha1", "Workflow", "spec: {entrypoint: main}"),
            ("jobset.x-k8s.io/v1alpha2", "JobSet", "spec: {replicatedJobs: []}"),
            ("batch/v1beta1", "CronJob", "spec: {schedule: '* * * * *', jobTemplate: {spec: {template: {spec: "
             "{restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}}")]


@pytest.mark.parametrize("api_version, kind, spec", UNSERVED, ids=[k for _, k, _ in UNSERVED])
def test_a_kind_the_server_does_not_serve_is_no_match(kube: KubeApi, api_version: str, kind: str, spec: str) -> None:
    """kubectl lists the CRDs and reads /openapi/v2 before it names the missing kind, as with a real server
    (before, the stand-in's 404s made it print "the server could not find the requested resource")."""
    doc = f"apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x}}\n{spec}\n"
    for verb in ("apply", "create"):
        r = kube.kubectl(verb, "-f", "-", input=doc, check=False)
        assert r.returncode == 1 and r.stderr == (
            f'error: resource mapping not found for name: "x" namespace: "" from "STDIN": no matches for kind '
            f'"{kind}" in version "{api_version}"\nensure CRDs are installed first\n'), r.stderr
    assert kube.kubectl("get", "crd").stderr == "No resources found\n"


def test_apply_create_update_and_strict_validation(kube: KubeApi) -> None:
    r = kube.kubectl("apply", "-f", "-", input=POD_YAML)
    assert r.stdout.strip() == "pod/web created"
    changed = POD_YAML.replace("app: web}", "app: web, tier: front}").replace("busybox:1.36", "busybox:1.37")
    r = kube.kubectl("apply", "-f", "-", input=changed)
    assert r.stdout.strip() == "pod/web configured" and "warning" not in r.stderr.lower()
    code, p = kube.get(f"{NS}/pods/web")
    assert p["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert p["spec"]["containers"][0]["image"] == "busybox:1.37" and p["metadata"]["generation"] == 2
    assert "kubectl.kubernetes.io/last-applied-configuration" in p["metadata"]["annotations"]
    r = kube.kubectl("apply", "-f", "-", input=changed.replace("env: [{name: A, value: \"1\"}]",
                                                               "env: [{name: A, value: \"2\"}]"), check=False)
    assert r.returncode == 1
    assert 'The Pod "web" is invalid: spec: Forbidden: pod updates may not change fields' in r.stderr
    r = kube.kubectl("apply", "-f", "-", input=POD_YAML.replace("name: web", "name: typo").replace(
        "command:", "comand:"), check=False)
    assert r.returncode == 1 and 'strict decoding error: unknown field "spec.containers[0].comand"' in r.stderr


def test_get_shows_a_started_sidecar_as_a_container_and_the_failing_init_container(kube: KubeApi) -> None:
    """printPod: a started native sidecar counts among READY/total and is passed over for Init:...,
    which the regular init container after it gives (its back-off); restarts are the init ones."""
    body = pod("sidecarinit", initContainers=[
        {"name": "proxy", "image": "busybox:1.36", "restartPolicy": "Always"},
        {"name": "setup", "image": "busybox:1.36"}])
    assert kube.post(f"{NS}/pods", body)[0] == 201
    started = {"running": {"startedAt": "2026-11-24T00:00:00Z"}}
    kube.patch(f"{NS}/pods/sidecarinit/status", {"status": {"phase": "Pending", "initContainerStatuses": [
        {"name": "proxy", "image": "busybox:1.36", "imageID": "", "ready": True, "started": True, "restartCount": 0,
         "state": started},
        {"name": "setup", "image": "busybox:1.36", "imageID": "", "ready": False, "started": False, "restartCount": 3,
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
         "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}], "containerStatuses": [
        {"name": "c", "image": "busybox:1.36", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"waiting": {"reason": "PodInitializing"}}}]}})
    cells = kube.kubectl("get", "pod", "sidecarinit", "--no-headers").stdout.split()
    assert cells[:4] == ["sidecarinit", "1/2", "Init:CrashLoopBackOff", "3"], cells


def test_get_prints_the_server_columns(kube: KubeApi, kubelet: FakeKubelet) -> None:
    kube.patch(f"{NS}/pods/onnode/status", {"status": {"phase": "Running", "podIP": "10.1.2.3", "containerStatuses": [
        {"name": "c", "image": "busybox:1.36", "imageID": "", "ready": True, "restartCount": 2,
         "state": {"running": {"startedAt": "2026-11-24T00:00:00Z"}}}]}})
    r = kube.kubectl("get", "pod", "onnode", "-o", "wide", "--no-headers")
    cells = r.stdout.split()
    assert cells[:4] == ["onnode", "1/1", "Running", "2"] and cells[5:7] == ["10.1.2.3", "hpk"]
    r = kube.kubectl("get", "nodes", "--no-headers")
    assert r.stdout.split()[:3] == ["hpk", "Ready", "<none>"]
    labeled = pod("labeled")
    labeled["metadata"]["labels"] = {"app": "lbl"}
    kube.post(f"{NS}/pods", labeled)
    r = kube.kubectl("get", "pods", "-l", "app=lbl", "-o", "name")
    assert r.stdout.split() == ["pod/labeled"]
    r = kube.kubectl("get", "pods", "--field-selector", "spec.nodeName=hpk", "-o", "name")
    assert r.stdout.split() == ["pod/onnode"]


def test_describe_shows_events(kube: KubeApi, kubelet: FakeKubelet) -> None:
    code, p = kube.get(f"{NS}/pods/onnode")
    ev = {"metadata": {"name": "onnode.1"}, "involvedObject": {"kind": "Pod", "namespace": "default",
                                                              "name": "onnode", "uid": p["metadata"]["uid"]},
          "reason": "Started", "message": "Started container c in Slurm job 42", "type": "Normal",
          "source": {"component": "kubelet", "host": "hpk"}, "count": 1,
          "firstTimestamp": "2026-11-24T00:00:00Z", "lastTimestamp": "2026-11-24T00:00:00Z"}
    assert kube.post(f"{NS}/events", ev)[0] == 201
    r = kube.kubectl("describe", "pod", "onnode")
    assert "Node:             hpk" in r.stdout
    assert "Started container c in Slurm job 42" in r.stdout
    assert "kube-api-access-" in r.stdout and "QoS Class:                   BestEffort" in r.stdout


def test_explain_reads_openapi_v3(kube: KubeApi) -> None:
    r = kube.kubectl("explain", "pod.spec.nodeName")
    assert "FIELD: nodeName <string>" in r.stdout


def test_logs_go_through_the_kubelet_with_the_client_cert(kube: KubeApi, kubelet: FakeKubelet) -> None:
    kubelet.requests.clear()
    r = kube.kubectl("logs", "onnode", "--tail=5", "--timestamps")
    assert r.stdout == "c line 0\nc line 1\nc line 2\n"
    assert kubelet.requests == [{"path": "/containerLogs/default/onnode/c", "method": "GET",
                                 "query": [("timestamps", "true"), ("tailLines", "5")],
                                 "cn": "kube-apiserver-kubelet-client"}]
    t0 = time.monotonic()
    r = kube.kubectl("logs", "-f", "onnode")
    assert r.stdout == "".join(f"c line {i}\n" for i in range(5))
    assert time.monotonic() - t0 >= 0.8  # streamed while the kubelet wrote, not buffered up front
    assert kubelet.requests[-1]["query"] == [("follow", "true")]
    kube.post(f"{NS}/pods", pod("nolog"))
    n = len(kubelet.requests)
    r = kube.kubectl("logs", "nolog", check=False)  # unbound pod: empty, no kubelet call
    assert (r.returncode, r.stdout, len(kubelet.requests)) == (0, "", n)


def test_exec_is_a_websocket_passthrough(kube: KubeApi, kubelet: FakeKubelet) -> None:
    kubelet.requests.clear()
    r = kube.kubectl("exec", "onnode", "--", "echo", "hi")
    assert r.stdout == "echo hi\n"
    assert kubelet.requests[0]["query"] == [("command", "echo"), ("command", "hi"), ("output", "1"), ("error", "1")]
    r = kube.kubectl("exec", "-i", "onnode", "--", "cat", input="hello from stdin\n")
    assert r.stdout == "cat\nhello from stdin\n"
    assert kubelet.requests[-1]["query"] == [("command", "cat"), ("input", "1"), ("output", "1"), ("error", "1")]
    r = kube.kubectl("exec", "onnode", "-c", "c", "--", "x", "fail", check=False)
    assert r.returncode == 3 and "command terminated with exit code 3" in r.stderr


def test_exec_refused_without_the_declared_feature(kube: KubeApi, kubelet: FakeKubelet) -> None:
    node = kubelet.node("oldnode", websocket=False)
    assert kube.post("/api/v1/nodes", node)[0] == 201
    kube.post(f"{NS}/pods", pod("onold", node="oldnode"))
    r = kube.kubectl("exec", "onold", "--", "true", check=False)
    assert r.returncode == 1 and "does not declare ExtendWebSocketsToKubelet" in r.stderr


def test_node_proxy(kube: KubeApi, kubelet: FakeKubelet) -> None:
    r = kube.kubectl("get", "--raw", "/api/v1/nodes/hpk/proxy/runningpods/")
    assert r.stdout == '{"kind": "PodList", "apiVersion": "v1", "items": []}'


def test_delete_wait_returns_once_the_kubelet_removed_the_pod(kube: KubeApi, kubelet: FakeKubelet) -> None:
    code, p = kube.post(f"{NS}/pods", pod("bye", node="hpk"))
    uid = p["metadata"]["uid"]

    def kubelet_final_delete() -> None:
        time.sleep(1.0)
        code, out = kube.delete(f"{NS}/pods/bye", {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        assert code == 200, out

    t = threading.Thread(target=kubelet_final_delete)
    t0 = time.monotonic()
    t.start()
    r = kube.kubectl("delete", "pod", "bye", "--wait=true", "--timeout=20s")
    t.join()
    assert r.stdout.strip() == 'pod "bye" deleted from default namespace'
    assert time.monotonic() - t0 >= 0.9
    assert kube.get(f"{NS}/pods/bye")[0] == 404
    kube.post(f"{NS}/pods", pod("bye-unbound"))
    # unbound: deleted at once, not marked for a kubelet to confirm, so the very next GET finds nothing
    kube.kubectl("delete", "pod", "bye-unbound", "--wait=false")
    assert kube.get(f"{NS}/pods/bye-unbound")[0] == 404


def test_namespace_lifecycle(kube: KubeApi) -> None:
    kube.kubectl("apply", "-f", "-", input="apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n")
    r = kube.kubectl("get", "serviceaccount,configmap", "-n", "team", "-o", "name")
    assert sorted(r.stdout.split()) == ["configmap/kube-root-ca.crt", "serviceaccount/default"]
    kube.kubectl("delete", "namespace", "team", "--wait=true", "--timeout=20s")
    assert kube.get("/api/v1/namespaces/team")[0] == 404
    r = kube.kubectl("delete", "namespace", "default", check=False)
    assert r.returncode == 1 and "this namespace may not be deleted" in r.stderr


def test_typed_clients_send_protobuf(kube: KubeApi) -> None:
    """kubectl create <generator> uses client-go's typed clients, which send protobuf bodies."""
    kube.kubectl("create", "namespace", "proto")
    kube.kubectl("create", "secret", "generic", "s1", "-n", "proto", "--from-literal=a=b")
    kube.kubectl("create", "deployment", "d1", "-n", "proto", "--image=busybox:1.36", "--replicas=2")
    kube.kubectl("create", "job", "j1", "-n", "proto", "--image=busybox:1.36", "--", "echo", "hi")
    code, s1 = kube.get("/api/v1/namespaces/proto/secrets/s1")
    assert (s1["type"], base64.b64decode(s1["data"]["a"])) == ("Opaque", b"b")
    code, d1 = kube.get("/apis/apps/v1/namespaces/proto/deployments/d1")
    assert d1["spec"]["replicas"] == 2 and d1["spec"]["selector"] == {"matchLabels": {"app": "d1"}}
    assert d1["spec"]["template"]["spec"]["containers"][0] == {"name": "busybox", "image": "busybox:1.36",
                                                                "resources": {}}
    code, j1 = kube.get("/apis/batch/v1/namespaces/proto/jobs/j1")
    assert j1["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
    assert j1["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    r = kube.kubectl("create", "token", "default", "-n", "proto", "--duration=1h")
    claims = json.loads(base64.urlsafe_b64decode(r.stdout.strip().split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:proto:default" and claims["exp"] - claims["iat"] == 3600
    kube.kubectl("scale", "deployment", "d1", "-n", "proto", "--replicas=3")
    assert kube.get("/apis/apps/v1/namespaces/proto/deployments/d1")[1]["spec"]["replicas"] == 3


def test_helm_install_upgrade_uninstall(kube: KubeApi, tmp_path: Path) -> None:
    chart = tmp_path / "tiny"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: tiny\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cfg\n"
        "data:\n  greeting: {{ .Values.greeting | default \"hello\" | quote }}\n")
    r = helm(kube, "install", "r1", str(chart), "-n", "kube-public")
    assert r.returncode == 0 and "STATUS: deployed" in r.stdout, r.stderr
    r = helm(kube, "upgrade", "r1", str(chart), "-n", "kube-public", "--set", "greeting=hi")
    assert r.returncode == 0, r.stderr
    assert kube.get("/api/v1/namespaces/kube-public/configmaps/r1-cfg")[1]["data"] == {"greeting": "hi"}
    r = helm(kube, "list", "-n", "kube-public", "-o", "json")
    assert [(x["name"], x["revision"], x["status"]) for x in json.loads(r.stdout)] == [("r1", "2", "deployed")]
    r = helm(kube, "uninstall", "r1", "-n", "kube-public")
    assert r.returncode == 0, r.stderr
    assert kube.get("/api/v1/namespaces/kube-public/configmaps/r1-cfg")[0] == 404

"""The kubelet end to end: the API stand-in + ``hpkctl scheduler`` + ``hpkctl kubelet`` as user hpk +
the real local Slurm + the Apptainer stand-in. Pods are created with the official Python client,
with raw HTTP and with the real kubectl; what they prove is in each test's docstring."""

from __future__ import annotations

import base64
import socket
import subprocess
from typing import Any

import pytest

from tests.support.cluster import Cluster
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.standin]


def bpod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    spec.setdefault("restartPolicy", "Never")
    containers = spec.pop("containers", None) or [{"name": "c", "image": "busybox", "command": command}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": containers, **spec}}


def slurm_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={job_id}", "--format=%T"],
                         capture_output=True, text=True, check=False).stdout.strip()
    if out:
        return out
    with open("/var/log/slurm/jobcomp.log") as fh:
        lines = [ln for ln in fh if f"JobId={job_id} " in ln]
    return lines[-1].split("JobState=")[1].split()[0] if lines else ""


def test_node_and_lease(cluster: Cluster) -> None:
    """The node is registered once with capacity from sinfo, nodeInfo, the kubelet's port and WebSocket
    streaming declared; the lease is renewed with a MicroTime of six fractional digits."""
    code, node = cluster.api.get("/api/v1/nodes/hpk")
    assert code == 200
    st = node["status"]
    cpus = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%c"], capture_output=True, text=True,
                          check=True).stdout.split()
    assert st["capacity"]["cpu"] == str(sum(int(c) for c in cpus[:1]))
    assert st["capacity"]["pods"] == "1000"
    assert st["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
    assert st["declaredFeatures"] == ["ExtendWebSocketsToKubelet"]
    assert st["nodeInfo"]["containerRuntimeVersion"].startswith("apptainer://")
    assert {"type": "InternalIP", "address": "127.0.0.1"} in st["addresses"]
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/hpk"
    lease = wait_for("the lease", lambda: (r := cluster.api.get(lease_path))[0] == 200 and r[1], timeout=15)
    assert lease["spec"]["holderIdentity"] == "hpk"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    first = lease["spec"]["renewTime"]
    assert len(first.split(".")[1]) == len("000000Z")
    wait_for("a lease renewal", lambda: cluster.api.get(
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/hpk")[1]["spec"]["renewTime"] != first,
        timeout=25)


def test_python_client_pod_succeeds_with_events_annotation_and_logs(cluster: Cluster) -> None:
    """A pod created with the official client, unbound: the scheduler binds it, the kubelet runs it as
    one Slurm job (annotated), status reaches Succeeded with exit code 0, the log comes through the
    API server's log route, events say Scheduled and Started."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.api.kubeconfig)))
    text = "quotes ' \" $(date) `id` ünïcödé"
    api.create_namespaced_pod("default", bpod("py-hello", ["sh", "-c", 'printf "%s\\n" "$MSG"'],
                                              containers=[{"name": "c", "image": "busybox",
                                                           "command": ["sh", "-c", 'printf "%s\\n" "$MSG"'],
                                                           "env": [{"name": "MSG", "value": text}]}]))
    p = cluster.wait_phase("py-hello", "Succeeded")
    assert p["spec"]["nodeName"] == "hpk"
    cs = p["status"]["containerStatuses"][0]
    assert cs["state"]["terminated"]["exitCode"] == 0 and cs["state"]["terminated"]["reason"] == "Completed"
    job = cluster.job_id("py-hello")
    assert job and wait_for("the job to leave", lambda: slurm_state(job) == "COMPLETED", timeout=30)
    reasons = {e["reason"] for e in cluster.events("py-hello")}
    assert {"Scheduled", "Started"} <= reasons, reasons
    assert api.read_namespaced_pod_log("py-hello", "default") == text + "\n"


def test_kubectl_failing_pod_reports_exit_code(cluster: Cluster) -> None:
    """kubectl apply of a pod whose container exits 3: phase Failed, the container terminated with
    exit code 3 and reason Error, and a Failed event."""
    cluster.kubectl("apply", "-f", "-", input="""
apiVersion: v1
kind: Pod
metadata: {name: fails}
spec:
  restartPolicy: Never
  containers:
  - {name: c, image: busybox, command: ["sh", "-c", "echo about to fail; exit 3"]}
""")
    p = cluster.wait_phase("fails", "Failed")
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")
    out = cluster.kubectl("get", "pod", "fails").stdout
    assert "Error" in out
    assert any(e["reason"] == "Failed" and e["type"] == "Warning" for e in cluster.events("fails"))


def test_delete_running_pod_cancels_job(cluster: Cluster) -> None:
    """kubectl delete --wait of a running pod: the stop sequence runs (the container sees SIGTERM),
    the job is cancelled, and the pod object is gone (nothing stays Terminating)."""
    cluster.create(bpod("stopme", ["sh", "-c", "trap 'echo got TERM; exit 0' TERM; while :; do sleep 1; done"],
                        terminationGracePeriodSeconds=5))
    cluster.wait_phase("stopme", "Running")
    job = cluster.job_id("stopme")
    cluster.kubectl("delete", "pod", "stopme", "--wait", "--timeout=60s", timeout=70)
    assert cluster.pod("stopme") is None
    assert wait_for("job cancelled", lambda: slurm_state(job) in ("CANCELLED", "COMPLETED"), timeout=30)


def test_force_delete_cancels_job(cluster: Cluster) -> None:
    """--force --grace-period=0 removes the object at once: the kubelet sees only DELETED and still
    cancels the job."""
    cluster.create(bpod("forced", ["sleep", "300"]))
    cluster.wait_phase("forced", "Running")
    job = cluster.job_id("forced")
    cluster.kubectl("delete", "pod", "forced", "--force", "--grace-period=0")
    assert wait_for("job cancelled", lambda: slurm_state(job) == "CANCELLED", timeout=30)


def test_mandatory_configmap_waits_optional_secret_skipped(cluster: Cluster) -> None:
    """A missing mandatory ConfigMap keeps the pod Pending (CreateContainerConfigError, event
    MandatoryConfigMapNotFound); once the ConfigMap exists the pod runs. A missing optional Secret
    only raises OptionalSecretNotFound."""
    cluster.create(bpod("needs-cm", ["sh", "-c", 'printf "%s|%s" "$A" "${B:-unset}"'],
                        containers=[{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", 'printf "%s|%s" "$A" "${B:-unset}"'],
                                     "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "late",
                                                                                             "key": "a"}}},
                                             {"name": "B", "valueFrom": {"secretKeyRef": {
                                                 "name": "nosuch", "key": "b", "optional": True}}}]}]))

    def waiting() -> bool:
        p = cluster.pod("needs-cm") or {}
        cs = (p.get("status", {}).get("containerStatuses") or [{}])[0]
        return cs.get("state", {}).get("waiting", {}).get("reason") == "CreateContainerConfigError"

    wait_for("CreateContainerConfigError", waiting, timeout=30)
    assert cluster.phase("needs-cm") == "Pending"
    wait_for("the MandatoryConfigMapNotFound event (posted on the events' own thread)",
             lambda: any(e["reason"] == "MandatoryConfigMapNotFound" for e in cluster.events("needs-cm")),
             timeout=30)
    code, _ = cluster.api.post("/api/v1/namespaces/default/configmaps",
                               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"},
                                "data": {"a": "x y"}})
    assert code == 201
    cluster.wait_phase("needs-cm", "Succeeded", timeout=60)
    assert cluster.kubectl("logs", "needs-cm").stdout == "x y|unset"
    assert any(e["reason"] == "OptionalSecretNotFound" for e in cluster.events("needs-cm"))


def test_configmap_secret_volumes_and_token(cluster: Cluster) -> None:
    """ConfigMap and Secret volumes, envFrom, and the projected service-account token (a real token
    from the TokenRequest API) with kube-root-ca.crt."""
    cluster.api.post("/api/v1/namespaces/default/configmaps",
                     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                      "data": {"file.txt": "line1\nline2 $HOME\n"}})
    cluster.api.post("/api/v1/namespaces/default/secrets",
                     {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"},
                      "data": {"PASSWORD": base64.b64encode(b"s3cr'et").decode()}})
    script = ('cat /cfg/file.txt; printf "%s\\n" "$PASSWORD"; '
              'head -c 3 /var/run/secrets/kubernetes.io/serviceaccount/token; echo; '
              'grep -c BEGIN /var/run/secrets/kubernetes.io/serviceaccount/ca.crt; '
              'cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo')
    cluster.create(bpod("vols", [], containers=[{
        "name": "c", "image": "busybox", "command": ["sh", "-c", script],
        "envFrom": [{"secretRef": {"name": "sec"}}],
        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
        volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}]))
    cluster.wait_phase("vols", "Succeeded")
    assert cluster.kubectl("logs", "vols").stdout == "line1\nline2 $HOME\ns3cr'et\neyJ\n1\ndefault\n"


def test_unsupported_pod_fails_with_reason_and_kubelet_survives(cluster: Cluster) -> None:
    """A pod the translator refuses (an unsupported volume type) becomes Failed with the reason and an
    event; the kubelet goes on running the next pod."""
    cluster.create(bpod("bad-vol", ["true"], volumes=[{"name": "x", "nfs": {"server": "n", "path": "/e"}}],
                        containers=[{"name": "c", "image": "busybox", "command": ["true"],
                                     "volumeMounts": [{"name": "x", "mountPath": "/x"}]}]))
    p = cluster.wait_phase("bad-vol", "Failed", timeout=30)
    assert p["status"]["reason"] == "UnsupportedVolume"
    assert any(e["reason"] == "Failed" and "UnsupportedVolume" in e["message"] for e in cluster.events("bad-vol"))
    cluster.create(bpod("after-bad", ["true"]))
    cluster.wait_phase("after-bad", "Succeeded")


def test_kubectl_logs_follow_and_exec_through_the_kubelet(cluster: Cluster) -> None:
    """`kubectl logs -f` follows a running pod until its container ends; `kubectl exec` runs a command
    in the running container (same hostname and volumes) and returns its exit code; `kubectl exec -i`
    passes stdin."""
    cluster.create(bpod("chatty", [], containers=[{
        "name": "c", "image": "busybox",
        "command": ["sh", "-c", "echo marker > /data/m; hostname > /data/h; for i in 1 2 3; do echo line $i; sleep 1; done; "
                                "while [ ! -e /data/stop ]; do sleep 0.2; done; echo bye"],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}], volumes=[{"name": "data", "emptyDir": {}}]))
    cluster.wait_phase("chatty", "Running")
    follow = subprocess.Popen(["/opt/hpk-tools/bin/kubectl", "--kubeconfig", str(cluster.api.kubeconfig), "logs",
                               "-f", "chatty"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(cluster.api.state)})
    r = cluster.kubectl("exec", "chatty", "--", "sh", "-c", "cat /data/m; [ \"$(hostname)\" = \"$(cat /data/h)\" ] "
                        "&& echo same-host; exit 7", check=False)
    assert r.returncode == 7, r.stderr
    assert r.stdout == "marker\nsame-host\n"
    r = cluster.kubectl("exec", "-i", "chatty", "--", "sh", "-c", "cat > /data/stop; echo stopped",
                        input="now\n")
    assert r.stdout == "stopped\n"
    out, err = follow.communicate(timeout=60)
    assert follow.returncode == 0, err
    assert out == "line 1\nline 2\nline 3\nbye\n"
    cluster.wait_phase("chatty", "Succeeded")


def test_kubelet_version_follows_the_api_server(cluster: Cluster) -> None:
    """The kubelet reports the API server's major.minor (never newer than its server: version skew)."""
    code, version = cluster.api.get("/version")
    code, node = cluster.api.get("/api/v1/nodes/hpk")
    assert node["status"]["nodeInfo"]["kubeletVersion"].startswith(
        f"v{version['major']}.{version['minor']}.0-hpkctl-")


def test_in_cluster_clients_reach_the_api_server(cluster: Cluster) -> None:
    """KUBERNETES_SERVICE_HOST/PORT name the API server's real address (no kube-proxy routes the
    cluster IP), so an in-cluster client with the projected token and CA can call the API."""
    cluster.create(bpod("incluster", [], containers=[{
        "name": "c", "image": "busybox",
        "command": ["sh", "-c", 'echo "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"']}]))
    cluster.wait_phase("incluster", "Succeeded")
    assert cluster.kubectl("logs", "incluster").stdout == f"127.0.0.1:{cluster.api.port}\n"


def kubelet_that_exits(cluster: Cluster, name: str, *args: str) -> tuple[int, str]:
    """A second kubelet with the cluster's credential and ``args``, expected to exit by itself: its exit
    status and log (named ``name``)."""
    proc = cluster._spawn(name, "kubelet", "--site", str(cluster.profile), "--kubeconfig",
                          str(cluster.api.state / "kubelet.kubeconfig"), "--address", "127.0.0.1", *args)
    try:
        rc = proc.wait(timeout=60)
    finally:
        cluster.stop_process(proc)
    return rc, cluster.log(name)


def test_a_node_credential_for_another_node_is_refused_at_start(cluster: Cluster) -> None:
    """The API stand-in applies the Node authorizer to kubelet credentials (as a real control plane
    does), so a kubelet started under another node's name would be refused every pod and lease: it
    exits at once and names the fix, instead of running half-blind."""
    rc, log = kubelet_that_exits(cluster, "kubelet-other", "--node-name", "other", "--port", "0")
    assert rc != 0, log
    assert "authenticates as system:node:hpk, but this kubelet serves node 'other'" in log
    assert "--node-name hpk" in log
    assert cluster.api.get("/api/v1/nodes/other")[0] == 404


def test_a_kubelet_that_cannot_listen_stops_before_it_submits_a_pod(cluster: Cluster) -> None:
    """The kubelet starts taking pods before its HTTPS API is up (issue 23.2), so its socket and TLS
    settings are made first: started on a port in use, with a bound pod waiting, it exits naming the
    port and the fix, and the pod is neither submitted nor recorded; the next kubelet runs it once."""
    busy = socket.create_server(("127.0.0.1", 0))
    port = busy.getsockname()[1]
    try:
        cluster.stop_process(cluster.kubelet)
        cluster.create(bpod("portbusy", ["true"]))
        wait_for("portbusy bound", lambda: ((cluster.pod("portbusy") or {}).get("spec") or {}).get("nodeName"),
                 timeout=30)
        rc, log = kubelet_that_exits(cluster, "kubelet-busy", "--port", str(port))
        assert rc != 0, log
        assert f"cannot listen on 127.0.0.1:{port}" in log and "choose a free port" in log, log
        meta = (cluster.pod("portbusy") or {}).get("metadata") or {}
        assert "hpk.io/slurm-job-id" not in (meta.get("annotations") or {}), meta
        written = list((cluster.root / "hpk-state").rglob(f"*{meta['uid']}*"))  # records and pod dirs: by uid
        assert not written, written
    finally:
        busy.close()
        cluster.start_kubelet()
    cluster.wait_phase("portbusy", "Succeeded")


def test_pods_get_the_cluster_dns_when_coredns_answers_on_port_53(cluster: Cluster) -> None:
    """The kube-dns Endpoints (which the control plane publishes with CoreDNS's real address) name
    port 53: a restarted kubelet gives ClusterFirst pods that nameserver with the cluster's search
    path, and a hostNetwork pod keeps the node's resolver, as the kubelet's DNS policy says."""
    ep = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kube-dns", "namespace": "kube-system"},
          "subsets": [{"addresses": [{"ip": "10.1.2.3"}],
                       "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                 {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}]}
    path = "/api/v1/namespaces/kube-system/endpoints"
    code, body = cluster.api.post(path, ep)
    assert code == 201, body
    try:
        cluster.stop_process(cluster.kubelet)
        cluster.start_kubelet()
        cluster.create(bpod("dns-cluster", ["cat", "/etc/resolv.conf"]))
        cluster.create(bpod("dns-hostnet", ["cat", "/etc/resolv.conf"], hostNetwork=True))
        cluster.wait_phase("dns-cluster", "Succeeded")
        cluster.wait_phase("dns-hostnet", "Succeeded")
        node = [w for line in open("/etc/resolv.conf") if line.split()[:1] in (["search"], ["domain"])
                for w in line.split()[1:]]  # the node's own search domains follow the cluster's
        search = list(dict.fromkeys(["default.svc.cluster.local", "svc.cluster.local", "cluster.local", *node]))
        assert cluster.kubectl("logs", "dns-cluster").stdout == (
            f"nameserver 10.1.2.3\nsearch {' '.join(search[:32])}\noptions ndots:5\n")
        assert "10.1.2.3" not in cluster.kubectl("logs", "dns-hostnet").stdout
    finally:
        cluster.api.delete(f"{path}/kube-dns")
        cluster.stop_process(cluster.kubelet)
        cluster.start_kubelet()


def test_conditions_that_turn_true_lose_their_old_reason_and_message(cluster: Cluster) -> None:
    """Issue 22.5: Ready and ContainersReady, False (ContainersNotReady, "containers with unready
    status") while the readiness probe fails, are True without a reason or message once it passes:
    the kubelet's patch deletes them (null), and the API stand-in merges that as the real one does."""
    cluster.create(bpod("readies", [], containers=[{
        "name": "c", "image": "busybox", "command": ["sh", "-c", "while [ ! -e /data/stop ]; do sleep 0.2; done"],
        "readinessProbe": {"exec": {"command": ["test", "-e", "/data/ready"]}, "periodSeconds": 1},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}], volumes=[{"name": "data", "emptyDir": {}}]))

    def ready(want: str) -> dict[str, Any] | None:
        p = cluster.pod("readies") or {}
        conds = {c["type"]: c for c in p.get("status", {}).get("conditions") or []}
        return conds if (conds.get("Ready") or {}).get("status") == want else None

    before = wait_for("Ready False while the probe fails", lambda: ready("False") if cluster.phase("readies") == "Running"
                      else None, timeout=90)
    assert before["Ready"]["reason"] == "ContainersNotReady" and "unready" in before["Ready"]["message"]
    cluster.kubectl("exec", "readies", "--", "touch", "/data/ready")
    after = wait_for("Ready True", lambda: ready("True"), timeout=60)
    for kind in ("Ready", "ContainersReady"):
        assert after[kind]["status"] == "True" and "reason" not in after[kind] and "message" not in after[kind], after
    cluster.kubectl("exec", "readies", "--", "touch", "/data/stop")
    cluster.wait_phase("readies", "Succeeded")


def test_a_pod_with_generate_name_runs(cluster: Cluster) -> None:
    """Issue 22.7 through the API: `kubectl create` of a pod with only metadata.generateName gets the
    server's name (prefix + 5 characters), and the kubelet runs it under that name."""
    import json
    import re

    manifest = json.dumps(bpod("", ["echo", "generated"]) | {"metadata": {"generateName": "gen-"}})
    out = cluster.kubectl("create", "-f", "-", "-o", "name", input=manifest).stdout.strip()
    m = re.fullmatch(r"pod/(gen-[bcdfghjklmnpqrstvwxz2456789]{5})", out)
    assert m, out
    p = cluster.wait_phase(m.group(1), "Succeeded")
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert cluster.kubectl("logs", m.group(1)).stdout == "generated\n"

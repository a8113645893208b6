"""The Kubernetes API stand-in through the official Python client (what hpkctl's kubelet uses):
list+watch with field selectors and bookmarks, the client's own 410 handling, strategic-merge
status patches, the uid-precondition delete without Content-Type, Lease MicroTime, TokenRequest,
logs and exec through a fake kubelet; and a restart that keeps objects and resourceVersions."""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream

from tests.support.fake_kubelet import FakeKubelet
from tests.support.kubeapi import KubeApi, free_port, pod, start

pytestmark = pytest.mark.standin


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeApi]:
    d = Path(tempfile.mkdtemp(prefix="kubeapi-client-"))
    api = start(d / "state", "--bookmark-interval", "0.3")
    try:
        yield api
    finally:
        api.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def v1(kube: KubeApi) -> Iterator[client.CoreV1Api]:
    api_client = config.new_client_from_config(config_file=str(kube.kubeconfig))
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()


@pytest.fixture(scope="module")
def kubelet(kube: KubeApi) -> Iterator[FakeKubelet]:
    fk = FakeKubelet(kube.pki).start()
    assert kube.post("/api/v1/nodes", fk.node())[0] == 201
    try:
        yield fk
    finally:
        fk.stop()


def test_list_then_watch_by_node_with_bookmarks(kube: KubeApi, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod("elsewhere", node="other"))
    lst = v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=hpk", _request_timeout=(3, 10))
    assert lst.items == []
    rv = lst.metadata.resource_version
    v1.create_namespaced_pod("default", pod("mine", node="hpk"))
    seen: list[tuple[str, str]] = []
    for ev in watch.Watch().stream(v1.list_pod_for_all_namespaces, field_selector="spec.nodeName=hpk",
                                   resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=2,
                                   _request_timeout=(3, 10)):
        seen.append((ev["type"], ev["raw_object"]["metadata"].get("name", "")))
    assert seen[0] == ("ADDED", "mine")
    assert ("BOOKMARK", "") in seen[1:] and all(t == "BOOKMARK" for t, _ in seen[1:])


def test_client_watch_raises_410_after_one_retry(kube: KubeApi, v1: client.CoreV1Api) -> None:
    rv = v1.list_namespaced_config_map("default").metadata.resource_version
    v1.create_namespaced_config_map("default", {"metadata": {"name": "bump"}})
    kube.post("/standin/compact", None)
    with pytest.raises(ApiException) as info:
        for _ in watch.Watch().stream(v1.list_namespaced_config_map, "default", resource_version=rv,
                                      timeout_seconds=2, _request_timeout=(3, 10)):
            pass
    assert info.value.status == 410


def test_status_patch_merges_conditions_by_type(v1: client.CoreV1Api) -> None:
    p = v1.create_namespaced_pod("default", pod("cond", node="hpk"))
    uid = p.metadata.uid
    v1.patch_namespaced_pod_status("cond", "default", {"status": {"conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]}})
    out = v1.patch_namespaced_pod_status("cond", "default", {"metadata": {"uid": uid}, "status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    assert [(c.type, c.status) for c in out.status.conditions] == [("PodScheduled", "True"), ("Ready", "True")]
    with pytest.raises(ApiException) as info:
        v1.patch_namespaced_pod_status("cond", "default", {"metadata": {"uid": "not-" + uid}, "status": {}})
    assert info.value.status == 422


@pytest.mark.parametrize("policy", ["Never", "OnFailure"])
def test_init_container_state_transitions_as_the_real_server(v1: client.CoreV1Api, policy: str) -> None:
    """ValidateInitContainerStateTransition: a plain init container that terminated (exit 0) may not
    run again (422, the old status's index in the path); a native sidecar (restartPolicy Always) may."""
    name = f"initx-{policy.lower()}"
    v1.create_namespaced_pod("default", pod(name, node="hpk", restartPolicy=policy, initContainers=[
        {"name": "setup", "image": "busybox:1.36"},
        {"name": "side", "image": "busybox:1.36", "restartPolicy": "Always"}]))

    def statuses(setup: dict[str, Any], side: dict[str, Any]) -> dict[str, Any]:
        return {"status": {"initContainerStatuses": [
            {"name": n, "state": st, "ready": False, "restartCount": 0, "image": "busybox:1.36", "imageID": ""}
            for n, st in (("setup", setup), ("side", side))]}}

    done, crashed, running = {"terminated": {"exitCode": 0}}, {"terminated": {"exitCode": 1}}, {"running": {}}
    v1.patch_namespaced_pod_status(name, "default", statuses(done, crashed))
    out = v1.patch_namespaced_pod_status(name, "default", statuses(done, running))  # the sidecar restarted
    assert out.status.init_container_statuses[1].state.running is not None
    with pytest.raises(ApiException) as info:
        v1.patch_namespaced_pod_status(name, "default", statuses(running, running))
    assert info.value.status == 422
    assert "status.initContainerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state" \
        in info.value.body


def test_kubelet_final_delete_with_uid_precondition(v1: client.CoreV1Api) -> None:
    p = v1.create_namespaced_pod("default", pod("gone", node="hpk"))
    v1.delete_namespaced_pod("gone", "default")
    assert v1.read_namespaced_pod("gone", "default").metadata.deletion_grace_period_seconds == 30
    with pytest.raises(ApiException) as info:
        v1.delete_namespaced_pod("gone", "default", grace_period_seconds=0, body={"preconditions": {"uid": "x"}})
    assert info.value.status == 409
    v1.delete_namespaced_pod("gone", "default", grace_period_seconds=0,
                             body={"preconditions": {"uid": p.metadata.uid}})
    with pytest.raises(ApiException) as info:
        v1.read_namespaced_pod("gone", "default")
    assert info.value.status == 404


def test_lease_microtime_must_have_six_digits(kube: KubeApi) -> None:
    api_client = config.new_client_from_config(config_file=str(kube.kubeconfig))
    coord = client.CoordinationV1Api(api_client)
    body = {"metadata": {"name": "mt"}, "spec": {"holderIdentity": "hpk", "leaseDurationSeconds": 40,
                                                "renewTime": "2026-11-24T10:00:00.123456Z"}}
    lease = coord.create_namespaced_lease("kube-node-lease", body)
    assert lease.spec.renew_time == datetime(2026, 11, 24, 10, 0, 0, 123456, tzinfo=timezone.utc)
    # kubernetes 37 serialises a whole-second datetime as "...T10:00:10+00:00" (no fraction):
    # the real MicroTime parser refuses it (kubelet-api.md 1.2), so the stand-in does too
    lease.spec.renew_time = datetime(2026, 11, 24, 10, 0, 10, tzinfo=timezone.utc)
    with pytest.raises(ApiException) as info:
        coord.replace_namespaced_lease("mt", "kube-node-lease", lease)
    assert info.value.status == 400
    assert json.loads(info.value.body)["message"].endswith('cannot parse "+00:00" as ".000000"')
    lease.spec.renew_time = datetime(2026, 11, 24, 10, 0, 10, 1, tzinfo=timezone.utc)
    out = coord.replace_namespaced_lease("mt", "kube-node-lease", lease)
    assert int(out.metadata.resource_version) > int(lease.metadata.resource_version)
    lease.spec.renew_time = datetime(2026, 11, 24, 10, 0, 20, 1, tzinfo=timezone.utc)
    with pytest.raises(ApiException) as info:  # lease still carries the old resourceVersion
        coord.replace_namespaced_lease("mt", "kube-node-lease", lease)
    assert info.value.status == 409
    api_client.close()


def test_token_request(v1: client.CoreV1Api) -> None:
    out = v1.create_namespaced_service_account_token("default", "default", {
        "spec": {"audiences": ["hpk"], "expirationSeconds": 3600}})
    assert out.status.token.count(".") == 2 and out.status.expiration_timestamp > datetime.now(timezone.utc)


def test_logs_and_exec_through_the_kubelet(v1: client.CoreV1Api, kubelet: FakeKubelet) -> None:
    v1.create_namespaced_pod("default", pod("talk", node="hpk"))
    assert v1.read_namespaced_pod_log("talk", "default", tail_lines=2) == "c line 0\nc line 1\nc line 2\n"
    r = v1.read_namespaced_pod_log("talk", "default", follow=True, _preload_content=False)
    lines = [line for line in r.stream()]
    assert b"".join(lines) == b"".join(f"c line {i}\n".encode() for i in range(5))
    out = stream(v1.connect_get_namespaced_pod_exec, "talk", "default", command=["echo", "hi"],
                 stderr=True, stdin=False, stdout=True, tty=False)
    assert out == "echo hi\n"


def test_restart_keeps_objects_and_resource_versions_grow(tmp_path: Path) -> None:
    port = free_port()
    api = start(tmp_path / "state", port=port)
    try:
        code, cm = api.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "keep"}, "data": {"a": "1"}})
        assert code == 201
        rv_before = int(cm["metadata"]["resourceVersion"])
        api.stop(signal.SIGTERM)
        api.start()
        code, again = api.get("/api/v1/namespaces/default/configmaps/keep")
        assert (code, again["metadata"]["uid"], again["data"]) == (200, cm["metadata"]["uid"], {"a": "1"})
        events = api.watch("/api/v1/namespaces/default/configmaps", {"resourceVersion": str(rv_before)}, seconds=2)
        assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
        code, upd = api.patch("/api/v1/namespaces/default/configmaps/keep", {"data": {"a": "2"}})
        assert int(upd["metadata"]["resourceVersion"]) > rv_before + 1000
        time.sleep(0.6)  # the snapshot is written 0.2 s after a write (--snapshot-delay)
        api.stop(signal.SIGKILL)
        api.start()
        code, after_kill = api.get("/api/v1/namespaces/default/configmaps/keep")
        assert after_kill["data"] == {"a": "2"}
        lst = api.get("/api/v1/namespaces/default/configmaps")[1]
        assert int(lst["metadata"]["resourceVersion"]) > int(upd["metadata"]["resourceVersion"])
    finally:
        api.stop()

"""Probes: Kubernetes' validation rules, the plan (defaults, named ports, request targets) and how the
script carries them (one array per probe in <function>_probes); the status read back from the files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpkctl.errors import PodError
from hpkctl.pod import render_pod
from hpkctl.pod.probes import request_target
from hpkctl.pod.status import read_pod_status
from hpkctl.pod.translate import plan_pod
from hpkctl.pod.validation import PodValidationError, unhonoured_fields, validate_pod
from tests.support.pods import make_profile, pod_doc

PROFILE = make_profile()


def _pod(init: bool = False, **container: Any) -> dict[str, Any]:
    c = {"name": "c", "image": "busybox:1.36", "ports": [{"name": "http", "containerPort": 8080}], **container}
    spec: dict[str, Any] = {"containers": [c]}
    if init:
        spec = {"initContainers": [c], "containers": [{"name": "m", "image": "busybox:1.36"}]}
    return pod_doc(spec)


def _problems(pod: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(PodValidationError) as err:
        validate_pod(pod, source="p")
    return [(p.path, p.message) for p in err.value.problems]


@pytest.mark.parametrize("probe, kind, path, message", [
    ({}, "livenessProbe", "spec.containers[0].livenessProbe", "must specify a handler type"),
    ({"exec": {"command": ["true"]}, "tcpSocket": {"port": 1}}, "readinessProbe",
     "spec.containers[0].readinessProbe", "may not specify more than 1 handler type"),
    ({"exec": {"command": []}}, "startupProbe", "spec.containers[0].startupProbe.exec.command", "required"),
    ({"exec": {"command": ["true"]}, "successThreshold": 2}, "livenessProbe",
     "spec.containers[0].livenessProbe.successThreshold", "must be 1"),
    ({"exec": {"command": ["true"]}, "successThreshold": 3}, "startupProbe",
     "spec.containers[0].startupProbe.successThreshold", "must be 1"),
    ({"exec": {"command": ["true"]}, "periodSeconds": -1}, "readinessProbe",
     "spec.containers[0].readinessProbe.periodSeconds", "must be greater than or equal to 0"),
    ({"exec": {"command": ["true"]}, "failureThreshold": -2}, "readinessProbe",
     "spec.containers[0].readinessProbe.failureThreshold", "must be greater than or equal to 0"),
    ({"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": 0}, "livenessProbe",
     "spec.containers[0].livenessProbe.terminationGracePeriodSeconds", "must be greater than 0"),
    ({"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": 5}, "readinessProbe",
     "spec.containers[0].readinessProbe.terminationGracePeriodSeconds", "must not be set for readinessProbes"),
    ({"httpGet": {"port": 0}}, "readinessProbe", "spec.containers[0].readinessProbe.httpGet.port",
     "must be between 1 and 65535, inclusive"),
    ({"tcpSocket": {"port": 70000}}, "readinessProbe", "spec.containers[0].readinessProbe.tcpSocket.port",
     "must be between 1 and 65535, inclusive"),
    ({"httpGet": {"port": "metrics"}}, "readinessProbe", "spec.containers[0].readinessProbe.httpGet.port",
     "name of one of the container's ports"),
    ({"httpGet": {"port": 80, "scheme": "FTP"}}, "readinessProbe",
     "spec.containers[0].readinessProbe.httpGet.scheme", "'HTTP' or 'HTTPS'"),
    ({"httpGet": {"port": 80, "httpHeaders": [{"name": "X Y", "value": "v"}]}}, "readinessProbe",
     "spec.containers[0].readinessProbe.httpGet.httpHeaders[0].name", "HTTP header name"),
    ({"httpGet": {"port": 80, "httpHeaders": [{"name": "X", "value": "a\r\nEvil: 1"}]}}, "readinessProbe",
     "spec.containers[0].readinessProbe.httpGet.httpHeaders[0].value", "line break"),
    ({"httpGet": {"port": 80, "host": "a/b"}}, "readinessProbe",
     "spec.containers[0].readinessProbe.httpGet.host", "an IP address or a host name"),
    ({"tcpSocket": {"port": "nope"}}, "livenessProbe", "spec.containers[0].livenessProbe.tcpSocket.port",
     "name of one of the container's ports"),
    ({"sleep": {"seconds": 1}}, "livenessProbe", "spec.containers[0].livenessProbe.sleep", "is not supported here"),
])
def test_kubernetes_rules(probe: dict[str, Any], kind: str, path: str, message: str) -> None:
    problems = _problems(_pod(**{kind: probe}))
    assert any(p == path and message in m for p, m in problems), problems


def test_probes_on_init_containers_only_for_sidecars() -> None:
    problems = _problems(_pod(init=True, readinessProbe={"exec": {"command": ["true"]}}))
    assert problems == [("spec.initContainers[0].readinessProbe",
                         "may not be set for init containers without restartPolicy=Always")]
    validate_pod(_pod(init=True, restartPolicy="Always", readinessProbe={"exec": {"command": ["true"]}}), source="p")


def test_probes_are_honoured_not_warned() -> None:
    pod = _pod(livenessProbe={"exec": {"command": ["true"]}}, readinessProbe={"httpGet": {"port": "http"}},
               startupProbe={"tcpSocket": {"port": 8080}})
    assert unhonoured_fields(pod) == []


def test_grpc_is_refused_naming_the_field_and_the_fix() -> None:
    with pytest.raises(PodError) as err:
        plan_pod(_pod(livenessProbe={"grpc": {"port": 9090}}), PROFILE)
    assert err.value.reason == "UnsupportedProbe"
    assert str(err.value).startswith("spec.containers[0].livenessProbe.grpc: gRPC probes are not run")
    assert "exec probe" in err.value.hint and "tcpSocket" in err.value.hint


def test_plan_defaults_zero_values_and_resolves_named_ports() -> None:
    pod = _pod(readinessProbe={"httpGet": {"port": "http"}, "periodSeconds": 0},
               livenessProbe={"tcpSocket": {"port": 9000, "host": "10.1.2.3"}, "initialDelaySeconds": 4,
                              "periodSeconds": 2, "timeoutSeconds": 3, "failureThreshold": 5,
                              "terminationGracePeriodSeconds": 7})
    live, ready = plan_pod(pod, PROFILE).containers[0].probes
    assert (live.kind, live.delay, live.period, live.timeout, live.success, live.failure, live.grace) == \
        ("liveness", 4, 2, 3, 1, 5, 7)
    assert live.handler == "tcp" and live.args == (("10.1.2.3",), ("9000",))
    assert (ready.kind, ready.period, ready.timeout, ready.success, ready.failure, ready.grace) == \
        ("readiness", 10, 1, 1, 3, None)
    assert ready.handler == "http" and ready.args[2:4] == (("8080",), ("/",))


@pytest.mark.parametrize("path, target", [
    (None, "/"), ("", "/"), ("healthz", "/healthz"), ("/a/../b?x=1&y=%20", "/a/../b?x=1&y=%20"),
    ("/a b", "/a%20b"), ("/\u00e9", "/%C3%A9"), ("/\t", "/%09"),
])
def test_request_target(path: str | None, target: str) -> None:
    assert request_target(path) == target


def test_the_script_holds_one_array_per_probe() -> None:
    pod = _pod(startupProbe={"exec": {"command": ["cat", "/tmp/it's here"]}, "failureThreshold": 30},
               readinessProbe={"httpGet": {"port": "http", "path": "/ready", "httpHeaders": [
                   {"name": "X-Token", "value": "$(id) `id` 'q'"}]}})
    script = render_pod(pod, PROFILE).script
    assert "hpk_main_0_exec() {" in script
    assert ("  local -a probe_startup=(0 10 1 1 30 '' exec cat '/tmp/it'\"'\"'s here')\n"
            "  local -a probe_readiness=(0 10 1 1 3 '' http HTTP \"$HPK_POD_IP\" 8080 /ready X-Token "
            "'$(id) `id` '\"'\"'q'\"'\"'')\n"
            '  hpk_probes c hpk_main_0 "$1" startup readiness\n') in script


def test_pods_without_probes_get_no_probe_function() -> None:
    assert "hpk_main_0_probes()" not in render_pod(_pod(), PROFILE).script


# --- status: ready, started, conditions, READY n/m -----------------------------------------------------
def _status_dir(tmp_path: Path, spec: dict[str, Any], files: dict[str, str]) -> Path:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "pod.json").write_text(json.dumps({"spec": spec}))
    (tmp_path / "status").mkdir()
    for name, value in files.items():
        (tmp_path / "status" / name).write_text(value + "\n")
    return tmp_path


SPEC = {"initContainers": [{"name": "side", "image": "b", "restartPolicy": "Always",
                            "startupProbe": {"exec": {"command": ["true"]}}}],
        "containers": [{"name": "web", "image": "b", "readinessProbe": {"httpGet": {"port": 80}}},
                       {"name": "plain", "image": "b"}]}
NAMES = [("side", True), ("web", False), ("plain", False)]
RUNNING = {"job.started": "2026-01-01T00:00:00Z", "pod.ip": "10.0.0.5", "side.started": "2026-01-01T00:00:01Z",
           "web.started": "2026-01-01T00:00:02Z", "plain.started": "2026-01-01T00:00:02Z", "plain.ready": "1"}


def test_not_ready_until_the_probes_pass(tmp_path: Path) -> None:
    st = read_pod_status(_status_dir(tmp_path, SPEC, {**RUNNING, "web.ready": "0"}), NAMES, None, job_known=False)
    side, web, plain = st.containers
    assert (side.started, side.ready, web.started, web.ready, plain.ready) == (False, False, True, False, True)
    assert st.ready_count() == "1/3"
    conds = {c["type"]: c for c in st.as_k8s()["conditions"]}
    assert conds["Ready"] == {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                              "message": "containers with unready status: [side web]"}
    assert conds["ContainersReady"]["status"] == "False"
    assert conds["Initialized"]["status"] == "True" and conds["PodScheduled"]["status"] == "True"
    assert conds["PodReadyToStartContainers"]["status"] == "True"
    k8s = st.as_k8s()
    assert k8s["containerStatuses"][0]["ready"] is False and k8s["containerStatuses"][0]["started"] is True


def test_ready_when_every_probe_passed(tmp_path: Path) -> None:
    files = {**RUNNING, "web.ready": "1", "side.ready": "1", "side.started-probe": "2026-01-01T00:00:03Z"}
    st = read_pod_status(_status_dir(tmp_path, SPEC, files), NAMES, None, job_known=False)
    assert st.ready_count() == "3/3"
    assert {c["type"]: c["status"] for c in st.conditions()} == {
        "PodReadyToStartContainers": "True", "Initialized": "True", "Ready": "True", "ContainersReady": "True",
        "PodScheduled": "True"}


def test_a_started_probe_file_of_the_run_before_a_restart_is_stale(tmp_path: Path) -> None:
    files = {**RUNNING, "side.started-probe": "2026-01-01T00:00:00Z", "side.ready": "1",
             "side.last-probe-kill": "Startup probe failed: no"}
    st = read_pod_status(_status_dir(tmp_path, SPEC, files), NAMES, None, job_known=False)
    side = st.containers[0]
    assert (side.started, side.ready, side.probe_kill) == (False, False, "Startup probe failed: no")


def test_pending_pod_conditions(tmp_path: Path) -> None:
    st = read_pod_status(_status_dir(tmp_path, SPEC, {}), NAMES, None, job_known=False)
    conds = {c["type"]: c for c in st.conditions()}
    assert conds["PodScheduled"] == {"type": "PodScheduled", "status": "False", "reason": "Submitted",
                                     "message": "waiting for the job to start"}
    assert st.ready_count() == "0/3"

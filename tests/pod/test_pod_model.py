"""The typed pod model: Kubernetes' validation rules, messages naming file/document/field/value/rule,
and the property that any document ends as a rendered pod or an HpkError, never another exception."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpkctl.errors import HpkError, ManifestError
from hpkctl.local.manifest import load_manifest, pod_warnings, select_pod, with_api_defaults
from hpkctl.pod import render_pod
from hpkctl.pod.validation import PodValidationError, unhonoured_fields, validate_pod
from tests.support.pods import PODS, make_profile

PROFILE = make_profile()


def _pod(**container: Any) -> dict[str, Any]:
    c = {"name": "c", "image": "busybox:1.36", **container}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [c]}}


def _error(pod: Any) -> PodValidationError:
    with pytest.raises(PodValidationError) as err:
        validate_pod(pod, source="m.yaml: document 1 (Pod 'p')")
    return err.value


# --- the rules ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mutate, path, rule", [
    (lambda p: p["metadata"].update(name="Web_1"), "metadata.name", "DNS-1123 subdomain"),
    (lambda p: p["metadata"].update(name="a" * 254), "metadata.name", "no more than 253"),
    (lambda p: p["metadata"].update(namespace="a.b"), "metadata.namespace", "DNS-1123 label"),
    (lambda p: p["metadata"].update(namespace="../etc"), "metadata.namespace", "DNS-1123 label"),
    (lambda p: p["spec"]["containers"][0].update(name="C"), "spec.containers[0].name", "DNS-1123 label"),
    (lambda p: p["spec"]["containers"][0].update(name="a" * 64), "spec.containers[0].name", "no more than 63"),
    (lambda p: p["spec"].update(volumes=[{"name": "../v", "emptyDir": {}}]), "spec.volumes[0].name", "DNS-1123 label"),
    (lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 80, "name": "http--x"}]),
     "spec.containers[0].ports[0].name", "IANA service name"),
    (lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 80, "name": "a" * 16}]),
     "spec.containers[0].ports[0].name", "no more than 15"),
    (lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 80, "name": "123"}]),
     "spec.containers[0].ports[0].name", "at least one letter"),
    (lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 0}]),
     "spec.containers[0].ports[0].containerPort", "greater than or equal to 1"),
    (lambda p: p["spec"]["containers"][0].update(env=[{"name": "A", "valueFrom": {"configMapKeyRef": {
        "name": "cm", "key": ".."}}}]), "spec.containers[0].env[0].valueFrom.configMapKeyRef.key", "'..'"),
    (lambda p: p["spec"]["containers"][0].update(env=[{"name": "A", "valueFrom": {"secretKeyRef": {
        "name": "s", "key": "a/b"}}}]), "spec.containers[0].env[0].valueFrom.secretKeyRef.key", "ConfigMap/Secret key"),
    (lambda p: p["spec"]["containers"][0].update(env=[{"name": "my.var", "value": "1"}]),
     "spec.containers[0].env[0].name", "--env-file"),
    (lambda p: p["spec"]["containers"][0].update(resources={"requests": {"cpu": "lots"}}),
     "spec.containers[0].resources.requests[cpu]", "not a Kubernetes quantity"),
    (lambda p: p["spec"]["containers"][0].update(resources={"limits": {"memory": "-1Gi"}}),
     "spec.containers[0].resources.limits[memory]", "negative"),
    (lambda p: p["spec"]["containers"][0].update(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
     "spec.containers[0].resources.requests[cpu]", "less than or equal to cpu limit"),
    (lambda p: p["spec"]["containers"][0].update(resources={"requests": {"memory": "1e999999999"}}),
     "spec.containers[0].resources.requests[memory]", "quantity"),
    (lambda p: p["spec"].update(volumes=[{"name": "v", "emptyDir": {}}]) or p["spec"]["containers"][0].update(
        volumeMounts=[{"name": "v", "mountPath": "data"}]), "spec.containers[0].volumeMounts[0].mountPath", "absolute"),
    (lambda p: p["spec"].update(volumes=[{"name": "v", "emptyDir": {}}]) or p["spec"]["containers"][0].update(
        volumeMounts=[{"name": "v", "mountPath": "/d", "subPath": "a/../../x"}]),
     "spec.containers[0].volumeMounts[0].subPath", "'..'"),
    (lambda p: p["spec"].update(volumes=[{"name": "v", "emptyDir": {}}]) or p["spec"]["containers"][0].update(
        volumeMounts=[{"name": "v", "mountPath": "/d", "subPath": "/abs"}]),
     "spec.containers[0].volumeMounts[0].subPath", "relative"),
    (lambda p: p["spec"]["containers"][0].update(volumeMounts=[{"name": "nope", "mountPath": "/d"}]),
     "spec.containers[0].volumeMounts[0].name", "no volume of that name"),
    (lambda p: p["spec"].update(initContainers=[{"name": "c", "image": "x"}]),
     "spec.containers[0].name", "duplicate container name (also spec.initContainers[0].name)"),
    (lambda p: p["spec"].update(volumes=[{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]),
     "spec.volumes[1].name", "duplicate volume name"),
    (lambda p: p["spec"].update(volumes=[{"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}}]),
     "spec.volumes[0]", "more than 1 volume type"),
    (lambda p: p["spec"].update(volumes=[{"name": "v", "configMap": {"name": "c", "items": [
        {"key": "k", "path": "..data"}]}}]), "spec.volumes[0].configMap.items[0].path", "start with '..'"),
    (lambda p: p["spec"].update(volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "../../etc"}}]),
     "spec.volumes[0].persistentVolumeClaim.claimName", "DNS-1123 subdomain"),
    (lambda p: p["spec"].update(hostAliases=[{"ip": "1.2.3.4", "hostnames": ["a\nb"]}]),
     "spec.hostAliases[0].hostnames[0]", "DNS-1123 subdomain"),
    (lambda p: p["spec"].update(restartPolicy="Sometimes"), "spec.restartPolicy", "'Always', 'OnFailure' or 'Never'"),
    (lambda p: p["spec"]["containers"][0].update(command="sh -c x"), "spec.containers[0].command",
     "must be a list of strings"),
    (lambda p: p["spec"]["containers"][0].update(args=["a\0b"]), "spec.containers[0].args[0]", "NUL"),
    (lambda p: p["metadata"].update(annotations={"a": 1}), "metadata.annotations[a]", "must be a string"),
])
def test_api_server_rules(mutate: Any, path: str, rule: str) -> None:
    pod = _pod()
    mutate(pod)
    err = _error(pod)
    assert any(p.path == path for p in err.problems), err.message
    assert rule in err.message
    assert err.message.startswith("m.yaml: document 1 (Pod 'p'): ")


def test_message_names_file_document_field_value_rule_and_fix(tmp_path: Path) -> None:
    f = tmp_path / "job.yaml"
    f.write_text("kind: ConfigMap\nmetadata: {name: cm}\ndata: {k: v}\n---\n"
                 "apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}\nspec:\n  template:\n    spec:\n"
                 "      volumes: [{name: v, emptyDir: {}}]\n      containers:\n"
                 "      - {name: a, image: x}\n"
                 "      - {name: b, image: x, volumeMounts: [{name: v, mountPath: /v, subPath: ../up}]}\n")
    with pytest.raises(ManifestError) as err:
        select_pod(load_manifest(f))
    text = str(err.value)
    assert text.startswith(f"{f}: document 2 (Job 'train'): spec.template.spec.containers[1].volumeMounts[0]"
                           ".subPath: '../up': must not contain '..'")
    assert "fix:" not in text or "\n  fix: " in text


def test_all_problems_are_listed_at_once() -> None:
    pod = _pod(name="A", image="")
    err = _error(pod)
    assert "2 problems" in err.message and "spec.containers[0].name" in err.message
    assert "spec.containers[0].image" in err.message


def test_unknown_fields_are_allowed_but_modelled_ones_typed() -> None:
    pod = _pod(someFutureField={"x": 1})
    pod["spec"]["futureSpecField"] = [1, 2]
    validate_pod(pod, source="s")
    pod["spec"]["containers"][0]["stdin"] = "yes"
    assert "spec.containers[0].stdin" in _error(pod).message


def test_every_example_pod_is_valid() -> None:
    for path in sorted(PODS.glob("*.yaml")):
        select_pod(load_manifest(path))


def test_configmap_and_secret_objects_are_validated(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("kind: Secret\nmetadata: {name: s}\ndata: {pw: 'not base64!'}\n")
    with pytest.raises(ManifestError, match=r"document 1 \(Secret 's'\): data\[pw\]|data.pw"):
        load_manifest(f)
    f.write_text("kind: ConfigMap\nmetadata: {name: c}\ndata: {'../x': v}\n")
    with pytest.raises(ManifestError, match="ConfigMap/Secret key"):
        load_manifest(f)


def test_the_translator_gets_a_pod_error_with_a_reason() -> None:
    """The kubelet path (no file): plan_pod validates too; a bad volume is InvalidVolume."""
    from hpkctl.errors import PodError
    from tests.support.pods import pod_doc

    pod = pod_doc({"containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "rel"}]}],
                   "volumes": [{"name": "v", "emptyDir": {}}]})
    with pytest.raises(PodError) as err:
        render_pod(pod, PROFILE)
    assert err.value.reason == "InvalidVolume" and "volumeMounts[0].mountPath" in str(err.value)


# --- nothing silently ignored (issue 8, requirement 8) ----------------------------------------------------
@pytest.mark.parametrize("where, field, value", [
    ("container", "lifecycle.stopSignal", {"stopSignal": "SIGUSR1"}),
    ("container", "stdin", True),
    ("container", "tty", True),
    ("spec", "nodeSelector", {"gpu": "a100"}),
    ("spec", "tolerations", [{"key": "k", "operator": "Exists"}]),
    ("spec", "affinity", {"nodeAffinity": {}}),
    ("spec", "topologySpreadConstraints", [{"maxSkew": 1}]),
    ("spec", "priorityClassName", "high"),
    ("spec", "hostNetwork", True),
])
def test_unhonoured_pod_fields_warn_naming_the_field(where: str, field: str, value: Any) -> None:
    pod = _pod()
    (pod["spec"]["containers"][0] if where == "container" else pod["spec"])[field.split(".")[0]] = value
    validate_pod(pod, source="s")
    warnings = render_pod(with_api_defaults(pod), PROFILE, strict=False).warnings
    path = f"spec.containers[0].{field}" if where == "container" else f"spec.{field}"
    assert any(w.startswith(f"{path}:") for w in warnings), warnings


def test_host_port_warns_and_honoured_lifecycle_fields_do_not() -> None:
    pod = _pod(ports=[{"containerPort": 80, "hostPort": 8080}],
               lifecycle={"preStop": {"sleep": {"seconds": 1}}}, terminationMessagePolicy="FallbackToLogsOnError",
               livenessProbe={"exec": {"command": ["true"]}}, readinessProbe={"httpGet": {"port": 80}},
               startupProbe={"tcpSocket": {"port": 80}})
    pod["spec"]["initContainers"] = [{"name": "side", "image": "x", "restartPolicy": "Always"}]
    pod["spec"]["terminationGracePeriodSeconds"] = 5
    warnings = unhonoured_fields(pod)
    assert any(w.startswith("spec.containers[0].ports[0].hostPort:") for w in warnings)
    assert len(warnings) == 1, warnings


def test_api_server_defaults_do_not_warn() -> None:
    m = load_manifest(PODS / "api-server-shape.yaml")
    assert unhonoured_fields(select_pod(m)) == []
    assert unhonoured_fields(with_api_defaults(_pod())) == []


@pytest.mark.parametrize("doc, expected", [
    # honoured since issue 9 (hpkctl.local.workload): no warning
    ("kind: Job\nmetadata: {name: j}\nspec: {backoffLimit: 3, template: {spec: {containers: [{name: c, image: x}]}}}",
     []),
    ("kind: Job\nmetadata: {name: j}\nspec: {completions: 4, parallelism: 2, activeDeadlineSeconds: 60, "
     "template: {spec: {containers: [{name: c, image: x}]}}}", []),
    ("kind: Deployment\nmetadata: {name: d}\nspec: {replicas: 3, template: {spec: {containers: [{name: c, image: x}]}}}",
     []),
    ("kind: CronJob\nmetadata: {name: cj}\nspec: {schedule: '*/5 * * * *', jobTemplate: {spec: {backoffLimit: 1, "
     "template: {spec: {containers: [{name: c, image: x}]}}}}}", []),
    # not honoured: named
    ("kind: Job\nmetadata: {name: j}\nspec: {ttlSecondsAfterFinished: 100, suspend: true, "
     "template: {spec: {containers: [{name: c, image: x}]}}}",
     ["spec.ttlSecondsAfterFinished: 100 is not honoured", "spec.suspend: true is not honoured"]),
    ("kind: Deployment\nmetadata: {name: d}\nspec: {replicas: 2, strategy: {type: Recreate}, "
     "template: {spec: {containers: [{name: c, image: x}]}}}", ["spec.strategy: "]),
    ("kind: StatefulSet\nmetadata: {name: s}\nspec: {replicas: 2, podManagementPolicy: OrderedReady, "
     "template: {spec: {containers: [{name: c, image: x}]}}}",
     ["spec.podManagementPolicy: 'OrderedReady' is not honoured: the pods start together"]),
    ("kind: StatefulSet\nmetadata: {name: s}\nspec: {replicas: 2, podManagementPolicy: Parallel, "
     "template: {spec: {containers: [{name: c, image: x}]}}}", []),
])
def test_unhonoured_workload_fields_warn(tmp_path: Path, doc: str, expected: list[str]) -> None:
    f = tmp_path / "w.yaml"
    f.write_text(doc)
    m = load_manifest(f)
    warnings = pod_warnings(m, select_pod(m))
    assert len(warnings) == len(expected), warnings
    for want in expected:
        assert any(want in w for w in warnings), (want, warnings)


def test_render_cli_prints_workload_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hpkctl.cli import main

    f = tmp_path / "w.yaml"
    f.write_text("kind: Job\nmetadata: {name: j}\nspec: {ttlSecondsAfterFinished: 2, template: {spec: {containers: "
                 "[{name: c, image: x, stdin: true}]}}}\n")
    main(["render", "-f", str(f), "--site", "ci"])
    err = capsys.readouterr().err
    assert "hpkctl: warning: spec.ttlSecondsAfterFinished: 2 is not honoured" in err
    assert "hpkctl: warning: spec.containers[0].stdin: not honoured" in err


# --- HOSTNAME (issue 8, requirement 10) ----------------------------------------------------------------
@pytest.mark.parametrize("spec_extra, expected", [({}, "p"), ({"hostname": "node-a"}, "node-a")])
def test_hostname_in_the_env_file_is_the_pods(spec_extra: dict[str, Any], expected: str) -> None:
    pod = _pod()
    pod["spec"].update(spec_extra)
    r = render_pod(with_api_defaults(pod), PROFILE, strict=False)
    assert f"HOSTNAME={expected}\n" in r.files["env/c.env"][0].decode()


def test_explicit_hostname_env_wins() -> None:
    pod = _pod(env=[{"name": "HOSTNAME", "value": "mine"}])
    r = render_pod(with_api_defaults(pod), PROFILE, strict=False)
    assert "HOSTNAME=mine\n" in r.files["env/c.env"][0].decode()


# --- the property: a rendered pod or an HpkError, nothing else ----------------------------------------
_HOSTILE = st.sampled_from(["", ".", "..", "../..", "/", "/etc/passwd", "a/../../b", "$(id)", "`id`", "'", '"',
                            "a'b\"c", "\n", "x\ny", "\0", "é", "💥", "--output=/tmp/x", "${HOME}", "a:b,c",
                            "-1", "1e999999", "0.0000001m", "C", "a" * 300, "Always", "IfNotPresent", "true"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                     st.text(max_size=20), _HOSTILE)
_KEYS = st.one_of(st.sampled_from(["name", "image", "command", "args", "env", "value", "valueFrom", "volumes",
                                   "volumeMounts", "mountPath", "subPath", "subPathExpr", "containers", "spec",
                                   "metadata", "kind", "resources", "requests", "limits", "cpu", "memory",
                                   "emptyDir", "hostPath", "configMap", "items", "key", "path", "ports"]),
                  st.text(max_size=8))
_ANY = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(_KEYS, inner, max_size=5)), max_leaves=25)


def _example_pods() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(PODS.glob("*.yaml")):
        docs.append([d for d in yaml.safe_load_all(path.read_text()) if d])
    return docs  # type: ignore[return-value]


_EXAMPLES = _example_pods()


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def _mutated(draw: st.DrawFn) -> list[Any]:
    docs = copy.deepcopy(draw(st.sampled_from(_EXAMPLES)))
    for _ in range(draw(st.integers(1, 4))):
        d = draw(st.integers(0, len(docs) - 1))
        paths = [p for p in _paths(docs[d]) if p]
        if not paths:
            continue
        path = draw(st.sampled_from(paths))
        parent = docs[d]
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["delete", "replace", "hostile"]))
        if op == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(_HOSTILE if op == "hostile" else _ANY)
    return docs


def _through_render(tmp_path: Path, docs: list[Any], *, as_json: bool) -> None:
    f = tmp_path / ("m.json" if as_json else "m.yaml")
    if as_json:
        f.write_text(json.dumps(docs[0] if len(docs) == 1 else {"kind": "List", "items": docs}, default=str))
    else:
        f.write_text(yaml.safe_dump_all(docs, allow_unicode=True))
    try:
        m = load_manifest(f)
        pod = select_pod(m, None)
        pod = with_api_defaults(pod)
        render_pod(pod, PROFILE, objects=m.objects, strict=False, services=m.services)
    except HpkError:
        pass


_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                             HealthCheck.too_slow])


@_SETTINGS
@given(docs=_mutated(), as_json=st.booleans())
def test_mutated_pods_render_or_fail_with_hpk_error(tmp_path: Path, docs: list[Any], as_json: bool) -> None:
    _through_render(tmp_path, docs, as_json=as_json)


@_SETTINGS
@given(docs=st.lists(_ANY, min_size=1, max_size=3), as_json=st.booleans())
def test_arbitrary_documents_render_or_fail_with_hpk_error(tmp_path: Path, docs: list[Any], as_json: bool) -> None:
    _through_render(tmp_path, docs, as_json=as_json)


@_SETTINGS
@given(spec=st.dictionaries(_KEYS, _ANY, max_size=6), container=st.dictionaries(_KEYS, _ANY, max_size=6))
def test_arbitrary_pod_shapes_render_or_fail_with_hpk_error(tmp_path: Path, spec: dict[str, Any],
                                                            container: dict[str, Any]) -> None:
    pod = {"kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "x", **container}], **spec}}
    _through_render(tmp_path, [pod], as_json=False)

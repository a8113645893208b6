"""Admission policies in the Kubernetes API stand-in (ci/standin/kubeapi/policies.py): what it evaluates
the way kube-apiserver 1.36 does (JSONPatch mutations, validations with Deny/Warn, failurePolicy,
matchConditions, the place in the admission chain), and what it refuses instead of ignoring."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kubeapi import KubeApi, start

pytestmark = pytest.mark.standin
AR = "/apis/admissionregistration.k8s.io/v1"
NS = "/api/v1/namespaces/default"


@pytest.fixture
def kube() -> Iterator[KubeApi]:
    d = Path(tempfile.mkdtemp(prefix="kubeapi-policies-"))
    api = start(d / "state", "--no-persist")
    try:
        yield api
    finally:
        api.stop()
        shutil.rmtree(d, ignore_errors=True)


def _ok(kube: KubeApi, path: str, body: dict[str, Any]) -> dict[str, Any]:
    code, out = kube.post(path, body)
    assert code == 201, out
    return out


def _rules(resource: str, *ops: str) -> dict[str, Any]:
    return {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": [resource],
                               "operations": list(ops)}]}


def _mutating(kube: KubeApi, name: str, expression: str, *, conditions: list[str] = (),  # type: ignore[assignment]
              failure: str = "Fail", resource: str = "configmaps") -> None:
    _ok(kube, f"{AR}/mutatingadmissionpolicies", {
        "metadata": {"name": name},
        "spec": {"matchConstraints": _rules(resource, "CREATE"), "failurePolicy": failure,
                 "reinvocationPolicy": "Never",
                 "matchConditions": [{"name": f"c{i}", "expression": c} for i, c in enumerate(conditions)],
                 "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]}})
    _ok(kube, f"{AR}/mutatingadmissionpolicybindings", {"metadata": {"name": name}, "spec": {"policyName": name}})


def _cm(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": dict(data)}


def test_jsonpatch_mutation_with_match_conditions(kube: KubeApi) -> None:
    _mutating(kube, "label", "[JSONPatch{op: 'add', path: '/data/added', value: object.metadata.name + '!'}]",
              conditions=["has(object.data) && 'mark' in object.data"])
    assert _ok(kube, f"{NS}/configmaps", _cm("a", mark="1"))["data"] == {"mark": "1", "added": "a!"}
    assert _ok(kube, f"{NS}/configmaps", _cm("b", other="1"))["data"] == {"other": "1"}  # condition false
    # only CREATE was asked for: an update is left alone
    code, out = kube.put(f"{NS}/configmaps/c", {**_ok(kube, f"{NS}/configmaps", _cm("c", x="1")), "data": {"mark": "2"}})
    assert code == 200 and out["data"] == {"mark": "2"}


def test_failure_policy_on_a_runtime_error(kube: KubeApi) -> None:
    _mutating(kube, "broken", "[JSONPatch{op: 'add', path: '/data/x', value: object.data.missing}]")
    code, out = kube.post(f"{NS}/configmaps", _cm("a", k="v"))
    assert code == 500 and "MutatingAdmissionPolicy 'broken' with binding 'broken' denied request" in out["message"]
    kube.delete(f"{AR}/mutatingadmissionpolicies/broken")
    _mutating(kube, "lenient", "[JSONPatch{op: 'add', path: '/data/x', value: object.data.missing}]", failure="Ignore")
    assert _ok(kube, f"{NS}/configmaps", _cm("b", k="v"))["data"] == {"k": "v"}


def test_validation_deny_and_warn(kube: KubeApi) -> None:
    _ok(kube, f"{AR}/validatingadmissionpolicies", {
        "metadata": {"name": "no-x"},
        "spec": {"matchConstraints": _rules("configmaps", "CREATE", "UPDATE"),
                 "validations": [{"expression": "!has(object.data) || !('x' in object.data)",
                                  "messageExpression": "'no x in ' + object.metadata.name", "reason": "Forbidden"}]}})
    _ok(kube, f"{AR}/validatingadmissionpolicybindings",
        {"metadata": {"name": "deny"}, "spec": {"policyName": "no-x", "validationActions": ["Deny"]}})
    code, out = kube.post(f"{NS}/configmaps", _cm("a", x="1"))
    assert (code, out["reason"]) == (403, "Forbidden")
    assert "ValidatingAdmissionPolicy 'no-x' with binding 'deny' denied request: no x in a" in out["message"]
    kube.delete(f"{AR}/validatingadmissionpolicybindings/deny")
    _ok(kube, f"{AR}/validatingadmissionpolicybindings",
        {"metadata": {"name": "warn"}, "spec": {"policyName": "no-x", "validationActions": ["Warn"]}})
    r = kube.session.post(kube.url + f"{NS}/configmaps", json=_cm("b", x="1"), timeout=10)
    assert r.status_code == 201
    assert "Validation failed for ValidatingAdmissionPolicy 'no-x' with binding 'warn': no x in b" in \
        r.headers["Warning"]


def test_mutation_runs_before_cluster_ip_allocation(kube: KubeApi) -> None:
    _mutating(kube, "headless", "[JSONPatch{op: 'add', path: '/spec/clusterIP', value: 'None'}]",
              conditions=["!has(object.spec.clusterIPs)"], resource="services")
    out = _ok(kube, f"{NS}/services", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    assert (out["spec"]["clusterIP"], out["spec"]["clusterIPs"]) == ("None", ["None"])


@pytest.mark.parametrize(("kind", "spec", "field"), [
    ("mutatingadmissionpolicies", {"matchConstraints": _rules("configmaps", "CREATE"), "reinvocationPolicy": "Never",
                                   "mutations": [{"patchType": "ApplyConfiguration",
                                                  "applyConfiguration": {"expression": "Object{}"}}]},
     "spec.mutations[0].patchType"),
    ("validatingadmissionpolicies", {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                                     "validations": [{"expression": "true"}]}, "spec.paramKind"),
    ("validatingadmissionpolicies", {"variables": [{"name": "v", "expression": "1"}],
                                     "validations": [{"expression": "true"}]}, "spec.variables"),
])
def test_what_it_does_not_evaluate_is_refused(kube: KubeApi, kind: str, spec: dict[str, Any], field: str) -> None:
    code, out = kube.post(f"{AR}/{kind}", {"metadata": {"name": "p"}, "spec": spec})
    assert code == 422 and field in out["message"] and "not evaluated by the kube-apiserver stand-in" in out["message"]


def test_an_expression_that_does_not_compile_is_refused(kube: KubeApi) -> None:
    code, out = kube.post(f"{AR}/validatingadmissionpolicies", {
        "metadata": {"name": "p"}, "spec": {"validations": [{"expression": "object.data.(("}]}})
    assert code == 422 and "compilation failed" in out["message"]

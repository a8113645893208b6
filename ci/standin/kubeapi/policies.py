"""MutatingAdmissionPolicy and ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``), evaluated
with cel-python (``celpy``), so a policy the control plane installs (its services rule) acts on the
stand-in as it would on kube-apiserver 1.36.

As kube-apiserver: mutating policies run at the end of the mutating admission chain (after the built-in
plugins: ServiceAccount, DefaultTolerationSeconds; before a Service's cluster IP is allocated), in the
order of their bindings' names; validating policies after the object's own validation. A binding names
its policy (``spec.policyName``); the policy's ``matchConstraints.resourceRules`` (groups, versions,
resources, operations, ``*``) choose the requests; every ``matchConditions`` expression must be true.
Mutations are JSON patches (``JSONPatch{op, path, value}`` lists); validations report
``message``/``messageExpression`` with the binding's ``validationActions``: ``Deny`` refuses
(``ValidatingAdmissionPolicy 'P' with binding 'B' denied request: ...``, code from ``reason``),
``Warn`` answers a ``Warning`` header (``Validation failed for ValidatingAdmissionPolicy 'P' with
binding 'B': ...``). A runtime error follows ``failurePolicy`` (default Fail).

CEL variables: ``object``, ``oldObject`` (null on create), ``request`` (operation, name, namespace,
kind, resource, userInfo.username). Not supported, and refused when a policy is created (422, naming
the stand-in) rather than ignored: ``ApplyConfiguration`` mutations, ``paramKind``/``paramRef``,
``variables``, a binding's ``matchResources``, ``auditAnnotations``, ``matchConstraints`` other than
``resourceRules``. The CEL is cel-python's (the CEL spec), not Kubernetes' extended library
(``quantity()``, ``url()``, ``lists``...); JSONPatch values may be strings, numbers, lists and maps.
Policies are not type-checked against the schema when created (the real server reports that in the
policy's status).
"""

from __future__ import annotations

from typing import Any

import celpy
from celpy import celtypes

from .errors import ApiError, FieldError, invalid
from .patch import json_patch
from .store import clone

MAP_KEY = "mutatingadmissionpolicies.admissionregistration.k8s.io"
MAPB_KEY = "mutatingadmissionpolicybindings.admissionregistration.k8s.io"
VAP_KEY = "validatingadmissionpolicies.admissionregistration.k8s.io"
VAPB_KEY = "validatingadmissionpolicybindings.admissionregistration.k8s.io"
_REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}

_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


class JSONPatch(celtypes.MapType):
    """``JSONPatch{op: ..., path: ..., value: ...}`` in a mutation's expression."""


def _program(expr: str) -> Any:
    prog = _PROGRAMS.get(expr)
    if prog is None:
        prog = _PROGRAMS[expr] = _ENV.program(_ENV.compile(expr))
    return prog


def _to_json(v: Any) -> Any:
    """A CEL result as plain JSON (celpy values subclass Python's bool/int/float/str/dict/list)."""
    if v is None or isinstance(v, bool):
        return v if v is None else bool(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, dict):
        return {str(k): _to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_to_json(x) for x in v]
    raise TypeError(f"CEL value of type {type(v).__name__} cannot be a JSON value")


def _evaluate(expr: str, activation: dict[str, Any]) -> Any:
    try:
        result = _program(expr).evaluate(activation)
    except celpy.CELParseError as e:
        raise _PolicyFailure(f"compilation failed: {e}") from None
    except Exception as e:  # noqa: BLE001 - celpy raises several kinds; a policy error, not a crash
        raise _PolicyFailure(f"expression {expr!r} failed: {e}") from None
    if isinstance(result, celpy.CELEvalError):
        raise _PolicyFailure(f"expression {expr!r} failed: {result.args[0] if result.args else result}")
    return result


class _PolicyFailure(Exception):
    pass


# ------------------------------------------------------------------------------ what is supported


def check_supported(kind: str, obj: dict[str, Any]) -> None:
    """422 for a policy or binding using what the stand-in does not evaluate (never silently ignored)."""
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    bad: list[str] = []
    if kind in ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"):
        bad += [f"spec.{k}" for k in ("paramKind", "variables", "auditAnnotations") if spec.get(k)]
        mc = spec.get("matchConstraints") or {}
        bad += [f"spec.matchConstraints.{k}" for k in mc if k != "resourceRules"]
        for i, m in enumerate(spec.get("mutations") or []):
            if m.get("patchType") != "JSONPatch":
                bad.append(f"spec.mutations[{i}].patchType {m.get('patchType')!r} (JSONPatch only)")
        for expr in [c.get("expression", "") for c in spec.get("matchConditions") or []] + \
                [(m.get("jsonPatch") or {}).get("expression", "") for m in spec.get("mutations") or []] + \
                [v.get(k, "") for v in spec.get("validations") or [] for k in ("expression", "messageExpression")]:
            if expr:
                try:
                    _program(expr)
                except celpy.CELParseError as e:
                    raise invalid(kind, "admissionregistration.k8s.io", name, [FieldError(
                        "FieldValueInvalid", "spec", f"compilation failed: {e}", expr)]) from None
    else:
        bad += [f"spec.{k}" for k in ("paramRef", "matchResources") if spec.get(k)]
    if bad:
        raise invalid(kind, "admissionregistration.k8s.io", name, [FieldError(
            "FieldValueNotSupported", b, "not evaluated by the kube-apiserver stand-in (ci/standin/kubeapi/policies.py)",
            None) for b in bad])


# ------------------------------------------------------------------------------ matching


def _matches(policy: dict[str, Any], *, group: str, version: str, resource: str, operation: str) -> bool:
    for rule in ((policy.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []:
        def has(field: str, value: str) -> bool:
            items = rule.get(field) or []
            return "*" in items or value in items
        if has("apiGroups", group) and has("apiVersions", version) and has("resources", resource) and \
                has("operations", operation):
            return True
    return False


def _bound(api: Any, binding_key: str, policy_key: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    pairs = []
    for b in sorted(api.store.list(binding_key), key=lambda o: o["metadata"]["name"]):
        p = api.store.get(policy_key, "", (b.get("spec") or {}).get("policyName", ""))
        if p is not None:
            pairs.append((b, p))
    return pairs


def _activation(rt: Any, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ns: str,
                user: str) -> dict[str, Any]:
    request = {"operation": operation, "name": obj["metadata"].get("name", ""), "namespace": ns,
               "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
               "resource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
               "userInfo": {"username": user}}
    return {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old) if old is not None else None,
            "request": celpy.json_to_cel(request), "JSONPatch": JSONPatch}


def _conditions_hold(policy: dict[str, Any], activation: dict[str, Any]) -> bool:
    for cond in (policy.get("spec") or {}).get("matchConditions") or []:
        if not bool(_evaluate(cond["expression"], activation)):
            return False
    return True


def _fail_open(policy: dict[str, Any]) -> bool:
    return (policy.get("spec") or {}).get("failurePolicy", "Fail") == "Ignore"


# ------------------------------------------------------------------------------ admission


def mutate(api: Any, rt: Any, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ns: str,
           user: str = "") -> dict[str, Any]:
    """``obj`` after every bound MutatingAdmissionPolicy that matches the request."""
    for binding, policy in _bound(api, MAPB_KEY, MAP_KEY):
        if not _matches(policy, group=rt.group, version=rt.version, resource=rt.plural, operation=operation):
            continue
        name = policy["metadata"]["name"]
        try:
            act = _activation(rt, operation, obj, old, ns, user)
            if not _conditions_hold(policy, act):
                continue
            for m in policy["spec"].get("mutations") or []:
                ops = _to_json(_evaluate(m["jsonPatch"]["expression"], act))
                if not isinstance(ops, list):
                    raise _PolicyFailure("a JSONPatch expression must return a list of JSONPatch values")
                obj = json_patch(obj, ops)
                act = _activation(rt, operation, obj, old, ns, user)
        except (_PolicyFailure, ApiError, TypeError) as e:
            if _fail_open(policy):
                continue
            raise ApiError(500, "InternalError", f"Internal error occurred: MutatingAdmissionPolicy '{name}' with "
                           f"binding '{binding['metadata']['name']}' denied request: {e}") from None
    return obj


def validate(api: Any, rt: Any, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ns: str,
             user: str = "") -> list[str]:
    """Warnings of the bound ValidatingAdmissionPolicies (``Warn``); ApiError for ``Deny``."""
    warnings: list[str] = []
    for binding, policy in _bound(api, VAPB_KEY, VAP_KEY):
        if not _matches(policy, group=rt.group, version=rt.version, resource=rt.plural, operation=operation):
            continue
        pname, bname = policy["metadata"]["name"], binding["metadata"]["name"]
        actions = (binding.get("spec") or {}).get("validationActions") or []
        act = _activation(rt, operation, clone(obj), old, ns, user)
        try:
            if not _conditions_hold(policy, act):
                continue
            failures = []
            for v in policy["spec"].get("validations") or []:
                if bool(_evaluate(v["expression"], act)):
                    continue
                message = v.get("message") or f"failed expression: {v['expression']}"
                if v.get("messageExpression"):
                    try:
                        message = str(_evaluate(v["messageExpression"], act))
                    except _PolicyFailure:
                        pass
                failures.append((message, v.get("reason") or "Invalid"))
        except _PolicyFailure as e:
            if _fail_open(policy):
                continue
            failures = [(str(e), "Invalid")]
        for message, reason in failures:
            if "Warn" in actions:
                warnings.append(f"Validation failed for ValidatingAdmissionPolicy '{pname}' with binding "
                                f"'{bname}': {message}")
            if "Deny" in actions:
                raise ApiError(_REASON_CODES.get(reason, 422), reason,
                               f"{rt.plural}{'.' + rt.group if rt.group else ''} "
                               f"\"{obj['metadata'].get('name', '')}\" is forbidden: ValidatingAdmissionPolicy "
                               f"'{pname}' with binding '{bname}' denied request: {message}")
    return warnings


__all__ = ["check_supported", "mutate", "validate"]

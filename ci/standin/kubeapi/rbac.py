"""SubjectAccessReview as kube-apiserver answers it with RBAC, for what the kubelet asks (its webhook
authorisation of ``nodes/proxy``, ``nodes/stats``...): ``system:masters`` is RBAC's superuser group,
then the stored ClusterRoles and ClusterRoleBindings decide; no binding, no access. Namespaced
RoleBindings are not consulted (node subresources are cluster-scoped), nor are the bootstrap roles
a real cluster creates (the stand-in stores none)."""

from __future__ import annotations

from typing import Any

SUPERUSER = "system:masters"


def _matches(values: list[str], wanted: str) -> bool:
    return "*" in values or wanted in values


def _rule_allows(rule: dict[str, Any], attrs: dict[str, Any]) -> bool:
    resource = str(attrs.get("resource", ""))
    if attrs.get("subresource"):
        resource += f"/{attrs['subresource']}"
    resources = list(rule.get("resources") or [])
    names = list(rule.get("resourceNames") or [])
    return (_matches(list(rule.get("apiGroups") or []), str(attrs.get("group", "")))
            and (_matches(resources, resource) or f"{attrs.get('resource')}/*" in resources)
            and _matches(list(rule.get("verbs") or []), str(attrs.get("verb", "")))
            and (not names or str(attrs.get("name", "")) in names))


def review(store: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """The ``status`` of a SubjectAccessReview with ``spec`` (user, groups, resourceAttributes)."""
    user, groups = str(spec.get("user", "")), list(spec.get("groups") or [])
    attrs = dict(spec.get("resourceAttributes") or {})
    if SUPERUSER in groups:
        return {"allowed": True, "reason": ""}
    roles = {r["metadata"]["name"]: r for r in store.list("clusterroles.rbac.authorization.k8s.io")}
    for binding in store.list("clusterrolebindings.rbac.authorization.k8s.io"):
        subjects = binding.get("subjects") or []
        if not any((s.get("kind") == "User" and s.get("name") == user)
                   or (s.get("kind") == "Group" and s.get("name") in groups) for s in subjects):
            continue
        role = roles.get(str((binding.get("roleRef") or {}).get("name", "")))
        if role is not None and any(_rule_allows(rule, attrs) for rule in role.get("rules") or []):
            return {"allowed": True, "reason": f'RBAC: allowed by ClusterRoleBinding "{binding["metadata"]["name"]}"'}
    return {"allowed": False, "reason": ""}

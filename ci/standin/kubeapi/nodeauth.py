"""What a kubelet's credentials may do: the Node authorizer and the NodeRestriction admission plugin.

A real control plane runs ``--authorization-mode=Node,RBAC`` with NodeRestriction, and binds no RBAC
role to ``system:nodes``: a kubelet (user ``system:node:<name>``, group ``system:nodes``) may do what
the Node authorizer allows and nothing else. The stand-in applies the same rules to node identities, so
every kubelet test also proves that the kubelet asks only for what a real API server would grant
(``pods is forbidden: User "system:node:hpk" cannot list resource "pods" ...`` otherwise). Every other
identity may still do anything (RBAC is not modelled).

Modelled on kube-apiserver 1.36 (plugin/pkg/auth/authorizer/node/node_authorizer.go with
AuthorizeNodeWithSelectors, bootstrappolicy.NodeRules, plugin/pkg/admission/noderestriction):

* pods: get one bound to the node; list/watch only with ``fieldSelector=spec.nodeName=<node>``;
  create (mirror pods only) and delete (bound to the node); ``status`` update/patch of pods bound to
  the node without changing labels; ``eviction``.
* nodes: read only its own Node; create/update/patch its own, without setting kubernetes.io labels
  outside the kubelet's set or changing taints.
* secrets, configmaps, persistentvolumeclaims: get (or list/watch by ``metadata.name``) only when a
  pod bound to the node references them (the authorizer's graph); serviceaccounts/token: create for a
  service account a pod on the node runs as, bound to that pod (uid and all).
* leases: in kube-node-lease, only the one named after the node.
* everything else: the static rules of the ``system:node`` role (services and endpoints read,
  events written, ...).

The real graph is fed by an informer and may lag a fresh binding by a moment (a kubelet then gets a
403 it must retry); here it is computed from the store, so it never lags.
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass
from typing import Any, Iterator

from .errors import ApiError, forbidden as forbidden_error

log = logging.getLogger(__name__)

NODE_GROUP = "system:nodes"
NODE_PREFIX = "system:node:"
NODE_LEASE_NAMESPACE = "kube-node-lease"

#: (user, groups) of the request being served; set by the server's middleware for the Api's admission.
CURRENT: contextvars.ContextVar[tuple[str, tuple[str, ...]]] = contextvars.ContextVar("user", default=("", ()))

_READ = ("get", "list", "watch")
#: bootstrappolicy.NodeRules(): (API group, resource[/subresource], verbs) for what the Node authorizer
#: does not subdivide itself, and what RBAC's bootstrap roles give every authenticated user.
STATIC_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("authentication.k8s.io", "tokenreviews", ("create",)),
    ("authorization.k8s.io", "subjectaccessreviews", ("create",)),
    ("authorization.k8s.io", "localsubjectaccessreviews", ("create",)),
    ("", "services", _READ),
    ("", "events", ("create", "update", "patch")),
    ("events.k8s.io", "events", ("create", "update", "patch")),
    ("", "endpoints", ("get",)),
    ("certificates.k8s.io", "certificatesigningrequests", ("create", "get", "list", "watch")),
    ("storage.k8s.io", "csidrivers", _READ),
    ("node.k8s.io", "runtimeclasses", _READ),
    # RBAC's system:basic-user, bound to every authenticated user (kubectl auth whoami / can-i)
    ("authentication.k8s.io", "selfsubjectreviews", ("create",)),
    ("authorization.k8s.io", "selfsubjectaccessreviews", ("create",)),
    ("authorization.k8s.io", "selfsubjectrulesreviews", ("create",)),
)

#: labels a kubelet may set on its Node inside the kubernetes.io / k8s.io namespaces (kubeletapis)
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region"})
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def node_identity(user: str, groups: tuple[str, ...] | list[str]) -> str | None:
    """The node a request comes from (nodeidentifier: the group and the name prefix), else None."""
    if NODE_GROUP in groups and user.startswith(NODE_PREFIX):
        return user[len(NODE_PREFIX):]
    return None


@dataclass(frozen=True)
class Request:
    verb: str  # get list watch create update patch delete deletecollection
    group: str
    resource: str
    sub: str
    namespace: str  # "" for cluster scope
    name: str
    field_selector: str = ""


def verb(method: str, name: str, query: Any) -> str:
    """The authorization verb of an HTTP request (apiserver's RequestInfoFactory)."""
    if method == "GET":
        if query.get("watch") in ("true", "1"):
            return "watch"
        return "get" if name else "list"
    if method == "DELETE" and not name:
        return "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


def _fields(selector: str) -> Iterator[tuple[str, str, str]]:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        for op in ("!=", "==", "="):
            if op in term:
                key, value = term.split(op, 1)
                yield key.strip(), "=" if op == "==" else op, value.strip()
                break


def _name_from_selector(r: Request) -> str:
    """list/watch with ``metadata.name=X`` counts as a request for X (as kube-apiserver's RequestInfo does)."""
    if r.name or r.verb not in ("list", "watch"):
        return r.name
    return next((v for k, op, v in _fields(r.field_selector) if k == "metadata.name" and op == "="), "")


# ------------------------------------------------------------------ the authorizer's graph
def _pod_references(pod: dict[str, Any]) -> dict[str, set[str]]:
    """What a pod makes its node able to read: podutil.VisitPodSecretNames/ConfigmapNames and friends."""
    spec = pod.get("spec") or {}
    refs: dict[str, set[str]] = {"secrets": set(), "configmaps": set(), "persistentvolumeclaims": set(),
                                 "serviceaccounts": {spec.get("serviceAccountName") or "default"}}
    for s in spec.get("imagePullSecrets") or []:
        refs["secrets"].add((s or {}).get("name", ""))
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
                  *(spec.get("ephemeralContainers") or [])]
    for c in containers:
        for e in c.get("envFrom") or []:
            if e.get("secretRef"):
                refs["secrets"].add(e["secretRef"].get("name", ""))
            if e.get("configMapRef"):
                refs["configmaps"].add(e["configMapRef"].get("name", ""))
        for e in c.get("env") or []:
            src = e.get("valueFrom") or {}
            if src.get("secretKeyRef"):
                refs["secrets"].add(src["secretKeyRef"].get("name", ""))
            if src.get("configMapKeyRef"):
                refs["configmaps"].add(src["configMapKeyRef"].get("name", ""))
    for v in spec.get("volumes") or []:
        if v.get("secret"):
            refs["secrets"].add(v["secret"].get("secretName", ""))
        if v.get("configMap"):
            refs["configmaps"].add(v["configMap"].get("name", ""))
        if v.get("persistentVolumeClaim"):
            refs["persistentvolumeclaims"].add(v["persistentVolumeClaim"].get("claimName", ""))
        if v.get("ephemeral"):  # the claim the ephemeral volume controller makes: <pod>-<volume>
            refs["persistentvolumeclaims"].add(f"{(pod.get('metadata') or {}).get('name', '')}-{v.get('name', '')}")
        if v.get("azureFile"):
            refs["secrets"].add(v["azureFile"].get("secretName", ""))
        if isinstance(v.get("csi"), dict) and isinstance(v["csi"].get("nodePublishSecretRef"), dict):
            refs["secrets"].add(v["csi"]["nodePublishSecretRef"].get("name", ""))
        for src in (v.get("projected") or {}).get("sources") or []:
            if src.get("secret"):
                refs["secrets"].add(src["secret"].get("name", ""))
            if src.get("configMap"):
                refs["configmaps"].add(src["configMap"].get("name", ""))
        for typed in v.values():  # csi, cephfs, rbd, iscsi, flexVolume, ...: secretRef.name
            if isinstance(typed, dict) and isinstance(typed.get("secretRef"), dict):
                refs["secrets"].add(typed["secretRef"].get("name", ""))
    return refs


def _bound_pods(store: Any, node: str, namespace: str) -> Iterator[dict[str, Any]]:
    for pod in store.list("pods.", namespace):
        if (pod.get("spec") or {}).get("nodeName") == node:
            yield pod


def _referenced(store: Any, node: str, kind: str, namespace: str, name: str) -> bool:
    return bool(name) and any(name in _pod_references(p)[kind] for p in _bound_pods(store, node, namespace))


def _pv_referenced(store: Any, node: str, name: str) -> bool:
    for pvc in store.list("persistentvolumeclaims.", None):
        meta = pvc["metadata"]
        if (pvc.get("spec") or {}).get("volumeName") == name and \
                _referenced(store, node, "persistentvolumeclaims", meta.get("namespace", ""), meta["name"]):
            return True
    return False


# ------------------------------------------------------------------ the authorizer
def authorize(store: Any, node: str, r: Request) -> tuple[bool, str]:
    """(allowed, reason) as Node,RBAC would decide with no RBAC binding for system:nodes."""
    name = _name_from_selector(r)
    gr = (r.group, r.resource)
    if gr in (("", "secrets"), ("", "configmaps")):
        if r.verb not in _READ:
            return False, "can only read resources of this type"
        if not name:
            return False, "No Object name found"
        if r.sub:
            return False, "cannot read subresource"
        return _graph(store, node, r.resource, r.namespace, name)
    if gr == ("", "persistentvolumeclaims"):
        if r.sub == "status":
            if r.verb not in ("update", "patch"):
                return False, "can only update or patch a persistentvolumeclaim status"
        elif r.verb != "get" or r.sub:
            return False, "can only get individual resources of this type"
        return _graph(store, node, r.resource, r.namespace, name)
    if gr == ("", "persistentvolumes"):
        if r.verb != "get" or r.sub or not name:
            return False, "can only get individual resources of this type"
        return (True, "") if _pv_referenced(store, node, name) else \
            (False, _no_relationship(node))
    if gr == ("", "serviceaccounts"):
        if r.verb != "create" or not name:
            return False, "can only create tokens for individual service accounts"
        if r.sub != "token":
            return False, "can only create token subresource of serviceaccount"
        return _graph(store, node, r.resource, r.namespace, name)
    if gr == ("coordination.k8s.io", "leases"):
        if r.verb not in ("get", "create", "update", "patch", "delete"):
            return False, "can only get, create, update, patch, or delete a node lease"
        if r.namespace != NODE_LEASE_NAMESPACE:
            return False, f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace'
        if r.verb != "create" and name != node:
            return False, "can only access node lease with the same name as the requesting node"
        return True, ""
    if gr == ("storage.k8s.io", "csinodes"):
        ok = r.verb in ("get", "create", "update", "patch", "delete") and (r.verb == "create" or name == node)
        return (True, "") if ok else (False, "can only access CSINode with the same name as the requesting node")
    if gr == ("", "nodes"):
        return _node(node, r.verb, r.sub, name)
    if gr == ("", "pods"):
        return _pod(store, node, r, name)
    resource = f"{r.resource}/{r.sub}" if r.sub else r.resource
    if any(g == r.group and res == resource and r.verb in verbs for g, res, verbs in STATIC_RULES):
        return True, ""
    return False, ""


def _no_relationship(node: str) -> str:
    return f"no relationship found between node '{node}' and this object"


def _graph(store: Any, node: str, kind: str, namespace: str, name: str) -> tuple[bool, str]:
    if _referenced(store, node, kind, namespace, name):
        return True, ""
    return False, _no_relationship(node)


def _node(node: str, verb_: str, sub: str, name: str) -> tuple[bool, str]:
    if sub == "status":
        return (verb_ in ("update", "patch")), ""
    if sub:
        return False, ""
    if verb_ in ("create", "update", "patch"):
        return True, ""  # NodeRestriction limits it to its own Node
    if verb_ in _READ:
        if name == node:
            return True, ""
        if not name:
            return False, f"node '{node}' cannot read all nodes, only its own Node object"
        return False, f"node '{node}' cannot read '{name}', only its own Node object"
    return False, ""


def _pod(store: Any, node: str, r: Request, name: str) -> tuple[bool, str]:
    if r.sub == "status":
        return (r.verb in ("update", "patch")), ""
    if r.sub == "eviction":
        return (r.verb == "create"), ""
    if r.sub:
        return False, ""
    if r.verb in ("create", "delete"):
        return True, ""  # NodeRestriction: mirror pods only, and pods bound to the node
    if r.verb in ("list", "watch") and \
            any(k == "spec.nodeName" and op == "=" and v == node for k, op, v in _fields(r.field_selector)):
        return True, ""
    if r.verb == "get" or (r.verb in ("list", "watch") and name):
        pod = store.get("pods.", r.namespace, name) if r.namespace else None
        if pod is not None and (pod.get("spec") or {}).get("nodeName") == node:
            return True, ""
        return False, _no_relationship(node)
    if r.verb in ("list", "watch"):
        return False, "can only list/watch pods with spec.nodeName field selector"
    return False, ""


def forbidden(user: str, r: Request, reason: str) -> ApiError:
    """kube-apiserver's 403 for an authorization refusal (its exact wording)."""
    resource = f"{r.resource}/{r.sub}" if r.sub else r.resource
    scope = f'in the namespace "{r.namespace}"' if r.namespace else "at the cluster scope"
    why = f'User "{user}" cannot {r.verb} resource "{resource}" in API group "{r.group}" {scope}' + \
        (f": {reason}" if reason else "")
    return forbidden_error(r.resource, r.group, r.name, why)


# ------------------------------------------------------------------ NodeRestriction
def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _forbidden_labels(new: dict[str, str], old: dict[str, str]) -> list[str]:
    changed = {k for k in new.keys() | old.keys() if new.get(k) != old.get(k)}
    out = []
    for key in sorted(changed):
        namespace = key.split("/", 1)[0] if "/" in key else ""
        if namespace == "node-restriction.kubernetes.io" or namespace.endswith(".node-restriction.kubernetes.io"):
            out.append(key)
        elif any(namespace == d or namespace.endswith("." + d) for d in ("kubernetes.io", "k8s.io")) and \
                key not in KUBELET_LABELS and \
                not any(namespace == d or namespace.endswith("." + d) for d in KUBELET_LABEL_NAMESPACES):
            out.append(key)
    return out


def admit(store: Any, *, operation: str, plural: str, group: str, sub: str, name: str,
          new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
    """NodeRestriction for the current request's user, if it is a node; raises a 403 ApiError."""
    user, groups = CURRENT.get()
    node = node_identity(user, groups)
    if node is None:
        return
    why = _restriction(store, node, operation=operation, plural=plural, group=group, sub=sub, name=name,
                       new=new, old=old)
    if why:
        log.warning("forbidden for %s: %s %s%s %r (NodeRestriction: %s)", user, operation, plural,
                    f"/{sub}" if sub else "", name, why)
        raise forbidden_error(plural, group, name, why)


def _restriction(store: Any, node: str, *, operation: str, plural: str, group: str, sub: str, name: str,
                 new: dict[str, Any] | None, old: dict[str, Any] | None) -> str:
    bound = ((old or {}).get("spec") or {}).get("nodeName")
    if (group, plural) == ("", "pods"):
        if sub == "":
            if operation == "CREATE":
                annotations = ((new or {}).get("metadata") or {}).get("annotations") or {}
                if "kubernetes.io/config.mirror" not in annotations:
                    return f'pod does not have "kubernetes.io/config.mirror" annotation, node "{node}" can only ' \
                           "create mirror pods"
                if ((new or {}).get("spec") or {}).get("nodeName") != node:
                    return f'node "{node}" can only create pods with spec.nodeName set to itself'
                return ""
            if operation == "DELETE":
                return "" if bound == node else f'node "{node}" can only delete pods with spec.nodeName set to itself'
            return f'unexpected operation "{operation}", node "{node}" can only create and delete mirror pods'
        if sub == "status":
            if bound != node:
                return f'node "{node}" can only update pod status for pods with spec.nodeName set to itself'
            if _labels(new) != _labels(old):
                return f'node "{node}" cannot update labels through pod status'
            return ""
        if sub == "eviction":
            return "" if bound == node else f"node {node} can only evict pods with spec.nodeName set to itself"
        return f"unexpected pod subresource \"{sub}\", only 'status' and 'eviction' are allowed"
    if (group, plural) == ("", "nodes"):
        target = name or ((new or {}).get("metadata") or {}).get("name", "")
        if target != node:
            return f'node "{node}" is not allowed to modify node "{target}"'
        if operation == "CREATE":
            bad = _forbidden_labels(_labels(new), {})
            return f'node "{node}" is not allowed to set the following labels: {", ".join(bad)}' if bad else ""
        if operation == "UPDATE":
            # Semantic.DeepEqual: no taints and an empty list are the same
            if (((new or {}).get("spec") or {}).get("taints") or []) != \
                    (((old or {}).get("spec") or {}).get("taints") or []):
                return f'node "{node}" is not allowed to modify taints'
            bad = _forbidden_labels(_labels(new), _labels(old))
            return f'is not allowed to modify labels: {", ".join(bad)}' if bad else ""
        return ""
    if (group, plural) == ("", "serviceaccounts") and sub == "token" and operation == "CREATE":
        ref = ((new or {}).get("spec") or {}).get("boundObjectRef") or {}
        if ref.get("apiVersion") != "v1" or ref.get("kind") != "Pod" or not ref.get("name"):
            return "node requested token not bound to a pod"
        if not ref.get("uid"):
            return "node requested token with a pod binding without a uid"
        namespace = ((new or {}).get("metadata") or {}).get("namespace", "")
        pod = store.get("pods.", namespace, ref["name"])
        if pod is None:
            return ""  # the TokenRequest itself answers 404
        if pod["metadata"]["uid"] != ref["uid"]:
            return f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. " \
                   "The object might have been deleted and then recreated"
        if (pod.get("spec") or {}).get("nodeName") != node:
            return "node requested token bound to a pod scheduled on a different node"
        return ""
    if (group, plural) == ("coordination.k8s.io", "leases"):
        namespace = ((new or old or {}).get("metadata") or {}).get("namespace", "")
        if namespace != NODE_LEASE_NAMESPACE:
            return f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace'
        target = name or ((new or {}).get("metadata") or {}).get("name", "")
        return "" if target == node else "can only access node lease with the same name as the requesting node"
    if (group, plural) == ("", "persistentvolumeclaims"):
        return "" if sub == "status" else "may only update PVC status"
    return ""


__all__ = ["CURRENT", "Request", "admit", "authorize", "forbidden", "node_identity", "verb"]

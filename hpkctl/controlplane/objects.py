"""The API objects the bootstrap keeps in place: CoreDNS's identity and rights, the ``kube-dns``
Service and Endpoints, and the services rule. Applied with server-side apply (``force``), so every
start writes the same objects whatever the previous one left.

The services rule
-----------------
hpk has no kube-proxy: a cluster IP routes nowhere. So a Service becomes *headless* when it is
created (``clusterIP: None``): its DNS name then resolves to its pods' own addresses, which work.
Kubernetes 1.36 has MutatingAdmissionPolicy GA and on by default (KEP-3962; kubernetes/kubernetes
#136039), so the rule is a policy the API server evaluates itself, not a webhook process:

- ``hpk-headless-services`` (MutatingAdmissionPolicy + binding): on CREATE of a Service of type
  ClusterIP (the default), a JSON patch sets ``spec.clusterIP`` (and ``spec.clusterIPs`` when given)
  to ``None``. Left alone: ``default/kubernetes`` (the API server's own) and ``kube-system/kube-dns``
  (it keeps the cluster DNS IP tools expect); ExternalName Services (no cluster IP).
- ``hpk-service-types`` (ValidatingAdmissionPolicy + binding with ``validationActions: [Warn]``):
  a NodePort or LoadBalancer Service is *admitted* (charts that create one still install) with a
  warning, shown by kubectl and helm, saying that its node port and cluster IP route nowhere here and
  what to use instead. A headless NodePort is invalid, so those keep their type.

``failurePolicy: Fail`` for the mutation: a Service that cannot be made headless is refused rather
than created with an address that silently routes nowhere; ``Ignore`` for the warning.
"""

from __future__ import annotations

import json
from typing import Any

from hpkctl.kube import Kube, KubeError

Obj = dict[str, Any]
FIELD_MANAGER = "hpkctl-controlplane"
APPLY = "application/apply-patch+yaml"
LABELS = {"app.kubernetes.io/managed-by": "hpkctl"}

HEADLESS_POLICY = "hpk-headless-services"
SERVICE_TYPES_POLICY = "hpk-service-types"
COREDNS_SA = "coredns"
COREDNS_ROLE = "system:coredns"

#: apiVersion/kind → the path segment of its collection (the kinds this module writes)
_PLURALS = {
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "Service"): "services",
    ("v1", "Endpoints"): "endpoints",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "clusterroles",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "clusterrolebindings",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): "mutatingadmissionpolicies",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): "mutatingadmissionpolicybindings",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "validatingadmissionpolicies",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): "validatingadmissionpolicybindings",
}


def object_path(obj: Obj) -> str:
    """The URL of ``obj`` (by apiVersion, kind, namespace and name)."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    plural = _PLURALS[(api_version, kind)]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    ns = obj["metadata"].get("namespace")
    return f"{base}/namespaces/{ns}/{plural}/{obj['metadata']['name']}" if ns else \
        f"{base}/{plural}/{obj['metadata']['name']}"


def apply(kube: Kube, obj: Obj) -> Obj:
    """Server-side apply of ``obj`` as :data:`FIELD_MANAGER`, taking over conflicting fields."""
    result: Obj = kube.patch(object_path(obj), json.dumps(obj), content_type=APPLY,
                             query={"fieldManager": FIELD_MANAGER, "force": "true"})
    return result


# ------------------------------------------------------------------------------ the services rule


#: Services the mutation leaves alone (namespace, name)
_HEADLESS_EXEMPT = (("default", "kubernetes"), ("kube-system", "kube-dns"))

HEADLESS_MATCH = " && ".join(
    ["(!has(object.spec.type) || object.spec.type == 'ClusterIP')"]
    + [f"!(request.namespace == '{ns}' && request.name == '{name}')" for ns, name in _HEADLESS_EXEMPT])

HEADLESS_PATCH = (
    "[JSONPatch{op: 'add', path: '/spec/clusterIP', value: 'None'}] + "
    "(has(object.spec.clusterIPs) ? [JSONPatch{op: 'replace', path: '/spec/clusterIPs', value: ['None']}] : [])"
)

SERVICE_TYPES_RULE = "!has(object.spec.type) || !(object.spec.type in ['NodePort', 'LoadBalancer'])"
SERVICE_TYPES_MESSAGE = (
    "'Service ' + request.namespace + '/' + request.name + ' has type ' + object.spec.type + "
    "': hpk has no kube-proxy and no load balancer, so its node ports and cluster IP route nowhere. "
    "Its pods are reachable at their own addresses (a ClusterIP Service is made headless: its DNS name "
    "resolves to them), and on their nodes at their ports in host network mode.'"
)


def services_policies() -> list[Obj]:
    """The MutatingAdmissionPolicy and ValidatingAdmissionPolicy of the services rule, with bindings."""
    services = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["services"]}]
    meta = {"labels": LABELS}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": HEADLESS_POLICY, **meta},
         "spec": {
             "matchConstraints": {"resourceRules": [{**services[0], "operations": ["CREATE"]}]},
             "matchConditions": [{"name": "cluster-ip-service", "expression": HEADLESS_MATCH}],
             "failurePolicy": "Fail",
             "reinvocationPolicy": "Never",
             "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": HEADLESS_PATCH}}],
         }},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": HEADLESS_POLICY, **meta},
         "spec": {"policyName": HEADLESS_POLICY}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": SERVICE_TYPES_POLICY, **meta},
         "spec": {
             "matchConstraints": {"resourceRules": [{**services[0], "operations": ["CREATE", "UPDATE"]}]},
             "failurePolicy": "Ignore",
             "validations": [{"expression": SERVICE_TYPES_RULE, "messageExpression": SERVICE_TYPES_MESSAGE,
                              "message": "NodePort and LoadBalancer Services route nowhere on hpk (no kube-proxy, "
                                         "no load balancer); reach the pods at their own addresses",
                              "reason": "Invalid"}],
         }},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": SERVICE_TYPES_POLICY, **meta},
         "spec": {"policyName": SERVICE_TYPES_POLICY, "validationActions": ["Warn"]}},
    ]


# ------------------------------------------------------------------------------ CoreDNS


def coredns_identity() -> list[Obj]:
    """ServiceAccount ``kube-system/coredns`` and what its ``kubernetes`` plugin reads (as kubeadm grants it)."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": COREDNS_SA, "namespace": "kube-system", "labels": LABELS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": COREDNS_ROLE, "labels": LABELS},
         "rules": [
             {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
              "verbs": ["list", "watch"]},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": COREDNS_ROLE, "labels": LABELS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COREDNS_ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": COREDNS_SA, "namespace": "kube-system"}]},
    ]


def coredns_token(kube: Kube, *, seconds: int) -> str:
    """A token of ``kube-system/coredns`` valid ``seconds`` (TokenRequest; asked again at every start)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds}}
    answer = kube.post(f"/api/v1/namespaces/kube-system/serviceaccounts/{COREDNS_SA}/token", body)
    return str(answer["status"]["token"])


def kube_dns(*, cluster_dns_ip: str, address: str, port: int) -> list[Obj]:
    """Service ``kube-system/kube-dns`` (cluster IP ``cluster_dns_ip``, no selector) and its Endpoints at
    CoreDNS's real address and port. The controller-manager mirrors them into an EndpointSlice."""
    labels = {**LABELS, "k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}
    return [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
         "spec": {"clusterIP": cluster_dns_ip,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": port},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": port}]}},
        {"apiVersion": "v1", "kind": "Endpoints",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
         "subsets": [{"addresses": [{"ip": address}],
                      "ports": [{"name": "dns", "port": port, "protocol": "UDP"},
                                {"name": "dns-tcp", "port": port, "protocol": "TCP"}]}]},
    ]


def ensure_kube_dns(kube: Kube, *, cluster_dns_ip: str, address: str, port: int) -> None:
    """Apply kube-dns; a Service left with another cluster IP (the profile changed) is made again."""
    service, endpoints = kube_dns(cluster_dns_ip=cluster_dns_ip, address=address, port=port)
    path = object_path(service)
    try:
        old = kube.get(path)
    except KubeError as e:
        if e.code != 404:
            raise
        old = None
    if old is not None and (old.get("spec") or {}).get("clusterIP") != cluster_dns_ip:
        kube.delete(path)
    apply(kube, service)
    apply(kube, endpoints)


__all__ = ["COREDNS_ROLE", "COREDNS_SA", "FIELD_MANAGER", "HEADLESS_MATCH", "HEADLESS_PATCH", "HEADLESS_POLICY",
           "SERVICE_TYPES_MESSAGE", "SERVICE_TYPES_POLICY", "SERVICE_TYPES_RULE", "apply", "coredns_identity",
           "coredns_token", "ensure_kube_dns", "kube_dns", "object_path", "services_policies"]

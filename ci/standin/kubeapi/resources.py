"""The resource types the stand-in serves, and the discovery documents built from them.

kubectl refuses to work without discovery ("Couldn't get current server API group list"), and
helm and client-go map kinds to paths through it, so every type listed here is announced with
its verbs, short names and subresources as kube-apiserver 1.36 announces it. Types without
special rules are stored and validated only (no controllers run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The control-plane image's kube-apiserver (hpkctl/controlplane/versions.py: KUBERNETES) is the version
#: modelled, so that "passes against the stand-in" speaks of the server users get from ``hpkctl start``
#: (tests/standin/test_standin_units.py fails when the two part).
VERSION = {"major": "1", "minor": "36", "emulationMajor": "1", "emulationMinor": "36",
           "minCompatibilityMajor": "1", "minCompatibilityMinor": "35",
           "gitVersion": "v1.36.0-standin", "gitCommit": "0000000000000000000000000000000000000000",
           "gitTreeState": "clean", "buildDate": "2026-10-01T00:00:00Z", "goVersion": "go1.25.3",
           "compiler": "gc", "platform": "linux/amd64"}
SCHEMA_VERSION = "1.36.0"  # kubernetes-validate's schemas of that release

RW = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: where it lives, what it is called, what it allows."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    # storage shared with another view (events.k8s.io/v1 events are core/v1 events)
    storage: str = ""
    # kube-apiserver: leases (and most non-core kinds) refuse a PUT without resourceVersion
    unconditional_update: bool = True
    verbs: tuple[str, ...] = RW
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def key(self) -> str:
        """Storage key: one namespace of names per stored type."""
        return self.storage or f"{self.plural}.{self.group}"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


def _t(group: str, version: str, kind: str, plural: str, **kw: Any) -> ResourceType:
    return ResourceType(group, version, kind, plural, **kw)


TYPES: list[ResourceType] = [
    _t("", "v1", "Pod", "pods", short_names=("po",), categories=("all",),
       subresources=("status", "binding", "log", "exec", "attach", "eviction", "ephemeralcontainers",
                     "resize", "proxy")),
    _t("", "v1", "Node", "nodes", namespaced=False, short_names=("no",), subresources=("status", "proxy")),
    _t("", "v1", "Namespace", "namespaces", namespaced=False, short_names=("ns",),
       subresources=("status", "finalize"), verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    _t("", "v1", "ConfigMap", "configmaps", short_names=("cm",)),
    _t("", "v1", "Secret", "secrets"),
    _t("", "v1", "Service", "services", short_names=("svc",), categories=("all",), subresources=("status", "proxy"),
       verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")),
    _t("", "v1", "Endpoints", "endpoints", short_names=("ep",)),
    _t("", "v1", "ServiceAccount", "serviceaccounts", short_names=("sa",), subresources=("token",)),
    _t("", "v1", "Event", "events", short_names=("ev",), storage="events"),
    _t("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", short_names=("pvc",), subresources=("status",)),
    _t("", "v1", "PersistentVolume", "persistentvolumes", namespaced=False, short_names=("pv",), subresources=("status",)),
    _t("", "v1", "ResourceQuota", "resourcequotas", short_names=("quota",), subresources=("status",)),
    _t("", "v1", "LimitRange", "limitranges", short_names=("limits",)),
    _t("events.k8s.io", "v1", "Event", "events", short_names=("ev",), storage="events"),
    _t("coordination.k8s.io", "v1", "Lease", "leases", unconditional_update=False),
    _t("batch", "v1", "Job", "jobs", categories=("all",), subresources=("status",), unconditional_update=False),
    _t("batch", "v1", "CronJob", "cronjobs", short_names=("cj",), categories=("all",), subresources=("status",),
       unconditional_update=False),
    _t("apps", "v1", "Deployment", "deployments", short_names=("deploy",), categories=("all",),
       subresources=("status", "scale"), unconditional_update=False),
    _t("apps", "v1", "ReplicaSet", "replicasets", short_names=("rs",), categories=("all",),
       subresources=("status", "scale"), unconditional_update=False),
    _t("apps", "v1", "StatefulSet", "statefulsets", short_names=("sts",), categories=("all",),
       subresources=("status", "scale"), unconditional_update=False),
    _t("apps", "v1", "DaemonSet", "daemonsets", short_names=("ds",), categories=("all",),
       subresources=("status",), unconditional_update=False),
    _t("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short_names=("pdb",),
       subresources=("status",), unconditional_update=False),
    _t("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", unconditional_update=False),
    _t("rbac.authorization.k8s.io", "v1", "Role", "roles", unconditional_update=True),
    _t("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    _t("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    _t("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
    # kubectl lists CRDs before it says "no matches for kind ... ensure CRDs are installed first":
    # served, always empty; the stand-in serves no custom resources, so it refuses to store one
    _t("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False,
       short_names=("crd", "crds"), categories=("api-extensions",), subresources=("status",),
       unconditional_update=False, extra={"read_only": True}),
    # answered, never stored (kubectl auth can-i / whoami)
    _t("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", namespaced=False,
       verbs=("create",), extra={"virtual": True}),
    _t("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False,
       verbs=("create",), extra={"virtual": True}),
    _t("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", namespaced=False,
       verbs=("create",), extra={"virtual": True}),
    _t("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", namespaced=False, short_names=("pc",),
       unconditional_update=False),
    # admission policies (stored; the services rule of the control plane is evaluated by ``policies``)
    _t("admissionregistration.k8s.io", "v1", "MutatingAdmissionPolicy", "mutatingadmissionpolicies",
       namespaced=False, categories=("api-extensions",), unconditional_update=False),
    _t("admissionregistration.k8s.io", "v1", "MutatingAdmissionPolicyBinding", "mutatingadmissionpolicybindings",
       namespaced=False, categories=("api-extensions",), unconditional_update=False),
    _t("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies",
       namespaced=False, categories=("api-extensions",), subresources=("status",), unconditional_update=False),
    _t("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding",
       "validatingadmissionpolicybindings", namespaced=False, categories=("api-extensions",),
       unconditional_update=False),
]

BY_PATH: dict[tuple[str, str, str], ResourceType] = {(t.group, t.version, t.plural): t for t in TYPES}
SUBRESOURCE_KINDS = {"status": None, "binding": ("", "v1", "Binding"), "eviction": ("policy", "v1", "Eviction"),
                     "token": ("authentication.k8s.io", "v1", "TokenRequest"),
                     "scale": ("autoscaling", "v1", "Scale"), "log": ("", "v1", "Pod"),
                     "exec": ("", "v1", "PodExecOptions"), "attach": ("", "v1", "PodAttachOptions"),
                     "proxy": None, "finalize": None, "ephemeralcontainers": None, "resize": None}
SUBRESOURCE_VERBS = {"status": ("get", "patch", "update"), "binding": ("create",), "eviction": ("create",),
                     "token": ("create",), "scale": ("get", "patch", "update"), "log": ("get",),
                     "exec": ("create", "get"), "attach": ("create", "get"),
                     "proxy": ("create", "delete", "get", "patch", "update"), "finalize": ("update",),
                     "ephemeralcontainers": ("get", "patch", "update"), "resize": ("get", "patch", "update")}


def find(group: str, version: str, plural: str) -> ResourceType | None:
    return BY_PATH.get((group, version, plural))


def by_kind(api_version: str, kind: str) -> ResourceType | None:
    for t in TYPES:
        if t.api_version == api_version and t.kind == kind:
            return t
    return None


def groups() -> dict[str, list[str]]:
    """Non-core groups and their versions, in the order kube-apiserver lists them."""
    out: dict[str, list[str]] = {}
    for t in TYPES:
        if t.group and t.version not in out.setdefault(t.group, []):
            out[t.group].append(t.version)
    return out


def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def api_group_list() -> dict[str, Any]:
    out = []
    for name, versions in groups().items():
        vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        out.append({"name": name, "versions": vs, "preferredVersion": vs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": out}


def api_group(name: str) -> dict[str, Any] | None:
    versions = groups().get(name)
    if not versions:
        return None
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": vs, "preferredVersion": vs[0]}


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    """``/api/v1`` or ``/apis/{group}/{version}``: an APIResourceList."""
    res: list[dict[str, Any]] = []
    for t in TYPES:
        if (t.group, t.version) != (group, version):
            continue
        entry: dict[str, Any] = {"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
                                 "kind": t.kind, "verbs": list(t.verbs)}
        if t.short_names:
            entry["shortNames"] = list(t.short_names)
        if t.categories:
            entry["categories"] = list(t.categories)
        res.append(entry)
        for sub in t.subresources:
            sk = SUBRESOURCE_KINDS.get(sub)
            sub_entry: dict[str, Any] = {"name": f"{t.plural}/{sub}", "singularName": "",
                                         "namespaced": t.namespaced, "kind": sk[2] if sk else t.kind,
                                         "verbs": list(SUBRESOURCE_VERBS[sub])}
            if sk and sk[0] != group:
                sub_entry["group"], sub_entry["version"] = sk[0], sk[1]
            res.append(sub_entry)
    if not res:
        return None
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}

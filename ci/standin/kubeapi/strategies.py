"""Per-kind rules (kube-apiserver's ``pkg/registry/*/strategy.go``): what a create or update may
change, which name rule applies, what a status write keeps, how long a graceful delete takes.

The default strategy fits the stored-only kinds; Pod lives in ``pods``, the others here.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from .errors import FieldError
from .names import CONFIG_KEY, check
from .store import clone

if TYPE_CHECKING:
    from .api import Api
    from .resources import ResourceType

MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


class Strategy:
    name_rule = "subdomain"
    # metadata a status write may change (pods/nodes keep labels and annotations; most kinds
    # reset all metadata: metav1.ResetObjectMetaForStatus)
    status_keeps_metadata = False

    def default(self, obj: dict[str, Any], api: "Api") -> None:
        """Defaults applied when any request body is decoded (create and update alike)."""

    def admit_create(self, obj: dict[str, Any], api: "Api") -> None:
        """Admission on create (service accounts, tolerations...)."""

    def allocate(self, obj: dict[str, Any], api: "Api") -> None:
        """What the registry assigns once admission is done (a Service's cluster IP)."""

    def prepare_create(self, rt: "ResourceType", obj: dict[str, Any]) -> None:
        if rt.has_status:
            obj.pop("status", None)
        if "spec" in obj:
            obj["metadata"]["generation"] = 1

    def prepare_update(self, rt: "ResourceType", new: dict[str, Any], old: dict[str, Any], sub: str) -> None:
        """Status/spec separation: a main write keeps the old status, a status write the old rest."""
        if sub == "status":
            keep = clone(old)
            if "status" in new:
                keep["status"] = new["status"]
            else:
                keep.pop("status", None)
            if self.status_keeps_metadata:
                for k in ("labels", "annotations"):
                    if k in new.get("metadata", {}):
                        keep["metadata"][k] = new["metadata"][k]
                    else:
                        keep["metadata"].pop(k, None)
            keep["metadata"]["resourceVersion"] = new.get("metadata", {}).get("resourceVersion", "")
            new.clear()
            new.update(keep)
            return
        if rt.has_status:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        if "generation" in old["metadata"]:
            gen = old["metadata"]["generation"]
            new["metadata"]["generation"] = gen + 1 if new.get("spec") != old.get("spec") else gen

    def validate(self, rt: "ResourceType", obj: dict[str, Any], old: dict[str, Any] | None,
                 sub: str) -> list[FieldError]:
        return []

    def after_create(self, obj: dict[str, Any], api: "Api") -> None:
        """Controllers' immediate reactions (a new namespace gets its ServiceAccount...)."""

    def grace_seconds(self, obj: dict[str, Any], requested: int | None) -> int:
        """0 deletes at once; kinds without graceful deletion ignore the request."""
        return 0


class NodeStrategy(Strategy):
    status_keeps_metadata = True

    def prepare_create(self, rt: "ResourceType", obj: dict[str, Any]) -> None:
        # "Nodes allow *all* fields, including status, to be set on create"
        pass


class NamespaceStrategy(Strategy):
    name_rule = "label"

    def default(self, obj: dict[str, Any], api: "Api") -> None:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")

    def prepare_create(self, rt: "ResourceType", obj: dict[str, Any]) -> None:
        obj["status"] = {"phase": "Active"}

    def after_create(self, obj: dict[str, Any], api: "Api") -> None:
        api.namespace_objects(obj["metadata"]["name"])


class ServiceStrategy(Strategy):
    name_rule = "1035"

    def default(self, obj: dict[str, Any], api: "Api") -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        if spec["type"] != "ExternalName":
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))

    def allocate(self, obj: dict[str, Any], api: "Api") -> None:
        spec = obj["spec"]
        if spec["type"] != "ExternalName" and not spec.get("clusterIP"):
            spec["clusterIP"] = api.allocate_cluster_ip()
        if spec.get("clusterIP"):
            spec.setdefault("clusterIPs", [spec["clusterIP"]])

    def prepare_create(self, rt: "ResourceType", obj: dict[str, Any]) -> None:
        obj["status"] = {"loadBalancer": {}}


class ConfigStrategy(Strategy):
    """ConfigMaps and Secrets: keys must be valid file names."""

    def validate(self, rt: "ResourceType", obj: dict[str, Any], old: dict[str, Any] | None,
                 sub: str) -> list[FieldError]:
        out = []
        for field in ("data", "binaryData", "stringData"):
            for k in obj.get(field) or {}:
                if not CONFIG_KEY.match(k) or len(k) > 253:
                    out.append(FieldError("FieldValueInvalid", f"{field}[{k}]",
                                          "a valid config key must consist of alphanumeric characters, "
                                          "'-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or "
                                          "'key-name', regex used for validation is '[-._a-zA-Z0-9]+')", k))
        if old is not None and old.get("immutable") and any(obj.get(f) != old.get(f) for f in ("data", "binaryData")):
            out.append(FieldError("FieldValueForbidden", "data", "field is immutable when `immutable` is set"))
        return out

    def default(self, obj: dict[str, Any], api: "Api") -> None:
        if obj.get("kind") == "Secret":
            obj.setdefault("type", "Opaque")
            string_data = obj.pop("stringData", None)
            if string_data:
                import base64
                data = obj.setdefault("data", {})
                for k, v in string_data.items():
                    data[k] = base64.b64encode(str(v).encode()).decode()

    def prepare_create(self, rt: "ResourceType", obj: dict[str, Any]) -> None:
        pass


class LeaseStrategy(Strategy):
    """Lease times are MicroTime: exactly six fractional digits, or the decoder fails (400)."""

    def validate(self, rt: "ResourceType", obj: dict[str, Any], old: dict[str, Any] | None,
                 sub: str) -> list[FieldError]:
        from .errors import bad_request
        spec = obj.get("spec") or {}
        for k in ("acquireTime", "renewTime"):
            v = spec.get(k)
            if v is not None and not (isinstance(v, str) and MICROTIME.match(v)):
                rest = v[19:] if isinstance(v, str) and len(v) > 19 else v  # Go reports the unparsed tail
                raise bad_request(f'Lease in version "v1" cannot be handled as a Lease: parsing time "{v}" '
                                  f'as "2006-01-02T15:04:05.000000Z07:00": cannot parse "{rest}" as ".000000"')
        return []


class EventStrategy(Strategy):
    def prepare_create(self, rt: "ResourceType", obj: dict[str, Any]) -> None:
        pass

    def validate(self, rt: "ResourceType", obj: dict[str, Any], old: dict[str, Any] | None,
                 sub: str) -> list[FieldError]:
        out = []
        ns = obj["metadata"].get("namespace", "")
        inv_ns = (obj.get("involvedObject") or {}).get("namespace", "")
        if inv_ns and inv_ns != ns:
            out.append(FieldError("FieldValueInvalid", "involvedObject.namespace", "does not match event.namespace",
                                  inv_ns))
        et = obj.get("eventTime")
        if et is not None and not (isinstance(et, str) and MICROTIME.match(et)):
            from .errors import bad_request
            raise bad_request(f'Event in version "v1" cannot be handled as a Event: parsing time "{et}" as '
                              f'"2006-01-02T15:04:05.000000Z07:00": cannot parse "{et}" as ".000000"')
        for k in ("firstTimestamp", "lastTimestamp"):
            v = obj.get(k)
            if v is not None and not (isinstance(v, str) and TIME.match(v)):
                from .errors import bad_request
                raise bad_request(f'Event in version "v1" cannot be handled as a Event: parsing time "{v}" as '
                                  f'"2006-01-02T15:04:05Z07:00": cannot parse "{v}" as "2006"')
        return out


class RbacStrategy(Strategy):
    """Roles, ClusterRoles and their bindings: names are path segments (``system:coredns``)."""

    name_rule = "path"


def strategy_for(rt: "ResourceType") -> Strategy:
    if rt.group == "rbac.authorization.k8s.io":
        return _RBAC
    return _table().get(rt.key, _DEFAULT)


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Strategy]:
    """The kinds' strategies (stateless), made once: every request asks for one, several times."""
    from .pods import PodStrategy
    from .workloads import STRATEGIES
    return {**STRATEGIES, "pods.": PodStrategy(), "nodes.": NodeStrategy(), "namespaces.": NamespaceStrategy(),
            "services.": ServiceStrategy(), "configmaps.": ConfigStrategy(), "secrets.": ConfigStrategy(),
            "leases.coordination.k8s.io": LeaseStrategy(), "events": EventStrategy()}


_RBAC = RbacStrategy()
_DEFAULT = Strategy()


def check_name(strategy: Strategy, name: str) -> list[FieldError]:
    return check(name, "metadata.name", strategy.name_rule)

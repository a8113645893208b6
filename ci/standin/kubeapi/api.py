"""The verbs (create, update, patch, delete, get, list) over the store, with the generic
apiserver rules every kind shares: metadata system fields, generateName, namespace checks,
optimistic concurrency, preconditions, finalizers, status subresources, dry run.

HTTP lives in ``handlers``; this module raises ``ApiError``s and returns objects.
"""

from __future__ import annotations

import ipaddress
import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import yaml

from . import events, names, nodeauth, policies
from .errors import ApiError, FieldError, already_exists, bad_request, conflict, forbidden, invalid, not_found, \
    status_success
from .patch import StrategicMerge, json_patch, merge_patch
from .resources import ResourceType, find
from .schema import Schemas
from .store import Store, clone
from .strategies import check_name, strategy_for

PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json", "application/apply-patch+yaml")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
POD_KEY = "pods."


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Api:
    def __init__(self, store: Store, schemas: Schemas, *, ca_pem: str, server: str,
                 service_cidr: str = "10.96.0.0/12", toleration_seconds: dict[str, int] | None = None) -> None:
        self.store = store
        self.schemas = schemas
        self.smp = StrategicMerge(schemas)
        self.ca_pem = ca_pem
        self.server = server  # "127.0.0.1:6443", for the kubernetes Endpoints
        self.service_net = ipaddress.ip_network(service_cidr)
        # DefaultTolerationSeconds (--default-not-ready/unreachable-toleration-seconds)
        self.toleration_seconds = toleration_seconds or {"node.kubernetes.io/not-ready": 300,
                                                         "node.kubernetes.io/unreachable": 300}
        self._next_ip = 10
        # --authorization-mode has Node / --enable-admission-plugins has NodeRestriction (nodeauth)
        self.node_authorization = True
        self.node_restriction = True

    # ------------------------------------------------------------------ reads
    def get(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
        obj = self.store.get(rt.key, ns if rt.namespaced else "", name)
        if obj is None:
            raise not_found(rt.plural, rt.group, name)
        return clone(obj)

    def _stored_view(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any] | None:
        """The stored object as ``rt`` shows it, not copied: only compared with (``Schemas.validate``)."""
        obj = self.store.get(rt.key, ns if rt.namespaced else "", name)
        return None if obj is None else self.encode(rt, obj)

    def encode(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """The stored object as the requested group/version shows it."""
        if rt.group == "events.k8s.io":
            return events.to_v1(obj)
        return obj

    # ------------------------------------------------------------------ decoding
    def _decode(self, rt: ResourceType, body: Any, ns: str, *, field_validation: str, name: str,
                stored: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        api_version, kind = body.get("apiVersion", rt.api_version), body.get("kind", rt.kind)
        if api_version != rt.api_version:
            raise bad_request(f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})")
        if kind != rt.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        obj = clone(body)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        warnings = self.schemas.validate(rt, obj, field_validation=field_validation,
                                         name=obj["metadata"].get("name") or name, stored=stored)
        if rt.group == "events.k8s.io":
            obj = events.from_v1(obj)
        meta = obj["metadata"]
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        meta.pop("selfLink", None)
        meta.pop("managedFields", None)
        strategy_for(rt).default(obj, self)
        return obj, warnings

    def _validate(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, sub: str) -> None:
        st = strategy_for(rt)
        meta = obj["metadata"]
        errs: list[FieldError] = [] if old is not None else check_name(st, meta.get("name", ""))
        errs += names.check_labels(meta.get("labels"), "metadata.labels")
        errs += names.check_owner_references(meta.get("ownerReferences"))
        for k in meta.get("annotations") or {}:
            errs += names.check_qualified(k, "metadata.annotations")
        if old is not None and old["metadata"].get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
            if added:
                errs.append(FieldError("FieldValueForbidden", "metadata.finalizers",
                                       "no new finalizers can be added if the object is being deleted"))
        errs += st.validate(rt, obj, old, sub)
        if errs:
            raise invalid(rt.kind, rt.group, meta.get("name", ""), errs)
        if rt.group == "admissionregistration.k8s.io" and not sub:
            policies.check_supported(rt.kind, obj)

    def _namespace_ready(self, rt: ResourceType, ns: str) -> None:
        if not rt.namespaced:
            return
        nso = self.store.get("namespaces.", "", ns)
        if nso is None:
            raise not_found("namespaces", "", ns)
        if nso["metadata"].get("deletionTimestamp"):
            raise forbidden(rt.plural, rt.group, "", f"unable to create new content in namespace {ns} "
                            "because it is being terminated")

    def _node_restriction(self, rt: ResourceType, operation: str, sub: str, new: dict[str, Any] | None,
                          old: dict[str, Any] | None) -> None:
        if self.node_restriction:
            name = ((old or new or {}).get("metadata") or {}).get("name", "")
            nodeauth.admit(self.store, operation=operation, plural=rt.plural, group=rt.group, sub=sub,
                           name=name if old is not None else "", new=new, old=old)

    # ------------------------------------------------------------------ create
    def create(self, rt: ResourceType, ns: str, body: Any, *, field_validation: str = "Warn",
               dry_run: bool = False, user: str = "") -> tuple[dict[str, Any], list[str]]:
        obj, warnings = self._decode(rt, body, ns, field_validation=field_validation, name="")
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = str(meta["generateName"])[:58] + names.random_suffix()
        self._namespace_ready(rt, ns)
        st = strategy_for(rt)
        self._node_restriction(rt, "CREATE", "", obj, None)
        st.admit_create(obj, self)
        obj = policies.mutate(self, rt, "CREATE", obj, None, ns, user)  # the end of the mutating chain
        meta = obj["metadata"]
        st.allocate(obj, self)
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            meta.pop(k, None)
        st.prepare_create(rt, obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        self._validate(rt, obj, None, "")
        warnings += policies.validate(self, rt, "CREATE", obj, None, ns, user)
        if self.store.get(rt.key, meta.get("namespace", ""), meta["name"]) is not None:
            if not meta.get("generateName") or not meta["name"].startswith(str(meta["generateName"])[:58]):
                raise already_exists(rt.plural, rt.group, meta["name"])
            for _ in range(7):  # RetryGenerateName (GA in 1.32): a taken generated name is drawn again
                meta["name"] = str(meta["generateName"])[:58] + names.random_suffix()
                if self.store.get(rt.key, meta.get("namespace", ""), meta["name"]) is None:
                    break
            else:
                raise already_exists(rt.plural, rt.group, meta["name"])
        stored = self.store.put(rt.key, obj, dry_run=dry_run)
        if not dry_run:
            st.after_create(stored, self)
        return clone(stored), warnings

    # ------------------------------------------------------------------ update / patch
    def update(self, rt: ResourceType, ns: str, name: str, body: Any, *, sub: str = "",
               field_validation: str = "Warn", dry_run: bool = False,
               user: str = "") -> tuple[dict[str, Any], list[str]]:
        new, warnings = self._decode(rt, body, ns, field_validation=field_validation, name=name,
                                     stored=self._stored_view(rt, ns, name))
        if new["metadata"].get("name") != name:
            raise bad_request(f"the name of the object ({new['metadata'].get('name', '')}) does not match "
                              f"the name on the URL ({name})")
        old = self.get(rt, ns, name)
        rv = new["metadata"].get("resourceVersion")
        if not rv and not rt.unconditional_update:
            raise invalid(rt.kind, rt.group, name, [FieldError("FieldValueInvalid", "metadata.resourceVersion",
                                                               "must be specified for an update", 0)])
        uid = new["metadata"].get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise conflict(rt.plural, rt.group, name, f"Precondition failed: UID in precondition: {uid}, "
                           f"UID in object meta: {old['metadata']['uid']}")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name)
        return self._write(rt, new, old, sub, dry_run, warnings, user), warnings

    def patch(self, rt: ResourceType, ns: str, name: str, raw: bytes, content_type: str, *, sub: str = "",
              field_validation: str = "Warn", dry_run: bool = False,
              field_manager: str = "", user: str = "") -> tuple[dict[str, Any], list[str], bool]:
        """Returns (object, warnings, created): server-side apply creates a missing object."""
        ctype = content_type.split(";")[0].strip()
        if ctype not in PATCH_TYPES:
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                           f"accepted media types include: {', '.join(PATCH_TYPES)}")
        try:
            patch = yaml.safe_load(raw) if ctype.endswith("yaml") else json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as e:
            raise bad_request(f"error decoding patch: {e}") from None
        if ctype == "application/apply-patch+yaml":
            if not field_manager:
                raise bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")
            if self.store.get(rt.key, ns if rt.namespaced else "", name) is None and sub == "":
                obj, w = self.create(rt, ns, patch, field_validation=field_validation, dry_run=dry_run, user=user)
                return obj, w, True
        old_view = self.encode(rt, self.get(rt, ns, name))
        if ctype == "application/json-patch+json":
            patched = json_patch(old_view, patch)
        elif ctype == "application/merge-patch+json":
            patched = merge_patch(old_view, patch)
        else:
            root = self.schemas.root(rt.group, rt.version, rt.kind)
            patched = self.smp.apply(old_view, patch, root)
        meta: dict[str, Any] = patched["metadata"] if isinstance(patched.get("metadata"), dict) else {}
        if meta.get("name") != name:
            raise bad_request(f"the name of the object ({meta.get('name', '')}) does not match the name on the URL ({name})")
        if meta.get("uid") != old_view["metadata"]["uid"]:
            raise invalid(rt.kind, rt.group, name, [FieldError("FieldValueInvalid", "metadata.uid",
                                                               "field is immutable", meta.get("uid"))])
        if meta.get("resourceVersion") != old_view["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name)
        new, warnings = self._decode(rt, patched, ns, field_validation=field_validation, name=name,
                                     stored=self._stored_view(rt, ns, name))
        return self._write(rt, new, self.get(rt, ns, name), sub, dry_run, warnings, user), warnings, False

    def _write(self, rt: ResourceType, new: dict[str, Any], old: dict[str, Any], sub: str,
               dry_run: bool, warnings: list[str] | None = None, user: str = "") -> dict[str, Any]:
        ns = old["metadata"].get("namespace", "")
        self._node_restriction(rt, "UPDATE", sub, new, old)
        if not sub:
            new = policies.mutate(self, rt, "UPDATE", new, old, ns, user)
        meta, old_meta = new["metadata"], old["metadata"]
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        strategy_for(rt).prepare_update(rt, new, old, sub)
        self._validate(rt, new, old, sub)
        if not sub:
            found = policies.validate(self, rt, "UPDATE", new, old, ns, user)
            if warnings is not None:
                warnings += found
        stored = self.store.put(rt.key, new, dry_run=dry_run)
        m = stored["metadata"]
        if m.get("deletionTimestamp") and not m.get("finalizers") and m.get("deletionGracePeriodSeconds") == 0:
            stored = self.store.remove(rt.key, stored, dry_run=dry_run)
        return clone(stored)

    # ------------------------------------------------------------------ delete
    def delete(self, rt: ResourceType, ns: str, name: str, opts: dict[str, Any], *,
               dry_run: bool = False, sub: str = "") -> dict[str, Any]:
        obj = self.get(rt, ns, name)
        meta = obj["metadata"]
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise conflict(rt.plural, rt.group, name, f"Precondition failed: UID in precondition: {pre['uid']}, "
                           f"UID in object meta: {meta['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name, f"Precondition failed: ResourceVersion in precondition: "
                           f"{pre['resourceVersion']}, ResourceVersion in object meta: {meta['resourceVersion']}")
        self._node_restriction(rt, "DELETE", sub, None, obj)
        if rt.key == "namespaces.":
            return self._delete_namespace(rt, obj, dry_run)
        requested = opts.get("gracePeriodSeconds")
        grace = strategy_for(rt).grace_seconds(obj, None if requested is None else int(requested))
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and current is not None and grace >= current and \
                (grace > 0 or current == 0):
            return obj  # a later delete can only shorten the grace period
        if grace > 0 or meta.get("finalizers"):
            when = datetime.now(timezone.utc) + timedelta(seconds=grace)
            meta["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["deletionGracePeriodSeconds"] = grace
            if meta.get("generation"):
                meta["generation"] += 1
            return clone(self.store.put(rt.key, obj, dry_run=dry_run))
        last = self.store.remove(rt.key, obj, dry_run=dry_run)
        if rt.key == POD_KEY:
            return clone(last)
        return status_success(name=name, kind=rt.plural, group=rt.group, uid=meta["uid"])

    def _delete_namespace(self, rt: ResourceType, obj: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in SYSTEM_NAMESPACES:
            raise forbidden("namespaces", "", name, "this namespace may not be deleted")
        if dry_run or obj["metadata"].get("deletionTimestamp"):
            return obj
        obj["metadata"]["deletionTimestamp"] = now()
        obj["metadata"]["deletionGracePeriodSeconds"] = 0
        obj["status"] = {"phase": "Terminating"}
        stored = self.store.put(rt.key, obj)
        self.sweep_namespace(name)
        return clone(stored)

    def sweep_namespace(self, name: str) -> bool:
        """The namespace controller's step: delete the content, drop the namespace once empty."""
        left = 0
        for key in list(self.store.objects):
            for o in list(self.store.list(key, name)):
                if o["metadata"].get("deletionTimestamp"):
                    left += 1
                    continue
                rt = next(t for t in _types_by_key() if t.key == key)
                try:
                    self.delete(rt, name, o["metadata"]["name"], {})
                except ApiError:
                    pass
                left += self.store.get(key, name, o["metadata"]["name"]) is not None
        nso = self.store.get("namespaces.", "", name)
        if left == 0 and nso is not None and nso["metadata"].get("deletionTimestamp"):
            self.store.remove("namespaces.", nso)
            return True
        return False

    # ------------------------------------------------------------------ controllers
    def namespace_objects(self, ns: str) -> None:
        """What the serviceaccount and root-CA publisher controllers create in every namespace."""
        if self.store.get("serviceaccounts.", ns, "default") is None:
            self.create(find("", "v1", "serviceaccounts"), ns,  # type: ignore[arg-type]
                        {"metadata": {"name": "default"}})
        if self.store.get("configmaps.", ns, "kube-root-ca.crt") is None:
            self.create(find("", "v1", "configmaps"), ns,  # type: ignore[arg-type]
                        {"metadata": {"name": "kube-root-ca.crt",
                                      "annotations": {"kubernetes.io/description": "Contains a CA bundle that "
                                                      "can be used to verify the kube-apiserver when using "
                                                      "internal endpoints such as the internal service IP or "
                                                      "kubernetes.default.svc. No other usage is guaranteed "
                                                      "across distributions of Kubernetes clusters."}},
                         "data": {"ca.crt": self.ca_pem}})

    def allocate_cluster_ip(self) -> str:
        used = {(o.get("spec") or {}).get("clusterIP") for o in self.store.list("services.")}
        while True:
            ip = str(self.service_net.network_address + self._next_ip)
            self._next_ip += 1
            if ip not in used:
                return ip

    def bootstrap(self) -> None:
        """The objects every cluster has: system namespaces, the kubernetes Service."""
        ns_rt = find("", "v1", "namespaces")
        assert ns_rt is not None
        for ns in SYSTEM_NAMESPACES:
            if self.store.get("namespaces.", "", ns) is None:
                self.create(ns_rt, "", {"metadata": {"name": ns}})
            else:
                self.namespace_objects(ns)
        host, _, port = self.server.rpartition(":")
        svc_rt, ep_rt = find("", "v1", "services"), find("", "v1", "endpoints")
        assert svc_rt is not None and ep_rt is not None
        if self.store.get("services.", "default", "kubernetes") is None:
            self.create(svc_rt, "default", {"metadata": {"name": "kubernetes", "labels": {
                "component": "apiserver", "provider": "kubernetes"}}, "spec": {
                "clusterIP": str(self.service_net.network_address + 1), "ports": [{"name": "https", "port": 443, "targetPort": int(port)}]}})
        subsets = [{"addresses": [{"ip": host}], "ports": [{"name": "https", "port": int(port), "protocol": "TCP"}]}]
        ep = self.store.get("endpoints.", "default", "kubernetes")
        if ep is None:
            self.create(ep_rt, "default", {"metadata": {"name": "kubernetes"}, "subsets": subsets})
        elif ep.get("subsets") != subsets:
            self.update(ep_rt, "default", "kubernetes", {**clone(ep), "subsets": subsets})


def _types_by_key() -> list[ResourceType]:
    from .resources import TYPES
    return [t for t in TYPES if not t.group == "events.k8s.io"]

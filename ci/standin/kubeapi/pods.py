"""Pods: defaulting, admission, validation and graceful deletion as kube-apiserver 1.36 does them.

The kubelet reads what these add (defaults, the service-account volume, tolerations, qosClass)
and trips over what they refuse (a terminated container going back to running, spec changes),
so they follow ``pkg/apis/core/v1/defaults.go``, the ServiceAccount / DefaultTolerationSeconds /
Priority admission plugins, ``pkg/apis/core/validation`` and ``pkg/registry/core/pod/strategy.go``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ApiError, FieldError
from .names import check, random_suffix
from .store import clone
from .strategies import Strategy

if TYPE_CHECKING:
    from .api import Api
    from .resources import ResourceType

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
ENUMS = {"restartPolicy": ("Always", "OnFailure", "Never"),
         "dnsPolicy": ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")}
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
UPDATABLE = ("pod updates may not change fields other than `spec.containers[*].image`,"
             "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
             "to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
             "previously negative)")


def _containers(spec: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    return [(f, i, c) for f in ("initContainers", "containers")
            for i, c in enumerate(spec.get(f) or [])]


def _pull_policy(image: str) -> str:
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_probe(p: dict[str, Any] | None) -> None:
    if not p:
        return
    for k, v in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)):
        p.setdefault(k, v)
    if "httpGet" in p:
        p["httpGet"].setdefault("scheme", "HTTP")
        p["httpGet"].setdefault("path", "/")


def _default_volume(v: dict[str, Any]) -> None:
    for kind in ("configMap", "secret", "downwardAPI", "projected"):
        if kind in v:
            v[kind].setdefault("defaultMode", 420)
    for item in (v.get("downwardAPI") or {}).get("items") or []:
        if "fieldRef" in item:
            item["fieldRef"].setdefault("apiVersion", "v1")
    if "hostPath" in v:
        v["hostPath"].setdefault("type", "")
    if "emptyDir" in v and v["emptyDir"] is None:
        v["emptyDir"] = {}


def qos_class(spec: dict[str, Any]) -> str:
    reqs, lims, guaranteed = False, False, True
    for _, _, c in _containers(spec):
        r = (c.get("resources") or {}).get("requests") or {}
        lm = (c.get("resources") or {}).get("limits") or {}
        reqs = reqs or any(k in r for k in ("cpu", "memory"))
        lims = lims or any(k in lm for k in ("cpu", "memory"))
        for k in ("cpu", "memory"):
            if k not in lm or r.get(k, lm[k]) != lm[k]:
                guaranteed = False
    if not reqs and not lims:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


class PodStrategy(Strategy):
    status_keeps_metadata = True

    def default(self, obj: dict[str, Any], api: "Api") -> None:
        spec = obj.setdefault("spec", {})
        for k, v in (("restartPolicy", "Always"), ("dnsPolicy", "ClusterFirst"),
                     ("schedulerName", "default-scheduler"), ("terminationGracePeriodSeconds", 30),
                     ("securityContext", {}), ("enableServiceLinks", True)):
            spec.setdefault(k, v)
        if spec.get("serviceAccountName") and not spec.get("serviceAccount"):
            spec["serviceAccount"] = spec["serviceAccountName"]
        for _, _, c in _containers(spec):
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            if isinstance(c.get("image"), str):
                c.setdefault("imagePullPolicy", _pull_policy(c["image"]))
            res = c.setdefault("resources", {})
            for k, v in (res.get("limits") or {}).items():
                res.setdefault("requests", {}).setdefault(k, v)
            for p in c.get("ports") or []:
                p.setdefault("protocol", "TCP")
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                _default_probe(c.get(probe))
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("fieldRef")
                if ref is not None:
                    ref.setdefault("apiVersion", "v1")
        for v in spec.get("volumes") or []:
            _default_volume(v)

    def admit_create(self, obj: dict[str, Any], api: "Api") -> None:
        spec = obj["spec"]
        ns = obj["metadata"]["namespace"]
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        sa_name = spec.get("serviceAccountName") or "default"
        spec["serviceAccountName"] = spec["serviceAccount"] = sa_name
        sa = api.store.get("serviceaccounts.", ns, sa_name)
        if sa is None:
            raise ApiError(403, "Forbidden", f'pods "{obj["metadata"].get("name") or obj["metadata"].get("generateName", "")}" '
                           f'is forbidden: error looking up service account {ns}/{sa_name}: '
                           f'serviceaccount "{sa_name}" not found', kind="pods")
        automount = spec.get("automountServiceAccountToken", sa.get("automountServiceAccountToken", True))
        if automount is not False:
            self._mount_token(spec)
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") or
                       (not t.get("key") and t.get("operator") == "Exists") for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": api.toleration_seconds[key]})

    @staticmethod
    def _mount_token(spec: dict[str, Any]) -> None:
        containers = _containers(spec)
        if all(any(m.get("mountPath") == SA_MOUNT for m in c.get("volumeMounts") or []) for _, _, c in containers):
            return
        name = f"kube-api-access-{random_suffix()}"
        spec.setdefault("volumes", []).append({"name": name, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
        for _, _, c in containers:
            mounts = c.setdefault("volumeMounts", [])
            if not any(m.get("mountPath") == SA_MOUNT for m in mounts):
                mounts.append({"name": name, "readOnly": True, "mountPath": SA_MOUNT})

    def prepare_create(self, rt: "ResourceType", obj: dict[str, Any]) -> None:
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj["spec"])}
        obj["metadata"]["generation"] = 1
        if obj["spec"].get("schedulingGates"):  # strategy.go applySchedulingGatedCondition
            obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                            "message": "Scheduling is blocked due to non-empty scheduling gates"}]

    def prepare_update(self, rt: "ResourceType", new: dict[str, Any], old: dict[str, Any], sub: str) -> None:
        super().prepare_update(rt, new, old, sub)
        if sub == "status" and "status" in new:
            new["status"].setdefault("qosClass", old.get("status", {}).get("qosClass"))

    # ------------------------------------------------------------------ validation
    def validate(self, rt: "ResourceType", obj: dict[str, Any], old: dict[str, Any] | None,
                 sub: str) -> list[FieldError]:
        if sub == "status":
            return self._validate_status(obj, old or {})
        errs = self._validate_spec(obj.get("spec") or {})
        if old is not None and sub == "":
            errs += self._validate_update(obj["spec"], old["spec"])
        return errs

    @staticmethod
    def _validate_spec(spec: dict[str, Any]) -> list[FieldError]:
        errs: list[FieldError] = []
        if not spec.get("containers"):
            errs.append(FieldError("FieldValueRequired", "spec.containers"))
        for field, allowed in ENUMS.items():
            if field in spec and spec[field] not in allowed:
                errs.append(FieldError("FieldValueNotSupported", f"spec.{field}", "supported values: "
                                       + ", ".join(f'"{a}"' for a in allowed), spec[field]))
        volumes = set()
        for i, v in enumerate(spec.get("volumes") or []):
            errs += check(v.get("name"), f"spec.volumes[{i}].name", "label")
            if v.get("name") in volumes:
                errs.append(FieldError("FieldValueDuplicate", f"spec.volumes[{i}].name", "", v.get("name")))
            volumes.add(v.get("name"))
        seen: set[str] = set()
        for field, i, c in _containers(spec):
            path = f"spec.{field}[{i}]"
            errs += check(c.get("name"), f"{path}.name", "label")
            if c.get("name") in seen:
                errs.append(FieldError("FieldValueDuplicate", f"{path}.name", "", c.get("name")))
            seen.add(c.get("name", ""))
            if not c.get("image"):
                errs.append(FieldError("FieldValueRequired", f"{path}.image"))
            if "imagePullPolicy" in c and c["imagePullPolicy"] not in PULL_POLICIES:
                errs.append(FieldError("FieldValueNotSupported", f"{path}.imagePullPolicy", "supported values: "
                                       + ", ".join(f'"{a}"' for a in PULL_POLICIES), c.get("imagePullPolicy")))
            for j, m in enumerate(c.get("volumeMounts") or []):
                if m.get("name") not in volumes:
                    errs.append(FieldError("FieldValueInvalid", f"{path}.volumeMounts[{j}].name", "",
                                           m.get("name")))
                    errs[-1].message = f'Not found: "{m.get("name")}"'
            for j, p in enumerate(c.get("ports") or []):
                if not isinstance(p.get("containerPort"), int) or not 0 < p["containerPort"] < 65536:
                    errs.append(FieldError("FieldValueInvalid", f"{path}.ports[{j}].containerPort",
                                           "must be between 1 and 65535, inclusive", p.get("containerPort")))
        return errs

    @staticmethod
    def _validate_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        old_gates = {g.get("name") for g in old.get("schedulingGates") or []}
        added = [FieldError("FieldValueForbidden", f"spec.schedulingGates[{i}].name",
                            f"only deletion is allowed, but found new scheduling gate '{g.get('name')}'")
                 for i, g in enumerate(new.get("schedulingGates") or []) if g.get("name") not in old_gates]
        if added:  # validation.go validateOnlyDeletedSchedulingGates
            return added
        allowed = clone(old)
        for field in ("containers", "initContainers"):
            for c_new, c_old in zip(new.get(field) or [], allowed.get(field) or []):
                if "image" in c_new:
                    c_old["image"] = c_new["image"]
        for k in ("activeDeadlineSeconds", "schedulingGates"):
            if k in new:
                allowed[k] = new[k]
        if "schedulingGates" not in new:  # the last gate removed
            allowed.pop("schedulingGates", None)
        old_tol = old.get("tolerations") or []
        if all(t in (new.get("tolerations") or []) for t in old_tol):
            allowed["tolerations"] = new.get("tolerations") or []
            if not allowed["tolerations"] and "tolerations" not in new:
                allowed.pop("tolerations", None)
        if allowed == new:
            return []
        return [FieldError("FieldValueForbidden", "spec", UPDATABLE)]

    @staticmethod
    def _validate_status(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        """ValidatePodStatusUpdate's container state transitions (pkg/apis/core/validation), checked
        against the old pod's spec: ValidateContainerStateTransition for containerStatuses (and
        ephemeralContainerStatuses, always as Never), ValidateInitContainerStateTransition for
        initContainerStatuses, which exempts restartable init containers (native sidecars)."""
        spec = old.get("spec") or {}
        policy = spec.get("restartPolicy", "Always")
        sidecars = {c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
        errs: list[FieldError] = []
        for key, key_policy, restartable in (("containerStatuses", policy, set()),
                                             ("initContainerStatuses", policy, sidecars),
                                             ("ephemeralContainerStatuses", "Never", set())):
            errs += _state_transitions((new.get("status") or {}).get(key) or [],
                                       (old.get("status") or {}).get(key) or [], f"status.{key}", key_policy,
                                       restartable)
        old_phase = (old.get("status") or {}).get("phase")
        new_phase = (new.get("status") or {}).get("phase")
        if old_phase in ("Succeeded", "Failed") and new_phase != old_phase:
            errs.append(FieldError("FieldValueForbidden", "status.phase",
                                   f"cannot transition from terminal phase {old_phase} to {new_phase}"))
        return errs

    # ------------------------------------------------------------------ deletion
    def grace_seconds(self, obj: dict[str, Any], requested: int | None) -> int:
        """pkg/registry/core/pod/strategy.go CheckGracefulDelete."""
        period = requested if requested is not None else obj["spec"].get("terminationGracePeriodSeconds", 30)
        if not obj["spec"].get("nodeName"):
            period = 0
        if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            period = 0
        return 1 if period < 0 else period


def _state_transitions(news: list[Any], olds: list[Any], path: str, policy: str,
                       restartable: set[Any]) -> list[FieldError]:
    """A terminated container may not become non-terminated unless the policy restarts it."""
    if policy == "Always":
        return []
    errs = []
    for i, prev in enumerate(olds):
        term = (prev.get("state") or {}).get("terminated")
        if term is None or (term.get("exitCode", 0) != 0 and policy == "OnFailure") or prev.get("name") in restartable:
            continue
        errs += [FieldError("FieldValueForbidden", f"{path}[{i}].state", "may not be transitioned to non-terminated state")
                 for s in news if s.get("name") == prev.get("name") and (s.get("state") or {}).get("terminated") is None]
    return errs

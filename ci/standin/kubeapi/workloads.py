"""The workload kinds' API rules (``pkg/apis/batch/v1/defaults.go``, ``pkg/apis/apps/v1/defaults.go``,
``pkg/registry/batch/job/strategy.go``): the defaults their controllers and clients rely on, and the
Job's generated selector. Pod templates are still not defaulted (see README.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import FieldError
from .strategies import Strategy

if TYPE_CHECKING:
    from .api import Api
    from .resources import ResourceType

JOB_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"


class JobStrategy(Strategy):
    def default(self, obj: dict[str, Any], api: "Api") -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = spec["parallelism"] = 1
        spec.setdefault("parallelism", 1)
        if spec.get("backoffLimitPerIndex") is None:
            spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        if spec.get("podFailurePolicy") is None:
            spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        else:
            spec.setdefault("podReplacementPolicy", "Failed")

    def validate(self, rt: "ResourceType", obj: dict[str, Any], old: dict[str, Any] | None,
                 sub: str) -> list[FieldError]:
        spec = obj.get("spec") or {}
        if old is None and not spec.get("manualSelector"):
            # generateSelector (called from the real Validate, once the uid is set)
            uid, name = obj["metadata"]["uid"], obj["metadata"]["name"]
            tmeta = spec.setdefault("template", {}).setdefault("metadata", {})
            tmeta["labels"] = {**(tmeta.get("labels") or {}), JOB_UID: uid, JOB_NAME: name,
                               "controller-uid": uid, "job-name": name}
            spec["selector"] = {"matchLabels": {JOB_UID: uid}}
        if old is not None and not sub and spec.get("selector") != (old.get("spec") or {}).get("selector"):
            return [FieldError("FieldValueInvalid", "spec.selector", "field is immutable", spec.get("selector"))]
        return []


class AppsStrategy(Strategy):
    """Deployments, ReplicaSets, StatefulSets: replicas and the strategy fields."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def default(self, obj: dict[str, Any], api: "Api") -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        if self.kind == "Deployment":
            st = spec.setdefault("strategy", {"type": "RollingUpdate"})
            if st.get("type", "RollingUpdate") == "RollingUpdate":
                st.setdefault("type", "RollingUpdate")
                ru = st.setdefault("rollingUpdate", {})
                ru.setdefault("maxUnavailable", "25%")
                ru.setdefault("maxSurge", "25%")
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
        elif self.kind == "StatefulSet":
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})


STRATEGIES: dict[str, Strategy] = {"jobs.batch": JobStrategy(), "deployments.apps": AppsStrategy("Deployment"),
                                   "replicasets.apps": AppsStrategy("ReplicaSet"),
                                   "statefulsets.apps": AppsStrategy("StatefulSet")}

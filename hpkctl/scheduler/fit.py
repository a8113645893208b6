"""Does a pod fit the hpk node? The scheduler's filters that make sense for one virtual node.

Slurm does the real placement (CPUs, memory, GPUs are its business), so of kube-scheduler's
filter plugins only those that express *where a pod may go* are applied, in kube-scheduler's
order, each with its real per-node reason (the text ``kubectl describe pod`` shows):

1. NodeUnschedulable: a cordoned node (``spec.unschedulable``) takes only pods that tolerate
   ``node.kubernetes.io/unschedulable:NoSchedule``.
2. TaintToleration: every ``NoSchedule``/``NoExecute`` taint must be tolerated
   (``PreferNoSchedule`` is only a preference).
3. NodeAffinity: ``spec.nodeSelector`` and the required node affinity (terms ORed; within a term
   ``matchExpressions`` and ``matchFields`` ANDed; an empty term matches nothing), as
   k8s.io/component-helpers/scheduling/corev1/nodeaffinity evaluates them.

Pure functions over raw JSON objects: no API calls.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """``Toleration.ToleratesTaint`` of k8s.io/api/core/v1: an empty effect or key matches any, operator
    ``Exists`` any value, ``Equal`` (the default) the same value; any other operator nothing."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return str(toleration.get("value") or "") == str(taint.get("value") or "")
    return False


def untolerated_taint(pod: Obj, node: Obj) -> Obj | None:
    """The first ``NoSchedule``/``NoExecute`` taint of the node the pod does not tolerate."""
    tolerations = [t for t in (pod.get("spec") or {}).get("tolerations") or [] if isinstance(t, dict)]
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return dict(taint)
    return None


def _int(text: Any) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def _label_requirement(req: Obj, labels: dict[str, str]) -> bool:
    """One ``matchExpressions`` entry (labels.Selector semantics; an invalid one matches nothing)."""
    key, op = req.get("key") or "", req.get("operator") or ""
    values = [str(v) for v in req.get("values") or []]
    present = key in labels
    if op == "In":
        return present and bool(values) and labels[key] in values
    if op == "NotIn":
        return bool(values) and (not present or labels[key] not in values)
    if op == "Exists":
        return present and not values
    if op == "DoesNotExist":
        return not present and not values
    if op in ("Gt", "Lt"):
        if len(values) != 1 or not present:
            return False
        bound, have = _int(values[0]), _int(labels[key])
        if bound is None or have is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _field_requirement(req: Obj, node: Obj) -> bool:
    """One ``matchFields`` entry: only ``metadata.name`` with ``In``/``NotIn`` and exactly one value exist."""
    values = [str(v) for v in req.get("values") or []]
    if req.get("key") != "metadata.name" or len(values) != 1:
        return False
    name = str((node.get("metadata") or {}).get("name") or "")
    if req.get("operator") == "In":
        return name == values[0]
    if req.get("operator") == "NotIn":
        return name != values[0]
    return False


def _term(term: Obj, node: Obj, labels: dict[str, str]) -> bool:
    exprs = [e for e in term.get("matchExpressions") or [] if isinstance(e, dict)]
    fields = [f for f in term.get("matchFields") or [] if isinstance(f, dict)]
    if not exprs and not fields:
        return False  # an empty term matches no objects
    return all(_label_requirement(e, labels) for e in exprs) and all(_field_requirement(f, node) for f in fields)


def matches_affinity(pod: Obj, node: Obj) -> bool:
    """``spec.nodeSelector`` and the required node affinity both hold for the node."""
    spec = pod.get("spec") or {}
    labels = {str(k): str(v) for k, v in ((node.get("metadata") or {}).get("labels") or {}).items()}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(str(key)) != str(value):
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    terms = [t for t in (required.get("nodeSelectorTerms") or []) if isinstance(t, dict)]
    return any(_term(t, node, labels) for t in terms)


def unfit_reason(pod: Obj, node: Obj) -> str | None:
    """``None`` if the pod may be bound to the node, else kube-scheduler's reason for this node
    (the first filter that fails)."""
    if (node.get("spec") or {}).get("unschedulable"):
        cordon = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        if not any(tolerates(t, cordon) for t in (pod.get("spec") or {}).get("tolerations") or []):
            return REASON_UNSCHEDULABLE
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
    if not matches_affinity(pod, node):
        return REASON_AFFINITY
    return None


def failed_scheduling_message(reason: str) -> str:
    """kube-scheduler's FitError text for a cluster of one node."""
    return f"0/1 nodes are available: 1 {reason}."

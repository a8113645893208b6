"""Label and field selectors, parsed and matched as kube-apiserver does.

The kubelet lists and watches only its own pods (``fieldSelector=spec.nodeName=<node>``) and
``kubectl describe`` finds a pod's events by ``involvedObject.*``; a field the real server does
not index is a 400 there, so it is one here ("field label not supported").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from .errors import bad_request


def _get(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _str(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _getter(path: str) -> Callable[[dict[str, Any]], str]:
    return lambda o: _str(_get(o, path))


def _fields(*paths: str) -> dict[str, Callable[[dict[str, Any]], str]]:
    return {p: _getter(p) for p in paths}


META = _fields("metadata.name", "metadata.namespace")
# pkg/registry/*/strategy.go ToSelectableFields (or GetAttrs) per kind
FIELDS: dict[str, dict[str, Callable[[dict[str, Any]], str]]] = {
    "pods.": {**META, **_fields("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                                "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                                "status.podIP", "status.nominatedNodeName")},
    "nodes.": {**META, **_fields("spec.unschedulable")},
    "namespaces.": {**META, **_fields("status.phase")},
    "secrets.": {**META, **_fields("type")},
    "events": {**META, **_fields("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                                 "involvedObject.uid", "involvedObject.apiVersion",
                                 "involvedObject.resourceVersion", "involvedObject.fieldPath",
                                 "reason", "reportingComponent", "type"),
               "source": lambda o: _str(_get(o, "source.component"))},
    "replicasets.apps": {**META, **_fields("status.replicas")},
    "jobs.batch": {**META, **_fields("status.successful")},
    "persistentvolumeclaims.": {**META, **_fields("status.phase")},
}
# events.k8s.io/v1 names the same fields differently (pkg/apis/events/v1 conversion)
EVENTS_V1_ALIASES = {"regarding.kind": "involvedObject.kind", "regarding.namespace": "involvedObject.namespace",
                     "regarding.name": "involvedObject.name", "regarding.uid": "involvedObject.uid",
                     "regarding.apiVersion": "involvedObject.apiVersion",
                     "regarding.resourceVersion": "involvedObject.resourceVersion",
                     "regarding.fieldPath": "involvedObject.fieldPath",
                     "reportingController": "reportingComponent", "deprecatedSource": "source"}


@dataclass(frozen=True)
class FieldReq:
    field: str
    op: str  # "=" or "!="
    value: str


@dataclass(frozen=True)
class LabelReq:
    key: str
    op: str  # = != in notin exists !exists gt lt
    values: tuple[str, ...]


def _split_unescaped(s: str, sep: str) -> list[str]:
    parts, cur, esc = [], "", False
    for ch in s:
        if esc:
            cur += "\\" + ch
            esc = False
        elif ch == "\\":
            esc = True
        elif ch == sep:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


def parse_fields(text: str, key: str) -> list[FieldReq]:
    allowed = FIELDS.get(key, META)
    out = []
    for term in _split_unescaped(text, ","):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([^=!]+?)\s*(==|!=|=)\s*(.*)$", term)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        name = EVENTS_V1_ALIASES.get(m.group(1), m.group(1)) if key == "events" else m.group(1)
        if name not in allowed:
            raise bad_request(f'field label not supported: {m.group(1)}')
        out.append(FieldReq(name, "!=" if m.group(2) == "!=" else "=", _unescape(m.group(3))))
    return out


def match_fields(reqs: list[FieldReq], key: str, obj: dict[str, Any]) -> bool:
    allowed = FIELDS.get(key, META)
    for r in reqs:
        got = allowed[r.field](obj)
        if (got == r.value) != (r.op == "="):
            return False
    return True


_LABEL_TOKEN = re.compile(r"\s*(\(|\)|,|!=|==|=|!|>|<|[^\s(),!=<>]+)")


def parse_labels(text: str) -> list[LabelReq]:
    """``a=b,c!=d,e in (x,y),f notin (z),g,!h`` (k8s.io/apimachinery/pkg/labels)."""
    toks = [t for t in _LABEL_TOKEN.findall(text)]
    if "".join(toks).replace(" ", "") != text.replace(" ", ""):
        raise bad_request(f"unable to parse requirement: invalid label selector: {text!r}")
    out, i = [], 0

    def need(cond: bool) -> None:
        if not cond:
            raise bad_request(f"unable to parse requirement: couldn't parse the selector string \"{text}\"")

    while i < len(toks):
        if toks[i] == "!":
            need(i + 1 < len(toks))
            out.append(LabelReq(toks[i + 1], "!exists", ()))
            i += 2
        else:
            key = toks[i]
            need(key not in ("(", ")", ",", "=", "==", "!="))
            op = toks[i + 1] if i + 1 < len(toks) else ","
            if op == ",":
                out.append(LabelReq(key, "exists", ()))
                i += 1
            elif op in ("=", "==", "!="):
                need(i + 2 < len(toks) and toks[i + 2] not in (",", "(", ")"))
                out.append(LabelReq(key, "!=" if op == "!=" else "=", (toks[i + 2],)))
                i += 3
            elif op in ("in", "notin"):
                need(i + 2 < len(toks) and toks[i + 2] == "(")
                j, vals = i + 3, []
                while j < len(toks) and toks[j] != ")":
                    if toks[j] != ",":
                        vals.append(toks[j])
                    j += 1
                need(j < len(toks))
                out.append(LabelReq(key, op, tuple(vals)))
                i = j + 1
            elif op in (">", "<"):
                need(i + 2 < len(toks) and toks[i + 2].lstrip("-").isdigit())
                out.append(LabelReq(key, "gt" if op == ">" else "lt", (toks[i + 2],)))
                i += 3
            else:
                need(False)
        if i < len(toks):
            need(toks[i] == ",")
            i += 1
    return out


def _label_ok(r: LabelReq, labels: dict[str, str]) -> bool:
    has, val = r.key in labels, labels.get(r.key)
    if r.op in ("=", "!="):
        return (has and val == r.values[0]) == (r.op == "=")
    if r.op in ("in", "notin"):
        return (has and val in r.values) == (r.op == "in")
    if r.op in ("exists", "!exists"):
        return has == (r.op == "exists")
    try:
        n = int(val or "")
    except ValueError:
        return False
    return n > int(r.values[0]) if r.op == "gt" else n < int(r.values[0])


def match_labels(reqs: list[LabelReq], obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(_label_ok(r, labels) for r in reqs)


@dataclass
class Selector:
    """A parsed ``labelSelector`` + ``fieldSelector`` for one storage key."""

    key: str
    labels: list[LabelReq]
    fields: list[FieldReq]

    @classmethod
    def parse(cls, key: str, label_text: str, field_text: str) -> "Selector":
        return cls(key, parse_labels(label_text) if label_text else [],
                   parse_fields(field_text, key) if field_text else [])

    def matches(self, obj: dict[str, Any]) -> bool:
        return match_labels(self.labels, obj) and match_fields(self.fields, self.key, obj)

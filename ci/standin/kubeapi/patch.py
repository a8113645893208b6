"""The three patch types of built-in resources: JSON patch, JSON merge patch, strategic merge.

Strategic merge is what ``kubectl apply`` (client-side) and the kubelet's status patches send.
Its list semantics come from the schema (``x-kubernetes-patch-strategy``/``-merge-key``): a
naive merge patch would replace a pod's whole ``containers`` or ``conditions`` list, and the
kubelet would silently erase what others wrote. Directives: ``$patch: replace|delete|merge``,
``$retainKeys``, ``$setElementOrder/<list>``, ``$deleteFromPrimitiveList/<list>``
(k8s.io/apimachinery/pkg/util/strategicpatch).
"""

from __future__ import annotations

from typing import Any

from .errors import ApiError, bad_request
from .schema import Schemas
from .store import clone

_DELETE = object()


# ---------------------------------------------------------------------- RFC 6902 JSON patch
def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f'json patch: invalid path "{path}"')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    for p in parts:
        if isinstance(doc, dict) and p in doc:
            doc = doc[p]
        elif isinstance(doc, list) and p.isdigit() and int(p) < len(doc):
            doc = doc[int(p)]
        else:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                           f"doc is missing path: \"{path}\": missing value")
    return doc


def _add(doc: Any, parts: list[str], value: Any, path: str, replace: bool) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            _walk(doc, parts, path)
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise ApiError(422, "Invalid", f'json patch: index out of range: "{path}"')
    else:
        raise ApiError(422, "Invalid", f'json patch: doc is missing path: "{path}"')
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    parent = _walk(doc, parts[:-1], path)
    _walk(doc, parts, path)
    if isinstance(parent, dict):
        return parent.pop(parts[-1])
    return parent.pop(int(parts[-1]))


def json_patch(doc: dict[str, Any], ops: Any) -> dict[str, Any]:
    if not isinstance(ops, list):
        raise bad_request("json patch: the patch must be a JSON array of operations")
    doc = clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"json patch: invalid operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind in ("add", "replace"):
            if "value" not in op:
                raise bad_request(f'json patch: missing value for "{op["path"]}"')
            doc = _add(doc, parts, clone(op["value"]), op["path"], kind == "replace")
        elif kind == "remove":
            _remove(doc, parts, op["path"])
        elif kind in ("move", "copy"):
            value = _walk(doc, _pointer(op.get("from", "")), op.get("from", ""))
            if kind == "move":
                _remove(doc, _pointer(op["from"]), op["from"])
            doc = _add(doc, parts, clone(value), op["path"], False)
        elif kind == "test":
            if _walk(doc, parts, op["path"]) != op.get("value"):
                raise ApiError(422, "Invalid", f'json patch: testing value {op["path"]} failed: test failed')
        else:
            raise bad_request(f'json patch: unexpected kind of operation "{kind}"')
    if not isinstance(doc, dict):
        raise bad_request("json patch: the result is not an object")
    return doc


# ---------------------------------------------------------------------- RFC 7386 merge patch
def merge_patch(doc: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    out = dict(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# ---------------------------------------------------------------------- strategic merge patch
class StrategicMerge:
    """Applies one strategic merge patch to an object of a known kind."""

    def __init__(self, schemas: Schemas) -> None:
        self.s = schemas

    def apply(self, doc: dict[str, Any], patch: Any, root: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(patch, dict):
            raise bad_request("strategic merge patch: the patch must be a JSON object")
        out = self._map(clone(doc), clone(patch), root)
        return {} if out is _DELETE else out

    def _map(self, doc: Any, patch: dict[str, Any], schema: dict[str, Any]) -> Any:
        directive = patch.pop("$patch", None)
        if directive == "delete":
            return _DELETE
        if directive == "replace":
            return self._strip(patch)
        if directive not in (None, "merge"):
            raise bad_request(f"Unknown patch type: {directive}")
        doc = dict(doc) if isinstance(doc, dict) else {}
        retain = patch.pop("$retainKeys", None)
        orders = {k.split("/", 1)[1]: patch.pop(k) for k in list(patch) if k.startswith("$setElementOrder/")}
        deletes = {k.split("/", 1)[1]: patch.pop(k) for k in list(patch)
                   if k.startswith("$deleteFromPrimitiveList/")}
        for k, v in patch.items():
            if k.startswith("$"):
                raise bad_request(f"strategic merge patch: unknown directive {k}")
            fschema = self.s.prop(schema, k)
            if v is None:
                doc.pop(k, None)
            elif isinstance(v, dict) and (isinstance(doc.get(k), dict) or k not in doc):
                merged = self._map(doc.get(k), v, fschema)
                if merged is _DELETE:
                    doc.pop(k, None)
                else:
                    doc[k] = merged
            elif isinstance(v, list):
                doc[k] = self._list(doc.get(k), v, fschema)
            else:
                doc[k] = v
        for k, values in deletes.items():
            if isinstance(doc.get(k), list):
                doc[k] = [x for x in doc[k] if x not in values]
        for k, order in orders.items():
            if isinstance(doc.get(k), list):
                doc[k] = self._order(doc[k], order, self.s.resolve(self.s.prop(schema, k)))
        if isinstance(retain, list):
            doc = {k: v for k, v in doc.items() if k in retain}
        return doc

    def _list(self, current: Any, patch: list[Any], fschema: dict[str, Any]) -> list[Any]:
        f = self.s.resolve(fschema) if "$ref" in fschema else fschema
        strategy = str(f.get("x-kubernetes-patch-strategy", ""))
        key = f.get("x-kubernetes-patch-merge-key")
        cur: list[Any] = list(current) if isinstance(current, list) else []
        if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
            return [self._strip(p) for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")]
        if "merge" not in strategy.split(","):
            return list(self._strip(patch))
        if not key:  # a merged list of primitives (finalizers)
            return cur + [p for p in patch if p not in cur]
        item_schema = self.s.items(f)
        for p in patch:
            if not isinstance(p, dict) or key not in p:
                raise bad_request(f"map: {p} does not contain declared merge key: {key}")
            idx = next((i for i, c in enumerate(cur) if isinstance(c, dict) and c.get(key) == p[key]), None)
            if p.get("$patch") == "delete":
                if idx is not None:
                    cur.pop(idx)
                continue
            if idx is None:
                merged = self._map({}, p, item_schema)
                if merged is not _DELETE:
                    cur.append(merged)
            else:
                merged = self._map(cur[idx], p, item_schema)
                if merged is _DELETE:
                    cur.pop(idx)
                else:
                    cur[idx] = merged
        return cur

    def _order(self, items: list[Any], order: list[Any], fschema: dict[str, Any]) -> list[Any]:
        key = fschema.get("x-kubernetes-patch-merge-key")

        def ident(x: Any) -> Any:
            return x.get(key) if key and isinstance(x, dict) else x

        wanted = [ident(o) for o in order]
        ranked = sorted(range(len(items)), key=lambda i: (wanted.index(ident(items[i]))
                                                           if ident(items[i]) in wanted else len(wanted), i))
        return [items[i] for i in ranked]

    def _strip(self, v: Any) -> Any:
        """Drop directives from a replacing value (they are instructions, not data)."""
        if isinstance(v, dict):
            return {k: self._strip(x) for k, x in v.items() if not k.startswith("$")}
        if isinstance(v, list):
            return [self._strip(x) for x in v]
        return v

"""A quick "is this valid?" over the Kubernetes JSON schemas, before jsonschema's full validation.

jsonschema (with ``referencing``) walks a pod in ~1-3 ms of pure Python per write, most of a request's
CPU in the stand-in. Almost every body is valid, so ``valid`` first checks the object with a plain walk
that knows only the keywords the 1.36 definitions use (``$ref``, ``type``, ``properties``,
``additionalProperties``, ``required``, ``items``, ``enum``, ``oneOf``; ``format`` and annotations
are not asserted, as jsonschema does not assert them without a format checker). It answers True only
where jsonschema finds no error; anything else (an error, an unknown keyword, a doubt) is False, and
the caller runs jsonschema, whose errors are the answer. So the result is jsonschema's, only cheaper.
"""

from __future__ import annotations

from typing import Any

#: keywords that assert nothing (jsonschema without a format checker ignores ``format``)
ANNOTATIONS = frozenset({"description", "format", "default", "title", "example", "examples", "$schema", "$id",
                         "$defs", "$comment", "deprecated", "readOnly", "writeOnly"})
ASSERTED = frozenset({"$ref", "type", "properties", "additionalProperties", "required", "items", "enum", "oneOf"})


def _type_ok(t: str, x: Any) -> bool:
    """jsonschema's draft 2020-12 type checker (booleans are not numbers; 1.0 is an integer)."""
    if t == "string":
        return isinstance(x, str)
    if t == "object":
        return isinstance(x, dict)
    if t == "array":
        return isinstance(x, list)
    if t == "null":
        return x is None
    if t == "boolean":
        return isinstance(x, bool)
    if t == "integer":
        return (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, float) and x.is_integer())
    if t == "number":
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    return False


class FastCheck:
    def __init__(self, defs: dict[str, dict[str, Any]]) -> None:
        self.defs = defs

    def valid(self, schema: Any, x: Any, known: frozenset[int]) -> bool:
        """True only if jsonschema would find ``x`` valid under ``schema``; ``known``: ids of parts
        known valid (equal to the stored object's at the same path), not walked."""
        if schema is True:
            return True
        if not isinstance(schema, dict):
            return False
        for key, want in schema.items():
            if key in ANNOTATIONS or key.startswith("x-kubernetes-"):
                continue
            if key not in ASSERTED:
                return False
            if key == "$ref":
                name = want.rsplit("/", 1)[1] if isinstance(want, str) and want.startswith("#/$defs/") else None
                target = self.defs.get(name) if name else None
                if target is None or not self.valid(target, x, known):
                    return False
            elif key == "type":
                if not (_type_ok(want, x) if isinstance(want, str) else any(_type_ok(t, x) for t in want)):
                    return False
            elif key == "enum":
                if not (isinstance(x, str) and x in want):
                    return False
            elif key == "oneOf":
                if sum(1 for s in want if self.valid(s, x, known)) != 1:
                    return False
            elif isinstance(x, dict) and not self._object(key, want, schema, x, known):
                return False
            elif key == "items" and isinstance(x, list):
                if want is False or "prefixItems" in schema:
                    return False
                if not all(id(i) in known or self.valid(want, i, known) for i in x):
                    return False
        return True

    def _object(self, key: str, want: Any, schema: dict[str, Any], x: dict[str, Any], known: frozenset[int]) -> bool:
        if key == "required":
            return all(k in x for k in want)
        if key == "properties":
            return all(id(x[k]) in known or self.valid(s, x[k], known) for k, s in want.items() if k in x)
        if key == "additionalProperties":
            props = schema.get("properties") or {}
            extra = [v for k, v in x.items() if k not in props]
            if want is False:
                return not extra
            return all(id(v) in known or self.valid(want, v, known) for v in extra)
        return True

"""Structural validation and strategic-merge metadata from the kubernetes-validate schemas.

kubernetes-validate ships the OpenAPI of each Kubernetes version as JSON Schema (strict variant:
``additionalProperties: false``) plus ``_definitions.json`` with every ``x-kubernetes-patch-*``
and list-map key. Using it instead of hand-written tables keeps the stand-in honest: what the real
1.36 server rejects as an unknown field, a wrong type or a missing required field, this rejects
too, and strategic merge uses the real merge keys. Go-level rules (names, immutability) are in
``strategies``/``pods``.
"""

from __future__ import annotations

import contextvars
import json
import marshal
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import kubernetes_validate
from referencing import Registry, Resource

from .errors import ApiError, FieldError, invalid
from .fastcheck import FastCheck
from .resources import SCHEMA_VERSION, ResourceType

DEFS_ID = "https://kubernetes.io/api/_definitions.json"
#: ids of the parts (dicts, lists) of the object being validated the same as the stored object's at the same path
_KNOWN: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("known_valid", default=frozenset())
_BASE = jsonschema.Draft202012Validator.VALIDATORS


def _properties(validator: Any, properties: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``properties`` keyword, except that a field known valid (``_KNOWN``) is not descended."""
    known = _KNOWN.get()
    if not known or not validator.is_type(instance, "object"):
        yield from _BASE["properties"](validator, properties, instance, schema)
        return
    for prop, subschema in properties.items():
        if prop in instance and id(instance[prop]) not in known:
            yield from validator.descend(instance[prop], subschema, path=prop, schema_path=prop)


def _items(validator: Any, items: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``items`` keyword (no ``prefixItems`` in Kubernetes' schemas), except that an item
    known valid (``_KNOWN``) is not descended."""
    known = _KNOWN.get()
    if not known or items is False or schema.get("prefixItems") or not validator.is_type(instance, "array"):
        yield from _BASE["items"](validator, items, instance, schema)
        return
    for index, item in enumerate(instance):
        if id(item) not in known:
            yield from validator.descend(instance=item, schema=items, path=index)


_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"properties": _properties, "items": _items})


_ABSENT: Any = object()


def _same(new: Any, old: Any) -> bool:
    """``new`` and ``old`` are the same JSON, types included: ``==`` alone holds True == 1 == 1.0 and
    False == 0, and a ``ready: 1`` equal to the stored ``ready: true`` must still be refused. marshal's
    version 2 writes each value's type and no back-references (so no sharing or reference count shows);
    a key-order difference, or a value marshal refuses (a YAML datetime), only costs a walk."""
    try:
        return bool(new == old) and marshal.dumps(new, 2) == marshal.dumps(old, 2)
    except (ValueError, RecursionError):
        return False


class _Aliased(Exception):
    """A dict or list occurs twice in the body (a YAML alias)."""


def _known(new: Any, old: Any) -> frozenset[int]:
    """The ids of the dicts and lists in ``new`` the same as ``old``'s at the same path (field name or
    list index): a subtree's validity depends only on it and its path's schema. An id stands for one
    path only if no dict or list the walk meets occurs twice: a body with a YAML alias
    (``finalizers: *labels``, or ``ports: *env`` whose list holds a part the same as the stored env's)
    gets no skips at all, and is checked whole."""
    known: set[int] = set()
    walked: set[int] = set()
    try:
        _pair(new, old, known, walked)
    except _Aliased:
        return frozenset()
    return frozenset(known - walked)


def _pair(new: Any, old: Any, known: set[int], walked: set[int]) -> None:
    """``new``'s dicts and lists below it into ``known`` (the same as ``old``'s at that path, not
    descended) or ``walked`` (all the others, descended); :class:`_Aliased` when one comes twice."""
    pairs: Any = ((v, old.get(k, _ABSENT)) for k, v in new.items()) if isinstance(new, dict) and isinstance(old, dict) \
        else ((v, old[i] if i < len(old) else _ABSENT) for i, v in enumerate(new)) \
        if isinstance(new, list) and isinstance(old, list) \
        else ((v, _ABSENT) for v in (new.values() if isinstance(new, dict) else new if isinstance(new, list) else ()))
    for v, o in pairs:
        if isinstance(v, (dict, list)):
            if id(v) in walked or id(v) in known:
                raise _Aliased  # its parts' verdicts at its first path need not hold at this one
            if o is not _ABSENT and _same(v, o):
                known.add(id(v))
            else:
                walked.add(id(v))
                _pair(v, o, known, walked)


GO_TYPES = {"string": "string", "integer": "int64", "number": "float64", "boolean": "bool",
            "array": "[]interface {}", "object": "map[string]interface {}"}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def field_path(parts: Iterator[Any] | list[Any]) -> str:
    """``spec.containers[0].name`` from a jsonschema path."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


class Schemas:
    """The definitions of one Kubernetes version, with cached validators per kind."""

    def __init__(self, version: str = SCHEMA_VERSION) -> None:
        base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
        with open(base / f"v{version}-local-strict" / "_definitions.json", encoding="utf-8") as f:
            doc = json.load(f)
        self.defs: dict[str, dict[str, Any]] = doc["$defs"]
        self.registry: Registry[Any] = Resource.from_contents(doc) @ Registry()
        self.by_gvk: dict[tuple[str, str, str], str] = {}
        for name, d in self.defs.items():
            for gvk in d.get("x-kubernetes-group-version-kind", []):
                self.by_gvk.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._fast = FastCheck(self.defs)

    # ------------------------------------------------------------------ navigation (for SMP)
    def root(self, group: str, version: str, kind: str) -> dict[str, Any]:
        name = self.by_gvk.get((group, version, kind))
        return self.defs[name] if name else {}

    def resolve(self, schema: dict[str, Any] | None) -> dict[str, Any]:
        """Follow ``$ref`` (all point into the definitions)."""
        while schema and "$ref" in schema:
            schema = self.defs[schema["$ref"].rsplit("/", 1)[1]]
        return schema or {}

    def prop(self, schema: dict[str, Any], key: str) -> dict[str, Any]:
        """The (unresolved) schema of field ``key`` of an object schema, or of a map's values."""
        s = self.resolve(schema)
        props = s.get("properties")
        if props and key in props:
            return dict(props[key])
        ap = s.get("additionalProperties")
        return dict(ap) if isinstance(ap, dict) else {}

    def items(self, field_schema: dict[str, Any]) -> dict[str, Any]:
        return self.resolve(self.resolve(field_schema).get("items") or {})

    # ------------------------------------------------------------------ validation
    def _validator(self, rt: ResourceType) -> jsonschema.protocols.Validator | None:
        name = self.by_gvk.get((rt.group, rt.version, rt.kind))
        if name is None:
            return None
        if name not in self._validators:
            self._validators[name] = _Validator(
                {"$ref": f"{DEFS_ID}#/$defs/{name}"}, registry=self.registry)
        return self._validators[name]

    def validate(self, rt: ResourceType, obj: dict[str, Any], *, field_validation: str,
                 name: str, stored: dict[str, Any] | None = None) -> list[str]:
        """Check ``obj`` against its kind's strict schema; returns warnings for dropped fields.

        Unknown fields: 400 under ``fieldValidation=Strict`` (kubectl's default), else dropped
        (with a warning under ``Warn``, the server default). Wrong JSON types: 400 (the decoder
        fails). Missing required fields, enums: 422 Invalid.

        ``stored``: the object an update or patch replaces, in the same view. It passed this
        validation when it was written (and was pruned and zero-filled then), so a part of ``obj``
        the same as its part at the same path there, types included (the spec under a status patch,
        the conditions that did not change), cannot fail: it is not walked again, unless it occurs
        at another path too (``_known``) (``oneOf``/``anyOf``, where that
        would not hold, appear only in CRD schemas, which are not served). A valid object is
        recognised by ``fastcheck``'s plain walk; jsonschema runs only for the others, and its errors
        are the answer. The result is the same, for a fraction of the CPU.
        """
        v = self._validator(rt)
        if v is None:
            return []
        known = _known(obj, stored) if stored is not None else frozenset()
        if self._fast.valid(self.defs[self.by_gvk[(rt.group, rt.version, rt.kind)]], obj, known):
            return []  # what jsonschema would find too (fastcheck): no error, nothing dropped
        token = _KNOWN.set(known)
        try:
            return self._check(rt, v, obj, field_validation=field_validation, name=name)
        finally:
            _KNOWN.reset(token)

    def _check(self, rt: ResourceType, v: Any, obj: dict[str, Any], *, field_validation: str, name: str) -> list[str]:
        warnings: list[str] = []
        for _ in range(50):  # pruning can uncover nothing new; bounded anyway
            errors = list(v.iter_errors(obj))
            unknown = [(e, k) for e in errors if e.validator == "additionalProperties"
                       for k in sorted(set(e.instance) - set(e.schema.get("properties", {})))]
            if not unknown:
                break
            paths = [field_path([*e.absolute_path, k]) for e, k in unknown]
            if field_validation == "Strict":
                raise ApiError(400, "BadRequest", f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                               f'{rt.kind}: strict decoding error: '
                               + ", ".join(f'unknown field "{p}"' for p in paths))
            if field_validation == "Warn":
                warnings += [f'unknown field "{p}"' for p in paths]
            for e, k in unknown:
                e.instance.pop(k, None)
        else:
            errors = list(v.iter_errors(obj))
        self._raise_type_errors(rt, errors)
        errors = self._fill_status_zeroes(v, obj, errors)
        field_errors = [self._field_error(e) for e in errors]
        if field_errors:
            raise invalid(rt.kind, rt.group, name, field_errors)
        return warnings

    def _fill_status_zeroes(self, v: Any, obj: dict[str, Any],
                            errors: list[jsonschema.ValidationError]) -> list[jsonschema.ValidationError]:
        """A field the OpenAPI marks required is one without ``omitempty`` in Go: decoding a body
        that lacks it gives the zero value, and only Go validation may refuse it. Under ``status``
        (what kubelets write piecemeal: containerStatuses without imageID...) the real server
        refuses none of them, so they get their zero value, as Go would encode it back."""
        for _ in range(20):
            todo = [e for e in errors if e.validator == "required" and list(e.absolute_path)[:1] == ["status"]
                    and isinstance(e.instance, dict)]
            if not todo:
                return errors
            for e in todo:
                for key in e.validator_value:
                    if key not in e.instance:
                        e.instance[key] = self._zero(e.schema.get("properties", {}).get(key, {}))
            errors = list(v.iter_errors(obj))
        return errors

    def _zero(self, schema: dict[str, Any]) -> Any:
        s = self.resolve(schema)
        types = s.get("type", "object")
        t = next((x for x in types if x != "null"), "object") if isinstance(types, list) else types
        if "oneOf" in s:  # Quantity, IntOrString
            return "0" if s["oneOf"][0].get("type") in ("string", ["string", "null"]) else 0
        return {"string": "", "integer": 0, "number": 0, "boolean": False}.get(t, None if t == "array" else {})

    def _raise_type_errors(self, rt: ResourceType, errors: list[jsonschema.ValidationError]) -> None:
        for e in errors:
            if e.validator in ("type", "oneOf") and not (e.validator == "oneOf" and isinstance(e.instance, (str, int, float)) and not isinstance(e.instance, bool)):
                want = e.validator_value if e.validator == "type" else "string"
                if isinstance(want, list):
                    want = next((w for w in want if w != "null"), "string")
                raise ApiError(400, "BadRequest", f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                               f'{rt.kind}: json: cannot unmarshal {_json_type(e.instance)} into Go struct field '
                               f'{rt.kind}.{field_path(e.absolute_path)} of type {GO_TYPES.get(str(want), str(want))}')

    @staticmethod
    def _field_error(e: jsonschema.ValidationError) -> FieldError:
        path = field_path(e.absolute_path)
        if e.validator == "required":
            missing = str(e.message).split("'")[1] if "'" in e.message else ""
            return FieldError("FieldValueRequired", f"{path}.{missing}" if path else missing)
        if e.validator == "enum":
            supported = ", ".join(f'"{x}"' for x in e.validator_value if x is not None)
            return FieldError("FieldValueNotSupported", path, f"supported values: {supported}", e.instance)
        return FieldError("FieldValueInvalid", path, e.message, e.instance)


@lru_cache(maxsize=1)
def schemas() -> Schemas:
    return Schemas()

"""``Model``: a class whose annotations are its validation rules (the subset of pydantic's
``BaseModel`` hpkctl uses, with its names): ``model_validate``, ``model_copy``, ``model_dump``,
``model_fields``, ``model_extra``; config ``extra`` (allow | forbid | ignore), ``alias_generator``,
``populate_by_name``, ``frozen``. Types are always strict (:mod:`hpkctl.typed.compile`).

Annotations are resolved, and each field's check built, on a class's first validation (or first
``model_fields``), and kept on the class: importing a module of models costs only its class
statements.
"""

from __future__ import annotations

import copy
import typing
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, dataclass_transform

from hpkctl.typed.compile import Check, after_check, bounded, compile_type
from hpkctl.typed.errors import ErrorDict, Invalid, ValidationError, error, from_exception, prefixed
from hpkctl.typed.fields import UNSET, Field, FieldInfo, FieldValidator, ModelValidator

M = TypeVar("M", bound="Model")
_EXTRA = "__typed_extra__"


def ConfigDict(**config: Any) -> dict[str, Any]:  # noqa: N802 (pydantic's name)
    """A model's settings, as ``model_config = ConfigDict(extra="forbid", frozen=True)``."""
    return config


class _Plan:
    """A class's fields, resolved: what one validation walks."""

    def __init__(self, cls: type[Model]) -> None:
        config = cls.__typed_config__
        hints = typing.get_type_hints(cls, include_extras=True)
        alias_of: Callable[[str], str] | None = config.get("alias_generator")
        by_name = bool(config.get("populate_by_name")) or alias_of is None
        validators = _collect(cls, FieldValidator)
        self.fields: dict[str, FieldInfo] = {}
        self.steps: list[tuple[str, str, str | None, Check, Any, Any]] = []
        self.known: set[str] = set()
        for name, declared in cls.__typed_declared__.items():
            info = copy.copy(declared)
            hint = hints[name]
            info.annotation = hint
            if typing.get_origin(hint) is typing.Annotated:
                info.annotation = typing.get_args(hint)[0]
                info.metadata = list(hint.__metadata__)
            check = compile_type(hint)
            if info.bounds.any():
                check = bounded(check, info.bounds, floats=info.annotation is float)
            for v in validators:
                if name in v.fields:
                    check = after_check(check, v.func.__get__(None, cls))
            alias = info.alias or (alias_of(name) if alias_of else name)
            info.alias = alias if alias != name else None
            self.fields[name] = info
            alt = name if by_name and alias != name else None
            self.steps.append((name, alias, alt, check, info.default, info.default_factory))
            self.known.update(k for k in (alias, alt) if k)
        self.extra: str = config.get("extra", "ignore")
        self.after = [v.func.__get__(None, cls) if isinstance(v.func, classmethod) else v.func
                      for v in _collect(cls, ModelValidator)]


def _collect(cls: type, kind: type[Any]) -> list[Any]:
    seen: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for key, value in vars(klass).items():
            if isinstance(value, kind):
                seen[key] = value
    return list(seen.values())


@dataclass_transform(kw_only_default=True, field_specifiers=(Field, FieldInfo))
class ModelMeta(type):
    """Records each model class's declared fields and settings; :attr:`model_fields` resolves them."""

    __typed_config__: dict[str, Any]
    __typed_declared__: dict[str, FieldInfo]

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any) -> ModelMeta:
        cls = super().__new__(mcs, name, bases, ns, **kw)
        config: dict[str, Any] = {}
        declared: dict[str, FieldInfo] = {}
        for base in reversed(bases):
            config.update(getattr(base, "__typed_config__", {}))
            declared.update(getattr(base, "__typed_declared__", {}))
        config.update(ns.get("model_config", {}))
        if "__annotations__" not in ns and "__annotate__" in ns:  # Python 3.14's lazy annotations (PEP 649)
            raise TypeError(f"{ns.get('__module__')}.{name}: hpkctl.typed reads a model's annotations as the "
                            "class body leaves them: start its module with `from __future__ import annotations`")
        for field, hint in ns.get("__annotations__", {}).items():
            if field.startswith("_") or field == "model_config" or "ClassVar" in str(hint):
                continue
            default = ns.get(field, UNSET)
            declared[field] = default if isinstance(default, FieldInfo) else FieldInfo(default)
        cls.__typed_config__ = config
        cls.__typed_declared__ = declared
        return cls

    @property
    def model_fields(cls) -> dict[str, FieldInfo]:
        return _plan(cls).fields


def _plan(cls: Any) -> _Plan:
    plan = cls.__dict__.get("__typed_plan__")
    if plan is None:
        plan = _Plan(cls)
        type.__setattr__(cls, "__typed_plan__", plan)
    return plan  # type: ignore[no-any-return]


class Model(metaclass=ModelMeta):
    """The base of every typed model; see the module's docstring."""

    model_config: ClassVar[dict[str, Any]] = {}

    def __init__(self, **data: Any) -> None:
        try:
            made = type(self)._typed_check(data)
        except Invalid as e:
            raise ValidationError(type(self).__name__, e.errors) from None
        self.__dict__.update(made.__dict__)

    @classmethod
    def model_validate(cls: type[M], obj: Any, *, strict: bool | None = None) -> M:
        """``obj`` (a mapping, or an instance) as this model; :class:`ValidationError` lists every problem.
        ``strict`` is accepted for pydantic's spelling: validation is always strict."""
        del strict
        try:
            return cls._typed_check(obj)
        except Invalid as e:
            raise ValidationError(cls.__name__, e.errors) from None

    @classmethod
    def _typed_check(cls: type[M], data: Any) -> M:
        if type(data) is not dict:
            if isinstance(data, cls):
                return data
            if not isinstance(data, dict):
                raise error("model_type", f"Input should be a valid dictionary or instance of {cls.__name__}",
                            data, {"class_name": cls.__name__})
        plan = cls.__dict__.get("__typed_plan__") or _plan(cls)
        values: dict[str, Any] = {}
        errors: list[ErrorDict] | None = None
        used = 0
        for name, key, alt, check, default, factory in plan.steps:
            if key in data:
                at = key
            elif alt is not None and alt in data:
                at = alt
            elif default is not UNSET:
                values[name] = default
                continue
            elif factory is not None:
                values[name] = factory()
                continue
            else:
                errors = (errors or []) + [{"type": "missing", "loc": (key,), "msg": "Field required", "input": data}]
                continue
            used += 1
            try:
                values[name] = check(data[at])
            except Invalid as e:
                errors = (errors or []) + prefixed(e.errors, at)
        extra: dict[str, Any] | None = {} if plan.extra == "allow" else None
        if used < len(data):
            extra, more = _extra(plan.extra, data, plan.known)
            errors = (errors or []) + more if more else errors
        if errors:
            raise Invalid(errors)
        inst = object.__new__(cls)
        inst.__dict__.update(values)
        inst.__dict__[_EXTRA] = extra
        for after in plan.after:
            try:
                inst = after(inst)
            except (ValueError, AssertionError) as e:
                raise from_exception(e, data) from None
        return inst

    @property
    def model_extra(self) -> dict[str, Any] | None:
        return self.__dict__.get(_EXTRA)

    def model_copy(self: M, *, update: dict[str, Any] | None = None, deep: bool = False) -> M:
        """A copy with ``update``'s values (not validated, as pydantic's)."""
        new = object.__new__(type(self))
        new.__dict__.update(copy.deepcopy(self.__dict__) if deep else self.__dict__)
        fields = type(self).model_fields
        extra = dict(new.__dict__.get(_EXTRA) or {})
        for key, value in (update or {}).items():
            if key in fields:
                new.__dict__[key] = value
            else:
                extra[key] = value
        if new.__dict__.get(_EXTRA) is not None or extra:
            new.__dict__[_EXTRA] = extra
        return new

    def model_dump(self, *, exclude: set[str] | None = None, by_alias: bool = False,
                   exclude_none: bool = False) -> dict[str, Any]:
        """The fields (and kept unknown fields) as plain data, nested models as dicts."""
        out: dict[str, Any] = {}
        for name, info in type(self).model_fields.items():
            if exclude and name in exclude:
                continue
            value = self.__dict__[name]
            if exclude_none and value is None:
                continue
            out[(info.alias or name) if by_alias else name] = _dump(value, by_alias, exclude_none)
        for key, value in (self.model_extra or {}).items():
            if not (exclude and key in exclude) and not (exclude_none and value is None):
                out[key] = _dump(value, by_alias, exclude_none)
        return out

    def __getattr__(self, name: str) -> Any:
        extra = self.__dict__.get(_EXTRA) if name != "__dict__" else None
        if extra and name in extra:
            return extra[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self).__typed_config__.get("frozen"):
            raise AttributeError(f"{type(self).__name__} is frozen: use model_copy(update={{{name!r}: ...}})")
        self.__dict__[name] = value

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__}: fields cannot be deleted")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *(self.__dict__[n] for n in type(self).model_fields)))

    def __repr__(self) -> str:
        parts = [f"{n}={self.__dict__[n]!r}" for n in type(self).model_fields]
        parts += [f"{k}={v!r}" for k, v in (self.model_extra or {}).items()]
        return f"{type(self).__name__}({', '.join(parts)})"


def _extra(mode: str, data: dict[Any, Any], known: set[str]) -> tuple[dict[str, Any] | None, list[ErrorDict]]:
    """The unknown keys of ``data``: kept (allow), errors (forbid) or dropped (ignore); keys must be strings."""
    kept: dict[str, Any] = {}
    errors: list[ErrorDict] = []
    for k, v in data.items():
        if k in known:
            continue
        if not isinstance(k, str):
            errors.append({"type": "invalid_key", "loc": (k,), "msg": "Keys should be strings", "input": k})
        elif mode == "forbid":
            errors.append({"type": "extra_forbidden", "loc": (k,), "msg": "Extra inputs are not permitted", "input": v})
        elif mode == "allow":
            kept[k] = v
    return (kept if mode == "allow" else None), errors


def _dump(value: Any, by_alias: bool, exclude_none: bool) -> Any:
    if isinstance(value, Model):
        return value.model_dump(by_alias=by_alias, exclude_none=exclude_none)
    if isinstance(value, list):
        return [_dump(v, by_alias, exclude_none) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v, by_alias, exclude_none) for k, v in value.items()}
    return value


BaseModel = Model

__all__ = ["BaseModel", "ConfigDict", "Model", "ModelMeta"]

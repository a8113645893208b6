"""A pydantic twin of an hpkctl.typed model: the same annotations, defaults, aliases, bounds, rule
functions and validators, compiled by pydantic. Property tests validate one document with both and
compare the errors (type, location, message, context): hpkctl.typed keeps pydantic's wording, which
the messages users see are built from. pydantic stays installed (the kubernetes client needs it).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union

import pydantic
from pydantic_core import PydanticCustomError

from hpkctl.typed import AfterValidator, BaseModel, BeforeValidator, FieldInfo, RuleError
from hpkctl.typed.fields import UNSET, FieldValidator, ModelValidator


def _rules(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``func`` with hpkctl.typed's RuleError raised as pydantic's custom error."""
    def run(value: Any) -> Any:
        try:
            return func(value)
        except RuleError as e:
            raise PydanticCustomError(e.kind, str(e.args[0]), e.ctx) from None
    return run


def _bounds(info: FieldInfo) -> dict[str, Any]:
    b = info.bounds
    return {k: getattr(b, k) for k in ("ge", "gt", "le", "lt", "min_length", "max_length") if getattr(b, k) is not None}


def convert(tp: Any) -> Any:
    """``tp`` with every hpkctl.typed model, validator and bound replaced by pydantic's."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return twin(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        meta: list[Any] = []
        for m in tp.__metadata__:
            if isinstance(m, AfterValidator):
                meta.append(pydantic.AfterValidator(_rules(m.func)))
            elif isinstance(m, BeforeValidator):
                meta.append(pydantic.BeforeValidator(_rules(m.func)))
            elif isinstance(m, FieldInfo):
                meta.append(pydantic.Field(**_bounds(m)))
        return Annotated[(convert(args[0]), *meta)]  # type: ignore[return-value]
    if origin is Literal:
        return tp
    if origin is Union or origin is typing.get_origin(int | str):
        return Union[tuple(convert(a) for a in args)]  # type: ignore[return-value]  # noqa: UP007
    if origin is list:
        return list[convert(args[0])]  # type: ignore[misc]
    if origin is dict:
        return dict[convert(args[0]), convert(args[1])]  # type: ignore[misc]
    return tp


@functools.cache
def twin(cls: type[BaseModel]) -> type[pydantic.BaseModel]:
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {}
    for name, info in cls.model_fields.items():
        kw: dict[str, Any] = {**_bounds(info), "description": info.description}
        if info.alias:
            kw["alias"] = info.alias
        if info.default_factory is not None:
            kw["default_factory"] = info.default_factory
        elif info.default is not UNSET:
            kw["default"] = info.default.model_dump() if isinstance(info.default, BaseModel) else info.default
        fields[name] = (convert(hints[name]), pydantic.Field(**kw))
    validators: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for key, value in vars(klass).items():
            if isinstance(value, FieldValidator):
                bound = value.func.__get__(None, cls)
                validators[key] = pydantic.field_validator(*value.fields, check_fields=False)(
                    classmethod(lambda _c, v, f=bound: f(v)))
            elif isinstance(value, ModelValidator):
                validators[key] = pydantic.model_validator(mode="after")(value.func)
    config = {k: v for k, v in cls.__typed_config__.items()}
    model: type[pydantic.BaseModel] = pydantic.create_model(  # type: ignore[call-overload]
        cls.__name__, __config__=pydantic.ConfigDict(**config), __validators__=validators, **fields)
    return model


def errors_of(model: Any, data: Any) -> list[tuple[Any, ...]] | None:
    """The errors ``model`` (either kind) gives ``data``, comparably; None when it is valid."""
    try:
        model.model_validate(data, strict=True)
    except (pydantic.ValidationError, ValueError) as exc:
        errs = exc.errors()  # type: ignore[attr-defined]
        return [(e["type"], tuple(e["loc"]), e["msg"], repr(e["input"]),
                 repr({k: str(v) for k, v in e["ctx"].items()}) if "ctx" in e else None) for e in errs]
    return None

"""What a model's annotations and class body say about a field: :func:`Field` (default, alias,
bounds, description), :class:`AfterValidator`/:class:`BeforeValidator` in ``Annotated``, and the
``field_validator``/``model_validator`` decorators. The names and arguments are pydantic's, so the
models read as before; nothing here validates (see :mod:`hpkctl.typed.compile`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: No default given: the field is required.
UNSET: Any = _Unset()


@dataclass(frozen=True)
class Bounds:
    """Constraints of a value: numbers (ge, gt, le, lt), lengths of strings, lists and dicts."""

    ge: Any = None
    gt: Any = None
    le: Any = None
    lt: Any = None
    min_length: int | None = None
    max_length: int | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.ge, self.gt, self.le, self.lt, self.min_length, self.max_length))


class FieldInfo:
    """A field: its annotation (the resolved type, outer ``Annotated`` removed), default and description."""

    def __init__(self, default: Any = UNSET, *, default_factory: Callable[[], Any] | None = None,
                 alias: str | None = None, description: str | None = None, bounds: Bounds | None = None) -> None:
        self.default = default
        self.default_factory = default_factory
        self.alias = alias
        self.description = description
        self.bounds = bounds or Bounds()
        self.annotation: Any = None
        self.metadata: list[Any] = []

    def is_required(self) -> bool:
        return self.default is UNSET and self.default_factory is None

    def get_default(self, *, call_default_factory: bool = False) -> Any:
        if self.default_factory is not None:
            return self.default_factory() if call_default_factory else None
        return None if self.default is UNSET else self.default

    def __repr__(self) -> str:
        return f"FieldInfo(annotation={self.annotation!r}, default={self.default!r}, alias={self.alias!r})"


def Field(default: Any = UNSET, *, default_factory: Callable[[], Any] | None = None, alias: str | None = None,
          description: str | None = None, ge: Any = None, gt: Any = None, le: Any = None, lt: Any = None,
          min_length: int | None = None, max_length: int | None = None) -> Any:  # noqa: N802 (pydantic's name)
    """A field's default and rules, as the default value of a class attribute or inside ``Annotated``."""
    return FieldInfo(default, default_factory=default_factory, alias=alias, description=description,
                     bounds=Bounds(ge=ge, gt=gt, le=le, lt=lt, min_length=min_length, max_length=max_length))


@dataclass(frozen=True)
class AfterValidator:
    """In ``Annotated``: ``func(value)`` runs after the type check; it returns the value or raises."""

    func: Callable[[Any], Any]


@dataclass(frozen=True)
class BeforeValidator:
    """In ``Annotated``: ``func(raw)`` runs before the type check, on what was given."""

    func: Callable[[Any], Any]


@dataclass(frozen=True)
class FieldValidator:
    """A classmethod run on the named fields' values after their type checks (``check_fields`` is accepted
    for pydantic's spelling: a validator of a base class applies to the subclasses that have the field)."""

    fields: tuple[str, ...]
    func: Any


@dataclass(frozen=True)
class ModelValidator:
    """A method run on the new instance once every field is valid; it returns the instance or raises."""

    func: Any


def field_validator(*fields: str, check_fields: bool | None = None) -> Callable[[Any], Any]:
    del check_fields

    def mark(func: Any) -> Any:
        return FieldValidator(fields, func)
    return mark


def model_validator(*, mode: Literal["after"]) -> Callable[[Any], Any]:
    del mode

    def mark(func: Any) -> Any:
        return ModelValidator(func)
    return mark


def to_camel(snake: str) -> str:
    """``termination_grace_period_seconds`` → ``terminationGracePeriodSeconds`` (pydantic's rule)."""
    if re.match("^[a-z]+[A-Za-z0-9]*$", snake) and not re.search(r"\d[a-z]", snake):
        return snake
    pascal = re.sub("([0-9A-Za-z])_(?=[0-9A-Z])", lambda m: m.group(1), snake.title())
    return re.sub("(^_*[A-Z])", lambda m: m.group(1).lower(), pascal)


__all__ = ["UNSET", "AfterValidator", "BeforeValidator", "Bounds", "Field", "FieldInfo", "FieldValidator",
           "ModelValidator", "field_validator", "model_validator", "to_camel"]

"""What a model's annotations and class body say about a field: :func:`Field` (default, alias,
bounds, description), :class:`AfterValidator`/:class:`BeforeValidator` in ``Annotated``, and the
``field_validator``/``model_validator`` decorators. The names and arguments are pydantic's, so the
models read as before; nothing here validates (see :mod:`hpkctl.typed.compile`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: No default given: the field is required.
UNSET: Any = _Unset()


class Bounds:
    """Constraints of a value: numbers (ge, gt, le, lt), lengths of strings, lists and dicts.

    Plain classes here, not dataclasses: a dataclass costs ~0.5 ms to create, and every command that reads
    a profile or a pod imports this module (issue 23.2)."""

    __slots__ = ("ge", "gt", "le", "lt", "min_length", "max_length")

    def __init__(self, ge: Any = None, gt: Any = None, le: Any = None, lt: Any = None, min_length: int | None = None,
                 max_length: int | None = None) -> None:
        self.ge, self.gt, self.le, self.lt = ge, gt, le, lt
        self.min_length, self.max_length = min_length, max_length

    def any(self) -> bool:
        return any(v is not None for v in (self.ge, self.gt, self.le, self.lt, self.min_length, self.max_length))


#: The bounds of a field that has none (shared: bounds are never changed).
NO_BOUNDS = Bounds()


class FieldInfo:
    """A field: its annotation (the resolved type, outer ``Annotated`` removed), default and description."""

    def __init__(self, default: Any = UNSET, *, default_factory: Callable[[], Any] | None = None,
                 alias: str | None = None, description: str | None = None, bounds: Bounds | None = None) -> None:
        self.default = default
        self.default_factory = default_factory
        self.alias = alias
        self.description = description
        self.bounds = bounds or NO_BOUNDS
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
    given = (ge, gt, le, lt, min_length, max_length) != (None,) * 6
    return FieldInfo(default, default_factory=default_factory, alias=alias, description=description,
                     bounds=Bounds(ge, gt, le, lt, min_length, max_length) if given else NO_BOUNDS)


class _Wraps:
    __slots__ = ("func",)

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.func!r})"


class AfterValidator(_Wraps):
    """In ``Annotated``: ``func(value)`` runs after the type check; it returns the value or raises."""

    __slots__ = ()


class BeforeValidator(_Wraps):
    """In ``Annotated``: ``func(raw)`` runs before the type check, on what was given."""

    __slots__ = ()


class ModelValidator(_Wraps):
    """A method run on the new instance once every field is valid; it returns the instance or raises."""

    __slots__ = ()


class FieldValidator(_Wraps):
    """A classmethod run on the named fields' values after their type checks (``check_fields`` is accepted
    for pydantic's spelling: a validator of a base class applies to the subclasses that have the field)."""

    __slots__ = ("fields",)

    def __init__(self, fields: tuple[str, ...], func: Any) -> None:
        super().__init__(func)
        self.fields = fields


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

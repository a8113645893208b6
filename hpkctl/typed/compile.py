"""Annotations to checks: each type becomes one function ``check(value) -> value`` that raises
:class:`~hpkctl.typed.errors.Invalid` with every error below it. Types are strict, as JSON/YAML/TOML
give them: no str↔int coercion, ``bool`` is not an ``int``; a ``float`` field takes an int.

Built once per class field (on the class's first validation), so validating is calls of small
closures, no dispatch on the annotation.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union

from hpkctl.typed.errors import Invalid, error, from_exception, prefixed
from hpkctl.typed.fields import AfterValidator, BeforeValidator, Bounds, FieldInfo

Check = Callable[[Any], Any]


def _plain(kind: type, name: str, msg: str) -> Check:
    if kind is int:
        def check_int(v: Any) -> Any:
            if type(v) is int or (isinstance(v, int) and not isinstance(v, bool)):
                return v
            raise error(name, msg, v)
        return check_int
    if kind is float:
        def check_float(v: Any) -> Any:
            if type(v) is float or (isinstance(v, (int, float)) and not isinstance(v, bool)):
                return v
            raise error(name, msg, v)
        return check_float
    if kind is bool:
        def check_bool(v: Any) -> Any:
            if v is True or v is False:
                return v
            raise error(name, msg, v)
        return check_bool

    def check_instance(v: Any) -> Any:
        if isinstance(v, kind):
            return v
        raise error(name, msg, v)
    return check_instance


_SCALARS: dict[Any, tuple[str, str]] = {
    str: ("string_type", "Input should be a valid string"),
    int: ("int_type", "Input should be a valid integer"),
    float: ("float_type", "Input should be a valid number"),
    bool: ("bool_type", "Input should be a valid boolean"),
}


def _literal(values: tuple[Any, ...]) -> Check:
    shown = [repr(v) for v in values]
    expected = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
    allowed = {(type(v), v) for v in values}

    def check_literal(v: Any) -> Any:
        try:
            if (type(v), v) in allowed:
                return v
        except TypeError:  # unhashable input
            pass
        raise error("literal_error", f"Input should be {expected}", v, {"expected": expected})
    return check_literal


def _list(item: Check) -> Check:
    def check_list(v: Any) -> Any:
        if not isinstance(v, list):
            raise error("list_type", "Input should be a valid list", v)
        out = []
        errors = None
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except Invalid as e:
                errors = (errors or []) + prefixed(e.errors, i)
        if errors:
            raise Invalid(errors)
        return out
    return check_list


def _dict(key: Check | None, value: Check | None) -> Check:
    def check_dict(v: Any) -> Any:
        if not isinstance(v, dict):
            raise error("dict_type", "Input should be a valid dictionary", v)
        if key is None and value is None:
            return dict(v)
        out = {}
        errors = None
        for k, x in v.items():
            if key is not None:
                try:
                    k2 = key(k)
                except Invalid as e:
                    errors = (errors or []) + prefixed(prefixed(e.errors, "[key]"), k)
                    k2 = k
            else:
                k2 = k
            if value is not None:
                try:
                    x = value(x)
                except Invalid as e:
                    errors = (errors or []) + prefixed(e.errors, k)
            out[k2] = x
        if errors:
            raise Invalid(errors)
        return out
    return check_dict


def _tag(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _union(members: list[Any]) -> Check:
    checks = [(_tag(m), compile_type(m)) for m in members]

    def check_union(v: Any) -> Any:
        errors = []
        for tag, check in checks:
            try:
                return check(v)
            except Invalid as e:
                errors += prefixed(e.errors, tag)
        raise Invalid(errors)
    return check_union


def _nullable(inner: Check) -> Check:
    def check_nullable(v: Any) -> Any:
        return None if v is None else inner(v)
    return check_nullable


def bounded(inner: Check, b: Bounds, *, generic: bool = False, floats: bool = False) -> Check:
    """``inner`` then ``b``'s rules; a list longer than ``max_length`` fails before its items are checked.
    ``generic``: the bounds follow a validator function, and pydantic words a length error as of a "Value".
    ``floats``: a ``float`` field, whose bounds an error's context gives as floats (``{'ge': 0.0}``)."""
    numbers = [(kind, key, text, limit, float(limit) if floats else limit) for kind, key, text, limit in (
        ("greater_than_equal", "ge", "greater than or equal to", b.ge), ("greater_than", "gt", "greater than", b.gt),
        ("less_than_equal", "le", "less than or equal to", b.le), ("less_than", "lt", "less than", b.lt))
        if limit is not None]
    lengths = b.min_length is not None or b.max_length is not None

    def check_bounded(v: Any) -> Any:
        if b.max_length is not None and isinstance(v, (list, dict)) and len(v) > b.max_length:
            _length(v, b, generic)
        v = inner(v)
        for kind, key, text, limit, shown in numbers:
            if not _within(kind, v, limit):
                raise error(kind, f"Input should be {text} {_number(limit)}", v, {key: shown})
        if lengths:
            _length(v, b, generic)
        return v
    return check_bounded


def _within(kind: str, v: Any, limit: Any) -> bool:
    if kind == "greater_than_equal":
        return bool(v >= limit)
    if kind == "greater_than":
        return bool(v > limit)
    if kind == "less_than_equal":
        return bool(v <= limit)
    return bool(v < limit)


def _number(x: Any) -> str:
    """A bound as pydantic's messages show it: 30.0 as 30."""
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def _length(v: Any, b: Bounds, generic: bool) -> None:
    n = len(v)
    if isinstance(v, str) and not generic:
        for limit, word, kind in ((b.min_length, "least", "string_too_short"), (b.max_length, "most", "string_too_long")):
            if limit is not None and (n < limit if word == "least" else n > limit):
                raise error(kind, f"String should have at {word} {limit} character{'s' if limit != 1 else ''}",
                            v, {"min_length" if word == "least" else "max_length": limit})
        return
    what = "Value" if generic else "Dictionary" if isinstance(v, dict) else "List"
    for limit, word, kind in ((b.min_length, "least", "too_short"), (b.max_length, "most", "too_long")):
        if limit is not None and (n < limit if word == "least" else n > limit):
            key = "min_length" if word == "least" else "max_length"
            raise error(kind, f"{what} should have at {word} {limit} item{'s' if limit != 1 else ''} after validation, "
                        f"not {n}", v, {"field_type": what, key: limit, "actual_length": n})


def after_check(inner: Check, func: Callable[[Any], Any]) -> Check:
    """``inner``, then ``func`` on its result (an ``AfterValidator``, a ``field_validator``)."""
    def check_after(v: Any) -> Any:
        v = inner(v)
        try:
            return func(v)
        except (ValueError, AssertionError) as e:
            raise from_exception(e, v) from None
    return check_after


def _before(inner: Check, func: Callable[[Any], Any]) -> Check:
    def check_before(v: Any) -> Any:
        try:
            v = func(v)
        except (ValueError, AssertionError) as e:
            raise from_exception(e, v) from None
        return inner(v)
    return check_before


def _annotated(base: Any, metadata: tuple[Any, ...]) -> Check:
    check = compile_type(base)
    wrapped = typing.get_origin(base) is Annotated
    for meta in metadata:
        if isinstance(meta, AfterValidator):
            check, wrapped = after_check(check, meta.func), True
        elif isinstance(meta, BeforeValidator):
            check, wrapped = _before(check, meta.func), True
        elif isinstance(meta, FieldInfo) and meta.bounds.any():
            check = bounded(check, meta.bounds, generic=wrapped, floats=base is float)
    return check


def _any(v: Any) -> Any:
    return v


def compile_type(tp: Any) -> Check:
    """The check of annotation ``tp`` (forward references already resolved)."""
    if tp is Any or tp is object:
        return _any
    if tp in _SCALARS:
        return _plain(tp, *_SCALARS[tp])
    if tp is None or tp is type(None):
        return _literal((None,))
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is None and isinstance(tp, type) and hasattr(tp, "_typed_check"):
        return typing.cast(Check, tp._typed_check)
    if origin is Annotated:
        return _annotated(args[0], tuple(tp.__metadata__))
    if origin is Literal:
        return _literal(args)
    if origin is Union or origin is types.UnionType:
        rest = [a for a in args if a is not type(None)]
        inner = compile_type(rest[0]) if len(rest) == 1 else _union(rest)
        return _nullable(inner) if len(rest) < len(args) else inner
    if origin is list:
        return _list(compile_type(args[0]) if args else _any)
    if origin is dict:
        key = None if not args or args[0] is Any else compile_type(args[0])
        value = None if not args or args[1] is Any else compile_type(args[1])
        return _dict(key, value)
    if tp is list:
        return _list(_any)
    if tp is dict:
        return _dict(None, None)
    if isinstance(tp, type):
        return _plain(tp, "is_instance_of", f"Input should be an instance of {tp.__name__}")
    raise TypeError(f"hpkctl.typed cannot check {tp!r}: add it to hpkctl/typed/compile.py")


__all__ = ["Check", "after_check", "bounded", "compile_type"]

"""Validation errors: one list of ``{type, loc, msg, input[, ctx]}`` per failed validation, the shape
:mod:`hpkctl.pod.validation` and :mod:`hpkctl.sites.validation` turn into their messages.

The types and texts are pydantic's (``string_type``, "Input should be a valid string", ...): the
messages users see were written against them and are pinned by the tests.
"""

from __future__ import annotations

from typing import Any

#: One error: ``type``, ``loc`` (a tuple of keys and indices), ``msg``, ``input``, and ``ctx`` when the rule has one.
ErrorDict = dict[str, Any]


class RuleError(ValueError):
    """Raised by a rule function: ``kind`` is the error's type, ``message`` its text (``{key}`` placeholders
    are filled from ``ctx``), ``ctx`` what a message builder may read (e.g. a hint)."""

    def __init__(self, kind: str, message: str, ctx: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.ctx = ctx
        text = message
        for key, value in (ctx or {}).items():
            text = text.replace("{" + key + "}", str(value))
        self.message = text


class Invalid(Exception):
    """Internal: the errors of one value, their ``loc`` relative to it (prefixed on the way out)."""

    __slots__ = ("errors",)

    def __init__(self, errors: list[ErrorDict]) -> None:
        self.errors = errors


def error(kind: str, msg: str, value: Any, ctx: dict[str, Any] | None = None) -> Invalid:
    err: ErrorDict = {"type": kind, "loc": (), "msg": msg, "input": value}
    if ctx is not None:
        err["ctx"] = ctx
    return Invalid([err])


def prefixed(errors: list[ErrorDict], key: Any) -> list[ErrorDict]:
    for err in errors:
        err["loc"] = (key, *err["loc"])
    return errors


def from_exception(exc: Exception, value: Any) -> Invalid:
    """The error a rule function's exception stands for (``ValueError`` as pydantic words it)."""
    if isinstance(exc, RuleError):
        return error(exc.kind, exc.message, value, exc.ctx)
    if isinstance(exc, AssertionError):
        return error("assertion_error", f"Assertion failed, {exc}", value, {"error": exc})
    return error("value_error", f"Value error, {exc}", value, {"error": exc})


class ValidationError(ValueError):
    """A value broke its model's rules; :meth:`errors` lists every problem."""

    def __init__(self, title: str, errors: list[ErrorDict]) -> None:
        self.title = title
        self._errors = errors
        super().__init__(self._text())

    def errors(self) -> list[ErrorDict]:
        return [dict(e) for e in self._errors]

    def error_count(self) -> int:
        return len(self._errors)

    def _text(self) -> str:
        n = len(self._errors)
        lines = [f"{n} validation error{'s' if n != 1 else ''} for {self.title}"]
        for e in self._errors:
            lines.append(".".join(str(p) for p in e["loc"]) or "(root)")
            value = repr(e["input"])
            lines.append(f"  {e['msg']} [type={e['type']}, input_value={value[:80]}]")
        return "\n".join(lines)


__all__ = ["ErrorDict", "Invalid", "RuleError", "ValidationError", "error", "from_exception", "prefixed"]

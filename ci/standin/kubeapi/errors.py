"""API errors as the real server reports them: a ``Status`` object with code, reason and details.

Clients branch on ``reason`` and ``code`` (client-go's ``IsNotFound``, ``IsConflict``...), and
kubectl prints ``message`` verbatim, so both follow kube-apiserver's wording
(``k8s.io/apimachinery/pkg/api/errors``).
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered as a ``Status`` (HTTP ``code``)."""

    def __init__(self, code: int, reason: str, message: str, *, name: str | None = None,
                 kind: str | None = None, group: str | None = None,
                 causes: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details: dict[str, Any] = {}
        if name is not None:
            self.details["name"] = name
        if group:
            self.details["group"] = group
        if kind is not None:
            self.details["kind"] = kind
        if causes:
            self.details["causes"] = causes

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                               "status": "Failure", "message": self.message,
                               "reason": self.reason, "code": self.code}
        if self.details:
            out["details"] = self.details
        return out


def status_success(*, name: str, kind: str, group: str, uid: str) -> dict[str, Any]:
    """What DELETE answers once the object is gone (for kinds that do not return the object)."""
    details: dict[str, Any] = {"name": name, "kind": kind, "uid": uid}
    if group:
        details["group"] = group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}


def qualified(plural: str, group: str) -> str:
    """``pods`` or ``leases.coordination.k8s.io``: how messages name a resource."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(plural, group)} "{name}" not found',
                    name=name, kind=plural, group=group)


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{qualified(plural, group)} "{name}" already exists',
                    name=name, kind=plural, group=group)


OPTIMISTIC_LOCK = "the object has been modified; please apply your changes to the latest version and try again"


def conflict(plural: str, group: str, name: str, why: str = OPTIMISTIC_LOCK) -> ApiError:
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
                    name=name, kind=plural, group=group)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(plural: str, group: str, name: str, why: str) -> ApiError:
    what = f'{qualified(plural, group)} "{name}"' if name else qualified(plural, group)
    return ApiError(403, "Forbidden", f"{what} is forbidden: {why}", name=name or None,
                    kind=plural, group=group)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


class FieldError:
    """One ``field.ErrorList`` entry: ``spec.containers[0].name: Required value``."""

    TYPES = {"FieldValueRequired": "Required value", "FieldValueInvalid": "Invalid value",
             "FieldValueNotSupported": "Unsupported value", "FieldValueForbidden": "Forbidden",
             "FieldValueDuplicate": "Duplicate value", "FieldValueTooLong": "Too long",
             "FieldValueTypeInvalid": "Invalid value"}

    def __init__(self, reason: str, field: str, detail: str = "", value: Any = None,
                 *, show_value: bool = False) -> None:
        self.reason = reason
        self.field = field
        label = self.TYPES[reason]
        if show_value or reason in ("FieldValueInvalid", "FieldValueNotSupported", "FieldValueDuplicate"):
            label += ": " + _go_value(value)
        self.message = f"{label}: {detail}" if detail else label

    def text(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def _go_value(value: Any) -> str:
    """A value as Go's ``%#v``-ish rendering in field errors (strings quoted)."""
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 Invalid: ``Pod "x" is invalid: [a: Required value, b: ...]`` with one cause each."""
    texts = [e.text() for e in errors]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    causes = [{"reason": e.reason, "message": e.message, "field": e.field} for e in errors]
    return ApiError(422, "Invalid", f'{kind}{"." + group if group else ""} "{name}" is invalid: {joined}',
                    name=name, kind=kind, group=group, causes=causes)

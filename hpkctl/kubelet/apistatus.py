"""Errors of the kubelet's HTTPS API as Kubernetes ``Status`` objects.

The API server passes a kubelet's error body on to ``kubectl`` (``error: unable to upgrade
connection: <message>`` for exec, the message itself for logs), so every refusal carries a message
that says what to do, in the shape clients decode.
"""

from __future__ import annotations

from typing import Any

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
           406: "NotAcceptable", 422: "Invalid", 500: "InternalError", 501: "NotImplemented",
           503: "ServiceUnavailable"}


def status(code: int, message: str, *, reason: str = "", details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``metav1.Status`` of a failure."""
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": message, "reason": reason or REASONS.get(code, ""), "code": code}
    if details:
        out["details"] = details
    return out


class ApiError(Exception):
    """A refusal the server answers with ``status(code, message)``."""

    def __init__(self, code: int, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason

    def body(self) -> dict[str, Any]:
        return status(self.code, self.message, reason=self.reason)

"""Errors that reach users. Every one says what is wrong, where, and how to fix it."""

from __future__ import annotations


class HpkError(Exception):
    """Base of all hpkctl errors: a message plus an optional hint on how to fix the problem."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.hint}" if self.hint else self.message


class ProfileError(HpkError):
    """A site profile is missing or invalid (names the file and the key)."""


class ManifestError(HpkError):
    """A manifest is invalid (names the file, the object and the field)."""


class ControlPlaneError(HpkError):
    """A control-plane component did not start, did not become healthy, or ended; names it, its log and
    the fix. Here rather than beside the bootstrap: the state directory's lock (read on the submit host
    too) raises it, and the submit host never imports what runs inside the control-plane job."""


class PodError(HpkError):
    """A pod cannot be run as asked; becomes a pod status with ``reason``, never a crash."""

    def __init__(self, reason: str, message: str, *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.reason = reason

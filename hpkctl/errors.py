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


class PodError(HpkError):
    """A pod cannot be run as asked; becomes a pod status with ``reason``, never a crash."""

    def __init__(self, reason: str, message: str, *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.reason = reason

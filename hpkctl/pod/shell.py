"""Safe shell text. Every user-controlled string reaches a script only through this module.

The sbatch template is rendered with a Jinja2 ``finalize`` hook that refuses anything but
:class:`Shell` (already-quoted text) and integers, so an unquoted string cannot slip into a script
by accident: forgetting to quote is a render error, not an injection.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ELEMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\[[0-9]+\]$")  # an array element: HPK_SECRETS[0]


class Shell(str):
    """Text that is safe to paste into bash as-is (quoted words, or code we wrote)."""


def quote(value: str) -> Shell:
    """One shell word that bash turns back into exactly ``value`` (any text without NUL)."""
    if "\0" in value:
        raise ValueError("a NUL byte cannot be passed through a shell word")
    return Shell(shlex.quote(value))


def is_identifier(name: str) -> bool:
    """Whether ``name`` can be a shell (and Apptainer env-file) variable name."""
    return bool(_IDENT.match(name))


@dataclass(frozen=True)
class RuntimeRef:
    """A value only the job knows when it starts (e.g. the pod IP), held in a shell variable."""

    variable: str  # e.g. "HPK_POD_IP"; always one of ours, never user text


@dataclass(frozen=True)
class SecretText:
    """Text that came from a Secret. It may go into 0600 files (env files, the secrets file), never
    into a script: Slurm keeps job scripts, and admins and accounting tools read them."""

    text: str

    def __repr__(self) -> str:
        return "SecretText(<hidden>)"


# A value is a tuple of literal strings, RuntimeRefs and SecretTexts, concatenated when the job runs.
Value = tuple[str | RuntimeRef | SecretText, ...]


def literal(text: str) -> Value:
    return (text,) if text else ()


def concat(*values: Value) -> Value:
    """Join values, merging adjacent literals (keeps rendered words short and readable)."""
    out: list[str | RuntimeRef | SecretText] = []
    for value in values:
        for part in value:
            if isinstance(part, str) and out and isinstance(out[-1], str):
                out[-1] = out[-1] + part
            elif part != "":
                out.append(part)
    return tuple(out)


def secret(text: str) -> Value:
    """A value from a Secret (see :class:`SecretText`)."""
    return (SecretText(text),) if text else ()


def has_secret(value: Value) -> bool:
    return any(isinstance(p, SecretText) for p in value)


def is_static(value: Value) -> bool:
    """Known before the job starts (Secret text included: it is known, just not printable)."""
    return not any(isinstance(p, RuntimeRef) for p in value)


def static_text(value: Value) -> str:
    if not is_static(value):
        raise ValueError("value depends on the running job")
    return "".join(p.text if isinstance(p, SecretText) else p for p in value if not isinstance(p, RuntimeRef))


def shell_word(value: Value) -> Shell:
    """One shell word for a value: literals single-quoted, runtime parts as ``"$VAR"`` (the closing
    quote ends the name, so a literal after it can never extend the variable's name)."""
    if not value:
        return Shell("''")
    parts = []
    for part in value:
        if isinstance(part, SecretText):
            raise ValueError("a Secret value cannot be written into a script; hide it first (render.SecretTable)")
        if isinstance(part, RuntimeRef):
            if is_identifier(part.variable):
                parts.append(f'"${part.variable}"')
            elif _ELEMENT.match(part.variable):
                parts.append(f'"${{{part.variable}}}"')
            else:
                raise ValueError(f"bad runtime variable {part.variable!r}")
        else:
            parts.append(shlex.quote(part))
    return Shell("".join(parts))


def env_file_line(name: str, value: str) -> str:
    """One line of an Apptainer ``--env-file`` (shell syntax): ``NAME='value'``."""
    if not is_identifier(name):
        raise ValueError(f"{name!r} is not a valid environment variable name for Apptainer")
    return f"{name}={quote(value)}\n"

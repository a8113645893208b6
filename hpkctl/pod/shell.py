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


# A value is a tuple of literal strings and RuntimeRefs, concatenated when the job runs.
Value = tuple[str | RuntimeRef, ...]


def literal(text: str) -> Value:
    return (text,) if text else ()


def concat(*values: Value) -> Value:
    """Join values, merging adjacent literals (keeps rendered words short and readable)."""
    out: list[str | RuntimeRef] = []
    for value in values:
        for part in value:
            if isinstance(part, str) and out and isinstance(out[-1], str):
                out[-1] = out[-1] + part
            elif part != "":
                out.append(part)
    return tuple(out)


def is_static(value: Value) -> bool:
    return all(isinstance(p, str) for p in value)


def static_text(value: Value) -> str:
    if not is_static(value):
        raise ValueError("value depends on the running job")
    return "".join(value)  # type: ignore[arg-type]


def shell_word(value: Value) -> Shell:
    """One shell word for a value: literals single-quoted, runtime parts as ``"$VAR"`` (the closing
    quote ends the name, so a literal after it can never extend the variable's name)."""
    if not value:
        return Shell("''")
    parts = []
    for part in value:
        if isinstance(part, RuntimeRef):
            if not is_identifier(part.variable):
                raise ValueError(f"bad runtime variable {part.variable!r}")
            parts.append(f'"${part.variable}"')
        else:
            parts.append(shlex.quote(part))
    return Shell("".join(parts))


def env_file_line(name: str, value: str) -> str:
    """One line of an Apptainer ``--env-file`` (shell syntax): ``NAME='value'``."""
    if not is_identifier(name):
        raise ValueError(f"{name!r} is not a valid environment variable name for Apptainer")
    return f"{name}={quote(value)}\n"

"""Kubernetes ``$(VAR)`` expansion, exactly as the kubelet does it.

Ported from Kubernetes' ``third_party/forked/golang/expansion``: ``$(NAME)`` is replaced when NAME
is defined, kept verbatim when not; ``$$`` is an escaped ``$``; any other ``$`` stays. Values may
contain parts only the job knows (the pod IP), so expansion works on :data:`Value` tuples.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpkctl.pod.shell import Value, concat, literal


def expand(text: str, env: Mapping[str, Value]) -> Value:
    """Expand ``$(VAR)`` references in ``text`` against ``env``."""
    out: list[Value] = []
    checkpoint = 0
    cursor = 0
    n = len(text)
    while cursor < n:
        if text[cursor] == "$" and cursor + 1 < n:
            out.append(literal(text[checkpoint:cursor]))
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                out.append(literal("$"))
                advance = 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    out.append(literal("$("))
                    advance = 1
                else:
                    name = rest[1:close]
                    out.append(env[name] if name in env else literal(f"$({name})"))
                    advance = close + 1
            else:
                out.append(literal("$" + rest[0]))
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(literal(text[checkpoint:]))
    return concat(*out)

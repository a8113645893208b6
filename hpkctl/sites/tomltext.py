"""Writing values the way a user would type them in a profile, for messages and generated TOML.

Error messages quote the user's value in TOML syntax (``"gpu"``, ``[1, 2]``, ``true``) so the fix can
be copied back into the file; paths under the home directory are shown as ``~/...`` because that is
how the documentation names them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from pathlib import Path
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    """A TOML key, quoted when it is not a bare key (``"amd.com/gpu"``)."""
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    """A value written as in TOML (inline tables for dicts); ``repr`` for anything TOML cannot hold."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (_dt.date, _dt.time, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(x) for x in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(x)}" for k, x in value.items()) + " }"
    return repr(value)


def tilde(path: Path | str) -> str:
    """``path`` with the home directory written as ``~`` (unchanged when outside it)."""
    s = str(path)
    home = str(Path.home())
    if home not in ("", "/") and (s == home or s.startswith(home + os.sep)):
        return "~" + s[len(home) :]
    return s


__all__ = ["tilde", "toml_key", "toml_value"]

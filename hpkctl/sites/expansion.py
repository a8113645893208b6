"""``$VAR``, ``${VAR}``, ``$$`` and a leading ``~`` in path-like profile values.

Only :data:`PATH_KEYS` are expanded, and only when a profile is used (``load_site``): ``hpkctl sites
show`` prints values as written, so a profile such as ``jsc`` (``$PROJECT``) can be inspected on any
machine. An unset or empty variable is an error, never an empty path segment: ``$SCRATCH/hpk`` must
not silently become ``/hpk``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from hpkctl.errors import ProfileError
from hpkctl.sites.provenance import SCHEMA_DEFAULT, Key
from hpkctl.sites.schema import SiteProfile
from hpkctl.sites.tomltext import tilde, toml_value

#: Keys whose string values get ``$VAR`` / ``${VAR}`` / ``~`` expansion (lists: every item).
PATH_KEYS: tuple[tuple[str, str], ...] = (
    ("slurm", "bin_dir"),
    ("slurm", "conf_file"),
    ("slurm", "jobcomp_file"),
    ("apptainer", "binary"),
    ("apptainer", "image_cache"),
    ("apptainer", "binds"),
    ("pods", "state_dir"),
    ("pods", "memory_dir"),
    ("pods", "hostpath_allow"),
    ("controlplane", "state_dir"),
    ("controlplane", "bin_dir"),
)
#: Path keys that must be absolute after expansion (when not empty).
_ABSOLUTE_KEYS = {k for k in PATH_KEYS if k[1] not in ("binary", "binds")}

_VAR_RE = re.compile(r"\$(?:\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*)|(?P<dollar>\$)|)")
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VAR_HINTS = {
    "PROJECT": "at JSC, `jutil env activate -p <project>` sets it",
    "SCRATCH": "at JSC, `jutil env activate -p <project>` sets it",
}


def expand_value(value: str, environ: Mapping[str, str] | None = None) -> str:
    """Expand ``$VAR``, ``${VAR}``, ``$$`` and a leading ``~``; raise KeyError(var) if unset/empty.

    A lone ``$`` raises ``KeyError("$")``.
    """
    env = os.environ if environ is None else environ

    def sub(m: re.Match[str]) -> str:
        if m.group("dollar"):
            return "$"
        var = m.group("braced") if m.group("braced") is not None else m.group("plain")
        if var is None:
            raise KeyError("$")
        if not _VAR_NAME.fullmatch(var) or not env.get(var, ""):
            raise KeyError(var)
        return env[var]

    out = _VAR_RE.sub(sub, value)
    if value.startswith("~"):
        out = os.path.expanduser(out)
    return out


def expand_profile(profile: SiteProfile, *, origins: dict[Key, str], user_dir: Path) -> SiteProfile:
    """The profile with every :data:`PATH_KEYS` value expanded; :class:`ProfileError` naming the file if one cannot be."""
    data = profile.model_dump()
    for sect, key in PATH_KEYS:
        v = data[sect][key]
        items = v if isinstance(v, list) else [v]
        done = [_expand_one(item, profile.name, sect, key, origins=origins, user_dir=user_dir) for item in items]
        data[sect][key] = done if isinstance(v, list) else done[0]
    return SiteProfile.model_validate(data, strict=True)


def _expand_one(item: str, name: str, sect: str, key: str, *, origins: dict[Key, str], user_dir: Path) -> str:
    file = origins.get((sect, key), SCHEMA_DEFAULT)
    try:
        new = expand_value(item)
    except KeyError as exc:
        var = exc.args[0]
        where = f"{file}: " if file != SCHEMA_DEFAULT else ""
        if var == "$":
            raise ProfileError(
                f"site profile {name!r}: {where}[{sect}].{key}: a lone `$` in {toml_value(item)}",
                hint="write $VAR or ${VAR} for a variable, $$ for a literal $",
            ) from None
        extra = f" ({_VAR_HINTS[var]})" if var in _VAR_HINTS else ""
        raise ProfileError(
            f"site profile {name!r}: {where}[{sect}].{key}: environment variable ${var} is not set "
            f"(value {toml_value(item)})",
            hint=f"set {var} in the environment{extra}, or override {key} under [{sect}] in "
            f"{tilde(user_dir / (name + '.toml'))}",
        ) from None
    if (sect, key) in _ABSOLUTE_KEYS and new and not os.path.isabs(new):
        raise ProfileError(
            f"site profile {name!r}: {file}: [{sect}].{key}: expected an absolute path; got {toml_value(item)}"
            + (f" (expanded: {toml_value(new)})" if new != item else ""),
            hint=f'write it as an absolute path, e.g. {key} = "~/{new}" or "/full/path" (in {file})',
        )
    return new


__all__ = ["PATH_KEYS", "expand_profile", "expand_value"]

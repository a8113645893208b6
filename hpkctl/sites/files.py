"""Finding and reading profile files, and resolving ``extends``: which files make up profile NAME.

A profile ``NAME`` is made of up to two TOML files, merged in this order:

1. the built-in ``site-configs/NAME.toml`` (shipped with hpkctl: ``data_dir("site-configs")``);
2. the user's ``$XDG_CONFIG_HOME/hpk/sites/NAME.toml`` (default ``~/.config/hpk/sites``).

A file may start from another profile with a top-level ``extends = "OTHER"``: OTHER is resolved
exactly like NAME (so the user's overrides of OTHER apply too) and the file is merged on top of it. A
user file with ``extends`` is based on that profile *instead of* the built-in of the same name;
``extends`` naming the file's own name means "the built-in of this name" (the default anyway). A path
to a ``.toml`` file is based on nothing but its ``extends``.

``[site] hostnames`` is not inherited through ``extends``: it says on which machines *this* profile is
the default, and a profile extending ``jsc`` would otherwise claim JSC's login nodes as well (two
matching profiles are an error, see :mod:`hpkctl.sites.selection`).
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpkctl import resources
from hpkctl.errors import ProfileError
from hpkctl.sites.tomltext import tilde, toml_value

#: (file, its data without ``extends``), in merge order.
Layer = tuple[Path, dict[str, Any]]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/hpk``, or ``$HOME/.config/hpk`` (XDG: a relative value is ignored)."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "hpk"
    home = env.get("HOME", "")
    return (Path(home) if os.path.isabs(home) else Path.home()) / ".config" / "hpk"


def default_user_dir() -> Path:
    """Where users keep their own profiles: ``$XDG_CONFIG_HOME/hpk/sites`` (``~/.config/hpk/sites``)."""
    return config_dir() / "sites"


def builtin_dir() -> Path:
    """The directory of the built-in profiles (raises FileNotFoundError if hpkctl ships none)."""
    return resources.data_dir("site-configs")


def safe_builtin_dir() -> Path | None:
    """:func:`builtin_dir`, or None where hpkctl was installed without its data."""
    try:
        return builtin_dir()
    except FileNotFoundError:
        return None


def is_profile_name(s: str) -> bool:
    """True for names a profile file can have; ``_defaults`` and the like are documentation."""
    return bool(_NAME_RE.match(s)) and not s.startswith("_")


def looks_like_path(s: str) -> bool:
    """``--site`` takes a name or the path of a .toml file; this tells them apart."""
    return "/" in s or os.sep in s or s.endswith(".toml") or s.startswith("~")


def profile_files(udir: Path) -> dict[str, dict[str, Path]]:
    """Every profile name → ``{"builtin": path, "user": path}`` (whichever exist)."""
    found: dict[str, dict[str, Path]] = {}
    for kind, d in (("builtin", safe_builtin_dir()), ("user", udir)):
        if d is None or not d.is_dir():
            continue
        for p in sorted(d.glob("*.toml")):
            if is_profile_name(p.stem):
                found.setdefault(p.stem, {})[kind] = p
    return dict(sorted(found.items()))


def available(udir: Path) -> str:
    """The profile names, comma-separated, for hints."""
    return ", ".join(profile_files(udir)) or "(none found)"


def profile_exists(name_or_path: str, *, udir: Path) -> bool:
    """Whether a name or path refers to a profile file (valid or not)."""
    if looks_like_path(name_or_path):
        return Path(os.path.expanduser(name_or_path)).is_file()
    return name_or_path in profile_files(udir)


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; errors name the file, line and column, show the line and say how to fix it."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"cannot read {path}: {exc.strerror or exc}", hint="check the path and its permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text (byte {exc.start})", hint="save the file as UTF-8 (TOML requires it)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)\s*$", msg)
        if m:
            line, col = int(m.group(1)), int(m.group(2))
            reason = msg[: m.start()].strip()
        else:
            m2 = re.search(r"\(at end of document\)\s*$", msg)
            line = text.count("\n") + 1
            col = len(text.rsplit("\n", 1)[-1]) + 1
            reason = msg[: m2.start()].strip() if m2 else msg
        lines = text.splitlines()
        shown = lines[line - 1] if 0 < line <= len(lines) else ""
        caret = f"\n    {shown}\n    {' ' * (col - 1)}^" if shown else ""
        raise ProfileError(
            f"{path}:{line}:{col}: TOML syntax error at line {line}, column {col}: {reason}{caret}",
            hint="fix the TOML at that spot: strings need quotes (\"...\"), tables are [name] on their own "
            "line, lists are [\"a\", \"b\"]",
        ) from None


def extends_of(path: Path) -> str | None:
    """The ``extends`` of a profile file, None if it has none or cannot be read."""
    try:
        ext = read_toml(path).get("extends")
    except ProfileError:
        return None
    return ext if isinstance(ext, str) else None


def resolve_layers(name_or_path: str, *, udir: Path) -> tuple[str, list[Layer]]:
    """The profile's name and the files that make it up, bases first (``extends`` resolved)."""
    if not name_or_path:
        raise ProfileError("no site profile given", hint=f"use one of: {available(udir)}")
    if looks_like_path(name_or_path):
        path = Path(os.path.expanduser(name_or_path)).absolute()
        if not path.is_file():
            raise ProfileError(
                f"site profile file {path} does not exist",
                hint=f"give the path of a .toml file, or a profile name: {available(udir)}",
            )
        return path.stem, _file_layers(path, own_name=None, implicit_base=[], udir=udir, stack=())
    return name_or_path, _name_layers(name_or_path, udir=udir, stack=())


def _name_layers(name: str, *, udir: Path, stack: tuple[str, ...]) -> list[Layer]:
    if not is_profile_name(name):
        raise ProfileError(
            f"{name!r} is not a site profile name",
            hint=f"use one of: {available(udir)} (or the path of a .toml file)",
        )
    if name in stack:
        chain = " -> ".join((*stack, name))
        raise ProfileError(f"site profiles extend each other in a cycle: {chain}", hint="remove one of the `extends` keys")
    files = profile_files(udir).get(name, {})
    if not files:
        close = difflib.get_close_matches(name, list(profile_files(udir)), n=1)
        maybe = f"did you mean {close[0]!r}? " if close else ""
        raise ProfileError(
            f"unknown site profile {name!r} (no {name}.toml among the built-in profiles or in {tilde(udir)})",
            hint=f"{maybe}available: {available(udir)}; or create {tilde(udir / f'{name}.toml')}",
        )
    stack = (*stack, name)
    layers: list[Layer] = []
    if "builtin" in files:
        layers = _file_layers(files["builtin"], own_name=name, implicit_base=[], udir=udir, stack=stack)
    if "user" in files:
        layers = _file_layers(files["user"], own_name=name, implicit_base=layers, udir=udir, stack=stack)
    return layers


def _file_layers(
    path: Path, *, own_name: str | None, implicit_base: list[Layer], udir: Path, stack: tuple[str, ...]
) -> list[Layer]:
    data = read_toml(path)
    if "name" in data:
        raise ProfileError(
            f"{path}: name: a profile's name is its file name, not a key (got name = {toml_value(data['name'])})",
            hint=f"remove the `name` key from {path}; rename the file to NAME.toml instead",
        )
    if "extends" not in data:
        return [*implicit_base, (path, data)]
    ext = data.pop("extends")
    if not isinstance(ext, str) or not ext:
        raise ProfileError(
            f"{path}: extends: expected the name of another site profile, got {toml_value(ext)}",
            hint=f'write e.g. extends = "ci" (available: {available(udir)})',
        )
    if own_name is not None and ext == own_name:
        if not implicit_base:
            raise ProfileError(f"{path}: extends: the profile extends itself ({ext!r})", hint="remove the `extends` key")
        return [*implicit_base, (path, data)]
    try:
        base = _name_layers(ext, udir=udir, stack=stack)
    except ProfileError as exc:
        raise ProfileError(f"{path}: extends = {toml_value(ext)}: {exc.message}", hint=exc.hint) from None
    return [*(_without_hostnames(layer) for layer in base), (path, data)]


def _without_hostnames(layer: Layer) -> Layer:
    path, data = layer
    site = data.get("site")
    if not isinstance(site, dict) or "hostnames" not in site:
        return layer
    data = copy.copy(data)
    data["site"] = {k: v for k, v in site.items() if k != "hostnames"}
    return path, data


__all__ = [
    "Layer",
    "available",
    "builtin_dir",
    "config_dir",
    "default_user_dir",
    "extends_of",
    "is_profile_name",
    "looks_like_path",
    "profile_exists",
    "profile_files",
    "read_toml",
    "resolve_layers",
    "safe_builtin_dir",
]

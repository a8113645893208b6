"""``hpkctl sites list`` and ``hpkctl sites show NAME [--toml]``."""

from __future__ import annotations

import argparse
import sys
import typing
from pathlib import Path
from typing import Any

import tomli_w

from hpkctl.errors import ProfileError
from hpkctl.sites.loader import (
    PATH_KEYS,
    SCHEMA_DEFAULT,
    _fmt,
    _q,
    _tilde,
    builtin_dir,
    default_user_dir,
    expand_value,
    explain_site,
    list_sites,
)
from hpkctl.sites.schema import SiteProfile


def cmd_list(args: argparse.Namespace) -> int:
    """Print every profile: name, description, the files it comes from. Exit 0 (1 if one is invalid)."""
    sites = list_sites()
    udir = default_user_dir()
    out = sys.stdout
    if not sites:
        print(f"no site profiles found (built-in or in {_tilde(udir)})", file=out)
        return 1
    width = max(len(s.name) for s in sites) + 2
    bad = 0
    for s in sites:
        desc = s.description or "(no description)"
        if s.error:
            bad += 1
            desc = f"INVALID: {s.error}"
        print(f"{s.name:<{width}}{desc}", file=out)
        parts = []
        if s.builtin:
            parts.append(f"built-in {_tilde(s.builtin)}")
        if s.user:
            parts.append(("overridden by " if s.builtin else "user ") + _tilde(s.user))
        if s.extends:
            parts.append(f"extends {s.extends}")
        print(f"{'':<{width}}" + "; ".join(parts), file=out)
    print(
        f"\nUser profiles: {_tilde(udir)}/NAME.toml (same name as a built-in: overrides it key by key).\n"
        "Details: hpkctl sites show NAME",
        file=out,
    )
    return 1 if bad else 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print the merged profile as TOML; each value followed by a comment naming its origin."""
    expl = explain_site(args.name)
    if getattr(args, "toml", False):
        sys.stdout.write(profile_toml(expl.profile))
        return 0
    sys.stdout.write(_annotated(expl))
    return 0


def profile_toml(profile: SiteProfile) -> str:
    """Plain TOML of a profile (without ``name``, which is the file name); loads back unchanged."""
    return tomli_w.dumps(profile.model_dump(exclude={"name"}))


def _label(origin: str) -> str:
    if origin == SCHEMA_DEFAULT:
        return SCHEMA_DEFAULT
    p = Path(origin)
    try:
        if p.parent == builtin_dir():
            return f"built-in {p.name}"
    except FileNotFoundError:
        pass
    return _tilde(p)


def _annotated(expl: Any) -> str:
    profile: SiteProfile = expl.profile
    lines = [f'# site profile "{profile.name}", merged from (bases first):']
    for f in expl.files:
        lines.append(f"#   {_label(str(f)):<28} {f}")
    lines.append("# After each value: the file that set it, or `schema default`.")
    lines.append("# Plain TOML: hpkctl sites show NAME --toml")
    data = profile.model_dump(exclude={"name"})
    path_keys = set(PATH_KEYS)
    for sect, values in data.items():
        rows: list[tuple[str, str]] = []
        subtables: list[tuple[str, dict, str]] = []
        for key, value in values.items():
            origin_keys = [k for k in expl.origins if k[:2] == (sect, key)]
            if isinstance(value, dict) and value:
                subtables.append((key, value, sect))
                continue
            origin = expl.origins.get((sect, key)) or (expl.origins[origin_keys[0]] if origin_keys else SCHEMA_DEFAULT)
            comment = _label(origin)
            if (sect, key) in path_keys:
                comment += _expansion_note(value)
            rows.append((f"{_q(key)} = {_fmt(value)}", comment))
        lines.append("")
        lines.append(f"[{sect}]")
        lines.extend(_aligned(rows))
        for key, table, sect_ in subtables:
            lines.append("")
            lines.append(f"[{sect_}.{_q(key)}]")
            sub_rows = []
            for k, v in table.items():
                origin = expl.origins.get((sect_, key, k), expl.origins.get((sect_, key), SCHEMA_DEFAULT))
                sub_rows.append((f"{_q(k)} = {_fmt(v)}", _label(origin)))
            lines.extend(_aligned(sub_rows))
    return "\n".join(lines) + "\n"


def _expansion_note(value: Any) -> str:
    items = value if isinstance(value, list) else [value]
    notes = []
    for item in items:
        if not isinstance(item, str) or ("$" not in item and not item.startswith("~")):
            continue
        try:
            notes.append(f"= {expand_value(item)}")
        except KeyError as exc:
            var = exc.args[0]
            notes.append(f"needs ${var} when used" if var != "$" else "lone $: invalid when used")
    return ("; " + ", ".join(notes)) if notes else ""


def _aligned(rows: list[tuple[str, str]]) -> list[str]:
    if not rows:
        return []
    width = min(max(len(r[0]) for r in rows), 48)
    return [f"{text:<{width}}  # {comment}" for text, comment in rows]


def defaults_toml() -> str:
    """The text of ``site-configs/_defaults.toml``: every key, its default and its description.

    Generated from the schema; a test checks the shipped file is current.
    """
    header = """\
# Every key a site profile can set, with its default value (what applies when no file sets it).
# Generated from hpkctl/sites/schema.py by hpkctl.sites.commands.defaults_toml(); do not edit.
# Not a site (the leading underscore hides it from `hpkctl sites list`); loading it gives exactly
# the schema defaults.
#
# A site profile is site-configs/NAME.toml (shipped with hpkctl) and/or
# ~/.config/hpk/sites/NAME.toml ($XDG_CONFIG_HOME/hpk/sites): the user file overrides the built-in
# key by key (tables are merged, lists replaced whole). Copy only the keys you change.
# A file may start from another profile with a top-level `extends = "OTHER"`.
# Unknown keys are errors. Path-like values (state_dir, image_cache, memory_dir, jobcomp_file,
# bin_dir, conf_file, binary, binds) may use $VAR, ${VAR} and a leading ~ ($$ for a literal $);
# they are expanded when the profile is used, not when it is shown.
"""
    lines = [header.rstrip("\n")]
    for sname, sfield in SiteProfile.model_fields.items():
        if sname == "name":
            continue
        model = sfield.annotation
        doc = (model.__doc__ or "").strip()  # type: ignore[union-attr]
        lines.append("")
        lines.append(f"[{sname}]" + (f"  # {doc}" if doc else ""))
        rows = []
        for fname, f in model.model_fields.items():  # type: ignore[union-attr]
            desc = f.description or ""
            if typing.get_origin(f.annotation) is typing.Literal:
                desc += ("; " if desc else "") + "one of " + ", ".join(_fmt(a) for a in typing.get_args(f.annotation))
            rows.append((f"{_q(fname)} = {_fmt(f.get_default(call_default_factory=True))}", desc))
        width = max(len(r[0]) for r in rows)
        lines.extend(f"{t:<{width}}  # {d}" if d else t for t, d in rows)
    return "\n".join(lines) + "\n"


__all__ = ["cmd_list", "cmd_show", "defaults_toml", "profile_toml", "ProfileError"]

"""The text of ``hpkctl sites list|show`` and of ``site-configs/_defaults.toml``, built from the data.

Builds strings only; printing and arguments belong to :mod:`hpkctl.cli.sites`.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomli_w

from hpkctl.sites.expansion import PATH_KEYS, expand_value
from hpkctl.sites.files import safe_builtin_dir
from hpkctl.sites.loader import SiteExplanation, SiteSource
from hpkctl.sites.provenance import SCHEMA_DEFAULT
from hpkctl.sites.schema import SiteProfile
from hpkctl.sites.tomltext import tilde, toml_key, toml_value
from hpkctl.typed import BaseModel


def list_text(sites: Sequence[SiteSource], *, user_dir: Path, selected: str = "") -> str:
    """Every profile: name, description (or why it does not load), the files it comes from.

    ``selected`` is a line saying which profile a command would use here without ``--site``.
    """
    if not sites:
        return f"no site profiles found (built-in or in {tilde(user_dir)})\n"
    width = max(len(s.name) for s in sites) + 2
    lines = []
    for s in sites:
        desc = f"INVALID: {s.error}" if s.error else (s.description or "(no description)")
        lines.append(f"{s.name:<{width}}{desc}")
        parts = []
        if s.builtin:
            parts.append(f"built-in {tilde(s.builtin)}")
        if s.user:
            parts.append(("overridden by " if s.builtin else "user ") + tilde(s.user))
        if s.extends:
            parts.append(f"extends {s.extends}")
        lines.append(f"{'':<{width}}" + "; ".join(parts))
    lines.append("")
    lines.append(f"User profiles: {tilde(user_dir)}/NAME.toml (same name as a built-in: overrides it key by key).")
    if selected:
        lines.append(selected)
    lines.append("Details: hpkctl sites show NAME")
    return "\n".join(lines) + "\n"


def profile_toml(profile: SiteProfile) -> str:
    """Plain TOML of a profile (without ``name``, which is the file name); loads back unchanged."""
    return tomli_w.dumps(profile.model_dump(exclude={"name"}))


def annotated_toml(expl: SiteExplanation, *, selected_by: str = "") -> str:
    """The merged profile as TOML, each value followed by a comment naming the file that set it.

    ``selected_by`` (e.g. ``$HPK_SITE=jsc``) is said in the header when the profile was not named.
    """
    profile = expl.profile
    lines = [f'# site profile "{profile.name}", merged from (bases first):']
    for f in expl.files:
        lines.append(f"#   {_label(str(f)):<28} {f}")
    if selected_by:
        lines.append(f"# Selected because: {selected_by}")
    lines.append("# After each value: the file that set it, or `schema default`.")
    lines.append("# Plain TOML: hpkctl sites show NAME --toml")
    data = profile.model_dump(exclude={"name"})
    path_keys = set(PATH_KEYS)
    for sect, values in data.items():
        rows: list[tuple[str, str]] = []
        subtables: list[tuple[str, dict[str, Any]]] = []
        for key, value in values.items():
            if isinstance(value, dict) and value:
                subtables.append((key, value))
                continue
            under = [k for k in expl.origins if k[:2] == (sect, key)]
            origin = expl.origins.get((sect, key)) or (expl.origins[under[0]] if under else SCHEMA_DEFAULT)
            comment = _label(origin)
            if (sect, key) in path_keys:
                comment += _expansion_note(value)
            rows.append((f"{toml_key(key)} = {toml_value(value)}", comment))
        lines.append("")
        lines.append(f"[{sect}]")
        lines.extend(_aligned(rows))
        for key, table in subtables:
            lines.append("")
            lines.append(f"[{sect}.{toml_key(key)}]")
            sub_rows = []
            for k, v in table.items():
                origin = expl.origins.get((sect, key, k), expl.origins.get((sect, key), SCHEMA_DEFAULT))
                sub_rows.append((f"{toml_key(k)} = {toml_value(v)}", _label(origin)))
            lines.extend(_aligned(sub_rows))
    return "\n".join(lines) + "\n"


def _label(origin: str) -> str:
    if origin == SCHEMA_DEFAULT:
        return SCHEMA_DEFAULT
    p = Path(origin)
    if p.parent == safe_builtin_dir():
        return f"built-in {p.name}"
    return tilde(p)


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
# Generated from hpkctl/sites/schema.py by hpkctl.sites.describe.defaults_toml(); do not edit.
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
#
# Which profile a command uses: --site NAME, else $HPK_SITE, else site = "NAME" in
# ~/.config/hpk/config.toml, else the one profile whose [site] hostnames match this host's name
# (socket.getfqdn() or gethostname(), shell-style globs, case-insensitive); otherwise an error.
"""
    lines = [header.rstrip("\n")]
    for sname, sfield in SiteProfile.model_fields.items():
        model = sfield.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue  # `name`: the file name, not a key
        doc = (model.__doc__ or "").strip()
        lines.append("")
        lines.append(f"[{sname}]" + (f"  # {doc}" if doc else ""))
        rows = []
        for fname, f in model.model_fields.items():
            desc = f.description or ""
            if typing.get_origin(f.annotation) is typing.Literal:
                desc += ("; " if desc else "") + "one of " + ", ".join(toml_value(a) for a in typing.get_args(f.annotation))
            rows.append((f"{toml_key(fname)} = {toml_value(f.get_default(call_default_factory=True))}", desc))
        width = max(len(r[0]) for r in rows)
        lines.extend(f"{t:<{width}}  # {d}" if d else t for t, d in rows)
    return "\n".join(lines) + "\n"


__all__ = ["annotated_toml", "defaults_toml", "list_text", "profile_toml"]

"""Validating a merged profile, and turning its validation errors into messages a user can act on.

Every problem names the file that set the value (from the merge's origins), the key as a TOML path
(``[apptainer].network``), what was expected, what was given, and a fix to copy into the file.
All problems of a profile are reported at once.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
import typing
from pathlib import Path
from typing import Any

from hpkctl.errors import ProfileError
from hpkctl.sites.provenance import SCHEMA_DEFAULT, Key
from hpkctl.sites.schema import SiteProfile
from hpkctl.sites.tomltext import toml_key, toml_value
from hpkctl.typed import BaseModel, ValidationError

_TIME_FIX = 'use Slurm\'s time format, e.g. "30" (minutes), "01:30:00", "1-00:00:00" (days-hours:minutes:seconds)'
_SCALAR_EXPECTED = {
    "string_type": "a string",
    "bool_type": "true or false",
    "float_type": "a number",
    "int_type": "an integer",
    "list_type": "a list",
    "finite_number": "a finite number",
}


def validate(name: str, merged: dict[str, Any], *, origins: dict[Key, str], files: tuple[Path, ...]) -> SiteProfile:
    """The merged data as a :class:`SiteProfile` named ``name``; else a :class:`ProfileError` listing every problem."""
    try:
        return SiteProfile.model_validate({**merged, "name": name}, strict=True)
    except ValidationError as exc:
        problems = [_problem(err, origins=origins, files=files) for err in exc.errors()]
    if len(problems) == 1:
        what, fix = problems[0]
        raise ProfileError(f"site profile {name!r}: {what}", hint=fix) from None
    lines = [f"site profile {name!r} has {len(problems)} problems:"]
    for i, (what, fix) in enumerate(problems, 1):
        lines.append(f"  {i}. {what}\n     fix: {fix}")
    raise ProfileError("\n".join(lines), hint=f"`hpkctl sites show {name}` shows which file sets each value") from None


def _sections() -> dict[str, type[BaseModel]]:
    out: dict[str, type[BaseModel]] = {}
    for n, f in SiteProfile.model_fields.items():
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            out[n] = f.annotation
    return out


def _key_path(loc: tuple[Any, ...]) -> str:
    """``("apptainer", "network")`` → ``[apptainer].network``; list indices as ``[0]``."""
    if len(loc) == 1:
        return f"[{loc[0]}]" if loc[0] in _sections() else toml_key(str(loc[0]))
    out = f"[{loc[0]}]"
    for k in loc[1:]:
        out += f"[{k}]" if isinstance(k, int) else "." + toml_key(str(k))
    return out


def _file_for(loc: Key, origins: dict[Key, str], files: tuple[Path, ...]) -> str:
    """The file that set the value at ``loc`` (or, for a table, the last file that set part of it)."""
    for i in range(len(loc), 0, -1):
        if origins.get(loc[:i], SCHEMA_DEFAULT) != SCHEMA_DEFAULT:
            return origins[loc[:i]]
    under = [origins[k] for k in origins if k[: len(loc)] == loc and origins[k] != SCHEMA_DEFAULT]
    if under:
        return under[-1]
    return str(files[-1]) if files else "(no file)"


def _type_name(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, (_dt.time, _dt.date, _dt.datetime)):
        return "a TOML date/time (unquoted)"
    return type(v).__name__


def _allowed_literals(loc: Key) -> list[Any]:
    sections = _sections()
    if len(loc) >= 2 and loc[0] in sections:
        finfo = sections[loc[0]].model_fields.get(loc[1])
        if finfo is not None:
            return list(typing.get_args(finfo.annotation))
    return []


def _problem(err: Any, *, origins: dict[Key, str], files: tuple[Path, ...]) -> tuple[str, str]:
    """(what is wrong, how to fix it) for one validation error."""
    raw_loc = tuple(err["loc"])
    loc: Key = tuple(str(x) for x in raw_loc)
    typ = err["type"]
    given = err.get("input")
    file = _file_for(loc, origins, files)
    kp = _key_path(raw_loc)
    leaf = loc[1] if len(loc) >= 2 else loc[0]  # the field, also for an item of a list/table
    table = f"[{loc[0]}]" if len(loc) >= 2 else "the top level"
    got = f"got {toml_value(given)}"

    if typ == "extra_forbidden":
        if len(loc) == 1 and isinstance(given, dict):
            what = f"{file}: [{toml_key(loc[0])}]: unknown table"
        else:
            what = f"{file}: {kp}: unknown key (value {toml_value(given)})"
        return what, _unknown_key_fix(loc, file)

    if typ == "literal_error":
        allowed = _allowed_literals(loc)
        allowed_s = ", ".join(toml_value(a) for a in allowed) or err["ctx"].get("expected", "")
        what = f"{file}: {kp}: expected one of {allowed_s}; {got}"
        return what, f"set {leaf} = " + " or ".join(toml_value(a) for a in allowed) + f" under {table} in {file}"

    if typ in ("model_type", "dict_type", "model_attributes_type"):
        what = f"{file}: {kp}: expected a table; {got} ({_type_name(given)})"
        if len(loc) == 1:
            return what, f"write the section as a table: a line [{leaf}] followed by key = value lines"
        return what, f'write it as a table, e.g. {leaf} = {{ "name" = "value" }}'

    if typ in _SCALAR_EXPECTED or typ in ("greater_than", "greater_than_equal"):
        return _scalar_problem(err, typ=typ, file=file, kp=kp, leaf=leaf, loc=loc, raw_loc=raw_loc)

    if typ == "value_error":
        msg = str(err["msg"]).removeprefix("Value error, ")
        field = loc[1] if len(loc) >= 2 else ""
        if field in ("default_time", "max_time"):
            fix = _TIME_FIX + f" (in {file})"
        elif field == "extra_directives":
            fix = 'write each option as one list item, e.g. extra_directives = ["--reservation=x", "--constraint=gpu"]'
        elif field == "hostnames":
            fix = f'write each pattern as one list item, e.g. hostnames = ["login*.example.org"] (in {file})'
        elif loc == ("apptainer",) and "parent_image" in msg:
            fix = f'add parent_image = "docker://..." under [apptainer] in {file}, or set network = "host"'
        elif loc == ("slurm",) and "max_time" in msg:
            fix = f"lower default_time or raise max_time under [slurm] in {file}"
        else:
            fix = f"correct {kp} in {file}"
        return (f"{file}: {kp}: {msg} ({got})" if len(loc) > 1 else f"{file}: {kp}: {msg}"), fix

    what = f"{file}: {kp}: {err['msg']}; {got}"
    return what, f"correct {kp} in {file} (every key is documented in site-configs/_defaults.toml)"


def _scalar_problem(
    err: Any, *, typ: str, file: str, kp: str, leaf: str, loc: Key, raw_loc: tuple[Any, ...]
) -> tuple[str, str]:
    given = err.get("input")
    ctx = err.get("ctx", {})
    if typ == "greater_than":
        expected = f"a number > {ctx.get('gt', 0)}"
    elif typ == "greater_than_equal":
        expected = f"a number >= {ctx.get('ge', 0)}"
    else:
        expected = _SCALAR_EXPECTED[typ]
    what = f"{file}: {kp}: expected {expected}; got {toml_value(given)} ({_type_name(given)})"
    if typ == "string_type":
        if isinstance(given, (_dt.time, _dt.date, _dt.datetime)):
            fix = f'quote it: {leaf} = "{given.isoformat()}" (unquoted, TOML reads it as a time)'
        elif isinstance(given, (list, dict)):
            fix = f'write a single string: {leaf} = "..."'
        else:
            fix = f"quote it: {leaf} = {json.dumps(toml_value(given))}"
        if len(loc) > 2:  # an item of a list or table
            fix = f"every item of {_key_path(raw_loc[:2])} must be a quoted string"
    elif typ == "bool_type":
        fix = f"write {leaf} = true or {leaf} = false (no quotes)"
    elif typ == "list_type":
        inner = toml_value(given) if isinstance(given, str) else '"..."'
        fix = f"write a list: {leaf} = [{inner}]"
    else:
        fix = f"write a number without quotes, e.g. {leaf} = 30"
    return what, fix + f" (in {file})"


def _unknown_key_fix(loc: Key, file: str) -> str:
    sections = _sections()
    key = loc[-1]
    if len(loc) == 1:
        owners = [s for s, m in sections.items() if key in m.model_fields]
        if owners:
            return f"move it under [{owners[0]}] (`{key}` belongs to that table) in {file}"
        close = difflib.get_close_matches(key, list(sections), n=1)
        if close:
            return f"remove the key; did you mean [{close[0]}]? (in {file})"
        return f"remove the key from {file}; the tables are " + ", ".join(f"[{s}]" for s in sections) + " and `extends`"
    model = sections.get(loc[0])
    allowed = list(model.model_fields) if model is not None else []
    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        return f"remove the key; did you mean `{close[0]}`? (in {file})"
    owners = [s for s, m in sections.items() if key in m.model_fields]
    if owners:
        return f"`{key}` belongs under [{owners[0]}]: move it there (in {file})"
    return f"remove the key from {file}; keys allowed in [{loc[0]}]: " + ", ".join(allowed)


__all__ = ["validate"]

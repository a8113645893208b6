"""Finding, merging and validating site profiles, remembering where every value came from.

A profile ``NAME`` is made of up to two TOML files, merged key by key (tables are merged, every
other value, lists included, is replaced whole), then validated by :class:`SiteProfile`:

1. the built-in ``site-configs/NAME.toml`` (shipped with hpkctl: ``data_dir("site-configs")``);
2. the user's ``$XDG_CONFIG_HOME/hpk/sites/NAME.toml`` (default ``~/.config/hpk/sites``).

A file may start from another profile with a top-level ``extends = "OTHER"``: OTHER is resolved
exactly like ``load_site("OTHER")`` (so the user's overrides of OTHER apply too) and the file is
merged on top of it. A user file with ``extends`` is based on that profile *instead of* the built-in
of the same name; ``extends`` naming the file's own name means "the built-in of this name" (the
default anyway). ``load_site`` also accepts the path of a ``.toml`` file; such a file is based on
nothing but its ``extends``.

Path-like values (:data:`PATH_KEYS`) may use ``$VAR``, ``${VAR}`` (``$$`` for a literal ``$``) and a
leading ``~``. :func:`load_site` expands them and fails if a variable is unset or empty;
``expand=False`` keeps them as written (what ``hpkctl sites show`` prints), so a profile such as
``jsc`` (``$PROJECT``) can be inspected on any machine and only fails where it is used.
"""

from __future__ import annotations

import copy
import datetime as _dt
import difflib
import json
import os
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from hpkctl import resources
from hpkctl.errors import ProfileError
from hpkctl.sites.schema import SiteProfile

#: Origin of a value no file set.
SCHEMA_DEFAULT = "schema default"

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
)
#: Path keys that must be absolute after expansion (when not empty).
_ABSOLUTE_KEYS = {k for k in PATH_KEYS if k[1] not in ("binary", "binds")}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VAR_RE = re.compile(r"\$(?:\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*)|(?P<dollar>\$)|)")
_VAR_HINTS = {
    "PROJECT": "at JSC, `jutil env activate -p <project>` sets it",
    "SCRATCH": "at JSC, `jutil env activate -p <project>` sets it",
}

Key = tuple[str, ...]


# --------------------------------------------------------------------------------------------
# Public data


@dataclass(frozen=True)
class SiteSource:
    """One profile hpkctl can find (``hpkctl sites list``)."""

    name: str
    builtin: Path | None
    user: Path | None
    description: str = ""
    extends: str | None = None
    #: why the profile does not load ("" when it does; variables are not expanded for this check)
    error: str = ""

    @property
    def files(self) -> tuple[Path, ...]:
        """The files named NAME.toml, built-in first."""
        return tuple(p for p in (self.builtin, self.user) if p is not None)


@dataclass(frozen=True)
class SiteExplanation:
    """A merged profile and, for every leaf key, where its value came from."""

    profile: SiteProfile
    #: leaf key path (e.g. ``("apptainer", "network")``) → file path (str) or :data:`SCHEMA_DEFAULT`
    origins: dict[Key, str]
    #: every file merged, in merge order (bases first)
    files: tuple[Path, ...] = field(default=())

    def origin(self, key: str | Key) -> str:
        """Origin of ``"apptainer.network"`` or ``("apptainer", "network")``."""
        k = tuple(key.split(".")) if isinstance(key, str) else tuple(key)
        return self.origins[k]


def default_user_dir() -> Path:
    """``$XDG_CONFIG_HOME/hpk/sites``, or ``~/.config/hpk/sites`` (XDG: a relative value is ignored)."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"
    return base / "hpk" / "sites"


def builtin_dir() -> Path:
    """The directory of the built-in profiles."""
    return resources.data_dir("site-configs")


# --------------------------------------------------------------------------------------------
# Public functions


def load_site(name_or_path: str, *, user_dir: Path | None = None, expand: bool = True) -> SiteProfile:
    """Load, merge and validate a site profile by name (built-in and/or user file) or .toml path.

    With ``expand`` (the default) ``$VAR``/``~`` in path-like values are expanded and must resolve.
    Raises :class:`ProfileError` naming the file, the key, the value and a fix.
    Does not check ``account_required``: call :func:`require_submittable` before submitting.
    """
    return explain_site(name_or_path, user_dir=user_dir, expand=expand).profile


def explain_site(name_or_path: str, *, user_dir: Path | None = None, expand: bool = False) -> SiteExplanation:
    """Like :func:`load_site`, plus the origin of every leaf value. Does not expand by default."""
    udir = default_user_dir() if user_dir is None else Path(user_dir)
    name, layers = _resolve_top(name_or_path, udir)
    merged: dict[str, Any] = {}
    origins: dict[Key, str] = {}
    for path, data in layers:
        _merge(merged, data, origins, str(path), ())
    files = tuple(p for p, _ in layers)
    profile = _validate(name, merged, origins, files)
    for key in _schema_leaves(profile):
        if not any(k[: len(key)] == key for k in origins):
            origins[key] = SCHEMA_DEFAULT
    if expand:
        profile = _expand(profile, origins, name, udir)
    ordered = {k: origins[k] for k in _ordered_keys(profile, origins)}
    return SiteExplanation(profile=profile, origins=ordered, files=files)


def list_sites(*, user_dir: Path | None = None) -> list[SiteSource]:
    """Every profile name hpkctl can find (built-in and user), sorted, with description or load error."""
    udir = default_user_dir() if user_dir is None else Path(user_dir)
    names: dict[str, dict[str, Path]] = {}
    for kind, d in (("builtin", _safe_builtin_dir()), ("user", udir)):
        if d is None or not d.is_dir():
            continue
        for p in d.glob("*.toml"):
            if p.stem.startswith("_") or not _NAME_RE.match(p.stem):
                continue  # _defaults.toml and the like are documentation, not sites
            names.setdefault(p.stem, {})[kind] = p
    out = []
    for name in sorted(names):
        description, extends, error = "", None, ""
        try:
            expl = explain_site(name, user_dir=udir, expand=False)
            description = expl.profile.site.description
        except ProfileError as exc:
            error = exc.message.splitlines()[0]
        for p in (names[name].get("user"), names[name].get("builtin")):
            if p is not None:
                try:
                    ext = _read(p).get("extends")
                except ProfileError:
                    ext = None
                if isinstance(ext, str):
                    extends = ext
                break
        out.append(
            SiteSource(
                name=name,
                builtin=names[name].get("builtin"),
                user=names[name].get("user"),
                description=description,
                extends=extends,
                error=error,
            )
        )
    return out


def require_submittable(profile: SiteProfile, *, user_dir: Path | None = None) -> None:
    """Raise :class:`ProfileError` if the profile cannot submit jobs as it is (e.g. no account).

    ``account_required`` is satisfied by ``[slurm].account`` or an ``--account``/``-A`` in
    ``[slurm].extra_directives``. (``SBATCH_ACCOUNT`` does not count: hpkctl scrubs ``SBATCH_*``
    from the environment of every Slurm command.)
    """
    s = profile.slurm
    if not s.account_required or s.account.strip():
        return
    if any(d == "-A" or d.startswith(("--account=", "-A")) for d in s.extra_directives):
        return
    udir = default_user_dir() if user_dir is None else Path(user_dir)
    target = _tilde(udir / f"{profile.name}.toml")
    raise ProfileError(
        f"site profile {profile.name!r} requires a Slurm account (account_required = true) "
        "but [slurm].account is empty",
        hint=f'set your budget in {target}:\n       [slurm]\n       account = "<budget>"'
        + (
            "\n     (the file overrides the built-in profile key by key; create it if missing)"
            if _safe_exists(_safe_builtin_dir(), profile.name)
            else ""
        ),
    )


# --------------------------------------------------------------------------------------------
# Finding and reading files


def _safe_builtin_dir() -> Path | None:
    try:
        return builtin_dir()
    except FileNotFoundError:
        return None


def _safe_exists(d: Path | None, name: str) -> bool:
    return d is not None and (d / f"{name}.toml").is_file()


def _looks_like_path(s: str) -> bool:
    return "/" in s or os.sep in s or s.endswith(".toml") or s.startswith("~")


def _resolve_top(name_or_path: str, udir: Path) -> tuple[str, list[tuple[Path, dict]]]:
    if not name_or_path:
        raise ProfileError("no site profile given", hint=f"use one of: {_available(udir)}")
    if _looks_like_path(name_or_path):
        path = Path(os.path.expanduser(name_or_path)).absolute()
        if not path.is_file():
            raise ProfileError(
                f"site profile file {path} does not exist",
                hint=f"give the path of a .toml file, or a profile name: {_available(udir)}",
            )
        return path.stem, _file_layers(path, own_name=None, implicit_base=[], udir=udir, stack=())
    return name_or_path, _resolve_name(name_or_path, udir, stack=())


def _resolve_name(name: str, udir: Path, stack: tuple[str, ...]) -> list[tuple[Path, dict]]:
    if not _NAME_RE.match(name) or name.startswith("_"):
        raise ProfileError(
            f"{name!r} is not a site profile name",
            hint=f"use one of: {_available(udir)} (or the path of a .toml file)",
        )
    if name in stack:
        chain = " -> ".join((*stack, name))
        raise ProfileError(f"site profiles extend each other in a cycle: {chain}", hint="remove one of the `extends` keys")
    bdir = _safe_builtin_dir()
    builtin = bdir / f"{name}.toml" if bdir is not None else None
    user = udir / f"{name}.toml"
    has_builtin = builtin is not None and builtin.is_file()
    has_user = user.is_file()
    if not has_builtin and not has_user:
        close = difflib.get_close_matches(name, _names(udir), n=1)
        maybe = f"did you mean {close[0]!r}? " if close else ""
        raise ProfileError(
            f"unknown site profile {name!r} (no {name}.toml among the built-in profiles or in {_tilde(udir)})",
            hint=f"{maybe}available: {_available(udir)}; or create {_tilde(user)}",
        )
    stack = (*stack, name)
    layers: list[tuple[Path, dict]] = []
    if has_builtin:
        assert builtin is not None
        layers = _file_layers(builtin, own_name=name, implicit_base=[], udir=udir, stack=stack)
    if has_user:
        layers = _file_layers(user, own_name=name, implicit_base=layers, udir=udir, stack=stack)
    return layers


def _file_layers(
    path: Path, *, own_name: str | None, implicit_base: list, udir: Path, stack: tuple[str, ...]
) -> list[tuple[Path, dict]]:
    data = _read(path)
    if "name" in data:
        raise ProfileError(
            f"{path}: name: a profile's name is its file name, not a key (got name = {_fmt(data['name'])})",
            hint=f"remove the `name` key from {path}; rename the file to NAME.toml instead",
        )
    if "extends" not in data:
        return [*implicit_base, (path, data)]
    ext = data.pop("extends")
    if not isinstance(ext, str) or not ext:
        raise ProfileError(
            f"{path}: extends: expected the name of another site profile, got {_fmt(ext)}",
            hint=f'write e.g. extends = "ci" (available: {_available(udir)})',
        )
    if own_name is not None and ext == own_name:
        if not implicit_base:
            raise ProfileError(f"{path}: extends: the profile extends itself ({ext!r})", hint="remove the `extends` key")
        return [*implicit_base, (path, data)]
    try:
        base = _resolve_name(ext, udir, stack)
    except ProfileError as exc:
        raise ProfileError(f"{path}: extends = {_fmt(ext)}: {exc.message}", hint=exc.hint) from None
    return [*base, (path, data)]


def _read(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"cannot read site profile {path}: {exc.strerror or exc}", hint="check the path and its permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(
            f"{path}: not UTF-8 text (byte {exc.start})", hint="save the file as UTF-8 (TOML requires it)"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)\s*$", msg)
        if not m:
            m2 = re.search(r"\(at end of document\)\s*$", msg)
            line = text.count("\n") + 1
            col = len(text.rsplit("\n", 1)[-1]) + 1
            reason = msg[: m2.start()].strip() if m2 else msg
        else:
            line, col = int(m.group(1)), int(m.group(2))
            reason = msg[: m.start()].strip()
        lines = text.splitlines()
        shown = lines[line - 1] if 0 < line <= len(lines) else ""
        caret = f"\n    {shown}\n    {' ' * (col - 1)}^" if shown else ""
        raise ProfileError(
            f"{path}:{line}:{col}: TOML syntax error at line {line}, column {col}: {reason}{caret}",
            hint="fix the TOML at that spot: strings need quotes (\"...\"), tables are [name] on their own "
            "line, lists are [\"a\", \"b\"]",
        ) from None


def _names(udir: Path) -> list[str]:
    found = set()
    for d in (_safe_builtin_dir(), udir):
        if d is not None and d.is_dir():
            found.update(p.stem for p in d.glob("*.toml") if _NAME_RE.match(p.stem) and not p.stem.startswith("_"))
    return sorted(found)


def _available(udir: Path) -> str:
    return ", ".join(_names(udir)) or "(none found)"


def _tilde(p: Path | str) -> str:
    s = str(p)
    home = str(Path.home())
    if home not in ("", "/") and (s == home or s.startswith(home + os.sep)):
        return "~" + s[len(home) :]
    return s


# --------------------------------------------------------------------------------------------
# Merging


def _merge(base: dict, over: dict, origins: dict[Key, str], src: str, prefix: Key) -> None:
    for k, v in over.items():
        key = (*prefix, k)
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v, origins, src, key)
            continue
        for old in [o for o in origins if o[: len(key)] == key]:
            del origins[old]
        base[k] = copy.deepcopy(v)
        if isinstance(v, dict) and v:
            _record(v, origins, src, key)
        else:
            origins[key] = src


def _record(d: dict, origins: dict[Key, str], src: str, prefix: Key) -> None:
    for k, v in d.items():
        if isinstance(v, dict) and v:
            _record(v, origins, src, (*prefix, k))
        else:
            origins[(*prefix, k)] = src


def _schema_leaves(profile: SiteProfile) -> list[Key]:
    keys = []
    for sname, sfield in type(profile).model_fields.items():
        if sname == "name":
            continue
        model = sfield.annotation
        for fname in model.model_fields:  # type: ignore[union-attr]
            keys.append((sname, fname))
    return keys


def _ordered_keys(profile: SiteProfile, origins: dict[Key, str]) -> list[Key]:
    """Leaf keys in schema order; entries of dict-valued fields in file order."""
    out = []
    for key in _schema_leaves(profile):
        out.extend(k for k in origins if k[: len(key)] == key)
    out.extend(k for k in origins if k not in out)
    return out


# --------------------------------------------------------------------------------------------
# Validation errors → ProfileError


def _validate(name: str, merged: dict, origins: dict[Key, str], files: tuple[Path, ...]) -> SiteProfile:
    try:
        return SiteProfile.model_validate({**merged, "name": name}, strict=True)
    except pydantic.ValidationError as exc:
        problems = [_problem(err, merged, origins, files) for err in exc.errors()]
    if len(problems) == 1:
        what, fix = problems[0]
        raise ProfileError(f"site profile {name!r}: {what}", hint=fix) from None
    lines = [f"site profile {name!r} has {len(problems)} problems:"]
    for i, (what, fix) in enumerate(problems, 1):
        lines.append(f"  {i}. {what}\n     fix: {fix}")
    raise ProfileError(
        "\n".join(lines), hint=f"`hpkctl sites show {name}` shows which file sets each value"
    ) from None


def _q(k: str) -> str:
    """A TOML key, quoted when it is not a bare key."""
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k, ensure_ascii=False)


def _key_path(loc: tuple) -> str:
    """``("apptainer", "network")`` → ``[apptainer].network``; list indices as ``[0]``."""
    if len(loc) == 1:
        return f"[{loc[0]}]" if loc[0] in _sections() else _q(str(loc[0]))
    out = f"[{loc[0]}]"
    for k in loc[1:]:
        out += f"[{k}]" if isinstance(k, int) else "." + _q(str(k))
    return out


def _sections() -> dict[str, type[pydantic.BaseModel]]:
    return {n: f.annotation for n, f in SiteProfile.model_fields.items() if n != "name"}  # type: ignore[misc]


def _file_for(loc: Key, origins: dict[Key, str], files: tuple[Path, ...]) -> str:
    """The file that set the value at ``loc`` (or, for a table, the last file that set part of it)."""
    for i in range(len(loc), 0, -1):
        if origins.get(loc[:i], SCHEMA_DEFAULT) != SCHEMA_DEFAULT:
            return origins[loc[:i]]
    under = [origins[k] for k in origins if k[: len(loc)] == loc and origins[k] != SCHEMA_DEFAULT]
    if under:
        return under[-1]
    return str(files[-1]) if files else "(no file)"


def _fmt(v: Any) -> str:
    """A value the way it would be written in TOML."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (_dt.date, _dt.time, _dt.datetime)):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_q(str(k))} = {_fmt(x)}" for k, x in v.items()) + " }" if v else "{}"
    return repr(v)


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


def _field_info(loc: Key) -> pydantic.fields.FieldInfo | None:
    sections = _sections()
    if len(loc) >= 2 and loc[0] in sections:
        return sections[loc[0]].model_fields.get(str(loc[1]))
    return None


_TIME_FIX = 'use Slurm\'s time format, e.g. "30" (minutes), "01:30:00", "1-00:00:00" (days-hours:minutes:seconds)'


def _problem(err: Any, merged: dict, origins: dict[Key, str], files: tuple[Path, ...]) -> tuple[str, str]:
    raw_loc = tuple(err["loc"])
    loc: Key = tuple(str(x) for x in raw_loc)
    typ = err["type"]
    given = err.get("input")
    file = _file_for(loc, origins, files)
    kp = _key_path(raw_loc)
    leaf = loc[1] if len(loc) >= 2 else loc[0]  # the field, also for an item of a list/table
    table = f"[{loc[0]}]" if len(loc) >= 2 else "the top level"
    got = f"got {_fmt(given)}"

    if typ == "extra_forbidden":
        if len(loc) == 1 and isinstance(given, dict):
            kp = f"[{_q(loc[0])}]"
            what = f"{file}: {kp}: unknown table"
        else:
            what = f"{file}: {kp}: unknown key (value {_fmt(given)})"
        return what, _unknown_key_fix(loc, file)

    if typ == "literal_error":
        finfo = _field_info(loc)
        allowed = list(typing.get_args(finfo.annotation)) if finfo is not None else []
        allowed_s = ", ".join(_fmt(a) for a in allowed) or err["ctx"].get("expected", "")
        what = f"{file}: {kp}: expected one of {allowed_s}; {got}"
        return what, f"set {leaf} = " + " or ".join(_fmt(a) for a in allowed) + f" under {table} in {file}"

    if typ in ("model_type", "dict_type", "model_attributes_type"):
        what = f"{file}: {kp}: expected a table; {got} ({_type_name(given)})"
        if len(loc) == 1:
            return what, f"write the section as a table: a line [{leaf}] followed by key = value lines"
        return what, f'write it as a table, e.g. {leaf} = {{ "name" = "value" }}'

    if typ in ("string_type", "bool_type", "float_type", "int_type", "list_type", "greater_than", "finite_number"):
        expected = {
            "string_type": "a string",
            "bool_type": "true or false",
            "float_type": "a number",
            "int_type": "an integer",
            "list_type": "a list",
            "greater_than": f"a number > {err.get('ctx', {}).get('gt', 0)}",
            "finite_number": "a finite number",
        }[typ]
        what = f"{file}: {kp}: expected {expected}; {got} ({_type_name(given)})"
        if typ == "string_type":
            if isinstance(given, (_dt.time, _dt.date, _dt.datetime)):
                fix = f'quote it: {leaf} = "{given.isoformat()}" (unquoted, TOML reads it as a time)'
            elif isinstance(given, (list, dict)):
                fix = f'write a single string: {leaf} = "..."'
            else:
                fix = f"quote it: {leaf} = {json.dumps(_fmt(given))}"
            if len(loc) > 2:  # an item of a list or table
                fix = f"every item of {_key_path(raw_loc[:2])} must be a quoted string"
        elif typ == "bool_type":
            fix = f"write {leaf} = true or {leaf} = false (no quotes)"
        elif typ == "list_type":
            inner = _fmt(given) if isinstance(given, str) else '"..."'
            fix = f"write a list: {leaf} = [{inner}]"
        else:
            fix = f"write a number without quotes, e.g. {leaf} = 30"
        return what, fix + f" (in {file})"

    if typ == "value_error":
        msg = str(err["msg"]).removeprefix("Value error, ")
        finfo_key = loc[1] if len(loc) >= 2 else ""
        if finfo_key in ("default_time", "max_time"):
            fix = _TIME_FIX + f" (in {file})"
        elif finfo_key == "extra_directives":
            fix = 'write each option as one list item, e.g. extra_directives = ["--reservation=x", "--constraint=gpu"]'
        elif loc == ("apptainer",) and "parent_image" in msg:
            fix = f'add parent_image = "docker://..." under [apptainer] in {file}, or set network = "host"'
        elif loc == ("slurm",) and "max_time" in msg:
            fix = f"lower default_time or raise max_time under [slurm] in {file}"
        else:
            fix = f"correct {kp} in {file}"
        return f"{file}: {kp}: {msg} ({got})" if len(loc) > 1 else f"{file}: {kp}: {msg}", fix

    what = f"{file}: {kp}: {err['msg']}; {got}"
    return what, f"correct {kp} in {file} (every key is documented in site-configs/_defaults.toml)"


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


# --------------------------------------------------------------------------------------------
# Expansion of $VAR and ~


class _Unset(Exception):
    def __init__(self, var: str) -> None:
        self.var = var


def expand_value(value: str, environ: typing.Mapping[str, str] | None = None) -> str:
    """Expand ``$VAR``, ``${VAR}``, ``$$`` and a leading ``~``; raise KeyError(var) if unset/empty."""
    env = os.environ if environ is None else environ

    def sub(m: re.Match) -> str:
        if m.group("dollar"):
            return "$"
        var = m.group("braced") if m.group("braced") is not None else m.group("plain")
        if var is None:
            raise KeyError("$")  # a lone "$"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
            raise KeyError(var)
        val = env.get(var, "")
        if not val:
            raise KeyError(var)
        return val

    out = _VAR_RE.sub(sub, value)
    if value.startswith("~"):
        out = os.path.expanduser(out)
    return out


def _expand(profile: SiteProfile, origins: dict[Key, str], name: str, udir: Path) -> SiteProfile:
    data = profile.model_dump()
    for sect, key in PATH_KEYS:
        v = data[sect][key]
        items = v if isinstance(v, list) else [v]
        done = []
        for item in items:
            try:
                new = expand_value(item)
            except KeyError as exc:
                var = exc.args[0]
                file = origins.get((sect, key), SCHEMA_DEFAULT)
                where = f"{file}: " if file != SCHEMA_DEFAULT else ""
                if var == "$":
                    raise ProfileError(
                        f"site profile {name!r}: {where}[{sect}].{key}: a lone `$` in {_fmt(item)}",
                        hint="write $VAR or ${VAR} for a variable, $$ for a literal $",
                    ) from None
                extra = f" ({_VAR_HINTS[var]})" if var in _VAR_HINTS else ""
                raise ProfileError(
                    f"site profile {name!r}: {where}[{sect}].{key}: environment variable ${var} is not set "
                    f"(value {_fmt(item)})",
                    hint=f"set {var} in the environment{extra}, or override {key} under [{sect}] in "
                    f"{_tilde(udir / (name + '.toml'))}",
                ) from None
            if (sect, key) in _ABSOLUTE_KEYS and new and not os.path.isabs(new):
                file = origins.get((sect, key), SCHEMA_DEFAULT)
                raise ProfileError(
                    f"site profile {name!r}: {file}: [{sect}].{key}: expected an absolute path; got {_fmt(item)}"
                    + (f" (expanded: {_fmt(new)})" if new != item else ""),
                    hint=f'write it as an absolute path, e.g. {key} = "~/{new}" or "/full/path" (in {file})',
                )
            done.append(new)
        data[sect][key] = done if isinstance(v, list) else done[0]
    return SiteProfile.model_validate(data, strict=True)

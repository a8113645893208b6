"""Loading site profiles: the public entry points, built from the modules that do each step.

``load_site(NAME)`` = find the files (:mod:`~hpkctl.sites.files`, ``extends`` included) → merge them
key by key remembering origins (:mod:`~hpkctl.sites.provenance`) → validate, with errors that name
file and key (:mod:`~hpkctl.sites.validation`) → expand ``$VAR``/``~`` in path-like values
(:mod:`~hpkctl.sites.expansion`). ``explain_site`` stops before expanding and keeps the origins;
``hpkctl sites show`` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hpkctl.errors import ProfileError
from hpkctl.sites import files
from hpkctl.sites.expansion import expand_profile
from hpkctl.sites.provenance import SCHEMA_DEFAULT, Key, add_schema_defaults, merge_layer, ordered, schema_leaves
from hpkctl.sites.schema import SiteProfile
from hpkctl.sites.tomltext import tilde
from hpkctl.sites.validation import validate


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


def load_site(name_or_path: str, *, user_dir: Path | None = None, expand: bool = True) -> SiteProfile:
    """Load, merge and validate a site profile by name (built-in and/or user file) or .toml path.

    With ``expand`` (the default) ``$VAR``/``~`` in path-like values are expanded and must resolve.
    Raises :class:`ProfileError` naming the file, the key, the value and a fix.
    Does not check ``account_required``: call :func:`require_submittable` before submitting.
    """
    return explain_site(name_or_path, user_dir=user_dir, expand=expand).profile


def explain_site(name_or_path: str, *, user_dir: Path | None = None, expand: bool = False) -> SiteExplanation:
    """Like :func:`load_site`, plus the origin of every leaf value. Does not expand by default."""
    udir = files.default_user_dir() if user_dir is None else Path(user_dir)
    name, layers = files.resolve_layers(name_or_path, udir=udir)
    merged: dict[str, object] = {}
    origins: dict[Key, str] = {}
    for path, data in layers:
        merge_layer(merged, data, origins=origins, src=str(path))
    merged_files = tuple(p for p, _ in layers)
    profile = validate(name, merged, origins=origins, files=merged_files)
    leaves = schema_leaves(SiteProfile)
    add_schema_defaults(origins, leaves)
    if expand:
        profile = expand_profile(profile, origins=origins, user_dir=udir)
    return SiteExplanation(profile=profile, origins=ordered(origins, leaves), files=merged_files)


def list_sites(*, user_dir: Path | None = None) -> list[SiteSource]:
    """Every profile name hpkctl can find (built-in and user), sorted, with description or load error."""
    udir = files.default_user_dir() if user_dir is None else Path(user_dir)
    out = []
    for name, found in files.profile_files(udir).items():
        description, error = "", ""
        try:
            description = explain_site(name, user_dir=udir).profile.site.description
        except ProfileError as exc:
            error = exc.message.splitlines()[0]
        top = found.get("user") or found["builtin"]  # the file whose `extends` applies
        out.append(
            SiteSource(
                name=name,
                builtin=found.get("builtin"),
                user=found.get("user"),
                description=description,
                extends=files.extends_of(top),
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
    udir = files.default_user_dir() if user_dir is None else Path(user_dir)
    bdir = files.safe_builtin_dir()
    has_builtin = bdir is not None and (bdir / f"{profile.name}.toml").is_file()
    raise ProfileError(
        f"site profile {profile.name!r} requires a Slurm account (account_required = true) "
        "but [slurm].account is empty",
        hint=f'set your budget in {tilde(udir / f"{profile.name}.toml")}:\n       [slurm]\n       account = "<budget>"'
        + ("\n     (the file overrides the built-in profile key by key; create it if missing)" if has_builtin else ""),
    )


__all__ = [
    "SCHEMA_DEFAULT",
    "SiteExplanation",
    "SiteSource",
    "explain_site",
    "list_sites",
    "load_site",
    "require_submittable",
]

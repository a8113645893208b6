"""Which site profile a command uses when ``--site`` is not given; never a silent default.

In this order, the first that says something wins:

1. ``--site NAME`` (or the path of a .toml file);
2. ``$HPK_SITE``;
3. ``site = "NAME"`` in ``$XDG_CONFIG_HOME/hpk/config.toml`` (default ``~/.config/hpk/config.toml``);
4. the one profile whose ``[site] hostnames`` globs match this host's name (fully qualified or not).
   Patterns are not inherited through ``extends`` (see :mod:`hpkctl.sites.files`); a user file can
   switch a built-in's off with ``hostnames = []``. Two matching profiles are an error naming both.

Nothing else: a JSC user who forgets ``--site`` must not get the CI profile. When nothing selects a
profile the error lists the profiles and the ways to choose one.

Pure apart from reading profile files: the environment, the host's names and the paths are
arguments, so callers (the CLI) and tests pass them explicitly.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hpkctl.errors import HpkError, ProfileError
from hpkctl.sites import files
from hpkctl.sites.tomltext import tilde, toml_value

#: The environment variable naming the profile.
ENV_VAR = "HPK_SITE"
#: The keys ``config.toml`` may hold.
_CONFIG_KEYS = ("site",)


@dataclass(frozen=True)
class SiteChoice:
    """The profile a command uses, and why."""

    #: a profile name or the path of a .toml file (what ``load_site`` takes)
    name: str
    #: ``"option"``, ``"environment"``, ``"config"`` or ``"hostname"``
    source: str
    #: one line for people: ``$HPK_SITE=jsc``, ``this host (jrlogin04.jureca) matches "jrlogin*.jureca" in ...``
    reason: str


def config_file(environ: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME/hpk/config.toml`` (``~/.config/hpk/config.toml``)."""
    return files.config_dir(environ) / "config.toml"


def select_site(
    option: str | None,
    *,
    environ: Mapping[str, str],
    host_names: Callable[[], Sequence[str]],
    config_path: Path,
    user_dir: Path,
) -> SiteChoice:
    """The profile to use (see the module docstring for the order); :class:`HpkError` when none is selected.

    ``host_names`` is called only when the host name is needed (a DNS lookup can be slow).
    """
    if option is not None:
        return SiteChoice(option, "option", f"--site {option}")
    env_value = environ.get(ENV_VAR, "")
    if env_value:
        _must_exist(env_value, where=f"${ENV_VAR}", fix=f"unset {ENV_VAR} or set it to", user_dir=user_dir)
        return SiteChoice(env_value, "environment", f"${ENV_VAR}={env_value}")
    configured = read_config_site(config_path)
    if configured is not None:
        _must_exist(configured, where=f"{tilde(config_path)}: site", fix="set site to", user_dir=user_dir)
        return SiteChoice(configured, "config", f"site = {toml_value(configured)} in {tilde(config_path)}")
    names = _unique(host_names())
    matches, unreadable = hostname_matches(names, user_dir=user_dir)
    if len(matches) == 1:
        name, host, pattern, path = matches[0]
        return SiteChoice(name, "hostname", f"this host ({host}) matches {toml_value(pattern)} in {tilde(path)}")
    if matches:
        found = "; ".join(f"{n} ({h} matches {toml_value(p)} in {tilde(f)})" for n, h, p, f in matches)
        raise HpkError(
            f"this host matches the [site] hostnames of {len(matches)} site profiles: {found}",
            hint="choose one with --site NAME, $HPK_SITE or site = \"NAME\" in "
            f"{tilde(config_path)}; or remove the pattern from one of them "
            "(a user profile can switch a built-in's off with hostnames = [] under [site])",
        )
    raise HpkError(_nothing_selected(names, unreadable, config_path), hint=_how_to_choose(config_path, user_dir))


def read_config_site(config_path: Path) -> str | None:
    """``site`` from the user's config.toml; None if the file or the key is missing."""
    if not config_path.is_file():
        return None
    data = files.read_toml(config_path)
    for key in data:
        if key not in _CONFIG_KEYS:
            close = difflib.get_close_matches(key, _CONFIG_KEYS, n=1)
            raise ProfileError(
                f"{config_path}: {key}: unknown key (value {toml_value(data[key])})",
                hint=(f"did you mean `{close[0]}`? " if close else "")
                + f"the keys allowed in {tilde(config_path)} are: " + ", ".join(_CONFIG_KEYS),
            )
    site = data.get("site")
    if site is None:
        return None
    if not isinstance(site, str) or not site:
        raise ProfileError(
            f"{config_path}: site: expected the name of a site profile; got {toml_value(site)}",
            hint='write e.g. site = "jsc"',
        )
    return site


def hostname_matches(
    host_names: Sequence[str], *, user_dir: Path
) -> tuple[list[tuple[str, str, str, Path]], list[str]]:
    """Profiles whose ``[site] hostnames`` match one of ``host_names``: (profile, host, pattern, file).

    Also returns the names of profiles that could not be read (they cannot match).
    """
    matches = []
    unreadable = []
    for name in files.profile_files(user_dir):
        try:
            declared = declared_hostnames(name, user_dir=user_dir)
        except ProfileError:
            unreadable.append(name)
            continue
        if declared is None:
            continue
        patterns, path = declared
        hit = next(((h, p) for p in patterns for h in host_names if _match(h, p)), None)
        if hit is not None:
            matches.append((name, hit[0], hit[1], path))
    return matches, unreadable


def declared_hostnames(name: str, *, user_dir: Path) -> tuple[list[str], Path] | None:
    """The profile's own ``[site] hostnames`` and the file that set them (None if no file does)."""
    _, layers = files.resolve_layers(name, udir=user_dir)
    found = None
    for path, data in layers:
        site = data.get("site")
        if isinstance(site, dict) and "hostnames" in site:
            found = (site["hostnames"], path)
    if found is None:
        return None
    patterns, path = found
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ProfileError(f"{path}: [site].hostnames: expected a list of strings; got {toml_value(patterns)}")
    return patterns, path


def _match(host: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(host.lower(), pattern.lower())  # host names are case-insensitive


def _unique(names: Sequence[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if n and n not in out:
            out.append(n)
    return out


def _must_exist(name: str, *, where: str, fix: str, user_dir: Path) -> None:
    if files.profile_exists(name, udir=user_dir):
        return
    raise ProfileError(
        f"{where} names site profile {name!r}, which does not exist",
        hint=f"{fix} one of: {files.available(user_dir)}",
    )


def _nothing_selected(host_names: Sequence[str], unreadable: Sequence[str], config_path: Path) -> str:
    host = ", ".join(host_names) or "unknown"
    msg = (
        f"no site profile selected: no --site, no ${ENV_VAR}, no `site` in {tilde(config_path)}, "
        f"and no profile's [site] hostnames match this host ({host})"
    )
    if unreadable:
        msg += f" (not checked, they do not load: {', '.join(unreadable)})"
    return msg


def _how_to_choose(config_path: Path, user_dir: Path) -> str:
    return (
        f"choose one of: {files.available(user_dir)}\n"
        "       for one command:  hpkctl COMMAND --site NAME\n"
        f"       for this shell:   export {ENV_VAR}=NAME\n"
        f'       for good:         site = "NAME" in {tilde(config_path)}'
    )


__all__ = [
    "ENV_VAR",
    "SiteChoice",
    "config_file",
    "declared_hostnames",
    "hostname_matches",
    "read_config_site",
    "select_site",
]

"""Arguments several command groups share, and choosing the site profile."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpkctl.sites import SiteChoice

# Exit statuses of every command (README.md, "Exit status"): 0 success; 125 hpkctl's own error
# (usage, invalid manifest or profile, Slurm refused or unreachable), as `docker run` uses it;
# `hpkctl run` otherwise exits with the pod's exit code (hpkctl.local.runs.exit_status). Here, not in
# hpkctl/cli/__init__.py, so that a command module need not import every other one to use it.
EXIT_ERROR = 125

_SITE_HELP = (
    "site profile: a name (built-in or ~/.config/hpk/sites/NAME.toml) or a .toml path. "
    'Without it: $HPK_SITE, then site = "NAME" in ~/.config/hpk/config.toml, then the profile whose '
    "[site] hostnames match this host; otherwise an error (`hpkctl sites show` tells which applies)"
)


def say(text: str) -> None:
    """A line on stderr that must not fail: after SIGHUP the terminal may be gone."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def add_site(p: argparse.ArgumentParser) -> None:
    p.add_argument("--site", metavar="NAME", default=None, help=_SITE_HELP)


def host_names() -> list[str]:
    """This host's names as profiles' ``[site] hostnames`` patterns are matched against."""
    return [socket.getfqdn(), socket.gethostname()]


def choose_site(option: str | None) -> SiteChoice:
    """The profile for this command: ``--site``, ``$HPK_SITE``, config.toml, host name (no default)."""
    from hpkctl.sites import default_user_dir, select_site
    from hpkctl.sites.selection import config_file

    return select_site(
        option,
        environ=os.environ,
        host_names=host_names,
        config_path=config_file(os.environ),
        user_dir=default_user_dir(),
    )


def site_of(args: argparse.Namespace, *, announce: bool = False) -> str:
    """The profile name (or path) for ``args.site``; with ``announce``, say on stderr why when not given."""
    choice = choose_site(args.site)
    if announce and choice.source != "option":
        print(f"hpkctl: site profile {choice.name} ({choice.reason})", file=sys.stderr)
    return choice.name

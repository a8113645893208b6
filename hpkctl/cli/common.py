"""Arguments several command groups share, and choosing the site profile."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import socket
import sys
from collections.abc import Iterator
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


#: set by :func:`hpkctl.cli.entry`: this process is the ``hpkctl`` program, which ends with its command
#: (not a test calling :func:`hpkctl.cli.main`, or anything else importing the CLI)
PROGRAM = False


@contextlib.contextmanager
def no_collections() -> Iterator[None]:
    """No garbage collection while a command imports what it needs: ~30,000 objects (modules,
    classes, functions) that stay, and a few hundred that are cyclic garbage (functions, enum
    helpers; nothing with a finalizer or a file). The collector walked them ~60 times (~8 ms of a
    ``hpkctl run --detach``, issue 23.2). In the program (:data:`PROGRAM`) they are then frozen
    (:func:`gc.freeze`), out of every later collection's walk, and live until the process ends, the
    garbage among them too. Elsewhere they are only collected later. Collection resumes as it was
    found."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if PROGRAM:
            gc.freeze()
        if was:
            gc.enable()


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

"""``hpkctl sites list`` and ``hpkctl sites show [NAME] [--toml]`` (text from :mod:`hpkctl.sites.describe`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hpkctl.cli.common import choose_site
from hpkctl.errors import HpkError


def register(sub: Any) -> None:
    p = sub.add_parser("sites", help="list site profiles or show one merged, with where each value came from")
    ssub = p.add_subparsers(dest="sites_command", required=True, metavar="SUBCOMMAND")
    sp = ssub.add_parser("list", help="list the profiles hpkctl can find")
    sp.set_defaults(func=cmd_list)
    sp = ssub.add_parser("show", help="show one profile merged, with the origin of every value")
    sp.add_argument(
        "name", nargs="?", help="profile name or .toml path (default: the one commands use here without --site, and why)"
    )
    sp.add_argument("--toml", action="store_true", help="print plain merged TOML only")
    sp.set_defaults(func=cmd_show)


def cmd_list(args: argparse.Namespace) -> int:
    """Print every profile: name, description, the files it comes from. Exit 0 (1 if one is invalid or none)."""
    from hpkctl.sites import default_user_dir, list_sites
    from hpkctl.sites.describe import list_text

    sites = list_sites()
    try:
        choice = choose_site(None)
        selected = f"Used here without --site: {choice.name} ({choice.reason})."
    except HpkError as exc:
        selected = f"Used here without --site: none ({exc.message.splitlines()[0]})."
    sys.stdout.write(list_text(sites, user_dir=default_user_dir(), selected=selected if sites else ""))
    return 1 if not sites or any(s.error for s in sites) else 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print the merged profile as TOML; each value followed by a comment naming its origin.

    Without a name: the profile commands would use here, and why it was selected.
    """
    from hpkctl.sites import explain_site
    from hpkctl.sites.describe import annotated_toml, profile_toml

    choice = choose_site(args.name)
    expl = explain_site(choice.name)
    if args.toml:
        sys.stdout.write(profile_toml(expl.profile))
    else:
        sys.stdout.write(annotated_toml(expl, selected_by="" if args.name else choice.reason))
    return 0

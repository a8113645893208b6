"""``hpkctl sites list`` and ``hpkctl sites show NAME [--toml]``."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("sites", help="list site profiles or show one merged, with where each value came from")
    ssub = p.add_subparsers(dest="sites_command", required=True, metavar="SUBCOMMAND")
    sp = ssub.add_parser("list", help="list the profiles hpkctl can find")
    sp.set_defaults(func=cmd_list)
    sp = ssub.add_parser("show", help="show one profile merged, with the origin of every value")
    sp.add_argument("name")
    sp.add_argument("--toml", action="store_true", help="print plain merged TOML only")
    sp.set_defaults(func=cmd_show)


def cmd_list(args: argparse.Namespace) -> int:
    from hpkctl.sites import commands

    return commands.cmd_list(args)


def cmd_show(args: argparse.Namespace) -> int:
    from hpkctl.sites import commands

    return commands.cmd_show(args)

"""The ``hpkctl`` command line: the parser, and error printing. One module per command group
(``render.py``, ``local.py``, ``sites.py``); each registers its subcommands with
``set_defaults(func=...)``, so ``grep 'def cmd_run'`` finds a command's code.

Business logic lives in the layers (:mod:`hpkctl.local`, :mod:`hpkctl.pod`, :mod:`hpkctl.sites`);
command modules are imported lazily so ``hpkctl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hpkctl import __version__
from hpkctl.cli import local, render, sites
from hpkctl.errors import HpkError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpkctl",
        description="High-Performance Kubernetes: run Kubernetes pods as Slurm jobs with Apptainer.",
    )
    parser.add_argument("--version", action="version", version=f"hpkctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    render.register(sub)
    local.register(sub)
    sites.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except HpkError as exc:
        print(f"hpkctl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


__all__ = ["build_parser", "main"]

"""The ``hpkctl`` command line: the parser, and error printing. One module per command group
(``render.py``, ``local.py``, ``sites.py``, ``cluster.py``); each registers its subcommands with
``set_defaults(func=...)``, so ``grep 'def cmd_run'`` finds a command's code.

Business logic lives in the layers (:mod:`hpkctl.local`, :mod:`hpkctl.pod`, :mod:`hpkctl.sites`);
command modules are imported lazily so ``hpkctl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from hpkctl import __version__
from hpkctl.cli import build, cluster, controlplane, launch, local, pull, render, sites
from hpkctl.cli.common import EXIT_ERROR
from hpkctl.errors import HpkError


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 125 (hpkctl's own error) instead of argparse's 2, which a
    pod's exit code could be too."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="hpkctl",
        description="High-Performance Kubernetes: run Kubernetes pods as Slurm jobs with Apptainer.",
    )
    parser.add_argument("--version", action="version", version=f"hpkctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    render.register(sub)
    local.register(sub)
    pull.register(sub)
    sites.register(sub)
    cluster.register(sub)
    build.register(sub)
    launch.register(sub)
    controlplane.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except HpkError as exc:
        print(f"hpkctl: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`hpkctl status | head`): stop quietly as a shell tool does, and keep
        # Python from failing again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


__all__ = ["EXIT_ERROR", "Parser", "build_parser", "main"]

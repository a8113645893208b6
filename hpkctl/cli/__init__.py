"""The ``hpkctl`` command line: the parser, and error printing. One module per command group
(``render.py``, ``local.py``, ``sites.py``, ``cluster.py``); each registers its subcommands with
``set_defaults(func=...)``, so ``grep 'def cmd_run'`` finds a command's code.

Business logic lives in the layers (:mod:`hpkctl.local`, :mod:`hpkctl.pod`, :mod:`hpkctl.sites`);
command modules are imported lazily so ``hpkctl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from hpkctl import __version__
from hpkctl.cli import common
from hpkctl.cli.common import EXIT_ERROR
from hpkctl.errors import HpkError


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 125 (hpkctl's own error) instead of argparse's 2, which a
    pod's exit code could be too."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


class _Skipped:
    """What a command that is not the one asked for gets instead of its parser: every call is accepted and
    ignored (``add_argument``, ``set_defaults``, ``add_subparsers`` and what they return)."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *_args, **_kwargs: self


class _Only:
    """The top-level subparsers, building only the parser of ``command``: argparse builds a whole parser
    per command (and looks up message translations for each, ~60 file-system lookups in all), which
    ``hpkctl run`` need not pay for the other 17 commands (issue 23.2). ``seen`` tells whether it was one."""

    def __init__(self, sub: Any, command: str) -> None:
        self.sub, self.command, self.seen = sub, command, False

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name != self.command:
            return _Skipped()
        self.seen = True
        return self.sub.add_parser(name, **kwargs)


#: the command modules in the order ``hpkctl --help`` lists their commands
MODULES = ("render", "local", "pull", "sites", "cluster", "build", "launch", "controlplane")
#: which module registers each command: ``hpkctl run`` imports hpkctl.cli.local alone, not the other
#: seven and what they import (issue 23.2; test_cli_parser proves every command is found here)
COMMANDS = {"render": "render", "run": "local", "status": "local", "logs": "local", "delete": "local",
            "pull": "pull", "sites": "sites", "kubelet": "cluster", "scheduler": "cluster", "build": "build",
            "start": "launch", "stop": "launch", "doctor": "launch", "selftest": "launch",
            "controlplane": "controlplane"}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """hpkctl's parser; with ``command``, only that command's parser is built below the top level (the
    whole parser when no command has that name, so a typo gets argparse's list of them)."""
    parser = Parser(
        prog="hpkctl",
        description="High-Performance Kubernetes: run Kubernetes pods as Slurm jobs with Apptainer.",
    )
    parser.add_argument("--version", action="version", version=f"hpkctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command is not None:
        only = _Only(sub, command)
        if command in COMMANDS:
            _register(only, (COMMANDS[command],))
        return parser if only.seen else build_parser()
    _register(sub, MODULES)
    return parser


def _register(sub: Any, modules: Sequence[str]) -> None:
    for name in modules:
        importlib.import_module(f"hpkctl.cli.{name}").register(sub)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # the command is the first word when nothing comes before it (``hpkctl -h run`` shows every command)
    command = argv[0] if argv and not argv[0].startswith("-") else None
    args = build_parser(command).parse_args(argv)
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


def entry() -> int:
    """The ``hpkctl`` program (its console script and ``python -m hpkctl``): :func:`main`, then a
    quicker exit. Every object left when a command returns is moved out of the garbage collector's
    sight (:func:`gc.freeze`), so the interpreter's last collections at exit do not walk the ~30,000
    objects of what the command imported: ~17 ms of a ``hpkctl run --detach`` that took ~180 ms
    (issue 23.2). Exit stays otherwise the same: ``atexit`` handlers run, the standard streams are
    flushed, modules are torn down and what they hold is freed by reference counting; only garbage in
    reference cycles is left to the operating system, which Python never promised to finalise at exit.
    Not in :func:`main`, which tests call in their own long-lived process; for the same reason a
    command freezes its imports (:func:`hpkctl.cli.common.no_collections`) only where this set
    :data:`~hpkctl.cli.common.PROGRAM`."""
    common.PROGRAM = True
    status = main()
    gc.freeze()
    return status


__all__ = ["COMMANDS", "EXIT_ERROR", "MODULES", "Parser", "build_parser", "entry", "main"]

"""The ``hpkctl`` command line. Parsing and error printing only; each command lives in its layer.

Imports of the layers are lazy so ``hpkctl --help`` and ``hpkctl render`` stay fast (the
Kubernetes client alone costs most of a second to import).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hpkctl import __version__
from hpkctl.errors import HpkError


def _add_site(p: argparse.ArgumentParser) -> None:
    p.add_argument("--site", default="ci", help="site profile name (built-in or ~/.config/hpk/sites/NAME.toml)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpkctl",
        description="High-Performance Kubernetes: run Kubernetes pods as Slurm jobs with Apptainer.",
    )
    parser.add_argument("--version", action="version", version=f"hpkctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("render", help="print the sbatch script for a manifest (dry run, submits nothing)")
    p.add_argument("-f", "--filename", required=True, help="manifest: Pod, Job or Deployment (+ ConfigMaps/Secrets)")
    _add_site(p)
    p.add_argument("--out", help="also write the pod directory here (as the job would see it)")
    p.add_argument("--pod", help="which pod template to use when the file holds several")

    p = sub.add_parser("run", help="run a manifest's pod as a Slurm job, stream its logs, exit with its result")
    p.add_argument("-f", "--filename", required=True)
    _add_site(p)
    p.add_argument("--pod", help="which pod template to use when the file holds several")
    p.add_argument("-d", "--detach", action="store_true", help="return once the job is submitted")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only the containers' logs")

    p = sub.add_parser("status", help="show the state of runs started with 'hpkctl run'")
    p.add_argument("name", nargs="?", help="pod name (all runs when omitted)")
    _add_site(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("logs", help="print a run's container logs")
    p.add_argument("name")
    p.add_argument("-c", "--container", help="container name (default: the first main container)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the container ends")
    p.add_argument("-p", "--previous", action="store_true", help="the run before the last restart")
    _add_site(p)

    p = sub.add_parser("delete", help="cancel a run's Slurm job and forget the run")
    p.add_argument("name")
    _add_site(p)

    p = sub.add_parser("sites", help="list site profiles or show one merged, with where each value came from")
    ssub = p.add_subparsers(dest="sites_command", required=True, metavar="SUBCOMMAND")
    ssub.add_parser("list", help="list the profiles hpkctl can find")
    sp = ssub.add_parser("show", help="show one profile merged, with the origin of every value")
    sp.add_argument("name")
    sp.add_argument("--toml", action="store_true", help="print plain merged TOML only")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "render":
            from hpkctl.kubelet.commands import cmd_render

            return cmd_render(args)
        if args.command in ("run", "status", "logs", "delete"):
            from hpkctl import runner

            return getattr(runner, f"cmd_{args.command}")(args)
        if args.command == "sites":
            from hpkctl.sites import commands

            return getattr(commands, f"cmd_{args.sites_command}")(args)
    except HpkError as exc:
        print(f"hpkctl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""``hpkctl build``: build hpkctl's own Apptainer images (the control plane; the pod parent in cni mode).

    hpkctl build --site NAME [IMAGE...] [--dry-run] [--force] [--wheel PATH] [--arch ARCH] [--timeout S]

The plan (``hpkctl.controlplane.image``) comes first: the definition, where the image goes, the
recipe hash, and whether an image from the same recipe is already there (then nothing is built
unless ``--force``). ``--dry-run`` prints the plan, the exact commands and the rendered definition,
and runs nothing. Otherwise the hpkctl wheel is built (from this checkout) into the build directory,
the definition written next to it, and ``apptainer build`` run with ``[apptainer] build_flags``
(``--fakeroot`` by default), its output streamed (``hpkctl.runtime.build``).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import posixpath
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpkctl.files import write_atomic
from hpkctl.cli.common import add_site, site_of

if TYPE_CHECKING:
    from hpkctl.controlplane.image import BuildPlan
    from hpkctl.sites import SiteProfile


def register(sub: Any) -> None:
    p = sub.add_parser("build", help="build hpkctl's Apptainer images (control plane; pod parent in cni mode)")
    add_site(p)
    p.add_argument("images", nargs="*", metavar="IMAGE",
                   help="controlplane and/or parent (default: controlplane, plus parent when [apptainer] network "
                        "is cni)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan, the exact commands and the rendered definition; run nothing")
    p.add_argument("--force", action="store_true", help="build even if an image from the same recipe exists")
    p.add_argument("--wheel", metavar="PATH",
                   help="the hpkctl wheel to put in the control-plane image (default: built from this checkout)")
    p.add_argument("--arch", metavar="ARCH", choices=["amd64", "arm64"],
                   help="render for this architecture (--dry-run only: a build runs on, and for, this machine)")
    p.add_argument("--timeout", type=float, default=7200.0, metavar="SECONDS",
                   help="give up a build after this long (default 7200)")
    p.set_defaults(func=cmd_build)


def _source_checkout() -> Path | None:
    """The repository hpkctl runs from, if it runs from a checkout (pyproject.toml next to the package)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "apptainer" / "defs").is_dir() else None


def _commands(plan: BuildPlan, profile: SiteProfile, *, wheel_src: str, checkout: Path | None) -> list[list[str]]:
    from hpkctl.runtime.build import build_command, partial_path, python_executable, wheel_command

    cmds: list[list[str]] = [["mkdir", "-p", plan.context]]
    if plan.image == "controlplane":
        if wheel_src:
            cmds.append(["cp", wheel_src, posixpath.join(plan.context, plan.wheel)])
        elif checkout is not None:
            cmds.append(wheel_command(python_executable(), str(checkout), plan.context))
        for name, src in plan.copies.items():
            cmds.append(["cp", src, posixpath.join(plan.context, name)])
    cmds.append(["cat", ">", plan.def_path, "# the definition printed below"])
    tmp = partial_path(plan.sif)
    cmds.append(build_command(profile.apptainer.binary, profile.apptainer.build_flags, tmp, plan.def_path))
    cmds.append(["mv", tmp, plan.sif])
    cmds.append(["cat", ">", plan.record_path, "# recipe hash, size and time of the new image"])
    return cmds


def _show(cmd: list[str]) -> str:
    out = []
    for word in cmd:
        out.append(word if word in (">",) or word.startswith("# ") else shlex.quote(word))
    return " ".join(out)


def _profile(args: argparse.Namespace) -> SiteProfile:
    from hpkctl.cli.render import _dry_run_profile
    from hpkctl.sites import load_site

    site = site_of(args, announce=True)
    return _dry_run_profile(site) if args.dry_run else load_site(site)


def cmd_build(args: argparse.Namespace) -> int:
    from hpkctl.cli.common import EXIT_ERROR
    from hpkctl.controlplane.image import host_arch, plan_build, reuse_decision, source_digest
    from hpkctl.errors import HpkError

    profile = _profile(args)
    if args.arch and args.dry_run:
        arch = args.arch
    else:
        arch = host_arch()
        if args.arch and args.arch != arch:
            raise HpkError(f"cannot build {args.arch} images on this {arch} machine",
                           hint="build on a machine of that architecture; --arch is for --dry-run")
    unknown = [i for i in args.images if i not in ("controlplane", "parent")]
    if unknown:
        raise HpkError(f"unknown image {unknown[0]!r}", hint="the images are controlplane and parent")
    images = list(dict.fromkeys(args.images)) or (
        ["controlplane", "parent"] if profile.apptainer.network == "cni" else ["controlplane"])
    checkout = _source_checkout()
    wheel_src = os.path.abspath(args.wheel) if args.wheel else ""
    if wheel_src and not os.path.isfile(wheel_src):
        raise HpkError(f"--wheel {args.wheel}: no such file")
    if not wheel_src and checkout is None and "controlplane" in images:
        raise HpkError("hpkctl does not run from a source checkout, so it cannot build its own wheel",
                       hint="pass --wheel with the hpkctl wheel you installed (pip download hpkctl, or the file "
                            "you installed from)")
    if wheel_src:
        digest = hashlib.sha256(Path(wheel_src).read_bytes()).hexdigest()
    else:
        digest = source_digest()
    status = 0
    for image in images:
        plan = plan_build(profile, image, arch=arch, hpkctl_digest=digest,
                          wheel=os.path.basename(wheel_src) if wheel_src else "")
        decision = reuse_decision(plan, force=args.force)
        if args.dry_run:
            _print_dry_run(plan, profile, decision.build, decision.reason, wheel_src=wheel_src, checkout=checkout)
            if plan.refusals:
                _print_refusal(plan)
                status = EXIT_ERROR
            continue
        if plan.refusals:
            _print_refusal(plan)
            status = EXIT_ERROR
            continue
        _build(plan, profile, force=args.force, wheel_src=wheel_src, checkout=checkout, timeout=args.timeout)
    return status


def _print_refusal(plan: BuildPlan) -> None:
    print(f"hpkctl: error: refusing to build the {plan.image} image: a download has no pinned checksum "
          "(nothing is ever downloaded unchecked):", file=sys.stderr)
    for line in plan.refusals:
        print(f"  - {line}", file=sys.stderr)


def _print_dry_run(plan: BuildPlan, profile: SiteProfile, build: bool, reason: str, *, wheel_src: str,
                   checkout: Path | None) -> None:
    print(f"# hpkctl build --dry-run: the {plan.image} image for site {profile.name} (linux/{plan.arch})")
    print(f"# contents: {plan.summary}")
    print(f"# image:    {plan.sif}")
    print(f"# recipe:   {plan.recipe_hash}")
    print(f"# decision: {'build' if build else 'reuse'}: {reason}")
    print("# commands (none is run with --dry-run):")
    for cmd in _commands(plan, profile, wheel_src=wheel_src, checkout=checkout):
        print(_show(cmd))
    print(f"# ---- {plan.def_path} ----")
    sys.stdout.write(plan.definition)
    print(f"# ---- end of {plan.def_path} ----")


def _build(plan: BuildPlan, profile: SiteProfile, *, force: bool, wheel_src: str, checkout: Path | None,
           timeout: float) -> None:
    from hpkctl.controlplane.image import build_record, reuse_decision
    from hpkctl.runtime.build import apptainer_build, build_wheel, image_lock, python_executable

    say = f"hpkctl build: {plan.image} image ({plan.summary}; linux/{plan.arch})"
    with image_lock(plan.sif):
        decision = reuse_decision(plan, force=force)  # again: another build may have finished meanwhile
        if not decision.build:
            print(f"{say}: up to date, nothing to do (--force rebuilds): {decision.reason}", flush=True)
            return
        print(f"{say}: building: {decision.reason}", flush=True)
        print(f"hpkctl build: recipe {plan.recipe_hash}; build directory {plan.context}", flush=True)
        shutil.rmtree(plan.context, ignore_errors=True)
        os.makedirs(plan.context)
        if plan.image == "controlplane":
            dest = os.path.join(plan.context, plan.wheel)
            if wheel_src:
                shutil.copyfile(wheel_src, dest)
            else:
                assert checkout is not None
                print(f"hpkctl build: building hpkctl's wheel from {checkout}", flush=True)
                built = build_wheel(python=python_executable(), source=str(checkout), outdir=plan.context,
                                    out=sys.stdout)
                if os.path.basename(built) != plan.wheel:
                    from hpkctl.errors import HpkError
                    raise HpkError(f"the wheel was built as {os.path.basename(built)}, not {plan.wheel}",
                                   hint="hpkctl's version and its package metadata disagree; reinstall hpkctl")
            for name, src in plan.copies.items():
                shutil.copyfile(src, os.path.join(plan.context, name))
        Path(plan.def_path).write_text(plan.definition)
        print(f"hpkctl build: apptainer build ({' '.join(profile.apptainer.build_flags) or 'no flags'}) "
              f"→ {plan.sif}; this downloads and packs the image and takes minutes", flush=True)
        apptainer_build(apptainer=profile.apptainer.binary, flags=profile.apptainer.build_flags, sif=plan.sif,
                        definition=plan.def_path, image=plan.image, out=sys.stdout, cwd=plan.context,
                        timeout=timeout)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        write_atomic(Path(plan.record_path), build_record(plan, built=now).encode(), mode=0o644)
        shutil.rmtree(plan.context, ignore_errors=True)
    print(f"hpkctl build: {plan.image} image ready: {plan.sif}", flush=True)

"""``hpkctl render``: print the sbatch script for a manifest; submit nothing."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpkctl.cli.common import add_site, site_of
from hpkctl.errors import PodError, ProfileError

if TYPE_CHECKING:
    from hpkctl.sites import SiteProfile


def register(sub: Any) -> None:
    p = sub.add_parser("render", help="print the sbatch script for a manifest (dry run, submits nothing)")
    p.add_argument("-f", "--filename", help="manifest: Pod, Job or Deployment (+ ConfigMaps/Secrets)")
    add_site(p)
    p.add_argument("--out", help="also write the pod directory here (as the job would see it); must be new, "
                                 "empty, or a pod directory an earlier --out wrote (nothing else is ever removed)")
    p.add_argument("--pod", help="which pod template to use when the file holds several")
    p.add_argument("--runtime", action="store_true",
                   help="print the hpkctl runtime every job script sources (the same for every pod), not a script")
    p.set_defaults(func=cmd_render)


def _dry_run_profile(site: str) -> SiteProfile:
    """The profile, expanded where this machine can; a dry run must work away from the site too
    (e.g. ``--site jsc`` on a laptop without ``$PROJECT``): then values stay unexpanded, with a warning."""
    from hpkctl.sites import load_site

    try:
        return load_site(site)
    except ProfileError as exc:
        if "is not set" not in exc.message:
            raise
        print(f"hpkctl: warning: {exc.message}; the script shows such values unexpanded", file=sys.stderr)
        return load_site(site, expand=False)


def _print_runtime(profile: SiteProfile) -> int:
    from hpkctl.pod.runtimefile import current_runtime, runtime_for

    runtime = current_runtime()
    sys.stdout.write(runtime.data.decode())
    where = runtime_for(profile)
    print(f"hpkctl: this is {where} (sha256 {runtime.sha256}), which every job script of site "
          f"{profile.name} sources", file=sys.stderr)
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from hpkctl.cli.common import EXIT_ERROR
    from hpkctl.local.arrays import build_array, workload_of
    from hpkctl.local.manifest import load_manifest, pod_warnings, select_pod, with_api_defaults
    from hpkctl.local.outdir import check_out_dir, mark_out_dir
    from hpkctl.pod import render_pod, write_pod_dir

    profile = _dry_run_profile(site_of(args, announce=True))
    if args.runtime:
        return _print_runtime(profile)
    if not args.filename:
        print("hpkctl: error: render needs -f MANIFEST (or --runtime)", file=sys.stderr)
        return EXIT_ERROR
    manifest = load_manifest(args.filename, dry_run=True)
    pod = select_pod(manifest, args.pod)
    warnings = pod_warnings(manifest, pod)  # select_pod validated it; these are the workload's fields
    workload = workload_of(manifest, pod, now=True)
    if workload is not None:  # a Job, Deployment...: its job array's script, then its first pod's
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        members, _, script, info, _, array_dir = build_array(profile, manifest, pod, workload, namespace=ns,
                                                             create=False)
        sys.stdout.write(script)
        print(f"\n# ==== pod 0 of {info.count}, {info.pods[0].name}: the array runs its script "
              f"{info.pods[0].dir}/job/job.sh, below (the others differ in name, uid and index) ====\n")
        pod = members[0]
    else:
        pod = with_api_defaults(pod)
    pod_dir = os.path.abspath(args.out) if args.out else None
    if pod_dir is not None:
        check_out_dir(Path(pod_dir))  # before anything is written, and never after a deletion
    try:
        rendered = render_pod(pod, profile, objects=manifest.objects, pod_dir=pod_dir, strict=False,
                              services=manifest.services, validated=True)  # select_pod or build_array did
    except PodError as exc:
        print(f"hpkctl: error: pod {pod['metadata']['name']}: {exc.reason}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for warning in warnings + rendered.warnings:
        print(f"hpkctl: warning: {warning}", file=sys.stderr)
    sys.stdout.write(rendered.script)
    print(f"\n# The script sources the hpkctl runtime {rendered.runtime} (sbatch/runtime.sh, the same for every "
          "pod; submitting installs it; 'hpkctl render --runtime' prints it)")
    if rendered.files:
        print("\n# Files hpkctl writes into the pod directory before submitting:")
        for rel, (data, mode) in sorted(rendered.files.items()):
            missing = dict(rendered.missing).get(rel)
            note = f"  <- MISSING: {missing}" if missing else ""
            print(f"#   {rendered.plan.pod_dir}/{rel} ({len(data)} bytes, mode {mode:o}){note}")
    if pod_dir is not None:
        check_out_dir(Path(pod_dir))  # again: a job may have started there while we rendered
        write_pod_dir(rendered, pod_json=json.dumps(pod, indent=2).encode())
        mark_out_dir(Path(pod_dir), uid=pod["metadata"]["uid"], files=[*rendered.files, "job/pod.json"])
        print(f"hpkctl: pod directory written to {rendered.plan.pod_dir}", file=sys.stderr)
    return 0

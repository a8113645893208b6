"""``hpkctl render``: print the sbatch script for a manifest; submit nothing."""

from __future__ import annotations

import argparse
import json
import sys

from hpkctl.errors import PodError, ProfileError
from hpkctl.kubelet import render_pod, write_pod_dir
from hpkctl.kubelet.manifest import load_manifest, select_pod, validate_pod_shape, with_api_defaults
from hpkctl.sites import SiteProfile, load_site


def _dry_run_profile(site: str) -> SiteProfile:
    """The profile, expanded where this machine can; a dry run must work away from the site too
    (e.g. ``--site jsc`` on a laptop without ``$PROJECT``): then values stay unexpanded, with a warning."""
    try:
        return load_site(site)
    except ProfileError as exc:
        if "is not set" not in exc.message:
            raise
        print(f"hpkctl: warning: {exc.message}; the script shows such values unexpanded", file=sys.stderr)
        return load_site(site, expand=False)


def cmd_render(args: argparse.Namespace) -> int:
    profile = _dry_run_profile(args.site)
    manifest = load_manifest(args.filename)
    pod = select_pod(manifest, args.pod)
    validate_pod_shape(pod, source=args.filename)
    pod = with_api_defaults(pod)
    pod_dir = None
    if args.out:
        import os

        pod_dir = os.path.abspath(args.out)
    try:
        rendered = render_pod(pod, profile, objects=manifest.objects, pod_dir=pod_dir, strict=False,
                              services=manifest.services)
    except PodError as exc:
        print(f"hpkctl: error: pod {pod['metadata']['name']}: {exc.reason}: {exc}", file=sys.stderr)
        return 1
    for warning in rendered.warnings:
        print(f"hpkctl: warning: {warning}", file=sys.stderr)
    sys.stdout.write(rendered.script)
    if rendered.files:
        print("\n# Files hpkctl writes into the pod directory before submitting:")
        for rel, (data, mode) in sorted(rendered.files.items()):
            missing = dict(rendered.missing).get(rel)
            note = f"  <- MISSING: {missing}" if missing else ""
            print(f"#   {rendered.plan.pod_dir}/{rel} ({len(data)} bytes, mode {mode:o}){note}")
    if args.out:
        write_pod_dir(rendered, pod_json=json.dumps(pod, indent=2).encode())
        print(f"hpkctl: pod directory written to {rendered.plan.pod_dir}", file=sys.stderr)
    return 0

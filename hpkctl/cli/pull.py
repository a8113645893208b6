"""``hpkctl pull``: fill the site's image cache from where a registry is reachable (a login node).

Where compute nodes have no internet (JSC), neither a pod's job nor the kubelet's job can pull; the
kubelet then finds every image a pod needs in ``[apptainer] image_cache`` under the name it looks
for, because this command and the pod translation name cached images the same way.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hpkctl.cli.common import add_site, site_of


def register(sub: Any) -> None:
    p = sub.add_parser("pull", help="pull images into the site's image cache (on a login node, for compute "
                                    "nodes without internet)")
    p.add_argument("images", nargs="*", metavar="IMAGE", help="an image as a pod names it, e.g. python:3.12")
    p.add_argument("-f", "--filename", action="append", default=[], metavar="FILE",
                   help="also every container image in these manifests (any kind: Pods, Deployments, Jobs, "
                        "Argo Workflows, 'helm template' output; '-' reads stdin); repeatable")
    add_site(p)
    p.add_argument("--force", action="store_true", help="pull again even if the image is cached")
    p.add_argument("--arch", default="", metavar="ARCH",
                   help="the compute nodes' architecture when it is not this host's (amd64, arm64)")
    p.set_defaults(func=cmd_pull)


def cmd_pull(args: argparse.Namespace) -> int:
    from hpkctl.cli.common import EXIT_ERROR
    from hpkctl.errors import HpkError, ManifestError
    from hpkctl.local.images import manifest_images, read_documents
    from hpkctl.local.manifest import read_manifest_text
    from hpkctl.pod.images import parse_image
    from hpkctl.pod.translate import image_sif
    from hpkctl.runtime import ImageToPull, pull_images
    from hpkctl.sites import load_site

    profile = load_site(site_of(args, announce=True))
    wanted: dict[str, None] = dict.fromkeys(args.images)
    for name in args.filename:
        text = read_manifest_text(name)
        found = manifest_images(read_documents(text, source=name))
        if not found:
            print(f"hpkctl: warning: {name} names no container image", file=sys.stderr)
        wanted.update(dict.fromkeys(found))
    if not wanted:
        raise ManifestError("no image to pull", hint="name images (hpkctl pull python:3.12) or manifests (-f FILE)")
    app = profile.apptainer
    failed = pulled = 0
    for name in wanted:
        try:
            try:
                ref = parse_image(name)
            except ValueError as exc:
                raise ManifestError(str(exc), hint="an image as a pod's image field names it") from None
            item = ImageToPull(source=ref.source, sif=image_sif(profile, ref),
                               policy="Always" if args.force else "IfNotPresent")
            if ref.tag == "latest" and not ref.digest:
                print(f"hpkctl: warning: {name} is :latest, which pods pull again (imagePullPolicy Always) "
                      f"{app.always_pull_window} s after this pull, even offline: give them imagePullPolicy: "
                      "IfNotPresent, or pin a tag", file=sys.stderr)
            if pull_images([item], apptainer=app.binary, window=0, timeout=app.pull_timeout, out=sys.stdout,
                           arch=args.arch):
                pulled += 1
                print(f"{name}: pulled: {item.sif}")
            else:
                print(f"{name}: cached: {item.sif}")
        except HpkError as exc:
            failed += 1
            print(f"hpkctl: error: {name}: {exc}", file=sys.stderr)
    cached = len(wanted) - failed
    print(f"{cached} of {len(wanted)} image(s) in {app.image_cache} ({pulled} pulled now)", file=sys.stderr)
    return EXIT_ERROR if failed else 0

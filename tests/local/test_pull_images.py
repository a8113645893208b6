"""``hpkctl pull``: the images of any manifests (unit), pulled into the site's cache with the names
the pod translation looks for (end to end, as user hpk, with the Apptainer stand-in)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hpkctl.local.images import manifest_images, read_documents
from hpkctl.errors import ManifestError
from hpkctl.pod.images import parse_image
from hpkctl.pod.translate import image_sif
from hpkctl.sites import load_site
from tests.support.ci import HPK_USER
from tests.support.hpk import Hpk, require_standin

DOCS = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, annotations: {image: not-a-container-image}}
spec:
  template:
    spec:
      initContainers: [{name: i, image: busybox}]
      containers: [{name: c, image: "docker://busybox"}, {name: e, image: python:3.12}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cj}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: c, image: ghcr.io/org/tool@sha256:0123456789abcdef0123456789abcdef}]
---
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: w-}
spec:
  templates:
  - name: a
    container: {image: debian:12, command: [echo]}
  - name: b
    script: {image: "{{inputs.parameters.image}}", source: "echo"}
  - name: c
    sidecars: [{name: s, image: redis}]
"""


def test_every_container_image_of_any_kind_once_in_order() -> None:
    assert manifest_images(read_documents(DOCS, source="m.yaml")) == [
        "busybox", "docker://busybox", "python:3.12", "ghcr.io/org/tool@sha256:0123456789abcdef0123456789abcdef",
        "debian:12", "redis"]


def test_yaml_errors_name_the_file() -> None:
    with pytest.raises(ManifestError) as err:
        read_documents("a: [", source="chart.yaml")
    assert err.value.message.startswith("chart.yaml: not YAML")


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)


@st.composite
def _nested(draw: Any) -> tuple[Any, list[str]]:
    """A random object tree with containers lists at random depths, and the images they hold."""
    images = draw(st.lists(_names.map(lambda n: f"reg.example/{n}:1"), min_size=0, max_size=6, unique=True))
    tree: Any = {"kind": draw(_names), "metadata": {"name": draw(_names), "labels": {"image": "label-value"}}}
    node = tree
    for i, image in enumerate(images):
        key = draw(st.sampled_from(["containers", "initContainers", "ephemeralContainers"]))
        child: dict[str, Any] = {}
        node.setdefault("spec", {})[key] = [{"name": f"c{i}", "image": image}, {"name": "noimage"}]
        node["spec"][draw(_names) + "x"] = child  # go one level deeper under a random field
        node = child
    return tree, images


@settings(max_examples=60, deadline=None)
@given(_nested())
def test_images_at_any_depth_and_nothing_else(case: tuple[Any, list[str]]) -> None:
    tree, images = case
    assert manifest_images([tree]) == images
    assert manifest_images(read_documents(yaml.safe_dump(tree, sort_keys=False), source="x")) == images


@pytest.mark.standin
def test_pull_fills_the_cache_the_kubelet_reads() -> None:
    require_standin()
    work = Path(tempfile.mkdtemp(prefix="hpk-pull-"))
    try:
        work.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(work, HPK_USER, HPK_USER)
        cache = work / "cache"
        site = work / "site.toml"
        site.write_text(f'extends = "ci"\n[apptainer]\nimage_cache = "{cache}"\n')
        site.chmod(0o644)
        manifest = work / "m.yaml"
        manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                            "spec: {containers: [{name: c, image: busybox}, {name: d, image: debian}]}\n")
        manifest.chmod(0o644)
        hpk = Hpk(work)
        r = hpk.hpkctl("pull", "-f", str(manifest), "--site", str(site))
        assert r.rc == 0, r.output
        profile = load_site(str(site))
        for name in ("busybox", "debian"):
            sif = Path(image_sif(profile, parse_image(name)))
            assert sif.is_file() and sif.stat().st_size > 0, r.output  # where a pod's job looks for it
            assert f"{name}: pulled: {sif}" in r.stdout
        assert "2 of 2 image(s)" in r.stderr
        again = hpk.hpkctl("pull", "busybox", "-f", str(manifest), "--site", str(site))
        assert again.rc == 0 and "(0 pulled now)" in again.stderr and "busybox: cached:" in again.stdout
        bad = hpk.hpkctl("pull", "nosuch-image", "busybox", "--site", str(site))
        assert bad.rc == 125
        assert "hpkctl: error: nosuch-image: pulling docker://docker.io/library/nosuch-image:latest failed" in bad.stderr
        assert "1 of 2 image(s)" in bad.stderr
        none = hpk.hpkctl("pull", "--site", str(site))
        assert none.rc == 125 and "no image to pull" in none.stderr
        # --arch reaches apptainer pull: the stand-in's store holds this host's architecture only
        host = {"x86_64": "amd64", "aarch64": "arm64"}[os.uname().machine]
        other = "arm64" if host == "amd64" else "amd64"
        same = hpk.hpkctl("pull", "--force", "--arch", host, "busybox", "--site", str(site))
        assert same.rc == 0 and "busybox: pulled:" in same.stdout, same.output
        cross = hpk.hpkctl("pull", "--force", "--arch", other, "busybox", "--site", str(site))
        assert cross.rc == 125 and f"cannot pull --arch {other}" in cross.stderr, cross.output
    finally:
        shutil.rmtree(work, ignore_errors=True)

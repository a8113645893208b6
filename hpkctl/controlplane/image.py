"""hpkctl's own Apptainer images: the control plane and the pod parent (cni mode).

Pure planning, no processes (``hpkctl.runtime.build`` runs them; ``hpkctl build`` in
``hpkctl/cli/build.py`` glues both):

* :func:`render_definition` renders ``apptainer/defs/<image>.def.j2`` for one architecture, with the
  versions and checksums of :mod:`hpkctl.controlplane.versions`;
* :func:`plan_build` decides where the image goes, what goes into its build directory and what its
  *recipe hash* is: a SHA-256 over the definition (rendered with a placeholder build directory, so
  the hash does not depend on where it is built) and over the files it copies in (the locked Python
  requirements, and hpkctl itself: its source files, or the wheel given with ``--wheel``);
* :func:`reuse_decision` says whether an existing image was built from the same recipe: the hash and
  the SIF's size and modification time are kept next to it in ``<image>.sif.build.json``, and the
  hash is also a label of the image (``hpk.recipe``, for ``apptainer inspect``).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from hpkctl import __version__
from hpkctl.controlplane import versions
from hpkctl.errors import HpkError
from hpkctl.pod.images import parse_image
from hpkctl.pod.translate import image_sif
from hpkctl.resources import data_dir
from hpkctl.sites import SiteProfile

IMAGES = ("controlplane", "parent")
REQUIREMENTS = "controlplane-requirements.txt"
RECORD_SUFFIX = ".build.json"
#: Stands for the build directory in the definition the recipe hash is computed over.
CONTEXT_PLACEHOLDER = "@BUILD_DIR@"
_PATH_OK = re.compile(r"^[A-Za-z0-9_./+@-]+$")  # %files lines are split on whitespace by Apptainer


def defs_dir() -> Path:
    """``apptainer/defs`` of the checkout, or its copy in the wheel (``hpkctl/_data/apptainer/defs``)."""
    return data_dir("apptainer") / "defs"


def host_arch(machine: str | None = None) -> str:
    """The release architecture (``amd64``, ``arm64``) of ``uname -m`` (``x86_64``, ``aarch64``)."""
    m = machine if machine is not None else os.uname().machine
    try:
        return versions.ARCHES[m]
    except KeyError:
        raise HpkError(f"no control-plane image for this machine's architecture {m!r}",
                       hint=f"build on a {' or '.join(versions.ARCHES)} host") from None


def wheel_name(version: str = __version__) -> str:
    """The file name hatchling gives hpkctl's wheel (pure Python, any platform)."""
    return f"hpkctl-{version}-py3-none-any.whl"


def _q(value: str) -> str:
    return shlex.quote(value)


def _artifact_context(a: versions.Artifact, arch: str) -> dict[str, Any]:
    members = [{"path_q": _q(path.format(arch=arch)), "dest": dest} for path, dest in a.members.items()]
    missing = versions.missing_checksums(arch)
    return {
        "name": a.name, "version": a.version, "algorithm": a.algorithm, "source": a.source,
        "checksum": a.checksum(arch), "url_q": _q(a.file_url(arch)), "file_q": _q(a.file_name(arch)),
        "cross_check": bool(a.cross_check), "cross_check_q": _q(a.cross_check.format(arch=arch)),
        "members": members, "binaries": ", ".join(a.members.values()),
        "missing_q": _q(next((m for m in missing if m.startswith(f"{a.name} ")), "")),
    }


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(defs_dir())), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def render_definition(image: str, *, arch: str, context: str, recipe_hash: str, wheel: str = "") -> str:
    """The Apptainer definition of ``image`` for ``arch``, copying its files from ``context``."""
    if image not in IMAGES:
        raise HpkError(f"unknown image {image!r}", hint=f"one of {', '.join(IMAGES)}")
    if not _PATH_OK.match(context) or (wheel and not _PATH_OK.match(wheel)):
        raise HpkError(f"build directory {context!r} has characters an Apptainer %files line cannot hold",
                       hint="choose an [apptainer] image_cache path of letters, digits and ./_+@- only")
    values: dict[str, Any] = {
        "arch": arch, "context": context, "recipe_hash": recipe_hash, "wheel": wheel or wheel_name(),
        "hpkctl_version": __version__,
        "kubernetes": versions.KUBERNETES, "etcd": versions.ETCD, "etcd_plain": versions.ETCD.lstrip("v"),
        "coredns": versions.COREDNS,
        "base_image": versions.BASE_IMAGE if image == "controlplane" else versions.PARENT_BASE_IMAGE,
        "artifacts": [_artifact_context(a, arch) for a in versions.ARTIFACTS],
    }
    return _environment().get_template(f"{image}.def.j2").render(values)


def image_path(profile: SiteProfile, image: str, arch: str) -> str:
    """Where ``image`` is kept: ``<image_cache>/hpk-controlplane-<arch>.sif``; the parent image goes
    where the pods' jobs look for ``[apptainer] parent_image`` (its cache file), so they never pull it."""
    cache = posixpath.expanduser(profile.apptainer.image_cache)
    if image == "controlplane":
        return posixpath.join(cache, f"hpk-controlplane-{arch}.sif")
    if not profile.apptainer.parent_image:
        raise HpkError(f"site profile {profile.name} names no [apptainer] parent_image to build",
                       hint='set [apptainer] parent_image = "localhost/hpk-parent:1" (any name; hpkctl build '
                            "puts the image where the pods' jobs look for it) and network = \"cni\"")
    try:
        ref = parse_image(profile.apptainer.parent_image)
    except ValueError as exc:
        raise HpkError(f"site profile {profile.name}: [apptainer] parent_image: {exc}") from None
    return image_sif(profile, ref)


def source_digest(root: Path | None = None, data: Iterable[Path] | None = None) -> str:
    """SHA-256 over hpkctl's own files (package and shipped data): what the wheel would contain."""
    pkg = root if root is not None else Path(__file__).resolve().parents[1]
    trees = [pkg] + list(data if data is not None else
                         (data_dir(n) for n in ("sbatch", "site-configs", "apptainer")))
    h = hashlib.sha256()
    for tree in trees:
        for path in sorted(p for p in tree.rglob("*") if p.is_file()):
            rel = path.relative_to(tree)
            if "__pycache__" in rel.parts or rel.parts[0] == "_data" or path.suffix in (".pyc", ".pyo"):
                continue
            h.update(f"{tree.name}/{rel.as_posix()}\0".encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


@dataclass(frozen=True)
class BuildPlan:
    """Everything ``hpkctl build`` does for one image, decided before anything runs."""

    image: str
    arch: str
    sif: str  # the image's final path
    context: str  # the build directory: the definition and the files it copies in
    definition: str  # rendered for ``context``
    recipe_hash: str
    wheel: str = ""  # the hpkctl wheel's file name in ``context`` (controlplane only)
    copies: dict[str, str] = field(default_factory=dict)  # file name in ``context`` → source path
    refusals: list[str] = field(default_factory=list)  # why a real build must not start (missing checksums)
    summary: str = ""  # one line: what is inside

    @property
    def def_path(self) -> str:
        return posixpath.join(self.context, f"{self.image}.def")

    @property
    def record_path(self) -> str:
        return self.sif + RECORD_SUFFIX


def plan_build(profile: SiteProfile, image: str, *, arch: str, hpkctl_digest: str, wheel: str = "") -> BuildPlan:
    """Plan ``image`` for ``profile``. ``hpkctl_digest`` stands for hpkctl itself in the recipe hash
    (:func:`source_digest`, or the SHA-256 of the wheel given); ``wheel`` is that wheel's file name."""
    sif = image_path(profile, image, arch)
    context = posixpath.join(posixpath.dirname(sif), ".hpk-build", f"{image}-{arch}")
    copies: dict[str, str] = {}
    parts: dict[str, str] = {}
    name = ""
    if image == "controlplane":
        name = wheel or wheel_name()
        req = defs_dir() / REQUIREMENTS
        copies[REQUIREMENTS] = str(req)
        parts[REQUIREMENTS] = hashlib.sha256(req.read_bytes()).hexdigest()
        parts["hpkctl"] = hpkctl_digest
    neutral = render_definition(image, arch=arch, context=CONTEXT_PLACEHOLDER, recipe_hash="", wheel=name)
    recipe = hashlib.sha256(json.dumps({"definition": neutral, "files": parts}, sort_keys=True).encode()).hexdigest()
    definition = render_definition(image, arch=arch, context=context, recipe_hash=recipe, wheel=name)
    if image == "controlplane":
        refusals = versions.missing_checksums(arch)
        summary = (f"Kubernetes {versions.KUBERNETES}, etcd {versions.ETCD}, CoreDNS {versions.COREDNS}, "
                   f"hpkctl {__version__} on {versions.BASE_IMAGE}")
    else:
        refusals = []
        summary = f"Apptainer and the pod-part tools on {versions.PARENT_BASE_IMAGE}"
    return BuildPlan(image=image, arch=arch, sif=sif, context=context, definition=definition, recipe_hash=recipe,
                     wheel=name, copies=copies, refusals=refusals, summary=summary)


@dataclass(frozen=True)
class Decision:
    build: bool
    reason: str


def reuse_decision(plan: BuildPlan, *, force: bool = False) -> Decision:
    """Build, or reuse the image at ``plan.sif``? Reused only when its record names the same recipe
    and the SIF is still the file that build wrote (same size and modification time)."""
    try:
        st = os.stat(plan.sif)
    except FileNotFoundError:
        return Decision(True, f"no image at {plan.sif} yet")
    if force:
        return Decision(True, "--force")
    try:
        record = json.loads(Path(plan.record_path).read_text())
    except (OSError, ValueError):
        return Decision(True, f"{plan.sif} has no readable build record ({plan.record_path}): not built by "
                              "hpkctl build, or by an older one")
    if record.get("recipe") != plan.recipe_hash:
        return Decision(True, f"{plan.sif} was built from recipe {str(record.get('recipe'))[:12]}, this one is "
                              f"{plan.recipe_hash[:12]} (versions, definition or hpkctl changed)")
    if record.get("size") != st.st_size or record.get("mtime_ns") != st.st_mtime_ns:
        return Decision(True, f"{plan.sif} changed after hpkctl build wrote it")
    return Decision(False, f"{plan.sif} was built from this recipe ({plan.recipe_hash[:12]}) "
                           f"on {record.get('built', '?')}")


def build_record(plan: BuildPlan, *, built: str) -> str:
    """The record written next to a freshly built image (JSON)."""
    st = os.stat(plan.sif)
    return json.dumps({"image": plan.image, "arch": plan.arch, "recipe": plan.recipe_hash, "size": st.st_size,
                       "mtime_ns": st.st_mtime_ns, "built": built, "summary": plan.summary,
                       "hpkctl": __version__}, indent=2) + "\n"


__all__ = ["BuildPlan", "CONTEXT_PLACEHOLDER", "Decision", "IMAGES", "REQUIREMENTS", "build_record", "defs_dir",
           "host_arch", "image_path", "plan_build", "render_definition", "reuse_decision", "source_digest",
           "wheel_name"]

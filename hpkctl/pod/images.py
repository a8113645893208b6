"""Container image references → Apptainer sources and cache file names.

HPK named cached images after the last path component and tag, so ``a/nginx:1`` and ``b/nginx:1``
collided and digests were dropped. Here the cache name keeps registry, repository and tag/digest,
plus a short hash of the full reference so two references never share a file.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    tag: str  # "" when a digest is given
    digest: str  # "" or "sha256:..."

    @property
    def full(self) -> str:
        ref = f"{self.registry}/{self.repository}"
        if self.tag:
            ref += f":{self.tag}"
        if self.digest:
            ref += f"@{self.digest}"
        return ref

    @property
    def source(self) -> str:
        """What ``apptainer pull`` gets: a ``docker://`` URL."""
        return f"docker://{self.full}"

    @property
    def cache_name(self) -> str:
        digest = hashlib.sha256(self.full.encode()).hexdigest()[:12]
        readable = _SAFE.sub("_", f"{self.registry}_{self.repository}_{self.tag or self.digest}")[:150]
        return f"{readable}-{digest}.sif"


def parse_image(image: str) -> ImageRef:
    """Normalise an image reference the way Docker does (``busybox`` → docker.io/library/busybox:latest)."""
    ref = image.strip()
    if not ref or any(c.isspace() for c in ref):
        raise ValueError(f"{image!r} is not an image reference")
    ref = ref.removeprefix("docker://")
    digest = ""
    if "@" in ref:
        ref, digest = ref.split("@", 1)
        if not re.fullmatch(r"[a-z0-9]+:[A-Fa-f0-9]{32,}", digest):
            raise ValueError(f"{image!r}: digest {digest!r} is not like sha256:<hex>")
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = "docker.io", ref
    tag = ""
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
    if registry == "docker.io" and "/" not in path:
        path = f"library/{path}"
    if not tag and not digest:
        tag = "latest"
    if not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+|__)*", path.replace("__", "_")):
        raise ValueError(f"{image!r}: repository {path!r} must be lowercase letters, digits and . _ - /")
    return ImageRef(registry, path, tag, digest)

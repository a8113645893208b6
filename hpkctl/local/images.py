"""The images a set of manifests needs, for ``hpkctl pull``: every container image in them, whatever
the kind (Pods, Deployments, Jobs, CronJobs, Argo Workflows, a ``helm template`` output), so a site
whose compute nodes cannot reach a registry fills the image cache from a login node first."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import yaml

from hpkctl.errors import ManifestError

#: keys whose list items (or value) are containers, in the core API and in Argo Workflows
_CONTAINER_KEYS = ("containers", "initContainers", "ephemeralContainers", "container", "script", "sidecars")


def read_documents(text: str, *, source: str) -> list[Any]:
    """Every YAML document of ``text`` (empty ones dropped); a YAML error names ``source``."""
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not YAML: {exc}",
                            hint="fix the YAML at the line and column shown") from None


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _CONTAINER_KEYS:
                for c in value if isinstance(value, list) else [value]:
                    if isinstance(c, dict):
                        yield c
            yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def manifest_images(documents: Iterable[Any]) -> list[str]:
    """The container images of ``documents``, each once, in the order they first appear. Templated
    values a chart left unrendered (``{{ ... }}``) are skipped: they are no image yet."""
    seen: dict[str, None] = {}
    for doc in documents:
        for c in _containers(doc):
            image = c.get("image")
            if isinstance(image, str) and image.strip() and "{{" not in image:
                seen.setdefault(image.strip(), None)
    return list(seen)


__all__ = ["manifest_images", "read_documents"]

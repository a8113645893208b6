"""Where the translator finds the ConfigMaps and Secrets a pod refers to.

The kubelet looks them up in the API server; ``hpkctl render``/``run`` take them from the manifest
file. A dry run may miss some (a warning, and the output says where the content would go); a real
run treats a missing required one as Kubernetes does: the pod cannot start.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class ObjectSource(Protocol):
    def configmap(self, namespace: str, name: str) -> Mapping[str, bytes] | None: ...

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None: ...


@dataclass
class StaticObjects:
    """ConfigMaps and Secrets given up front (from a manifest file, or a kubelet's cache)."""

    configmaps: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    secrets: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)

    def configmap(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        return self.configmaps.get((namespace, name))

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        return self.secrets.get((namespace, name))

    def add(self, obj: Mapping[str, Any]) -> bool:
        """Add a ConfigMap or Secret dict; return False for other kinds."""
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace") or "default", meta.get("name") or "")
        if kind == "ConfigMap":
            data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
            self.configmaps[key] = data
            return True
        if kind == "Secret":
            data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            data.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
            self.secrets[key] = data
            return True
        return False

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]]) -> "StaticObjects":
        store = cls()
        for obj in objects:
            store.add(obj)
        return store

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


def configmap_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A ConfigMap's keys as bytes: ``data`` as text, ``binaryData`` base64-decoded."""
    data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


def secret_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret's keys as bytes: ``data`` base64-decoded, ``stringData`` (manifests only) as text."""
    data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    data.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
    return data


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
            self.configmaps[key] = configmap_data(obj)
            return True
        if kind == "Secret":
            self.secrets[key] = secret_data(obj)
            return True
        return False

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]]) -> "StaticObjects":
        store = cls()
        for obj in objects:
            store.add(obj)
        return store


def referenced_objects(pod: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The ConfigMaps and Secrets the pod names, as ``("configmaps"|"secrets", name)`` in its own
    namespace: env ``valueFrom`` and ``envFrom`` of every container, ``configMap``/``secret``
    volumes, projected sources and ``imagePullSecrets`` (the real kubelet's
    ``VisitPodConfigmapNames``/``VisitPodSecretNames``, for the objects it watches)."""
    spec = pod.get("spec") or {}
    out: set[tuple[str, str]] = set()

    def add(plural: str, name: Any) -> None:
        if isinstance(name, str) and name:
            out.add((plural, name))

    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for e in c.get("env") or []:
            src = (e or {}).get("valueFrom") or {}
            add("configmaps", (src.get("configMapKeyRef") or {}).get("name"))
            add("secrets", (src.get("secretKeyRef") or {}).get("name"))
        for e in c.get("envFrom") or []:
            add("configmaps", ((e or {}).get("configMapRef") or {}).get("name"))
            add("secrets", ((e or {}).get("secretRef") or {}).get("name"))
    for v in spec.get("volumes") or []:
        add("configmaps", ((v or {}).get("configMap") or {}).get("name"))
        add("secrets", ((v or {}).get("secret") or {}).get("secretName"))
        for src in ((v or {}).get("projected") or {}).get("sources") or []:
            add("configmaps", ((src or {}).get("configMap") or {}).get("name"))
            add("secrets", ((src or {}).get("secret") or {}).get("name"))
    for ref in spec.get("imagePullSecrets") or []:
        add("secrets", (ref or {}).get("name"))
    return out

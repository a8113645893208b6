"""State shared while one pod is translated: the pod, the profile, where objects come from, warnings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpkctl.errors import PodError
from hpkctl.pod.objects import ObjectSource
from hpkctl.pod.shell import RuntimeRef
from hpkctl.sites.schema import SiteProfile

POD_IP = RuntimeRef("HPK_POD_IP")
HOST_IP = RuntimeRef("HPK_HOST_IP")


@dataclass
class Ctx:
    pod: dict[str, Any]
    profile: SiteProfile
    objects: ObjectSource
    pod_dir: str
    strict: bool  # False in a dry run: missing ConfigMaps/Secrets are warnings
    warnings: list[str] = field(default_factory=list)

    @property
    def meta(self) -> dict[str, Any]:
        return self.pod.get("metadata") or {}

    @property
    def spec(self) -> dict[str, Any]:
        return self.pod.get("spec") or {}

    @property
    def namespace(self) -> str:
        return self.meta.get("namespace") or "default"

    @property
    def name(self) -> str:
        return self.meta.get("name") or ""

    @property
    def uid(self) -> str:
        return self.meta.get("uid") or ""

    @property
    def hostname(self) -> str:
        """The pod's hostname: ``spec.hostname`` or its name cut to a DNS label's 63 characters, without a
        trailing '-' or '.' (Kubernetes' ``GeneratePodHostnameAndDomain``)."""
        hostname = self.spec.get("hostname")
        return hostname if hostname else self.name[:63].rstrip("-.")

    @property
    def node_name(self) -> str:
        return self.spec.get("nodeName") or self.profile.pods.node_name

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def missing(self, what: str, *, where: str) -> None:
        """A required ConfigMap/Secret (or key) is absent: fatal in a real run, a warning in a dry run."""
        if self.strict:
            raise PodError("CreateContainerConfigError", f"{where}: {what}",
                           hint="add it to the manifest file as another document (after a '---' line), "
                                "or mark the reference optional: true")
        self.warn(f"{where}: {what} (dry run: its content is left out)")

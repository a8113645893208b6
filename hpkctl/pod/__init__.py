"""The virtual kubelet's translator: a pod → its pod directory and sbatch script.

Public surface: :func:`render_pod` (dask-jobqueue's "show me the job script"), :func:`write_pod_dir`,
:class:`RenderedPod`, plus :mod:`hpkctl.local.manifest` for pods taken from files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hpkctl.pod.objects import ObjectSource, StaticObjects
from hpkctl.pod.poddir import write_pod_dir
from hpkctl.pod.render import RenderedPod, render_plan
from hpkctl.pod.plan import PodPlan
from hpkctl.pod.translate import plan_pod, pod_dir_for
from hpkctl.pod.volumes import PvcResolver
from hpkctl.sites.schema import SiteProfile


def render_pod(pod: Mapping[str, Any], profile: SiteProfile, *, objects: ObjectSource | None = None,
               pod_dir: str | None = None, strict: bool = True, services: Sequence[Mapping[str, Any]] = (),
               pvc_resolver: PvcResolver | None = None, validated: bool = False) -> RenderedPod:
    """Translate a pod (shaped as the API server returns it) into its sbatch script and files.

    Raises :class:`hpkctl.errors.PodError` (with a Kubernetes-style ``reason``) when the pod cannot
    run as asked. ``strict=False`` is a dry run: missing ConfigMaps/Secrets become warnings. ``validated``:
    the caller has validated the pod already (:func:`hpkctl.pod.translate.plan_pod` says when that holds).
    """
    plan = plan_pod(pod, profile, objects=objects, pod_dir=pod_dir, strict=strict, services=services,
                    pvc_resolver=pvc_resolver, validated=validated)
    return render_plan(plan)


__all__ = ["ObjectSource", "PodPlan", "RenderedPod", "StaticObjects", "pod_dir_for", "render_pod", "write_pod_dir"]

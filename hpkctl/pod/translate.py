"""A pod, as the API server hands it out, → a :class:`~hpkctl.pod.plan.PodPlan` (everything the script
needs).

This module decides; :mod:`hpkctl.pod.render` only writes. Problems with the pod raise
:class:`~hpkctl.errors.PodError` with a Kubernetes-style reason; they never crash a caller. Its
parts: the Slurm options (:mod:`hpkctl.pod.slurmopts`), DNS (:mod:`hpkctl.pod.dns`), environment
(:mod:`hpkctl.pod.env`), volumes (:mod:`hpkctl.pod.volumes`), hooks and grace
(:mod:`hpkctl.pod.lifecycle`), probes (:mod:`hpkctl.pod.probes`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from hpkctl.errors import PodError
from hpkctl.pod import paths
from hpkctl.pod.context import Ctx
from hpkctl.pod.dns import resolv_conf
from hpkctl.pod.env import container_env, service_env
from hpkctl.pod.expansion import expand
from hpkctl.pod.images import ImageRef, parse_image
from hpkctl.pod.lifecycle import grace_period, log_fallback, message_path, plan_hooks
from hpkctl.pod.objects import ObjectSource, StaticObjects
from hpkctl.pod.plan import ContainerPlan, PodPlan
from hpkctl.pod.probes import plan_probes
from hpkctl.pod.pullsecrets import pull_credentials
from hpkctl.pod.resources import PodResources, pod_resources
from hpkctl.pod.shell import is_static, static_text
from hpkctl.pod.slurmopts import slurm_options
from hpkctl.pod.validation import PodValidationError, unhonoured_fields, validate_pod
from hpkctl.pod.volumes import PvcResolver, VolumePlan, bindable, container_binds, default_pvc_resolver, plan_volumes
from hpkctl.sites.schema import SiteProfile


def _validated(pod: Mapping[str, Any]) -> None:
    """The API server's rules (:mod:`hpkctl.pod.validation`), as a pod error with a reason."""
    meta = pod.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    try:
        validate_pod(pod, source=f"pod {name}" if isinstance(name, str) and name else "pod")
    except PodValidationError as exc:
        first = exc.problems[0].path if exc.problems else ""
        reason = ("InvalidVolume" if "volumes[" in first or "volumeMounts[" in first else
                  "InvalidResources" if ".resources." in first else "InvalidPod")
        raise PodError(reason, exc.message, hint=exc.hint) from exc


def pod_dir_for(profile: SiteProfile, uid: str) -> str:
    return paths.pod_dir_for(posixpath.expanduser(profile.pods.state_dir), uid)


def image_sif(profile: SiteProfile, image: ImageRef) -> str:
    """Where the image is cached as a SIF file; its directory is bound into a cni parent, so bindable."""
    sif = posixpath.join(posixpath.expanduser(profile.apptainer.image_cache), image.cache_name)
    if not bindable(sif):
        raise PodError("InvalidPodDirectory", f"image cache path {sif!r} contains ':', ',' or a line break",
                       hint="choose an [apptainer].image_cache without them")
    return sif


def plan_pod(pod: Mapping[str, Any], profile: SiteProfile, *, objects: ObjectSource | None = None,
             pod_dir: str | None = None, strict: bool = True, services: Sequence[Mapping[str, Any]] = (),
             pvc_resolver: PvcResolver | None = None, validated: bool = False) -> PodPlan:
    """Translate ``pod`` for ``profile``. ``strict=False`` is a dry run (missing objects warn).

    ``validated``: the caller has checked ``pod`` with :func:`~hpkctl.pod.validation.validate_pod`, or the
    manifest's pod it was made from by :func:`hpkctl.local.manifest.with_api_defaults` (which adds only
    valid defaults), with messages naming the file: ``hpkctl run`` and ``render``. Every other pod (the
    kubelet's, from the API server) is validated here, and a bad one becomes a :class:`PodError`.
    """
    pod = dict(pod)
    if not validated:
        _validated(pod)
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not meta.get("name"):
        raise PodError("InvalidPod", "metadata.name: a pod needs a name")
    if not meta.get("uid"):
        raise PodError("InvalidPod", "metadata.uid: a pod needs a uid (the API server sets one)")
    pdir = pod_dir or pod_dir_for(profile, meta["uid"])
    if not bindable(pdir):
        raise PodError("InvalidPodDirectory", f"pod directory {pdir!r} contains ':', ',' or a line break",
                       hint="choose a [pods].state_dir without those characters in the site profile")
    ctx = Ctx(pod=pod, profile=profile, objects=objects or StaticObjects(), pod_dir=pdir, strict=strict)
    for warning in unhonoured_fields(pod, profile.apptainer.binds):
        ctx.warn(warning)

    restart = spec.get("restartPolicy") or "Always"

    resources = pod_resources(ctx)
    volumes = plan_volumes(ctx, resources, pvc_resolver=pvc_resolver or default_pvc_resolver(
        posixpath.expanduser(profile.pods.state_dir)))
    svc_env = service_env(services) if spec.get("enableServiceLinks", True) else service_env(
        [s for s in services if (s.get("metadata") or {}).get("name") == "kubernetes"])

    options, mpi_flags, mpi = slurm_options(ctx, resources)
    network = profile.apptainer.network
    if mpi and network == "cni":
        ctx.warn("MPI launch spans nodes: this pod uses the node's network instead of its own namespace")
        network = "host"

    containers: list[ContainerPlan] = []
    pod_sc = spec.get("securityContext") or {}
    for init, key in ((True, "initContainers"), (False, "containers")):
        for i, c in enumerate(spec.get(key) or []):
            containers.append(_plan_container(ctx, c, index=i, init=init, where=f"spec.{key}[{i}]",
                                              resources=resources, volumes=volumes, services=svc_env,
                                              pod_sc=pod_sc, restart=restart))
    if mpi:
        mains = [c for c in containers if not c.init]
        mains[0].mpi = True
        # its ranks span nodes and MPI libraries tell nodes apart by their hostname: keep the nodes'
        i = mains[0].flags.index("--hostname") if "--hostname" in mains[0].flags else -1
        if i >= 0:
            del mains[0].flags[i:i + 2]
        if len(mains) > 1:
            ctx.warn(f"MPI launch applies to the first container ({mains[0].name!r}) only")

    hostname = ctx.hostname
    subdomain = spec.get("subdomain") or ""
    domain = profile.pods.cluster_domain
    fqdn = f"{hostname}.{subdomain}.{ctx.namespace}.svc.{domain}" if subdomain else hostname
    dns_mode, resolv = resolv_conf(ctx)
    aliases = [(a.get("ip", ""), list(a.get("hostnames") or [])) for a in spec.get("hostAliases") or []]
    credentials = pull_credentials(ctx, {c.image.registry for c in containers})
    parent = None
    if network == "cni":
        try:
            parent_image = parse_image(profile.apptainer.parent_image)
        except ValueError as exc:
            raise PodError("InvalidImageName", f"site profile [apptainer].parent_image: {exc}",
                           hint=f"fix parent_image in the {profile.name} site profile") from exc
        parent = (parent_image, image_sif(profile, parent_image))
    return PodPlan(
        profile=profile, namespace=ctx.namespace, name=meta["name"], uid=meta["uid"], pod_dir=pdir,
        hostname=hostname, fqdn=fqdn, network=network, containers=containers, options=options,
        mpi_flags=mpi_flags, resources=resources, volumes=volumes, dns_mode=dns_mode, resolv_conf=resolv,
        host_aliases=aliases, pull_credentials=credentials,
        memory_dir=posixpath.join(profile.pods.memory_dir, f"hpk-{meta['uid']}"), parent=parent, warnings=ctx.warnings,
        grace=grace_period(spec), active_deadline=int(spec.get("activeDeadlineSeconds") or 0),
    )


def _plan_container(ctx: Ctx, c: Mapping[str, Any], *, index: int, init: bool, where: str,
                    resources: PodResources, volumes: VolumePlan, services: Mapping[str, str],
                    pod_sc: Mapping[str, Any], restart: str) -> ContainerPlan:
    name = c["name"]  # a DNS label (validated)
    try:
        image = parse_image(c.get("image") or "")
    except ValueError as exc:
        raise PodError("InvalidImageName", f"{where}.image: {exc}",
                       hint="use a reference like busybox:1.36 or ghcr.io/org/app@sha256:...") from exc
    pull = c.get("imagePullPolicy") or ("Always" if image.tag == "latest" else "IfNotPresent")  # validated
    profile = ctx.profile
    sif = image_sif(profile, image)

    env = container_env(ctx, c, where=where, resources=resources, services=services)
    command = [expand(str(a), env) for a in c.get("command") or []]
    args = [expand(str(a), env) for a in c.get("args") or []]
    verb = "exec" if command else "run"
    argv = command + args

    binds, subdirs = container_binds(ctx, volumes, c, where=where, env=env)
    flags: list[str] = []
    sc = dict(pod_sc)
    sc.update(c.get("securityContext") or {})
    if not sc.get("readOnlyRootFilesystem"):
        flags.append("--writable-tmpfs")
    uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
    if uid == 0:
        if sc.get("runAsNonRoot"):
            raise PodError("CreateContainerConfigError",
                           f"{where}.securityContext: runAsNonRoot is true but runAsUser is 0")
        flags.append("--fakeroot")
    elif uid is not None or gid is not None or sc.get("runAsNonRoot"):
        u = uid if uid is not None else 65534
        g = gid if gid is not None else u
        flags += ["--security", f"uid:{int(u)},gid:{int(g)}", "--userns"]
    elif profile.apptainer.fakeroot:
        flags.append("--fakeroot")
    if sc.get("privileged") or (sc.get("capabilities") or {}).get("add"):
        ctx.warn(f"{where}.securityContext: privileged mode and added capabilities are not available "
                 "to unprivileged Apptainer; ignored")
    if resources.per_container.get(name) and resources.per_container[name].gres:
        flags.append(profile.apptainer.gpu_flag)
    if profile.apptainer.set_hostname:
        # the pod's hostname in every network mode: Apptainer's --hostname brings its own UTS
        # namespace (the launcher turns it on), it needs no network namespace
        flags += ["--hostname", ctx.hostname]
    flags += list(profile.apptainer.exec_flags)

    workdir = expand(c["workingDir"], env) if c.get("workingDir") else ()
    env_static = [(k, static_text(v)) for k, v in env.items() if is_static(v)]
    for k, v in env_static:
        if "\0" in v:  # a C string cannot hold it: no process can receive such a variable
            raise PodError("CreateContainerConfigError", f"{where}: environment variable {k} holds a NUL byte, "
                           "which no environment variable can carry",
                           hint="remove the NUL byte from the value (or the ConfigMap/Secret key it comes from)")
    env_runtime = [(k, v) for k, v in env.items() if not is_static(v)]
    policy = restart
    if init and restart == "Always":
        policy = "OnFailure"  # Kubernetes retries failed init containers of Always pods
    if init and c.get("restartPolicy") == "Always":
        policy = "Always"  # a sidecar: runs (and restarts) until the main containers end
    plan = ContainerPlan(name=name, init=init, index=index, image=image, sif=sif, pull_policy=pull, verb=verb,
                         argv=argv, env_static=env_static, env_runtime=env_runtime, binds=binds, subdirs=subdirs,
                         flags=flags, workdir=workdir, restart_policy=policy,
                         probes=plan_probes(c, where=where))

    plan.hooks = plan_hooks(c)
    plan.message_path = message_path(c)
    plan.log_fallback = log_fallback(c)
    return plan


__all__ = ["ContainerPlan", "PodPlan", "image_sif", "plan_pod", "pod_dir_for"]

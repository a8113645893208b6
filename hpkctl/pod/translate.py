"""A pod, as the API server hands it out, → a :class:`PodPlan` (everything the script needs).

This module decides; :mod:`hpkctl.pod.render` only writes. Problems with the pod raise
:class:`~hpkctl.errors.PodError` with a Kubernetes-style reason; they never crash a caller.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpkctl import __version__
from hpkctl.errors import PodError
from hpkctl.pod import paths
from hpkctl.pod.context import Ctx
from hpkctl.pod.env import container_env, service_env
from hpkctl.pod.expansion import expand
from hpkctl.pod.flags import (
    FLAGS_ANNOTATIONS,
    MPI_FLAGS_ANNOTATIONS,
    SlurmOption,
    annotation,
    job_comment,
    merge_options,
    parse_options,
    parse_srun_options,
)
from hpkctl.pod.images import ImageRef, parse_image
from hpkctl.pod.lifecycle import (
    HookPlan,
    checked_grace,
    grace_period,
    log_fallback,
    message_path,
    plan_hooks,
    signal_option,
    room_for_grace,
    stop_wait,
)
from hpkctl.pod.model import Pod
from hpkctl.pod.objects import ObjectSource, StaticObjects
from hpkctl.pod.probes import ProbePlan, plan_probes
from hpkctl.pod.pullsecrets import pull_credentials
from hpkctl.pod.resources import PodResources, pod_resources
from hpkctl.pod.shell import Value, is_static, literal, static_text
from hpkctl.pod.validation import PodValidationError, unhonoured_fields, validate_pod
from hpkctl.pod.volumes import (
    Bind,
    PvcResolver,
    VolumePlan,
    bindable,
    container_binds,
    default_pvc_resolver,
    plan_volumes,
)
from hpkctl.sites.schema import SiteProfile, seconds_to_slurm_time, slurm_time_to_seconds

RESTART_POLICIES = ("Always", "OnFailure", "Never")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
# Groups of sbatch options Slurm refuses together: a user's choice drops our generated one.
_EXCLUSIVE_GROUPS = (
    {"--mem", "--mem-per-cpu", "--mem-per-gpu"},
    {"--cpus-per-task", "--cpus-per-gpu"},
)


@dataclass
class ContainerPlan:
    name: str
    init: bool
    index: int
    image: ImageRef
    sif: str
    pull_policy: str
    verb: str  # "exec" (command given) or "run" (image entrypoint)
    argv: list[Value]
    env_static: list[tuple[str, str]]
    env_runtime: list[tuple[str, Value]]
    binds: list[Bind]
    subdirs: list[Value]
    flags: list[str]  # Apptainer flags other than binds/env-file
    workdir: Value
    restart_policy: str
    hooks: dict[str, HookPlan] = field(default_factory=dict)  # post_start, pre_stop
    message_path: str = "/dev/termination-log"  # terminationMessagePath
    log_fallback: bool = False  # terminationMessagePolicy FallbackToLogsOnError
    mpi: bool = False
    probes: list[ProbePlan] = field(default_factory=list)  # the script gets a <function>_probes

    @property
    def env_file(self) -> str:
        return f"env/{self.name}.env"

    @property
    def run_env_file(self) -> str:
        """The env file plus values only the job knows, written by the job (when there are such values)."""
        return f"run/{self.name}.env"


@dataclass
class PodPlan:
    profile: SiteProfile
    namespace: str
    name: str
    uid: str
    pod_dir: str
    hostname: str
    fqdn: str
    network: str  # "host" or "cni"
    containers: list[ContainerPlan]
    options: list[SlurmOption]
    mpi_flags: list[str]
    resources: PodResources
    volumes: VolumePlan
    # "host" (copy the node's resolv.conf), "host+custom" (and add dnsConfig's lines), "custom"
    # (resolv_conf as it is: dnsPolicy None), "cluster" (resolv_conf, the node's search domains
    # appended to its search line by the job, as the kubelet does for ClusterFirst)
    dns_mode: str
    resolv_conf: str  # used unless dns_mode == "host"
    host_aliases: list[tuple[str, list[str]]]
    memory_dir: str
    parent: tuple[ImageRef, str] | None  # cni mode: the parent container's image and SIF path
    grace: int = 30  # spec.terminationGracePeriodSeconds
    active_deadline: int = 0  # spec.activeDeadlineSeconds (the runtime's timer); 0: none
    pull_credentials: dict[str, tuple[str, str]] = field(default_factory=dict)  # registry → (user, password)
    warnings: list[str] = field(default_factory=list)
    version: str = __version__

    @property
    def init_containers(self) -> list[ContainerPlan]:
        return [c for c in self.containers if c.init]

    @property
    def main_containers(self) -> list[ContainerPlan]:
        return [c for c in self.containers if not c.init]

    @property
    def images(self) -> list[tuple[ImageRef, str, str]]:
        """Unique (image, sif path, strongest pull policy) in first-use order."""
        seen: dict[str, tuple[ImageRef, str, str]] = {}
        rank = {"Never": 0, "IfNotPresent": 1, "Always": 2}
        for c in self.containers:
            prev = seen.get(c.sif)
            if prev is None or rank[c.pull_policy] > rank[prev[2]]:
                seen[c.sif] = (c.image, c.sif, c.pull_policy)
        return list(seen.values())


def _validated(pod: Mapping[str, Any]) -> Pod:
    """The API server's rules (:mod:`hpkctl.pod.validation`), as a pod error with a reason."""
    meta = pod.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    try:
        return validate_pod(pod, source=f"pod {name}" if isinstance(name, str) and name else "pod")
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
             pvc_resolver: PvcResolver | None = None) -> PodPlan:
    """Translate ``pod`` for ``profile``. ``strict=False`` is a dry run (missing objects warn)."""
    pod = dict(pod)
    model = _validated(pod)
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not model.metadata.name:
        raise PodError("InvalidPod", "metadata.name: a pod needs a name")
    if not meta.get("uid"):
        raise PodError("InvalidPod", "metadata.uid: a pod needs a uid (the API server sets one)")
    pdir = pod_dir or pod_dir_for(profile, meta["uid"])
    if not bindable(pdir):
        raise PodError("InvalidPodDirectory", f"pod directory {pdir!r} contains ':', ',' or a line break",
                       hint="choose a [pods].state_dir without those characters in the site profile")
    ctx = Ctx(pod=pod, profile=profile, objects=objects or StaticObjects(), pod_dir=pdir, strict=strict)
    for warning in unhonoured_fields(pod):
        ctx.warn(warning)

    restart = model.spec.restart_policy or "Always"

    resources = pod_resources(ctx)
    volumes = plan_volumes(ctx, resources, pvc_resolver=pvc_resolver or default_pvc_resolver(
        posixpath.expanduser(profile.pods.state_dir)))
    svc_env = service_env(services) if spec.get("enableServiceLinks", True) else service_env(
        [s for s in services if (s.get("metadata") or {}).get("name") == "kubernetes"])

    options, mpi_flags, mpi = _slurm_options(ctx, resources)
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
    dns_mode, resolv = _dns(ctx)
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


def _slurm_options(ctx: Ctx, res: PodResources) -> tuple[list[SlurmOption], list[str], bool]:
    profile = ctx.profile
    s = profile.slurm
    annotations = ctx.meta.get("annotations") or {}
    site_opts = parse_options(" ".join(s.extra_directives), source="profile [slurm].extra_directives")
    user: list[SlurmOption] = []
    found = annotation(annotations, FLAGS_ANNOTATIONS)
    if found:
        user = parse_options(found[1], source=f"metadata.annotations[{found[0]}]")
    # The comment carries the pod's uid first (see flags.job_comment); a comment of the site or
    # the pod follows it instead of replacing it.
    comments = [o.value for o in site_opts + user if o.name == "--comment" and o.value]
    site_opts = [o for o in site_opts if o.name != "--comment"]
    user = [o for o in user if o.name != "--comment"]
    gen: list[SlurmOption] = [
        SlurmOption("--job-name", ctx.name),  # squeue shows the pod's name
        SlurmOption("--output", posixpath.join(ctx.pod_dir, "logs", "slurm.out")),
        SlurmOption("--chdir", ctx.pod_dir),
        SlurmOption("--comment", job_comment(ctx.uid, namespace=ctx.namespace, name=ctx.name,
                                             user=comments[-1] if comments else None)),
        SlurmOption("--cpus-per-task", str(res.cpus)),
        # the time limit: only the batch shell gets SIGTERM, early enough for the stop sequence
        SlurmOption("--signal", signal_option(checked_grace(ctx.spec))),
        # Slurm requeues by default (a node failure, 'scontrol requeue'): the containers would run
        # again unseen after the pod was reported final; a pod ends instead (NodeLost, as Kubernetes)
        SlurmOption("--no-requeue", None),
    ]
    if res.mem_mib:
        gen.append(SlurmOption("--mem", f"{res.mem_mib}M"))
    if res.tmp_mib:
        gen.append(SlurmOption("--tmp", f"{res.tmp_mib}M"))
    if res.gres:
        gen.append(SlurmOption("--gres", ",".join(f"{g}:{n}" for g, n in res.gres.items())))
    deadline = ctx.spec.get("activeDeadlineSeconds")
    if deadline is not None:
        if not isinstance(deadline, int) or deadline <= 0:
            raise PodError("InvalidPod", f"spec.activeDeadlineSeconds: {deadline!r} must be a positive integer")
        if s.max_time and deadline > slurm_time_to_seconds(s.max_time):
            raise PodError("DeadlineExceedsSiteLimit",
                           f"spec.activeDeadlineSeconds: {deadline}s is longer than this site's maximum {s.max_time}",
                           hint=f"lower it to at most {slurm_time_to_seconds(s.max_time)}")
        # The runtime stops the pod at the deadline itself, to the second (hpk_deadline); Slurm's limit,
        # whole minutes whose --signal may come a minute early, is the backstop after the stop sequence.
        limit = deadline + int(stop_wait(ctx.spec)) + 60  # the stop sequence's room is in it
        if s.max_time and limit > slurm_time_to_seconds(s.max_time):
            limit = _room_for_grace(ctx, slurm_time_to_seconds(s.max_time))
        gen.append(SlurmOption("--time", seconds_to_slurm_time(limit)))
    elif s.default_time:
        limit = slurm_time_to_seconds(s.default_time)
        room = _room_for_grace(ctx, limit)
        gen.append(SlurmOption("--time", s.default_time if room == limit else seconds_to_slurm_time(room)))
    for key, val in (("--partition", s.partition), ("--account", s.account), ("--qos", s.qos)):
        if val:
            gen.append(SlurmOption(key, val))
    if s.exclusive:
        gen.append(SlurmOption("--exclusive", None))
    if res.gres and profile.gpu.flags_per_gpu:
        gen += parse_options(" ".join(profile.gpu.flags_per_gpu), source="profile [gpu].flags_per_gpu")
    chosen = {o.name for o in user} | {o.name for o in site_opts}
    for group in _EXCLUSIVE_GROUPS:
        if chosen & group:
            gen = [o for o in gen if o.name not in group or o.name in chosen]
    options = merge_options(merge_options(gen, site_opts), user)
    if s.account_required and not any(o.name == "--account" for o in options):
        msg = "this site requires a Slurm account (budget) and none is set"
        hint = (f"set account = \"...\" under [slurm] in ~/.config/hpk/sites/{profile.name}.toml, "
                f"or add --account=... to the {FLAGS_ANNOTATIONS[0]} annotation")
        if ctx.strict:
            raise PodError("AccountRequired", msg, hint=hint)
        ctx.warn(f"{msg}; {hint}")

    mpi_found = annotation(annotations, MPI_FLAGS_ANNOTATIONS)
    mpi_flags: list[str] = []
    if mpi_found:
        srun = parse_srun_options(mpi_found[1], source=f"metadata.annotations[{mpi_found[0]}]")
        mpi_flags = [o.word for o in srun]
    multi = any(o.name in ("--nodes", "--ntasks", "--ntasks-per-node") and o.value not in (None, "1")
                for o in options)
    return options, mpi_flags, bool(mpi_found) or multi


def _room_for_grace(ctx: Ctx, limit: int) -> int:
    limit, warning = room_for_grace(ctx.spec, limit, max_time=ctx.profile.slurm.max_time)
    if warning:
        ctx.warn(warning)
    return limit


def _dns(ctx: Ctx) -> tuple[str, str]:
    spec = ctx.spec
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    if policy == "ClusterFirst" and spec.get("hostNetwork"):
        policy = "Default"  # the kubelet's rule: a hostNetwork pod needs ClusterFirstWithHostNet for it
    cfg = spec.get("dnsConfig") or {}
    profile = ctx.profile
    if policy not in ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"):
        raise PodError("InvalidPod", f"spec.dnsPolicy: {policy!r} is not a DNS policy",
                       hint="use ClusterFirst, ClusterFirstWithHostNet, Default or None")
    nameservers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    if policy.startswith("ClusterFirst") and profile.pods.dns_server:
        domain = profile.pods.cluster_domain
        nameservers = [profile.pods.dns_server]
        searches = [f"{ctx.namespace}.svc.{domain}", f"svc.{domain}", domain]
        options = ["ndots:5"]
    elif policy != "None" and not cfg:
        return "host", ""
    elif policy != "None":
        if policy.startswith("ClusterFirst"):
            ctx.warn("dnsPolicy ClusterFirst: this site has no cluster DNS ([pods].dns_server); using the node's")
        return "host+custom", _dns_extra(cfg)
    nameservers += [n for n in cfg.get("nameservers") or [] if n not in nameservers]
    searches += [s for s in cfg.get("searches") or [] if s not in searches]
    for opt in cfg.get("options") or []:
        text = opt.get("name", "") + (f":{opt['value']}" if opt.get("value") not in (None, "") else "")
        options = [o for o in options if o.split(":")[0] != opt.get("name")] + [text]
    lines = [f"nameserver {n}" for n in nameservers[:3]]
    if searches:
        lines.append("search " + " ".join(searches[:32]))
    if options:
        lines.append("options " + " ".join(options))
    for line in lines:
        if "\n" in line:
            raise PodError("InvalidPod", "spec.dnsConfig: values must not contain line breaks")
    return ("cluster" if policy.startswith("ClusterFirst") else "custom"), "".join(f"{line}\n" for line in lines)


def _dns_extra(cfg: Mapping[str, Any]) -> str:
    """dnsConfig lines to add to the node's resolv.conf (policy Default or no cluster DNS)."""
    lines = [f"nameserver {n}" for n in cfg.get("nameservers") or []]
    if cfg.get("searches"):
        lines.append("search " + " ".join(cfg["searches"]))
    opts = [o.get("name", "") + (f":{o['value']}" if o.get("value") not in (None, "") else "")
            for o in cfg.get("options") or []]
    if opts:
        lines.append("options " + " ".join(opts))
    if any("\n" in line for line in lines):
        raise PodError("InvalidPod", "spec.dnsConfig: values must not contain line breaks")
    return "".join(f"{line}\n" for line in lines)


__all__ = ["ContainerPlan", "PodPlan", "plan_pod", "pod_dir_for", "literal"]

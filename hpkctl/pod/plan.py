"""What a pod becomes before it is written: a :class:`PodPlan` with one :class:`ContainerPlan` per
container, everything the job script and the pod directory's files need.

:mod:`hpkctl.pod.translate` fills them in (it decides), :mod:`hpkctl.pod.render` and
:mod:`hpkctl.pod.storage` only read them: plain dataclasses, so the writers need not import the
translator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpkctl import __version__
from hpkctl.pod.flags import SlurmOption
from hpkctl.pod.images import ImageRef
from hpkctl.pod.lifecycle import HookPlan
from hpkctl.pod.probes import ProbePlan
from hpkctl.pod.resources import PodResources
from hpkctl.pod.shell import Value
from hpkctl.pod.volumes import Bind, VolumePlan
from hpkctl.sites.schema import SiteProfile


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


__all__ = ["ContainerPlan", "PodPlan"]

"""The one schema every site profile is validated against.

Profiles are plain data (TOML). Unknown keys are errors, not silently ignored: a typo in a profile
must not turn into a job that runs somewhere unexpected.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from hpkctl.typed import Field, field_validator, model_validator

from hpkctl.sites.pilot import PilotSection
from hpkctl.sites.slurmfmt import _Section, _slurm_mem, seconds_to_slurm_time, slurm_time_to_seconds

__all__ = ["PilotSection", "seconds_to_slurm_time", "slurm_time_to_seconds"]


class SiteInfo(_Section):
    """What the profile is for and where it is the default."""

    description: str = Field(default="", description="one line shown by `hpkctl sites list`")
    hostnames: list[str] = Field(
        default_factory=list,
        description="globs of this site's login node names: the profile used there when nothing names one; "
        "not inherited by extends",
    )

    @field_validator("hostnames")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p.strip() or any(c.isspace() for c in p):
                raise ValueError(f"{p!r} is not a hostname pattern (one glob per item, e.g. 'login*.example.org')")
        return v


class SlurmSection(_Section):
    """How jobs are submitted and watched."""

    bin_dir: str = Field(default="", description="directory of sbatch/squeue/scancel/sacct; empty: from PATH")
    conf_file: str = Field(default="", description="SLURM_CONF for every Slurm command; empty: Slurm's default")
    partition: str = Field(default="", description="default partition; empty: Slurm's default")
    account: str = Field(default="", description="default account (budget); empty: Slurm's default")
    qos: str = Field(default="", description="default QOS; empty: Slurm's default")
    account_required: bool = Field(default=False, description="refuse to submit without an account")
    default_time: str = Field(default="01:00:00", description="--time when the pod has no activeDeadlineSeconds (which the job keeps itself, with --time past it). Every job also gets "
                              "--signal=B:TERM@<grace+10>: the pod's stop sequence starts before the limit; a pod's own "
                              "--signal replaces it, and then a grace period longer than the site's KillWait is cut to "
                              "KillWait (README, 'Stopping a pod')")
    max_time: str = Field(default="", description="longest --time allowed; empty: no check before Slurm's")
    exclusive: bool = Field(default=False, description="whole nodes per job (--exclusive)")
    extra_directives: list[str] = Field(default_factory=list, description="more sbatch options, e.g. --reservation=x")
    command_timeout: float = Field(default=30.0, gt=0, description="seconds before a Slurm command is given up")
    jobcomp_file: str = Field(default="", description="jobcomp/filetxt log, read for final states; empty: none")
    use_sacct: Literal["auto", "yes", "no"] = Field(default=
        "auto", description="read final job states with sacct (needs slurmdbd); auto: probe once"
    )
    request_tmp: bool = Field(default=True, description="a pod's ephemeral-storage requests become --tmp (node-local disk, "
                              "the nodes' TmpDisk); false where nodes declare none (TmpDisk=0), since sbatch "
                              "refuses any --tmp there: limits are still enforced by the job (README, What "
                              "stays private)")

    @field_validator("default_time", "max_time")
    @classmethod
    def _time(cls, v: str) -> str:
        if v:
            slurm_time_to_seconds(v)
        return v

    @field_validator("extra_directives")
    @classmethod
    def _directives(cls, v: list[str]) -> list[str]:
        for d in v:
            if not d.startswith("-") or "\n" in d:
                raise ValueError(f"{d!r} is not an sbatch option (write it like '--reservation=x')")
        return v

    @model_validator(mode="after")
    def _default_within_max(self) -> "SlurmSection":
        if self.default_time and self.max_time:
            if slurm_time_to_seconds(self.default_time) > slurm_time_to_seconds(self.max_time):
                raise ValueError(f"default_time {self.default_time!r} is longer than max_time {self.max_time!r}")
        return self


class GpuSection(_Section):
    """How accelerators in a pod's resources become Slurm requests."""

    gres_name: str = Field(default="gpu", description="gres for nvidia.com/gpu (--gres=<name>:N)")
    flags_per_gpu: list[str] = Field(default_factory=list, description="extra sbatch options when GPUs are used")
    extended_resources: dict[str, str] = Field(
        default_factory=dict, description="other resource names mapped to a gres name, e.g. 'amd.com/gpu' = 'gpu'"
    )


class ApptainerSection(_Section):
    """How containers are started inside the job."""

    binary: str = Field(default="apptainer", description="'apptainer' or 'singularity', or an absolute path")
    exec_flags: list[str] = Field(default_factory=list, description="added to every container's exec/run")
    binds: list[str] = Field(default_factory=list, description="bind specs (src[:dst[:ro]]) added to every container")
    fakeroot: bool = Field(default=False, description="run pod containers with --fakeroot")
    network: Literal["host", "cni"] = Field(default=
        "host", description="host: pods share the node's network; cni: each pod gets its own namespace"
    )
    cni_network: str = Field(default="bridge", description="--network value for the pod's parent container (cni mode)")
    parent_image: str = Field(default="", description="image of the pod's parent container (cni mode); must hold apptainer")
    parent_flags: list[str] = Field(default_factory=list, description="extra flags for the parent container")
    image_cache: str = Field(default="~/.hpk/images", description="where pulled images are kept as SIF files")
    pull: Literal["job", "submit"] = Field(default=
        "job", description="job: the job pulls missing images; submit: hpkctl pulls before submitting (offline computes)"
    )
    gpu_flag: str = Field(default="--nv", description="flag that exposes GPUs to a container")
    set_hostname: bool = Field(default=True, description="give containers the pod's hostname (--hostname)")
    always_pull_window: int = Field(default=
        300, ge=0, description="imagePullPolicy Always: a cached image younger than this many seconds is reused"
    )
    pull_timeout: float = Field(default=1800.0, gt=0, description="seconds before an image pull on the submit host is given up")
    build_flags: list[str] = Field(
        default_factory=lambda: ["--fakeroot"],
        description="flags of `apptainer build` for hpkctl's own images (`hpkctl build`); [] when building as root")

    @model_validator(mode="after")
    def _cni_needs_parent(self) -> "ApptainerSection":
        if self.network == "cni" and not self.parent_image:
            raise ValueError("network = 'cni' needs parent_image (an image that holds apptainer) in [apptainer]")
        return self


class PodsSection(_Section):
    """Where pods live and how they see the cluster."""

    state_dir: str = Field(default="~/.hpk", description="per-pod directories, logs and status files, and runtime/ (what "
                           "every job script sources): compute nodes must see it")
    node_name: str = Field(default="hpk", description="the virtual node every pod is bound to (the kubelet's default --node-name)")
    dns_server: str = Field(default="", description="nameserver for ClusterFirst pods; empty: the cluster's CoreDNS when "
                            "it answers on port 53 (hpkctl kubelet), else the host's resolv.conf")
    cluster_domain: str = Field(default="cluster.local", description="DNS domain of the cluster's Services")
    memory_dir: str = Field(default="/dev/shm", description="node-local tmpfs for emptyDir medium: Memory (each pod gets "
                            "a private directory in the user's own 0700 hpk-<uid> there)")
    hostpath_allow: list[str] = Field(default_factory=list, description="absolute path prefixes a hostPath volume "
                                      "may name (or what is below them); empty: hostPath volumes are refused. The "
                                      "state directories, the image cache, ~/.kube and ~/.config/hpk never are")
    default_cpu: str = Field(default="1", description="CPUs when a pod requests none")
    default_memory: str = Field(default="", description="memory when a pod requests none; empty: Slurm's default")
    restart_backoff: int = Field(default=10, ge=1, description="seconds before a container's first restart; doubles each time")
    restart_backoff_max: int = Field(default=300, ge=1, description="longest wait between restarts (Kubernetes: 300)")
    size_check_interval: int = Field(default=10, ge=1, description="seconds between checks of emptyDir sizeLimit")


class _JobSection(_Section):
    """A section describing one of `hpkctl start`'s Slurm jobs: its job_mem and job_time are checked
    alike (the fields themselves, with their own defaults, stand in each section)."""

    @field_validator("job_mem", check_fields=False)
    @classmethod
    def _job_mem(cls, v: str) -> str:
        return _slurm_mem(v)

    @field_validator("job_time", check_fields=False)
    @classmethod
    def _job_time(cls, v: str) -> str:
        if v:
            slurm_time_to_seconds(v)
        return v


class KubeletSection(_JobSection):
    """How `hpkctl kubelet` serves the virtual node (the control plane's view of this site)."""

    port: int = Field(default=10250, ge=1, le=65535, description="HTTPS port of the kubelet API (logs, exec, stats)")
    address: str = Field(default="", description="address the API server dials for logs/exec (the kubelet API listens "
                         "there only); empty: this host's IP")
    api_clients: list[str] = Field(
        default_factory=lambda: ["kube-apiserver-kubelet-client"],
        description="client certificate common names the kubelet API serves besides group system:masters: the "
                    "API server's --kubelet-client-certificate (kubeadm's and hpkctl's CN by default)")
    authz_denied_ttl: float = Field(default=30.0, ge=0, description="seconds a SubjectAccessReview's denial of a kubelet API "
                                    "client is kept (the real kubelet's --authorization-webhook-cache-unauthorized-ttl)")
    slurm_poll: float = Field(default=10.0, gt=0, description="seconds between the one squeue call that answers for every "
                              "pod (also hpkctl run's); only what status files cannot say waits for it")
    status_poll: float = Field(default=0.5, gt=0, description="seconds between reads of the change log (<state_dir>/changes: "
                               "one readdir, then only the pods that changed)")
    status_audit: float = Field(default=60.0, gt=0, description="seconds between stats of every running pod's status "
                                "directory (a safety net: directories removed by hand, jobs of an hpkctl without the "
                                "change log)")
    workers: int = Field(default=8, ge=1, le=64, description="pods submitted, stopped or deleted at the same time")
    max_pods: int = Field(default=1000, ge=1, description="the node's pod capacity")
    keep_pod_dirs: int = Field(default=3600, ge=0, description="seconds a deleted pod's directory is kept for debugging")
    scheduler_names: list[str] = Field(
        default_factory=lambda: ["hpk-scheduler", "default-scheduler"],
        description="schedulerName values `hpkctl scheduler` binds to the node")
    job_cpus: int = Field(default=1, ge=1, description="CPUs of the kubelet's Slurm job (`hpkctl start`)")
    job_mem: str = Field(default="2G", description="--mem of the kubelet's Slurm job (e.g. 2G); empty: none (sites that "
                         "do not schedule memory)")
    job_time: str = Field(default="", description="--time of the kubelet's Slurm job; empty: the control plane's "
                          "([controlplane] job_time)")


def _network(text: str, what: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as e:
        raise ValueError(f"{what} {text.strip()!r}: {e} (write a network such as 10.96.0.0/12, host bits zero)") from None


class ControlPlaneSection(_JobSection):
    """The control-plane job (`hpkctl controlplane run`): state, ports (one set per user on a shared node), network."""

    state_dir: str = Field(default="~/.hpk/controlplane", description="PKI, etcd data, logs, and the published endpoint and "
                           "kubeconfigs (admin, kubelet, scheduler); keep it: a restarted control plane resumes from it")
    bin_dir: str = Field(default="", description="directory of etcd, kube-apiserver, kube-controller-manager and coredns; "
                         "empty: from PATH (the control-plane image puts them there)")
    address: str = Field(default="", description="address the kubelet and users dial (published kubeconfigs, the kubernetes "
                         "Service); empty: this host's IP")
    apiserver_port: int = Field(default=6443, ge=1, le=65535, description="kube-apiserver's HTTPS port (all interfaces)")
    etcd_client_port: int = Field(default=2379, ge=1, le=65535, description="etcd's client port (loopback, TLS)")
    etcd_peer_port: int = Field(default=2380, ge=1, le=65535, description="etcd's peer port (loopback, TLS; one member)")
    controller_manager_port: int = Field(default=10257, ge=1, le=65535,
                                         description="kube-controller-manager's HTTPS port for /healthz (loopback)")
    coredns_port: int = Field(default=10053, ge=1, le=65535, description="UDP/TCP port CoreDNS answers on (all interfaces; "
                              "the kube-dns Endpoints name it). Pods can use it as their nameserver only on 53 "
                              "(resolv.conf has no port), which needs a site that lets users bind it; the kubelet "
                              "then gives it to ClusterFirst pods by itself")
    coredns_ready_port: int = Field(default=8181, ge=1, le=65535,
                                    description="CoreDNS's readiness endpoint /ready (loopback)")
    service_cidr: str = Field(default="10.96.0.0/12", description="the Services' cluster IP range (--service-cluster-ip-range;"
                              " two, comma-separated, for dual stack). Services are made headless, so these "
                              "addresses route nowhere; the first is the kubernetes Service's")
    cluster_dns_ip: str = Field(default="10.96.0.10", description="cluster IP of the kube-dns Service (inside service_cidr), "
                                "as tools expect it; DNS itself is reached through the kube-dns Endpoints")
    dns_upstream: list[str] = Field(default_factory=lambda: ["/etc/resolv.conf"],
                                    description="where CoreDNS forwards names outside the cluster: IP[:port] "
                                    "addresses or a resolv.conf file (CoreDNS forward)")
    start_timeout: float = Field(default=120.0, gt=0, description="seconds each component may take to become healthy")
    job_cpus: int = Field(default=2, ge=1, description="CPUs of the control-plane Slurm job (`hpkctl start`)")
    job_mem: str = Field(default="4G", description="--mem of the control-plane job (e.g. 4G); empty: none (sites that do "
                         "not schedule memory)")
    job_time: str = Field(default="", description="--time of the control-plane job; empty: [slurm] max_time, else "
                          "1-00:00:00. A successor job takes over when it ends (takeover_before)")
    job_partition: str = Field(default="", description="partition of the control-plane and kubelet jobs; empty: [slurm] "
                               "partition")
    job_setup: list[str] = Field(default_factory=list, description="shell lines run first in the control-plane and "
                                 "kubelet jobs, e.g. [\"module load Apptainer\"]")
    takeover_before: int = Field(default=7200, ge=0, description="seconds: `hpkctl start` submits successor jobs (they wait "
                                 "with --dependency=singleton and take over from the state directory) when the "
                                 "running ones have less than this left (at most half their time); 0: only with "
                                 "--takeover")

    @field_validator("job_setup")
    @classmethod
    def _job_setup(cls, v: list[str]) -> list[str]:
        for line in v:
            if "\n" in line or "\r" in line or "\0" in line:
                raise ValueError(f"{line!r}: one shell line per item, without line breaks")
        return v

    @field_validator("service_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        nets = [_network(c, "service_cidr") for c in v.split(",")]
        if len(nets) > 2 or (len(nets) == 2 and nets[0].version == nets[1].version):
            raise ValueError(f"service_cidr {v!r}: one network, or two of different IP families (dual stack)")
        return v

    @field_validator("dns_upstream")
    @classmethod
    def _upstreams(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("dns_upstream is empty: name at least one nameserver or a resolv.conf file")
        for item in v:
            if item.startswith("/"):
                continue
            if item.startswith("["):  # [v6]:port
                host, _, rest = item[1:].partition("]")
                port = rest[1:] if rest.startswith(":") else rest or ""
            elif item.count(":") == 1:  # v4:port
                host, port = item.split(":")
            else:
                host, port = item, ""
            try:
                ipaddress.ip_address(host)
            except ValueError:
                raise ValueError(f"dns_upstream {item!r} is neither an IP address (optionally :port) nor an absolute "
                                 "path of a resolv.conf file") from None
            if port and not (port.isdigit() and 0 < int(port) < 65536):
                raise ValueError(f"dns_upstream {item!r}: port {port!r} is not a number in 1-65535")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "ControlPlaneSection":
        ports = {"apiserver_port": self.apiserver_port, "etcd_client_port": self.etcd_client_port,
                 "etcd_peer_port": self.etcd_peer_port, "controller_manager_port": self.controller_manager_port,
                 "coredns_port": self.coredns_port, "coredns_ready_port": self.coredns_ready_port}
        seen: dict[int, str] = {}
        for key, port in ports.items():
            if port in seen:
                raise ValueError(f"[controlplane] {seen[port]} and {key} are both {port}: each component needs its own port")
            seen[port] = key
        try:
            dns = ipaddress.ip_address(self.cluster_dns_ip)
        except ValueError:
            raise ValueError(f"cluster_dns_ip {self.cluster_dns_ip!r} is not an IP address") from None
        nets = [_network(c, "service_cidr") for c in self.service_cidr.split(",")]
        net = next((n for n in nets if n.version == dns.version), None)
        if net is None or dns not in net or dns in (net.network_address, net.network_address + 1):
            raise ValueError(f"cluster_dns_ip {self.cluster_dns_ip} must lie inside service_cidr {self.service_cidr} "
                             "and not be its network address or its first address (the kubernetes Service's)")
        return self


class SiteProfile(_Section):
    """A merged, validated site profile."""

    name: str
    site: SiteInfo = SiteInfo()
    slurm: SlurmSection = SlurmSection()
    gpu: GpuSection = GpuSection()
    apptainer: ApptainerSection = ApptainerSection()
    pods: PodsSection = PodsSection()
    kubelet: KubeletSection = KubeletSection()
    controlplane: ControlPlaneSection = ControlPlaneSection()
    pilot: PilotSection = PilotSection()

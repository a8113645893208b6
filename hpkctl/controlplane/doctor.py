"""``hpkctl doctor``: what a site must provide for ``hpkctl start`` and the pods, checked one by one.

Each check says OK, WARN or FAIL, what it saw, and for anything but OK the fix. Processes run only
through :mod:`hpkctl.jobs` (``sinfo``, ``sbatch --test-only``) and :mod:`hpkctl.runtime`
(``apptainer --version``); the rest reads files and binds sockets.

What only a job on a compute node could tell (the compute nodes' Apptainer, their view of the image
cache, TCP from a compute node to the API server's node, internet for pulls) is not checked here:
``hpkctl start`` shows it, naming the job's output.
"""

from __future__ import annotations

import getpass
import json
import os
import pwd
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpkctl.controlplane.statedir import read_endpoint
from hpkctl.controlplane.image import host_arch, image_path
from hpkctl.controlplane.launch import render_jobs
from hpkctl.errors import HpkError
from hpkctl.jobs import TERMINAL_STATES, Slurm, SlurmError
from hpkctl.runtime import apptainer_version
from hpkctl.sites.loader import require_submittable
from hpkctl.sites.schema import SiteProfile

OK, WARN, FAIL = "OK", "WARN", "FAIL"
INFO = "INFO"  # what the site offers beyond what hpkctl needs: never a failure
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "coredns")
#: where Apptainer looks for CNI network configurations (``<prefix>/etc/apptainer/network``)
CNI_DIRS = ("/etc/apptainer/network", "/usr/local/etc/apptainer/network", "/etc/singularity/network",
            "/usr/local/etc/singularity/network")
#: unusable Slurm node states (sinfo's long form, flags stripped)
DOWN = ("down", "drained", "draining", "fail", "failing", "future", "inval", "maint", "reboot", "unknown")


@dataclass(frozen=True)
class Check:
    name: str
    result: str  # OK, WARN, FAIL or INFO
    detail: str
    fix: str = ""


def _user() -> tuple[str, int]:
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name, uid
    except KeyError:
        return getpass.getuser(), uid


def check_slurm(profile: SiteProfile, slurm: Slurm) -> list[Check]:
    part = profile.controlplane.job_partition or profile.slurm.partition
    try:
        nodes = slurm.nodes()
    except SlurmError as e:
        return [Check("slurm", FAIL, f"sinfo failed: {e.message}", e.hint)]
    out = [Check("slurm", OK, f"sinfo answers: {len(nodes)} node(s)")]
    if part:
        mine = [n for n in nodes if part in n.partitions]
        if not mine:
            names = sorted({p for n in nodes for p in n.partitions})
            out.append(Check("partition", FAIL, f"partition {part} does not exist here (there are: "
                                                f"{', '.join(names) or 'none'})",
                             "set [slurm] partition (or [controlplane] job_partition) in your site profile"))
        else:
            usable = [n for n in mine if not n.state.lower().startswith(DOWN)]
            cpus = sum(n.cpus for n in usable)
            res = OK if usable else FAIL
            out.append(Check("partition", res, f"partition {part}: {len(usable)} of {len(mine)} node(s) usable, "
                                               f"{cpus} CPUs", "" if usable else "every node of it is down or "
                                               "drained; ask the admins or choose another partition"))
    else:
        out.append(Check("partition", OK, "Slurm's default partition ([slurm] partition is empty)"))
    return out


def check_process_tracking(slurm: Slurm) -> Check:
    """Slurm must see every process of a pod's job. Each container runs in a process group of its
    own (so that what it leaves behind can be ended with it), which ``proctrack/pgid`` cannot follow."""
    try:
        kind = slurm.settings().get("ProctrackType", "")
    except SlurmError as e:
        return Check("proctrack", WARN, f"scontrol show config failed: {e.message}", e.hint)
    if kind == "proctrack/pgid":
        return Check("proctrack", WARN, "ProctrackType=proctrack/pgid: Slurm follows process groups, and each "
                     "container has its own, so a job ended without its stop sequence (a node failure, a plain "
                     "scancel) may leave container processes running",
                     "ask the admins for proctrack/cgroup (what Slurm recommends)")
    if not kind:
        return Check("proctrack", WARN, "scontrol show config names no ProctrackType",
                     "ask the admins which process tracking Slurm uses (proctrack/cgroup is what hpkctl expects)")
    return Check("proctrack", OK, f"{kind}: not proctrack/pgid, so containers in process groups of their own "
                                  "stay part of their job")


def check_accounting(profile: SiteProfile, slurm: Slurm, *, now: float | None = None) -> Check:
    """Whether the site's accounting answers for this user (``sacct`` of their jobs of the last 7 days),
    as information: hpkctl needs none (final states come from ``scontrol`` and the jobcomp file), but
    where it answers, ``sacct`` shows each pod's job or pilot step with its resources and use, and a
    restarted kubelet finds its pods' ended jobs after ``MinJobAge``."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime((time.time() if now is None else now) - 7 * 86400))
    answer = slurm.ask_accounting(since=since)
    if not answer.enabled:
        return Check("accounting", INFO, f"no accounting here ({answer.error}): sacct shows nothing; pods' final "
                     "states come from scontrol (until MinJobAge) and the jobcomp file" +
                     ("" if profile.slurm.jobcomp_file else " (slurm.jobcomp_file is not set)"))
    if answer.error:
        return Check("accounting", WARN, f"sacct failed: {answer.error}",
                     "slurmdbd may be down or slow: ask the admins; hpkctl reads final states from scontrol and "
                     "the jobcomp file meanwhile")
    unused = ' (this profile reads no final states from it: slurm.use_sacct = "no")' \
        if profile.slurm.use_sacct == "no" else ""
    if answer.jobs:
        newest = answer.jobs[-1]
        return Check("accounting", OK, f"sacct answers: {len(answer.jobs)} of your jobs since {since[:10]}, the "
                     f"newest {newest.job_id} ({newest.state}){_comments(slurm)}{unused}")
    try:
        known = [j for j in slurm.user_jobs() if j.state == "RUNNING" or j.state in TERMINAL_STATES]
    except SlurmError:
        known = []
    if known:
        return Check("accounting", INFO, f"sacct answers but has none of your jobs since {since[:10]}, while "
                     f"slurmctld knows job {known[-1].job_id} ({known[-1].state}): slurmdbd may lag behind, or "
                     f"not record this cluster{unused}", "ask again in a minute; if it still has none, ask the admins")
    return Check("accounting", INFO, f"sacct answers, but you ran no job since {since[:10]} to check it with: "
                 f"run a pod and ask again{unused}")


def _comments(slurm: Slurm) -> str:
    """Whether job comments reach sacct (``AccountingStoreFlags=job_comment``): a kubelet's way to find
    its pods' jobs once slurmctld forgot them."""
    try:
        flags = slurm.settings().get("AccountingStoreFlags", "")
    except SlurmError:
        return ""
    if "job_comment" in flags:
        return "; job comments are stored (sacct -o Comment, once a job ended)"
    return "; job comments are not stored (AccountingStoreFlags has no job_comment)"


def check_submission(profile: SiteProfile, slurm: Slurm, *, site: str, python: str, image: str) -> list[Check]:
    """The account rule, then ``sbatch --test-only`` of the control-plane job: partition, account,
    time limit and resources as Slurm sees them, without queueing anything."""
    try:
        require_submittable(profile)
    except HpkError as e:
        return [Check("account", FAIL, e.message, e.hint)]
    acct = profile.slurm.account
    out = [Check("account", OK, f"account {acct}" if acct else "no account needed "
                 f"(account_required = {str(profile.slurm.account_required).lower()})")]
    try:
        scripts = render_jobs(profile, site=site, python=python, image=image or "/dev/null")
    except HpkError as e:
        return out + [Check("job", FAIL, e.message, e.hint)]
    with tempfile.TemporaryDirectory(prefix="hpk-doctor-") as tmp:
        path = Path(tmp) / "controlplane.sh"
        path.write_text(scripts.controlplane)
        try:
            answer = slurm.test_submit(path)
        except SlurmError as e:
            return out + [Check("job", FAIL, f"sbatch --test-only of the control-plane job: {e.message}", e.hint)]
    return out + [Check("job", OK, f"sbatch --test-only of the control-plane job: {answer}")]


def check_apptainer(profile: SiteProfile, *, version: Callable[[str], str] = apptainer_version,
                    subid_files: tuple[str, str] = ("/etc/subuid", "/etc/subgid")) -> list[Check]:
    a = profile.apptainer
    v = version(a.binary)
    out = []
    if v.endswith("unknown"):
        out.append(Check("apptainer", FAIL, f"{a.binary} --version did not answer",
                         "install Apptainer, load its module (e.g. module load Apptainer), or set [apptainer] "
                         "binary to its path"))
    else:
        out.append(Check("apptainer", OK, f"{a.binary}: {v.split('://', 1)[-1]}"))
    name, uid = _user()
    needed = a.fakeroot or a.network == "cni"
    for_build = "--fakeroot" in a.build_flags
    if uid == 0:
        out.append(Check("fakeroot", OK, "running as root: no fakeroot mapping needed"))
    elif needed or for_build:
        missing = [f for f in subid_files if not _subid_entry(Path(f), name, uid)]
        why = "pods (network = cni or fakeroot = true)" if needed else "hpkctl build (build_flags --fakeroot)"
        if not missing:
            out.append(Check("fakeroot", OK, f"{name} has ranges in {' and '.join(subid_files)} (for {why})"))
        else:
            out.append(Check("fakeroot", FAIL if needed else WARN,
                             f"no entry for {name} in {', '.join(missing)}; --fakeroot is needed by {why}",
                             f"ask the admins for a subordinate id range (usermod --add-subuids 100000-165535 "
                             f"--add-subgids 100000-165535 {name}, or apptainer config fakeroot --add {name})"
                             + ("" if needed else "; without it Apptainer falls back to a root-mapped namespace "
                                "where package installs in %post may fail")))
    if a.network == "cni":
        out.append(_check_cni(a.cni_network, a.binary))
    return out


def _subid_entry(path: Path, name: str, uid: int) -> bool:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[0] in (name, str(uid)) and parts[2].isdigit() and int(parts[2]) > 0:
            return True
    return False


def _check_cni(network: str, binary: str) -> Check:
    if network == "none":
        return Check("cni", OK, "cni_network = none: Apptainer's own loopback-only network, no CNI plugin needed")
    dirs = list(CNI_DIRS)
    if "/" in binary:  # <prefix>/bin/apptainer -> <prefix>/etc/apptainer/network
        dirs.insert(0, str(Path(binary).resolve().parent.parent / "etc" / "apptainer" / "network"))
    seen = []
    for d in dict.fromkeys(dirs):
        for f in sorted(Path(d).glob("*.conflist")):
            try:
                conf = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            seen.append(str(conf.get("name", "")))
            if conf.get("name") == network:
                return Check("cni", OK, f"CNI network {network} in {f}")
    return Check("cni", FAIL, f"no CNI network {network!r} in {', '.join(dict.fromkeys(dirs))}"
                 + (f" (found: {', '.join(seen)})" if seen else ""),
                 "ask the admins for a CNI configuration of that name (Apptainer's network directory), e.g. "
                 "flannel on ParallelCluster (site-configs/parallelcluster/on-node-configured.sh), or set "
                 "[apptainer] network = \"host\"")


def _writable(what: str, directory: str) -> Check:
    d = Path(os.path.expanduser(directory))
    probe = d
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not d.exists() and not os.access(probe, os.W_OK | os.X_OK):
        return Check(what, FAIL, f"{d} does not exist and {probe} is not writable",
                     f"create {d}, or choose another directory in your site profile")
    if d.exists():
        try:
            with tempfile.NamedTemporaryFile(dir=d, prefix=".hpk-doctor-"):
                pass
        except OSError as e:
            return Check(what, FAIL, f"{d} is not writable: {e.strerror or e}",
                         "choose a directory you can write in your site profile")
        return Check(what, OK, f"{d} is writable")
    return Check(what, OK, f"{d} will be created (in {probe})")


def check_directories(profile: SiteProfile) -> list[Check]:
    return [_writable("image cache", profile.apptainer.image_cache),
            _writable("state", profile.controlplane.state_dir)]


def _port_free(port: int, *, udp: bool = False) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM) as s:
        if not udp:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def check_ports(profile: SiteProfile) -> list[Check]:
    cp = profile.controlplane
    ports = [("apiserver_port", cp.apiserver_port, False), ("etcd_client_port", cp.etcd_client_port, False),
             ("etcd_peer_port", cp.etcd_peer_port, False), ("controller_manager_port", cp.controller_manager_port, False),
             ("coredns_port", cp.coredns_port, False), ("coredns_port", cp.coredns_port, True),
             ("coredns_ready_port", cp.coredns_ready_port, False)]
    ep = read_endpoint(Path(cp.state_dir))
    here = ep is not None and ep.get("host") == socket.gethostname()
    busy = [f"{key} {port}{'/udp' if udp else ''}" for key, port, udp in ports if not _port_free(port, udp=udp)]
    kubelet = profile.kubelet.port
    kubelet_busy = not _port_free(kubelet)
    out = []
    if not busy:
        out.append(Check("ports", OK, "the control plane's ports are free on this host: "
                                      + ", ".join(f"{p}" for _, p, udp in ports if not udp)))
    elif here:
        out.append(Check("ports", OK, f"in use by your control plane on this host: {', '.join(busy)}"))
    else:
        out.append(Check("ports", FAIL, f"in use on this host: {', '.join(busy)} (another user's control plane, or "
                                        "another program; the control-plane job may run here)",
                         "choose other [controlplane] ports in ~/.config/hpk/sites/"
                         f"{profile.name}.toml: every user on a shared node needs ports of their own"))
    if kubelet_busy and not here:
        out.append(Check("kubelet port", WARN, f"[kubelet] port {kubelet} is in use on this host",
                         "if the kubelet job may run on this host, choose another [kubelet] port"))
    return out


def check_images(profile: SiteProfile, *, arch: str | None = None) -> list[Check]:
    cp = profile.controlplane
    out = []
    if cp.bin_dir:
        missing = [b for b in BINARIES if not os.access(Path(cp.bin_dir) / b, os.X_OK)]
        out.append(Check("binaries", FAIL if missing else OK,
                         f"[controlplane] bin_dir {cp.bin_dir}: " + (f"missing {', '.join(missing)}" if missing else
                                                                      ", ".join(BINARIES)),
                         "put etcd, kube-apiserver, kube-controller-manager and coredns there, or empty bin_dir "
                         "to run the control-plane image (hpkctl build)" if missing else ""))
    else:
        try:
            a = arch or host_arch()
            sif = image_path(profile, "controlplane", a)
        except HpkError as e:
            return [Check("images", FAIL, e.message, e.hint)]
        ok = os.path.isfile(sif)
        out.append(Check("images", OK if ok else FAIL, f"control-plane image {sif}" + ("" if ok else " is not built"),
                         "" if ok else f"hpkctl build --site {profile.name} (on a node with internet and fakeroot)"))
    if profile.apptainer.network == "cni":
        try:
            parent = image_path(profile, "parent", arch or host_arch())
        except HpkError as e:
            return out + [Check("parent image", FAIL, e.message, e.hint)]
        ok = os.path.isfile(parent)
        out.append(Check("parent image", OK if ok else WARN, f"pod parent image {parent}" +
                         ("" if ok else " is not there yet (the pods' jobs pull it)"),
                         "" if ok else f"hpkctl build --site {profile.name} parent"))
    return out


def run_checks(profile: SiteProfile, slurm: Slurm, *, site: str, python: str) -> list[Check]:
    checks = check_slurm(profile, slurm)
    image = ""
    if not profile.controlplane.bin_dir:
        try:
            image = image_path(profile, "controlplane", host_arch())
        except HpkError:
            image = ""
    if checks[0].result == OK:
        checks.append(check_process_tracking(slurm))
        checks.append(check_accounting(profile, slurm))
        checks += check_submission(profile, slurm, site=site, python=python, image=image)
    checks += check_apptainer(profile)
    checks += check_directories(profile)
    checks += check_ports(profile)
    checks += check_images(profile)
    return checks


__all__ = ["BINARIES", "CNI_DIRS", "Check", "FAIL", "INFO", "OK", "WARN", "check_accounting", "check_apptainer",
           "check_directories",
           "check_images", "check_ports", "check_process_tracking", "check_slurm", "check_submission",
           "run_checks"]

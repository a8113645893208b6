"""``hpkctl doctor --on-node``: the compute-node half of the site's checks, as a job script (pure).

The login node's checks (:mod:`hpkctl.controlplane.doctor`) cannot see what a pod's job meets on a
compute node: its bash, its Apptainer and the features the pods' flags need (user namespaces,
``--fakeroot``, ``--security uid:``, ``--nv``), ``/dev/fuse``, cgroup v2 memory accounting, the CNI
network, the image cache and state directory as the node sees them, the programs the job scripts
call, and a route to the control plane's ports. :func:`render_node_check` renders
``sbatch/nodecheck.sh.j2`` (a short job on the profile's partition; only quoted ``Shell`` values and
integers reach it); :func:`parse_node_checks` reads the lines it prints. Submitting and waiting is
:mod:`hpkctl.controlplane.nodedoctor`'s, through :mod:`hpkctl.jobs`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import NamedTuple

from hpkctl import __version__
from hpkctl.controlplane.launch import _directive, _environment, _words, site_label, with_site_options
from hpkctl.pod.flags import SlurmOption
from hpkctl.pod.shell import Shell, quote
from hpkctl.sites.schema import SiteProfile

JOB_NAME = "hpk-doctor"
TIME = "00:05:00"
MARK = "hpk-check"
#: what the job scripts run besides bash's builtins (sbatch/runtime.sh, sbatch/pod.sh.j2)
TOOLS = ("date", "hostname", "mkdir", "mv", "rm", "cat", "chmod", "tail", "head", "cut", "tr", "realpath",
         "readlink", "dirname", "flock", "setsid", "timeout", "sleep", "stat", "du", "pgrep", "sha256sum")
#: and in their own network namespace (``network = "cni"``): entering the pod's namespaces, its address
CNI_TOOLS = ("nsenter", "ip")


class NodeCheck(NamedTuple):
    name: str
    result: str  # OK, WARN or FAIL
    detail: str
    fix: str


def node_check_options(profile: SiteProfile, *, site: str, out_dir: str) -> list[SlurmOption]:
    """One task on one node of the pods' partition, five minutes, output in ``out_dir``."""
    opts = [SlurmOption("--job-name", JOB_NAME), SlurmOption("--comment", f"{JOB_NAME} site={site_label(site)}"),
            SlurmOption("--output", posixpath.join(out_dir, "node-check-%j.out")), SlurmOption("--chdir", out_dir),
            SlurmOption("--nodes", "1"), SlurmOption("--ntasks", "1"), SlurmOption("--cpus-per-task", "1"),
            SlurmOption("--time", TIME)]
    if profile.pods.default_memory:
        opts.append(SlurmOption("--mem", profile.pods.default_memory))
    return with_site_options(profile, opts, partition=profile.slurm.partition)


def render_node_check(profile: SiteProfile, *, site: str, out_dir: str,
                      endpoints: Sequence[tuple[str, str, int]] = ()) -> str:
    """The node-check job script. ``endpoints``: (name, host, port) of a running control plane's
    ports that pods use, each tried over TCP from the node."""
    a = profile.apptainer
    words: list[str] = []
    for name, host, port in endpoints:
        words += [name, host, str(port)]
    tools = TOOLS + (CNI_TOOLS if a.network == "cni" else ())
    return _environment().get_template("nodecheck.sh.j2").render(
        directives=[_directive(o) for o in node_check_options(profile, site=site, out_dir=out_dir)],
        version=Shell(__version__), site_label=Shell(site_label(site)),
        apptainer=quote(a.binary), image_cache=quote(posixpath.expanduser(a.image_cache)),
        state_dir=quote(posixpath.expanduser(profile.pods.state_dir)), network=quote(a.network),
        cni_network=quote(a.cni_network), fakeroot=int(a.fakeroot), gpu_flag=quote(a.gpu_flag),
        endpoints=_words(words), tools=_words(list(tools)))


def parse_node_checks(output: str) -> list[NodeCheck]:
    """The checks the job printed (``hpk-check<TAB>name<TAB>result<TAB>detail<TAB>fix``), in order."""
    out = []
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) == 5 and parts[0] == MARK and parts[2] in ("OK", "WARN", "FAIL"):
            out.append(NodeCheck(parts[1], parts[2], parts[3], parts[4]))
    return out


#: the checks every node-check job reports (the rest depend on the profile and a running cluster)
ALWAYS = ("bash", "tools", "clock", "https", "state", "image cache", "apptainer", "user namespaces", "fakeroot",
          "security uid", "gpu", "fuse", "cgroup")

__all__ = ["ALWAYS", "JOB_NAME", "NodeCheck", "TOOLS", "node_check_options", "parse_node_checks", "render_node_check"]

"""The two Slurm jobs of a private cluster, as scripts: the control plane and the kubelet (pure).

``hpkctl start`` renders ``sbatch/controlplane.sh.j2`` and ``sbatch/kubelet.sh.j2`` with
:func:`render_jobs` and submits them (:mod:`hpkctl.controlplane.lifecycle`); ``--dry-run`` prints them.

The control-plane job runs the bootstrap (``hpkctl controlplane run --site NAME``) either from the
control-plane image (``apptainer run --bind STATE_DIR IMAGE --site NAME``; the image's ``%runscript`` is
the bootstrap) or, when the profile says the binaries are on the host (``[controlplane] bin_dir``), with
this host's hpkctl directly. The kubelet job always runs this host's hpkctl: it calls ``sbatch``,
``squeue`` and ``scancel``, which live on the host, not in an image.

What every job gets (each option an ``#SBATCH`` line):

* ``--job-name=hpk_controlplane_<id>`` / ``hpk_kubelet_<id>`` (never a pod's job name) and ``--comment=hpk-controlplane
  hpk-cluster=<id> ...``: ``<id>`` is a short hash of the state directory, so one user's several
  clusters (profiles with their own ``[controlplane] state_dir``) never mix, and ``squeue --me``
  finds the jobs (:func:`parse_comment`);
* ``--dependency=singleton``: at most one job of a name runs; a successor submitted while the old one
  runs waits, then takes over from the state directory (same PKI, same etcd data);
* ``--signal=B:TERM@SIGNAL_SECONDS``: the batch shell (which ``exec``-s the bootstrap) gets SIGTERM
  early enough to stop every component before the time limit;
* ``--output`` under ``<state_dir>/logs``, ``--chdir`` the state directory;
* the profile's partition (``[controlplane] job_partition``, else ``[slurm] partition``), account, QOS,
  ``[slurm] extra_directives`` (except the options above, which are hpkctl's), time and resources
  (``[controlplane]``/``[kubelet]`` ``job_cpus``, ``job_mem``, ``job_time``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import posixpath
from dataclasses import dataclass
from typing import Any

import jinja2

from hpkctl import __version__
from hpkctl.errors import HpkError, PodError
from hpkctl.pod.flags import SlurmOption, parse_options, sbatch_directive_word
from hpkctl.pod.shell import Shell, quote
from hpkctl.resources import data_dir
from hpkctl.sites.schema import SiteProfile, slurm_time_to_seconds

CONTROLPLANE = "hpk-controlplane"
KUBELET = "hpk-kubelet"
KINDS = (CONTROLPLANE, KUBELET)
CLUSTER_KEY = "hpk-cluster="
#: seconds before the time limit the batch shell gets SIGTERM (the bootstrap stops 5 components, each
#: SIGTERM + up to 10 s; Slurm may send the signal up to 60 s early, never late)
SIGNAL_SECONDS = 120
#: --time of the jobs when neither the profile's job_time nor [slurm] max_time says
DEFAULT_TIME = "1-00:00:00"
#: seconds between the kubelet job's looks at the published endpoint
ENDPOINT_POLL = 10
#: options hpkctl sets on its own jobs; the same options in [slurm] extra_directives are ignored
OWN_OPTIONS = frozenset({"--job-name", "--comment", "--output", "--error", "--chdir", "--dependency", "--signal",
                         "--nodes", "--ntasks", "--cpus-per-task", "--mem", "--time", "--array", "--open-mode",
                         "--export", "--wrap", "--parsable", "--hold"})


def cluster_id(state_dir: str) -> str:
    """8 hex digits naming the cluster whose state lives in ``state_dir`` (absolute, normalised)."""
    return hashlib.sha256(posixpath.normpath(os.path.abspath(state_dir)).encode()).hexdigest()[:8]


def job_name(kind: str, cid: str) -> str:
    """``hpk_controlplane_<id>`` / ``hpk_kubelet_<id>``: with ``_``, which no pod name (a DNS subdomain)
    and so no pod's job name can hold, so a pod named ``hpk-kubelet-<id>`` never joins the cluster's
    ``--dependency=singleton`` queue (issue 20.11)."""
    return f"{kind.replace('-', '_')}_{cid}"


def job_comment(kind: str, cid: str, *, site: str) -> str:
    """``hpk-controlplane hpk-cluster=<id> site=<profile>``: what ``squeue --me`` is searched for."""
    return f"{kind} {CLUSTER_KEY}{cid} site={site_label(site)}"


def parse_comment(comment: str) -> tuple[str, str] | None:
    """``(kind, cluster id)`` of a job comment written by :func:`job_comment`, else None."""
    words = comment.split()
    if len(words) < 2 or words[0] not in KINDS or not words[1].startswith(CLUSTER_KEY):
        return None
    return words[0], words[1][len(CLUSTER_KEY):]


def site_label(site: str) -> str:
    """The profile as a comment names it: a name, or a path's file name without ``.toml``."""
    base = posixpath.basename(site)
    base = base[:-5] if base.endswith(".toml") else base
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in base) or "_"


def controlplane_time(profile: SiteProfile) -> str:
    """``--time`` of the control-plane job: ``job_time``, else ``[slurm] max_time``, else one day."""
    t = profile.controlplane.job_time or profile.slurm.max_time or DEFAULT_TIME
    _within_max(profile, t, "[controlplane] job_time")
    return t


def kubelet_time(profile: SiteProfile) -> str:
    t = profile.kubelet.job_time or controlplane_time(profile)
    _within_max(profile, t, "[kubelet] job_time")
    return t


def _within_max(profile: SiteProfile, t: str, key: str) -> None:
    m = profile.slurm.max_time
    if m and slurm_time_to_seconds(t) > slurm_time_to_seconds(m):
        raise HpkError(f"site profile {profile.name}: {key} {t} is longer than [slurm] max_time {m}",
                       hint=f"lower {key} to at most {m}")
    if slurm_time_to_seconds(t) <= SIGNAL_SECONDS + 60:
        raise HpkError(f"site profile {profile.name}: {key} {t} is too short for a control-plane job",
                       hint=f"give at least {(SIGNAL_SECONDS + 60) // 60 + 1} minutes; the job stops "
                            f"{SIGNAL_SECONDS} s before its end")


def job_options(profile: SiteProfile, kind: str, *, cid: str, site: str, strict: bool = True) -> list[SlurmOption]:
    """The ``#SBATCH`` options of the ``kind`` job (see the module docstring), in script order.
    ``strict``: refuse a profile that requires an account and has none (a dry run shows the script)."""
    s = profile.slurm
    cp = profile.controlplane
    state = cp.state_dir
    short = "controlplane" if kind == CONTROLPLANE else "kubelet"
    if kind == CONTROLPLANE:
        cpus, mem, time = cp.job_cpus, cp.job_mem, controlplane_time(profile)
    else:
        cpus, mem, time = profile.kubelet.job_cpus, profile.kubelet.job_mem, kubelet_time(profile)
    opts = [
        SlurmOption("--job-name", job_name(kind, cid)),
        SlurmOption("--comment", job_comment(kind, cid, site=site)),
        SlurmOption("--output", posixpath.join(state, "logs", f"{short}-job-%j.out")),
        SlurmOption("--chdir", state),
        SlurmOption("--nodes", "1"),
        SlurmOption("--ntasks", "1"),
        SlurmOption("--cpus-per-task", str(cpus)),
    ]
    if mem:
        opts.append(SlurmOption("--mem", mem))
    opts += [SlurmOption("--time", time), SlurmOption("--signal", f"B:TERM@{SIGNAL_SECONDS}"),
             SlurmOption("--dependency", "singleton")]
    return with_site_options(profile, opts, partition=cp.job_partition or s.partition, strict=strict)


def with_site_options(profile: SiteProfile, opts: list[SlurmOption], *, partition: str,
                      strict: bool = True) -> list[SlurmOption]:
    """``opts`` of one of hpkctl's own jobs, then the profile's partition, account, QOS and ``[slurm]
    extra_directives`` (except ``OWN_OPTIONS``; the site's partition/account/qos wins, as for pods).
    ``strict``: refuse a profile that requires an account and has none."""
    s = profile.slurm
    for key, val in (("--partition", partition), ("--account", s.account), ("--qos", s.qos)):
        if val:
            opts.append(SlurmOption(key, val))
    try:
        site_opts = parse_options(" ".join(s.extra_directives), source="profile [slurm].extra_directives")
    except PodError as e:
        raise HpkError(str(e), hint=e.hint) from None
    names = {o.name for o in opts}
    for o in site_opts:
        if o.name in OWN_OPTIONS:
            continue
        if o.name in names:  # the site's partition/account/qos: the extra directive wins, as for pods
            opts = [x for x in opts if x.name != o.name]
        opts.append(o)
    if strict and s.account_required and not any(o.name == "--account" for o in opts):
        raise HpkError(f"site profile {profile.name} requires a Slurm account (budget) and none is set",
                       hint=f'set account = "<budget>" under [slurm] in ~/.config/hpk/sites/{profile.name}.toml')
    return opts


def _directive(opt: SlurmOption) -> Shell:
    return Shell(opt.name if opt.value is None else f"{opt.name}={sbatch_directive_word(opt.value)}")


def _finalize(value: Any) -> Any:
    if isinstance(value, Shell) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise TypeError(f"template got an unquoted value {value!r}; wrap it with shell.quote()")


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_dir("sbatch"))), autoescape=False,
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                              undefined=jinja2.StrictUndefined, finalize=_finalize)


def _comment(text: str) -> Shell:
    """``text`` for a ``#`` comment line: anything that could end the line is replaced."""
    return Shell("".join(c if c.isprintable() else "?" for c in text))


def _words(argv: list[str]) -> Shell:
    return Shell(" ".join(quote(w) for w in argv))


@dataclass(frozen=True)
class JobScripts:
    """Both job scripts and where they are written before ``sbatch`` (``<state_dir>/jobs/``)."""

    controlplane: str
    kubelet: str
    cluster: str  # the cluster id
    image: str  # the control-plane image the job runs, "" when the binaries are on the host

    def path(self, state_dir: str, kind: str) -> str:
        return posixpath.join(state_dir, "jobs", "controlplane.sh" if kind == CONTROLPLANE else "kubelet.sh")


def render_jobs(profile: SiteProfile, *, site: str, python: str, image: str = "", strict: bool = True) -> JobScripts:
    """Both scripts for ``profile``.

    ``site`` is what the jobs pass as ``--site`` (a name, or an absolute path of a .toml file);
    ``python`` the interpreter of this hpkctl installation (``python -m hpkctl`` runs it on the nodes,
    which must share its file system); ``image`` the control-plane image's path, used only when
    ``[controlplane] bin_dir`` is empty.
    """
    cp = profile.controlplane
    if not cp.bin_dir and not image:
        raise HpkError("no control-plane image given and [controlplane] bin_dir is empty",
                       hint="build the image (hpkctl build), or set [controlplane] bin_dir to where etcd, "
                            "kube-apiserver, kube-controller-manager and coredns are on the compute nodes")
    cid = cluster_id(cp.state_dir)
    common: dict[str, Any] = {
        "version": Shell(__version__), "site_label": _comment(site_label(site)), "state_dir": quote(cp.state_dir),
        "site": quote(site), "hpkctl": _words([python, "-m", "hpkctl"]), "setup": [Shell(line) for line in cp.job_setup],
        "signal_seconds": SIGNAL_SECONDS,
    }
    binds: list[Shell] = []
    if not cp.bin_dir:
        binds.append(quote(cp.state_dir))
        if "/" in site:
            binds.append(quote(posixpath.dirname(site)))
    cp_script = _environment().get_template("controlplane.sh.j2").render(
        directives=[_directive(o) for o in job_options(profile, CONTROLPLANE, cid=cid, site=site, strict=strict)],
        image=quote(image) if not cp.bin_dir else Shell(""), binds=binds,
        apptainer=quote(profile.apptainer.binary), bin_dir=_comment(cp.bin_dir), **common)
    kubelet_script = _environment().get_template("kubelet.sh.j2").render(
        directives=[_directive(o) for o in job_options(profile, KUBELET, cid=cid, site=site, strict=strict)],
        node_name=_comment(profile.pods.node_name), python=quote(python), poll=ENDPOINT_POLL, **common)
    return JobScripts(controlplane=cp_script, kubelet=kubelet_script, cluster=cid,
                      image=image if not cp.bin_dir else "")


__all__ = ["CLUSTER_KEY", "CONTROLPLANE", "DEFAULT_TIME", "ENDPOINT_POLL", "JobScripts", "KINDS", "KUBELET",
           "OWN_OPTIONS", "SIGNAL_SECONDS", "cluster_id", "controlplane_time", "job_comment", "job_name",
           "job_options", "kubelet_time", "parse_comment", "render_jobs", "site_label"]

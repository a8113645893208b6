"""``hpkctl start``, ``stop`` and ``doctor``: the private cluster as Slurm jobs, and the site's readiness
for it (:mod:`hpkctl.controlplane.lifecycle`, :mod:`hpkctl.controlplane.doctor`). The cluster's table of
``hpkctl status`` is :func:`print_cluster`, called by ``cmd_status`` in ``local.py``.

    hpkctl start --site NAME [--dry-run] [--takeover] [--timeout S]
    hpkctl stop --site NAME [--all]
    hpkctl doctor --site NAME [--on-node]
    hpkctl selftest --site NAME

Progress goes to stderr; ``start`` prints only ``export KUBECONFIG=...`` on stdout, so
``eval "$(hpkctl start --site NAME)"`` works.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from hpkctl.cli.common import add_site, say, site_of

if TYPE_CHECKING:
    from hpkctl.controlplane.lifecycle import Cluster, ClusterStatus
    from hpkctl.sites import SiteProfile

DEFAULT_TIMEOUT = 1800.0


def register(sub: Any) -> None:
    p = sub.add_parser("start", help="start the private cluster as Slurm jobs (control plane, then the kubelet); "
                                     "idempotent")
    add_site(p)
    p.add_argument("--dry-run", action="store_true", help="print the two job scripts; submit nothing")
    p.add_argument("--takeover", action="store_true",
                   help="submit successor jobs now; each waits for the running one to end and resumes from the "
                        "state directory (default: only within [controlplane] takeover_before of the end)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"give up waiting after this long (queue wait included; default {DEFAULT_TIMEOUT:.0f}); "
                        "the jobs stay")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("stop", help="stop the private cluster's jobs (kubelet, then control plane; its state is kept)")
    add_site(p)
    p.add_argument("--all", action="store_true", help="also stop the Slurm jobs of the node's pods")
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("doctor", help="check what the site must provide (Slurm, partition, account, Apptainer, "
                                      "fakeroot, CNI, directories, ports, images)")
    add_site(p)
    p.add_argument("--on-node", action="store_true",
                   help="also run a short job on the pods' partition that checks a compute node (bash, Apptainer "
                        "and its features, /dev/fuse, cgroup memory accounting, CNI, image cache, state directory, "
                        "the control plane's ports)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds the node-check job may wait and run (default 300)")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("selftest", help="run a battery of small pods through the site (hello, env and args, volumes, "
                                        "init order, a probe, delete with grace, MPI on two nodes; exec and logs "
                                        "through the cluster when hpkctl start runs one) and print one table")
    add_site(p)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds the battery may take (default 600)")
    p.set_defaults(func=cmd_selftest)


def jobs_site(site: str) -> str:
    """``--site`` for the jobs: a profile name as it is, a path made absolute (the jobs start elsewhere)."""
    from hpkctl.sites.files import looks_like_path

    return os.path.abspath(os.path.expanduser(site)) if looks_like_path(site) else site


def _cluster(profile: SiteProfile, site: str) -> Cluster:
    from hpkctl.controlplane.image import host_arch, image_path
    from hpkctl.controlplane.lifecycle import Cluster
    from hpkctl.jobs import Slurm

    image = "" if profile.controlplane.bin_dir else image_path(profile, "controlplane", host_arch())
    return Cluster(profile, slurm=Slurm(profile.slurm), site=jobs_site(site), python=sys.executable, image=image,
                   say=say)


def cmd_start(args: argparse.Namespace) -> int:
    from hpkctl.cli.render import _dry_run_profile
    from hpkctl.errors import ProfileError
    from hpkctl.sites import load_site, require_submittable

    site = site_of(args, announce=True)
    if args.dry_run:
        profile = _dry_run_profile(site)
        try:
            require_submittable(profile)
        except ProfileError as e:
            say(f"hpkctl: warning: {e.message} (a real start refuses this)")
        scripts = _cluster(profile, site).scripts(strict=False)
        root = profile.controlplane.state_dir
        print(f"# hpkctl start --dry-run: site {profile.name}, cluster {scripts.cluster}, state {root}")
        print(f"# ---- {scripts.path(root, 'hpk-controlplane')} (submitted first) ----")
        sys.stdout.write(scripts.controlplane)
        print(f"# ---- {scripts.path(root, 'hpk-kubelet')} (submitted once the control plane is ready) ----")
        sys.stdout.write(scripts.kubelet)
        return 0
    profile = load_site(site)
    require_submittable(profile)
    cluster = _cluster(profile, site)
    try:
        st = cluster.start(timeout=args.timeout, takeover=args.takeover)
    except KeyboardInterrupt:
        say("hpkctl start: interrupted; the submitted jobs stay (hpkctl status shows them, hpkctl stop stops them)")
        return 130
    print_cluster(st, out=sys.stderr, pods=False)
    print(f"export KUBECONFIG={cluster.layout.kubeconfig('admin')}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from hpkctl.sites import load_site

    site = site_of(args, announce=True)
    profile = load_site(site)
    cluster = _stop_cluster(profile, site)
    done = cluster.stop(all_pods=args.all)
    if not done:
        say(f"nothing to stop: no job of the cluster in {cluster.layout.root} is queued or running")
    else:
        say(f"stopped; the state in {cluster.layout.root} is kept: hpkctl start resumes from it")
    return 0


def _stop_cluster(profile: SiteProfile, site: str) -> Cluster:
    from hpkctl.controlplane.lifecycle import Cluster
    from hpkctl.jobs import Slurm

    return Cluster(profile, slurm=Slurm(profile.slurm), site=jobs_site(site), python=sys.executable, say=say)


def cmd_doctor(args: argparse.Namespace) -> int:
    from hpkctl.cli.common import EXIT_ERROR
    from hpkctl.controlplane.doctor import FAIL, run_checks
    from hpkctl.jobs import Slurm
    from hpkctl.sites import load_site

    site = site_of(args, announce=True)
    profile = load_site(site)
    slurm = Slurm(profile.slurm)
    checks = run_checks(profile, slurm, site=jobs_site(site), python=sys.executable)
    if args.on_node:
        from hpkctl.controlplane.nodedoctor import run_node_checks

        say(f"hpkctl doctor: submitting the node-check job to {profile.slurm.partition or 'the default partition'}"
             f" (up to {args.timeout:g} s)")
        checks += run_node_checks(profile, slurm, site=jobs_site(site), timeout=args.timeout)
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{c.result:4}  {c.name:{width}}  {c.detail}")
        if c.fix:
            print(f"{'':4}  {'':{width}}  fix: {c.fix}")
    failed = [c for c in checks if c.result == FAIL]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed" + (f"; {len(failed)} failed" if failed else ""))
    return EXIT_ERROR if failed else 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from hpkctl.cli.common import EXIT_ERROR
    from hpkctl.controlplane.selftestexec import exec_and_logs
    from hpkctl.jobs import Slurm
    from hpkctl.local.selftest import FAIL, run_selftest, table, work_dir_for
    from hpkctl.sites import load_site

    site = site_of(args, announce=True)
    profile = load_site(site)
    slurm, work_dir = Slurm(profile.slurm), work_dir_for(profile)
    results = run_selftest(profile, slurm, work_dir=work_dir, timeout=args.timeout, out=sys.stderr,
                           exec_and_logs=lambda: exec_and_logs(profile, slurm, site=jobs_site(site),
                                                               python=sys.executable, work_dir=work_dir))
    print(table(results))
    return EXIT_ERROR if any(r.result == FAIL for r in results) else 0


# ---------------------------------------------------------------------------- the status table


def cluster_status(profile: SiteProfile) -> ClusterStatus | None:
    """The cluster's status for ``hpkctl status``, or None when the profile has none yet."""
    from hpkctl.controlplane.lifecycle import Cluster
    from hpkctl.jobs import Slurm, SlurmError

    root = profile.controlplane.state_dir
    if not os.path.isdir(root):
        return None
    cluster = Cluster(profile, slurm=Slurm(profile.slurm), site=profile.name, python=sys.executable)
    try:
        st = cluster.status()
    except SlurmError as e:
        say(f"hpkctl: warning: cannot list the cluster's Slurm jobs: {e.message}")
        return None
    return st if st.exists else None


def print_cluster(st: ClusterStatus, *, out: TextIO, pods: bool = True) -> None:
    """The cluster's table: its jobs, the endpoint, the node, and (``pods``) the node's pods and jobs."""
    from hpkctl.controlplane.launch import CONTROLPLANE, KUBELET
    from hpkctl.controlplane.clusterview import PHASES, duration

    now = dt.datetime.now(dt.timezone.utc)
    print(f"CLUSTER {st.cluster} (state {st.state_dir})", file=out)
    print(f"{'COMPONENT':16} {'JOB':>8} {'STATE':10} {'NODE':12} DETAIL", file=out)
    for kind, what in ((CONTROLPLANE, "control plane"), (KUBELET, "kubelet")):
        jobs = st.jobs.of(kind)
        if not jobs:
            detail = ""
            if kind == CONTROLPLANE and st.phase is not None:
                detail = f"last: {PHASES.get(str(st.phase.get('phase')), st.phase.get('phase'))} at {st.phase.get('time')}"
                if st.phase.get("phase") == "failed":
                    detail += f": {str(st.phase.get('message', '')).splitlines()[0]}"
            print(f"{what:16} {'-':>8} {'-':10} {'-':12} not running {detail}".rstrip(), file=out)
            continue
        for i, j in enumerate(jobs):
            label = what if i == 0 else "  successor"
            left = j.left(now)
            if j.pending:
                detail = f"queued: {j.reason or 'pending'}"
            elif kind == CONTROLPLANE:
                ep = st.endpoint if st.endpoint and str(st.endpoint.get("slurm_job_id")) == j.job_id else None
                phase = str(st.phase.get("phase")) if st.phase and str(st.phase.get("slurm_job_id")) == j.job_id else ""
                detail = f"{ep['server']}" if ep else f"{PHASES.get(phase, phase) or 'starting'}"
                if ep:
                    detail += " ready" if st.api == "ok" else f" ({st.api})"
            else:
                detail = f"node {st.node_name} {st.node or '?'}"
            if left is not None:
                detail += f"; {duration(left)} left"
            print(f"{label:16} {j.job_id:>8} {j.state:10} {j.node or '-':12} {detail}", file=out)
    if st.api == "ok":
        print(f"node {st.node_name}: {st.node or 'unknown'}", file=out)
    if pods and st.api == "ok":
        if not st.pods:
            print("no pods on the node", file=out)
        else:
            print(f"{'POD':40} {'PHASE':12} {'JOB':>8} {'SLURM':12} NODE", file=out)
            for p in sorted(st.pods, key=lambda r: (r.namespace, r.name)):
                print(f"{p.namespace + '/' + p.name:40} {p.phase:12} {p.job_id or '-':>8} {p.job_state or '-':12} "
                      f"{p.job_node or '-'}", file=out)

"""``hpkctl run/status/logs/delete``: pods as Slurm jobs without a control plane (:mod:`hpkctl.local`)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from hpkctl.cli.common import add_site, site_of
from hpkctl.errors import HpkError, PodError


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run a manifest's pod as a Slurm job, stream its logs, exit with its result")
    p.add_argument("-f", "--filename", required=True)
    add_site(p)
    p.add_argument("--pod", help="which pod template to use when the file holds several")
    p.add_argument("-d", "--detach", action="store_true", help="return once the job is submitted")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only the containers' logs")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="show the state of runs started with 'hpkctl run'")
    p.add_argument("name", nargs="?", help="pod name (all runs when omitted)")
    add_site(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="print a run's container logs")
    p.add_argument("name")
    p.add_argument("-c", "--container", help="container name (default: the first main container)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the container ends")
    p.add_argument("-p", "--previous", action="store_true", help="the run before the last restart")
    add_site(p)
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("delete", help="cancel a run's Slurm job and forget the run")
    p.add_argument("name")
    add_site(p)
    p.set_defaults(func=cmd_delete)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_run(args: argparse.Namespace) -> int:
    from hpkctl.jobs import Slurm
    from hpkctl.local.follow import follow_run, result_line, settle
    from hpkctl.local.submit import submit_pod
    from hpkctl.sites import load_site

    profile = load_site(site_of(args, announce=not args.quiet))
    out = sys.stderr
    try:
        rec, _ = submit_pod(profile, args.filename, pod_name=args.pod, out=out)
    except PodError as exc:
        print(f"hpkctl: pod cannot run: {exc.reason}: {exc}", file=out)
        return 1
    if not args.quiet:
        print(f"pod {rec.namespace}/{rec.name}: submitted as Slurm job {rec.job_id} (pod directory {rec.pod_dir})",
              file=out)
    if args.detach:
        print(rec.job_id)
        return 0
    slurm = Slurm(profile.slurm)
    # SIGTERM (a closing terminal, a kill from a batch system) cancels the job like Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        st = follow_run(slurm, rec, out=out, log_out=sys.stdout, quiet=args.quiet)
    except KeyboardInterrupt:
        print(f"\ninterrupted: cancelling Slurm job {rec.job_id}", file=out)
        slurm.cancel(rec.job_id)
        st = settle(slurm, rec)
        print(result_line(rec, st), file=out)
        return 130
    print(result_line(rec, st), file=out)
    if st.phase == "Succeeded":
        return 0
    return st.exit_code if st.exit_code and 0 < st.exit_code < 256 else 1


def cmd_status(args: argparse.Namespace) -> int:
    from hpkctl.jobs import Slurm
    from hpkctl.local.records import all_records, load_record
    from hpkctl.local.submit import job_states
    from hpkctl.pod.status import containers_of, read_pod_status
    from hpkctl.sites import load_site

    profile = load_site(site_of(args))
    records = [load_record(profile, args.name)] if args.name else all_records(profile)
    jobs = job_states(Slurm(profile.slurm), [r.job_id for r in records])
    rows = []
    for rec in records:
        try:
            pod = rec.pod()
        except OSError:  # deleted by a concurrent 'hpkctl delete'
            if args.name:
                raise HpkError(f"run {rec.name} is being deleted") from None
            continue
        rows.append((rec, read_pod_status(rec.dir.root, containers_of(pod), jobs[rec.job_id])))
    if args.json:
        print(json.dumps([{"name": r.name, "namespace": r.namespace, "uid": r.uid, "jobId": r.job_id,
                           "podDir": r.pod_dir, "status": st.as_k8s()} for r, st in rows], indent=2))
        return 0
    if not rows:
        print("no runs")
        return 0
    print(f"{'NAME':24} {'JOB':>8} {'PHASE':10} {'REASON':18} {'NODE':10} MESSAGE")
    for rec, st in rows:
        msg = st.message if st.phase != "Running" else ""
        print(f"{rec.name:24} {rec.job_id:>8} {st.phase:10} {st.reason or '-':18} {st.node or '-':10} {msg}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from hpkctl.jobs import Slurm
    from hpkctl.local.follow import follow_logs
    from hpkctl.local.records import load_record
    from hpkctl.pod.status import containers_of
    from hpkctl.sites import load_site

    profile = load_site(site_of(args))
    rec = load_record(profile, args.name)
    names = containers_of(rec.pod())
    container = args.container or next(n for n, init in names if not init)
    if container not in [n for n, _ in names]:
        raise HpkError(f"pod {rec.name} has no container {container!r}",
                       hint="choose one of " + ", ".join(n for n, _ in names))
    path = rec.dir.log(container, previous=args.previous)
    if args.previous and not path.exists():
        raise HpkError(f"container {container} of pod {rec.name} has not been restarted: no previous log")
    if not args.follow:
        if path.exists():
            sys.stdout.buffer.write(path.read_bytes())
        return 0
    follow_logs(Slurm(profile.slurm), rec, container, out=sys.stdout)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from hpkctl.jobs import Slurm
    from hpkctl.local.follow import wait_ended
    from hpkctl.local.records import forget_run, load_record
    from hpkctl.local.submit import ended
    from hpkctl.sites import load_site

    profile = load_site(site_of(args))
    rec = load_record(profile, args.name)
    slurm = Slurm(profile.slurm)
    if not ended(slurm.query([rec.job_id]).get(rec.job_id)):
        slurm.cancel(rec.job_id)
        print(f"pod {rec.namespace}/{rec.name}: cancelled Slurm job {rec.job_id}", file=sys.stderr)
        wait_ended(slurm, rec.job_id)  # let the job end before its directory goes (KillWait is short)
    forget_run(profile, rec)
    print(f"pod {rec.namespace}/{rec.name} deleted")
    return 0

"""``hpkctl run/status/logs/delete``: pods as Slurm jobs without a control plane (:mod:`hpkctl.local`)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from hpkctl.cli.common import add_site, no_collections, say as _say, site_of
from hpkctl.errors import HpkError, PodError

if TYPE_CHECKING:
    from hpkctl.jobs import Slurm
    from hpkctl.local.runs import NeverStarts
    from hpkctl.provider.jobpod import JobPodProvider
    from hpkctl.provider.runrecords import RunRecord
    from hpkctl.provider.runstatus import Unrecorded
    from hpkctl.sites import SiteProfile


def _profile(args: argparse.Namespace) -> SiteProfile:
    from hpkctl.sites import load_site

    return load_site(site_of(args))


def _namespace(value: str) -> str:
    """``-n``'s value, refused unless a namespace (a DNS-1123 label): it names a directory of runs, so
    ``-n ../..`` must never reach a path (issue 20.18)."""
    from hpkctl.provider.runrecords import check_name

    try:
        check_name("x", namespace=value)
    except HpkError as e:
        raise argparse.ArgumentTypeError(e.message) from None
    return value


def add_namespace(p: argparse.ArgumentParser, *, default: str | None = "default") -> None:
    p.add_argument("-n", "--namespace", default=default, metavar="NS", type=_namespace,
                   help="the pod's namespace" + (" (default: default)" if default else
                                                 " (default: the manifest's, else default)"))


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run a manifest's pod as a Slurm job, stream its logs, exit with its result")
    p.add_argument("-f", "--filename", required=True)
    add_site(p)
    add_namespace(p, default=None)
    p.add_argument("--pod", help="which pod template to use when the file holds several")
    p.add_argument("--now", action="store_true",
                   help="a CronJob: run its Job once, now (hpkctl runs no schedules; see 'scrontab')")
    p.add_argument("-d", "--detach", action="store_true", help="return once the job is submitted (or the step runs)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only the containers' logs")
    p.add_argument("--replace", action="store_true",
                   help="delete an existing run of the same name first (cancel its job, remove its directory)")
    p.add_argument("--pilot", action="store_true",
                   help="run the pod as a job step in an allocation held for such runs (pilot mode, [pilot] in "
                        "the profile), whatever the profile says")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="show the private cluster (hpkctl start), then the runs of 'hpkctl run' "
                       "that wait, run or ended within the last hour (--all: every run)")
    p.add_argument("name", nargs="?", help="pod name (when omitted: the namespace's runs that wait or run, and "
                                           "those that ended within the last hour)")
    add_site(p)
    add_namespace(p)
    p.add_argument("-A", "--all-namespaces", action="store_true", help="runs of every namespace")
    p.add_argument("--all", action="store_true", dest="every_run",
                   help="finished runs too, however long ago they ended (until 'hpkctl delete' forgets them)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="print a run's container logs")
    p.add_argument("name")
    p.add_argument("-c", "--container", help="container name (default: the first main container)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the container ends")
    p.add_argument("-p", "--previous", action="store_true", help="the run before the last restart")
    add_site(p)
    add_namespace(p)
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("delete", help="cancel a run's Slurm job and forget the run")
    p.add_argument("name")
    add_site(p)
    add_namespace(p)
    p.set_defaults(func=cmd_delete)


def _cancel(slurm: Slurm, profile: SiteProfile, rec: RunRecord, why: str, *, wait: bool = False) -> None:
    """Delete the run's pod once, as ``hpkctl delete`` does (its status then says hpkctl deleted it, not
    "cancelled from outside hpkctl"); a workload's running pods too, then its array is cancelled.
    Failures are said, never raised."""
    from hpkctl.jobs import SlurmError
    from hpkctl.local.runs import stop_run

    _say(f"{why}: cancelling Slurm job {rec.job_id}")
    try:
        stop_run(slurm, profile, rec, out=sys.stderr, wait=wait)
    except SlurmError as exc:
        _say(f"hpkctl: error: cannot cancel Slurm job {rec.job_id}: {exc}\n  then: scancel {rec.job_id}")


def cmd_run(args: argparse.Namespace) -> int:
    with no_collections():  # what is imported and loaded here stays for the run
        from hpkctl.cli.common import EXIT_ERROR
        from hpkctl.jobs import Slurm
        from hpkctl.local.signals import Interrupted, Interrupts
        from hpkctl.local.submit import prepare_run, submit_prepared
        from hpkctl.sites import load_site

        profile = load_site(site_of(args, announce=not args.quiet))
    out = sys.stderr
    slurm = Slurm(profile.slurm)
    if args.pilot or profile.pilot.enabled:
        from hpkctl.cli.pilotrun import run_pilot

        return run_pilot(args, profile, slurm)
    # SIGINT, SIGTERM (a batch system, `timeout`, `runuser`) and SIGHUP (a closing terminal) cancel
    # the job once; sbatch and the record of its job id are never interrupted (hpkctl.local.signals).
    interrupts = Interrupts().install()
    rec = None
    try:
        try:
            prep = prepare_run(profile, args.filename, pod_name=args.pod, namespace=args.namespace,
                               replace=args.replace, slurm=slurm, now=args.now, out=out)
            with interrupts.deferred():
                rec = submit_prepared(slurm, prep)
        except PodError as exc:
            print(f"hpkctl: pod cannot run: {exc.reason}: {exc}", file=out)
            return EXIT_ERROR
        what = f"{rec.kind.lower()} {rec.namespace}/{rec.name}"
        if not args.quiet:
            print(f"{what}: submitted as Slurm job {'array ' if rec.is_array else ''}{rec.job_id} "
                  f"({'workload' if rec.is_array else 'pod'} directory {rec.pod_dir})", file=out)
        if args.detach:  # imports nothing of following a run: its provider, the follow (issue 23.2)
            print(rec.job_id)
            return 0
        from hpkctl.local.follow import follow_run

        provider = _run_provider(profile, slurm, rec)
        if rec.is_array:
            return _follow_array(provider, rec, quiet=args.quiet, slurm_poll=profile.kubelet.slurm_poll)
        st = follow_run(provider, rec, out=out, log_out=sys.stdout, quiet=args.quiet)
    except Interrupted as exc:
        from hpkctl.local.follow import result_line, settle

        name = "interrupted" if exc.signum == signal.SIGINT else f"got {exc}"
        if rec is None:
            _say(f"\nhpkctl: {name} before a job was submitted; nothing to cancel")
            return exc.exit_status
        _cancel(slurm, profile, rec, f"\nhpkctl: {name}")
        st = settle(_run_provider(profile, slurm, rec), rec)
        _say(result_line(rec, st))
        return exc.exit_status
    except BrokenPipeError:  # `hpkctl run ... | head`: nobody reads the logs any more, as SIGPIPE would end it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        if rec is not None:
            _cancel(slurm, profile, rec, "hpkctl: the output was closed")
        return 128 + signal.SIGPIPE
    except _never_starts() as exc:
        from hpkctl.provider.runrecords import forget_run

        _cancel(slurm, profile, exc.record, "hpkctl: the job can never start", wait=True)
        forget_run(profile, exc.record)
        raise
    finally:
        interrupts.restore()
    from hpkctl.local.follow import result_line
    from hpkctl.local.runs import exit_status

    print(result_line(rec, st), file=out)
    return exit_status(rec, st)


def _never_starts() -> type[NeverStarts]:
    """The follow's ``NeverStarts``, imported only when an exception is matched against it: a detached
    run imports nothing of the follow."""
    from hpkctl.local.runs import NeverStarts

    return NeverStarts


def _run_provider(profile: SiteProfile, slurm: Slurm, rec: RunRecord) -> JobPodProvider:
    """The job-per-pod provider that knows ``rec`` (its status, logs and delete): run_provider's,
    without pilot mode's code to import."""
    from hpkctl.provider.jobpod import JobPodProvider
    from hpkctl.provider.runrecords import RunRecords

    provider = JobPodProvider(slurm=slurm, profile=profile, records=RunRecords(profile))
    provider.know(rec)
    return provider


def _follow_array(provider: JobPodProvider, rec: RunRecord, *, quiet: bool, slurm_poll: float) -> int:
    """``hpkctl run`` of a workload: its pods' logs (``[pod/NAME/CONTAINER] line``) and progress until it
    finished; 0 when every pod succeeded."""
    from hpkctl.local.arrayfollow import follow_array

    st = follow_array(provider, rec, log_out=sys.stdout, quiet=quiet, slurm_poll=slurm_poll)
    for i in st.indexes:
        if i.result != "Succeeded" and not quiet:
            _say(f"  {i.name} (Slurm job {i.job_id}, {i.attempts} run(s)): {i.pod.phase} "
                 f"{i.pod.reason}: {i.pod.message}".rstrip(": "))
    why = (f" ({st.reason})" if st.reason else "") + (f": {st.message}" if st.message else "")
    _say(f"{rec.kind.lower()} {rec.namespace}/{rec.name} (Slurm job array {rec.job_id}): {st.phase}{why}; "
         f"{st.summary()}")
    return 0 if st.phase in ("Complete", "Succeeded") else 1


def _unrecorded(profile: SiteProfile, slurm: Slurm, records: list[RunRecord]) -> list[Unrecorded]:
    """Jobs of pods no record names (a failed Slurm query is a warning: the records still show)."""
    from hpkctl.jobs import SlurmError
    from hpkctl.provider.runstatus import unrecorded_jobs

    try:
        return unrecorded_jobs(profile, slurm, records)
    except SlurmError as exc:
        print(f"hpkctl: warning: cannot list your Slurm jobs to find pods without a record: {exc.message}",
              file=sys.stderr)
        return []


def cmd_status(args: argparse.Namespace) -> int:
    from hpkctl.jobs import Slurm
    from hpkctl.provider.runrecords import all_records, load_record
    from hpkctl.provider import PodRef
    from hpkctl.provider.pilotpod import run_provider
    from hpkctl.local.listing import is_listed, print_runs

    profile = _profile(args)
    left_out = 0
    slurm = Slurm(profile.slurm)
    if args.name and args.all_namespaces:
        raise HpkError("a pod name cannot be given with -A/--all-namespaces", hint="use -n NAMESPACE NAME")
    if not args.name and not args.json:  # the private cluster (hpkctl start) on top, when the profile has one
        from hpkctl.cli.launch import cluster_status, print_cluster

        cluster = cluster_status(profile)
        if cluster is not None:
            print_cluster(cluster, out=sys.stdout)
            print("\nRUNS (hpkctl run)")
    everything = all_records(profile)
    orphans = _unrecorded(profile, slurm, everything)  # first: it may write a job id into a record
    if args.name:
        orphans = [o for o in orphans if (o.namespace, o.name) == (args.namespace, args.name)]
        try:
            records = [load_record(profile, args.name, args.namespace)]
        except HpkError:
            if not orphans:
                raise
            records = []
    else:
        records = all_records(profile, None if args.all_namespaces else args.namespace)
        if not args.all_namespaces:
            orphans = [o for o in orphans if o.namespace == args.namespace]
    # through the provider: one squeue for every pod and every element of every workload; an odd record
    # shows its own problem
    provider = run_provider(slurm, profile, pilot=False)
    for r in records:
        provider.know(r)
    statuses = provider.pod_statuses([PodRef(r.uid, r.namespace, r.name) for r in records])
    if not (args.name or args.every_run):  # live runs, and those that ended within the hour
        now = time.time()
        shown = [r for r in records if is_listed(statuses[r.uid], r.submitted, now)]
        left_out, records = len(records) - len(shown), shown
    rows: list[tuple[str, str, str, str, str, Any]] = [
        (r.namespace, r.name, r.job_id, r.uid, r.pod_dir, statuses[r.uid]) for r in records]
    rows += [(o.namespace, o.name, o.job.job_id, o.uid, "", o.status()) for o in orphans]
    if args.json:
        print(json.dumps([{"name": name, "namespace": ns, "uid": uid, "jobId": job, "podDir": pod_dir,
                           "kind": getattr(st, "kind", "Pod"), "status": st.as_k8s()}
                          for ns, name, job, uid, pod_dir, st in rows], indent=2))
        return 0
    print_runs(rows, namespace=None if args.all_namespaces else args.namespace, left_out=left_out)
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from hpkctl.jobs import Slurm
    from hpkctl.local.follow import follow_logs
    from hpkctl.pod.status import containers_of
    from hpkctl.provider import PodRef
    from hpkctl.provider.pilotpod import run_provider
    from hpkctl.sites import load_site

    profile = load_site(site_of(args))
    rec = _pod_record(profile, args.name, args.namespace)
    provider = run_provider(Slurm(profile.slurm), profile, pilot=False)  # a pilot pod's logs are files alike
    provider.know(rec)
    try:
        names = containers_of(rec.pod())
    except (OSError, ValueError):
        st = provider.pod_statuses([PodRef(rec.uid, rec.namespace, rec.name)])[rec.uid]
        raise HpkError(f"pod {rec.namespace}/{rec.name} has no logs: {st.reason}: {st.message}") from None
    container = args.container or next(n for n, init in names if not init)
    if container not in [n for n, _ in names]:
        raise HpkError(f"pod {rec.name} has no container {container!r}",
                       hint="choose one of " + ", ".join(n for n, _ in names))
    path = provider.log_file(rec.uid, container, previous=args.previous)
    if args.previous and path is None:
        raise HpkError(f"container {container} of pod {rec.name} has not been restarted: no previous log")
    if not args.follow:
        if path is not None:
            sys.stdout.buffer.write(path.read_bytes())
        return 0
    follow_logs(provider, rec, container, out=sys.stdout, slurm_poll=profile.kubelet.slurm_poll)
    return 0


def _pod_record(profile: SiteProfile, name: str, namespace: str) -> RunRecord:
    """The run of pod ``name``: its own record, a workload's pod (``train-3``), or a workload's
    first pod when ``name`` is the workload (as ``kubectl logs job/train`` picks one)."""
    from hpkctl.local.arrays import find_member, member_record
    from hpkctl.provider.runrecords import all_records, load_record

    try:
        rec = load_record(profile, name, namespace)
    except HpkError:
        member = find_member(all_records(profile, namespace), name, namespace)
        if member is None:
            raise
        return member
    if rec.is_array:
        first = member_record(rec, 0)
        _say(f"{rec.kind.lower()} {namespace}/{name}: showing its pod {first.name} "
             f"('hpkctl status {name}' lists its pods)")
        return first
    return rec


def cmd_delete(args: argparse.Namespace) -> int:
    from hpkctl.jobs import Slurm
    from hpkctl.provider.runrecords import all_records, load_record
    from hpkctl.local.runs import delete_run, delete_unrecorded

    profile = _profile(args)
    slurm = Slurm(profile.slurm)
    try:
        rec = load_record(profile, args.name, args.namespace)
    except HpkError:
        # no record: a job that still names the pod in its comment is the pod, deleted as a run is
        orphans = [o for o in _unrecorded(profile, slurm, all_records(profile))
                   if (o.namespace, o.name) == (args.namespace, args.name)]
        if not orphans:
            raise
        for o in orphans:
            delete_unrecorded(slurm, profile, o, out=sys.stderr)
        print(f"pod {args.namespace}/{args.name} deleted")
        return 0
    delete_run(slurm, profile, rec, out=sys.stderr)
    print(f"pod {rec.namespace}/{rec.name} deleted")
    return 0

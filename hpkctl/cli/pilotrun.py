"""``hpkctl run --pilot`` (or a profile whose ``[pilot]`` is on): the pod as a job step of an allocation
held for such runs (:mod:`hpkctl.local.pilotrun`); apart from :mod:`hpkctl.cli.local` so that a
job-per-pod run imports none of it."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING

from hpkctl.cli.common import EXIT_ERROR, say
from hpkctl.errors import PodError

if TYPE_CHECKING:
    from hpkctl.jobs import Slurm
    from hpkctl.sites import SiteProfile


def run_pilot(args: argparse.Namespace, profile: SiteProfile, slurm: Slurm) -> int:
    """``hpkctl run --pilot``: the pod as a step of a held allocation (hpkctl.local.pilotrun)."""
    from hpkctl.local.follow import result_line
    from hpkctl.local.pilotrun import follow_pilot, prepare_pilot, run_pilot_workload, start_pilot
    from hpkctl.provider.pilotpod import pilot_enabled, pilot_run_provider
    from hpkctl.local.runs import exit_status, stop_run
    from hpkctl.local.signals import Interrupted, Interrupts

    profile = pilot_enabled(profile)
    out = sys.stderr
    interrupts = Interrupts().install()
    rec = proc = None
    try:
        try:
            prep = prepare_pilot(profile, args.filename, pod_name=args.pod, namespace=args.namespace,
                                 replace=args.replace, slurm=slurm, now=args.now, detach=args.detach, out=out)
            if prep.record.is_array:  # this process runs the workload's pods as steps
                return run_pilot_workload(slurm, prep, interrupts, manifest=args.filename, pod_name=args.pod,
                                          now=args.now, out=out, log_out=sys.stdout, quiet=args.quiet)
            rec, proc = start_pilot(slurm, prep, interrupts, out=out, quiet=args.quiet)
            provider = pilot_run_provider(slurm, profile)  # its status, logs and delete
            provider.know(rec)
            if args.detach:  # the step's srun runs on in a session of its own; its files say the rest
                print(provider.step_id(rec.uid) or rec.allocation)
                return 0
            st = follow_pilot(provider, rec, proc, out=out, log_out=sys.stdout, quiet=args.quiet)
        except PodError as exc:
            print(f"hpkctl: pod cannot run: {exc.reason}: {exc}", file=out)
            return EXIT_ERROR
    except Interrupted as exc:
        if rec is not None:
            say(f"\nhpkctl: {'interrupted' if exc.signum == signal.SIGINT else f'got {exc}'}")
            stop_run(slurm, profile, rec, out=out, step=proc)  # through the pilot provider
        return exc.exit_status
    finally:
        interrupts.restore()
    print(result_line(rec, st), file=out)
    return exit_status(rec, st)

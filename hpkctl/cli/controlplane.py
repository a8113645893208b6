"""``hpkctl controlplane run --site NAME``: the bootstrap inside the control-plane job (internal; not listed
in ``hpkctl --help``: ``hpkctl start`` submits the job that runs it, and it may be run by hand to debug).

It runs in the foreground, logs to stderr, and stops the control plane in reverse order on SIGTERM (the
job's end, ``hpkctl stop``), SIGINT (Ctrl-C) or SIGHUP (a closed terminal). The scheduler is
``hpkctl scheduler``'s loop on a thread of this process.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

from hpkctl.cli.common import add_site, site_of


def register(sub: Any) -> None:
    # no help=: argparse then leaves it out of `hpkctl --help` (help=SUPPRESS would print "==SUPPRESS==")
    p = sub.add_parser("controlplane",
                       description="internal: the control plane inside its Slurm job (hpkctl start runs it)")
    actions = p.add_subparsers(dest="controlplane_command", required=True, metavar="ACTION")
    r = actions.add_parser("run", help="start etcd, kube-apiserver, kube-controller-manager, CoreDNS, the scheduler "
                                       "and the services rule; publish the endpoint and kubeconfigs; stop on SIGTERM")
    add_site(r)
    r.add_argument("--no-scheduler", action="store_true",
                   help="do not run the scheduler (run `hpkctl scheduler` elsewhere with scheduler.kubeconfig)")
    r.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    r.set_defaults(func=cmd_controlplane_run)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    logger = logging.getLogger("hpkctl.controlplane")

    def handler(signum: int, frame: Any) -> None:
        if not stop.is_set():
            logger.info("%s: stopping the control plane", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)
    return stop


def cmd_controlplane_run(args: argparse.Namespace) -> int:
    from hpkctl.controlplane.bootstrap import SchedulerFn, run_controlplane
    from hpkctl.sites import load_site

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    profile = load_site(site_of(args, announce=True))
    stop = _stop_on_signals()
    scheduler: SchedulerFn | None = None
    if not args.no_scheduler:
        from hpkctl.scheduler.daemon import run_scheduler

        def scheduler(kubeconfig: str, stop_scheduler: threading.Event) -> int:
            return run_scheduler(kubeconfig, node_name=profile.pods.node_name,
                                 scheduler_names=list(profile.kubelet.scheduler_names), stop=stop_scheduler)

    return run_controlplane(profile, stop=stop, scheduler=scheduler)

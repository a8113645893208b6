"""``hpkctl kubelet`` and ``hpkctl scheduler``: the daemons that join a Kubernetes control plane.

Both run in the foreground as the normal user, log to stderr and stop cleanly on SIGTERM/SIGINT
(the pods' Slurm jobs keep running: a restarted kubelet adopts them again).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

from hpkctl.cli.common import add_site, site_of


def register(sub: Any) -> None:
    p = sub.add_parser("kubelet", help="serve one virtual Kubernetes node whose pods run as Slurm jobs")
    add_site(p)
    p.add_argument("--kubeconfig", required=True, metavar="PATH", help="kubeconfig of the node's identity")
    p.add_argument("--node-name", default=None, metavar="NAME",
                   help="the node's name (default: [pods] node_name of the profile, 'hpk')")
    p.add_argument("--port", type=int, default=None, metavar="N",
                   help="HTTPS port of the kubelet API (default: [kubelet] port; 0 picks a free one)")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="address the API server dials for logs and exec (default: [kubelet] address, else this "
                        "host's IP)")
    p.add_argument("--tls-cert-file", default=None, metavar="PATH",
                   help="serving certificate of the kubelet API (default: a self-signed one)")
    p.add_argument("--tls-private-key-file", default=None, metavar="PATH")
    p.add_argument("--client-ca-file", default=None, metavar="PATH",
                   help="CA whose client certificates may use the kubelet API (default: the kubeconfig's CA)")
    p.add_argument("--pilot", action="store_true",
                   help="run pods as job steps in allocations this kubelet holds ([pilot] in the profile), "
                        "whatever the profile says")
    p.add_argument("-v", "--verbose", action="store_true", help="log every request and decision")
    p.set_defaults(func=cmd_kubelet)

    p = sub.add_parser("scheduler", help="bind pending pods to the hpk node (Slurm does the real placement)")
    add_site(p)
    p.add_argument("--kubeconfig", required=True, metavar="PATH", help="kubeconfig with rights to bind pods")
    p.add_argument("--node-name", default=None, metavar="NAME", help="the node to bind to (default: the profile's)")
    p.add_argument("--scheduler-name", action="append", default=None, metavar="NAME",
                   help="schedulerName to serve (repeatable; default: [kubelet] scheduler_names)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_scheduler)


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        logging.getLogger("hpkctl").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def cmd_kubelet(args: argparse.Namespace) -> int:
    from hpkctl.kubelet.daemon import KubeletOptions, run_kubelet
    from hpkctl.sites import load_site

    _logging(args.verbose)
    profile = load_site(site_of(args, announce=True))
    opts = KubeletOptions(kubeconfig=args.kubeconfig, node_name=args.node_name or profile.pods.node_name,
                          port=profile.kubelet.port if args.port is None else args.port,
                          address=args.address if args.address is not None else profile.kubelet.address,
                          cert_file=args.tls_cert_file, key_file=args.tls_private_key_file,
                          client_ca_file=args.client_ca_file, pilot=args.pilot)
    return run_kubelet(profile, opts, stop=_stop_on_signals())


def cmd_scheduler(args: argparse.Namespace) -> int:
    from hpkctl.scheduler.daemon import run_scheduler
    from hpkctl.sites import load_site

    _logging(args.verbose)
    profile = load_site(site_of(args, announce=True))
    names = args.scheduler_name or list(profile.kubelet.scheduler_names)
    return run_scheduler(args.kubeconfig, node_name=args.node_name or profile.pods.node_name,
                         scheduler_names=names, stop=_stop_on_signals())

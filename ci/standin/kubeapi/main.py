"""Command line of ``ci/standin/kube-apiserver``: state directory, PKI, kubeconfigs, serving.

Two command lines. With ``--state-dir`` (the stand-in's own, ``ci/kube-up``): it makes its PKI,
starts on loopback, writes the kubeconfigs only once the socket is bound (so their presence means
the port is known). Without it, the real kube-apiserver flags the control-plane bootstrap passes
(``realflags``). Either way it saves the object snapshot on SIGTERM/SIGINT so a restart resumes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pwd
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from . import realflags
from .api import Api
from .certs import Pki
from .handlers import Server
from .proxy import DEFAULT_ADDRESS_TYPES, KubeletClient
from .schema import schemas
from .store import Store
from .watch import WatchSettings

log = logging.getLogger("kubeapi")
#: with real kube-apiserver flags: where to keep objects.json (no persistence when unset)
STATE_ENV = "HPK_STANDIN_APISERVER_DIR"
#: set (a file name): run under cProfile and write its stats there when stopped (SIGTERM/SIGINT)
PROFILE_ENV = "HPK_STANDIN_PROFILE"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kube-apiserver", description="Kubernetes API stand-in (tests and demos only)")
    p.add_argument("--state-dir", required=True, type=Path, help="PKI, kubeconfigs, object snapshot")
    p.add_argument("--bind-address", default="127.0.0.1")
    p.add_argument("--secure-port", "--port", dest="port", type=int, default=6443, help="0: any free port")
    p.add_argument("--node-name", default="hpk", help="the kubelet user's node (kubeconfig, serving cert)")
    p.add_argument("--kubeconfig-owner", default="", help="user that gets the kubeconfigs and kubelet key (chown)")
    p.add_argument("--history-size", type=int, default=1000, help="watch events kept for resuming")
    p.add_argument("--bookmark-interval", type=float, default=60.0, help="seconds between watch BOOKMARKs")
    p.add_argument("--min-request-timeout", type=float, default=1800.0,
                   help="watches without timeoutSeconds end after a random time in [T, 2T]")
    p.add_argument("--kubelet-preferred-address-types", default=",".join(DEFAULT_ADDRESS_TYPES))
    p.add_argument("--kubelet-certificate-authority", type=Path, default=None)
    p.add_argument("--protobuf-schema-binary", default=os.environ.get("HPK_TOOLS", "/opt/hpk-tools") + "/bin/kubectl",
                   help="a Go client (kubectl) whose type data gives the protobuf field numbers")
    p.add_argument("--snapshot-delay", type=float, default=0.2,
                   help="seconds between a write and the snapshot (SIGTERM saves at once; SIGKILL loses less than this)")
    p.add_argument("--no-persist", action="store_true", help="do not load or save the object snapshot")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def _owner(name: str) -> tuple[int, int] | None:
    if not name:
        return None
    pw = pwd.getpwnam(name)
    return pw.pw_uid, pw.pw_gid


async def serve(args: argparse.Namespace) -> None:
    """The stand-in's own command line (``--state-dir``): its PKI, kubeconfigs and kubelet serving cert."""
    state: Path = args.state_dir
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o755)
    owner = _owner(args.kubeconfig_owner)
    pki = Pki(state)
    sock = _bind(args.bind_address, args.port)
    port = sock.getsockname()[1]
    host = f"[{args.bind_address}]" if ":" in args.bind_address else args.bind_address
    server_url = f"https://{host}:{port}"
    cert, key = pki.serving((args.bind_address,))
    store = Store(history_size=args.history_size, snapshot=None if args.no_persist else state / "objects.json",
                  snapshot_delay=args.snapshot_delay)
    api = Api(store, schemas(), ca_pem=pki.ca_pem, server=f"{args.bind_address}:{port}")
    kc, kk = pki.leaf("apiserver-kubelet-client", cn="kube-apiserver-kubelet-client", orgs=("kubeadm:cluster-admins",))
    kubelet = KubeletClient(kc, kk, ca=args.kubelet_certificate_authority,
                            address_types=tuple(args.kubelet_preferred_address_types.split(",")))
    node = args.node_name
    serving = pki.leaf(f"kubelet-{node}-serving", cn=f"system:node:{node}", orgs=("system:nodes",), server=True,
                       sans=("localhost", "127.0.0.1", socket.gethostname(), node))
    if owner is not None:
        for f in serving:
            os.chown(f, *owner)

    def published() -> None:
        for user, cn, orgs in (("admin", "kubernetes-admin", ("system:masters",)),
                               ("kubelet", f"system:node:{node}", ("system:nodes",)),
                               ("scheduler", "system:kube-scheduler", ())):
            pki.kubeconfig(state / f"{user}.kubeconfig", server=server_url, user=user, cn=cn, orgs=orgs,
                           owner=owner)
        (state / "port").write_text(f"{port}\n")
        print(f"kube-apiserver stand-in: serving {server_url}, admin kubeconfig {state / 'admin.kubeconfig'}",
              file=sys.stderr, flush=True)

    await _run(api, pki, kubelet, sock, cert=cert, key=key, client_ca=pki.dir / "ca.crt", args=args,
               on_serving=published)


async def serve_real(values: dict[str, Any], args: argparse.Namespace) -> None:
    """Started as ``kube-apiserver`` with real flags (``realflags``)."""
    creds = realflags.Credentials(values)
    state_env = os.environ.get(STATE_ENV, "")
    state = Path(state_env) if state_env else None
    if state is not None:
        state.mkdir(parents=True, exist_ok=True)
    etcd = realflags.wait_for_etcd(values)
    _say(f"etcd {values['etcd-servers'][0]}/health answered {etcd} (objects are not stored there)")
    bind = values.get("bind-address", "0.0.0.0")
    sock = _bind(bind, values.get("secure-port", 6443))
    port = sock.getsockname()[1]
    advertise = values.get("advertise-address") or ("127.0.0.1" if bind in ("0.0.0.0", "::") else bind)
    store = Store(history_size=args.history_size, snapshot=state / "objects.json" if state else None,
                  snapshot_delay=args.snapshot_delay)
    cidrs = values.get("service-cluster-ip-range", ["10.96.0.0/12"])
    tolerations = {"node.kubernetes.io/not-ready": values.get("default-not-ready-toleration-seconds", 300),
                   "node.kubernetes.io/unreachable": values.get("default-unreachable-toleration-seconds", 300)}
    api = Api(store, schemas(), ca_pem=creds.ca_pem, server=f"{advertise}:{port}", service_cidr=cidrs[0],
              toleration_seconds=tolerations)
    # kube-apiserver's defaults: --authorization-mode=AlwaysAllow, NodeRestriction off
    api.node_authorization = "Node" in values.get("authorization-mode", [])
    api.node_restriction = "NodeRestriction" in values.get("enable-admission-plugins", [])
    if "kubelet-client-certificate" in values:
        kubelet = KubeletClient(values["kubelet-client-certificate"], values["kubelet-client-key"], ca=None,
                                address_types=tuple(values.get("kubelet-preferred-address-types", DEFAULT_ADDRESS_TYPES)))
    else:
        kubelet = KubeletClient(values["tls-cert-file"], values["tls-private-key-file"], ca=None)

    def serving() -> None:
        _say(f"serving https://{bind}:{port} with {values['tls-cert-file']}, client CA {values['client-ca-file']}, "
             f"objects in {state / 'objects.json' if state else 'memory'}")

    await _run(api, creds, kubelet, sock, cert=values["tls-cert-file"], key=values["tls-private-key-file"],
               client_ca=values["client-ca-file"], args=args, on_serving=serving)


def _say(message: str) -> None:
    stamp = datetime.now().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    print(f"{stamp} kube-apiserver stand-in: {message}", file=sys.stderr, flush=True)


def _bind(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    return sock


async def _run(api: Api, pki: Any, kubelet: KubeletClient, sock: socket.socket, *, cert: Path, key: Path,
               client_ca: Path, args: argparse.Namespace, on_serving: Callable[[], None]) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    api.bootstrap()
    app = Server(api, pki, WatchSettings(bookmark_interval=args.bookmark_interval,
                                         min_request_timeout=args.min_request_timeout), kubelet,
                 args.protobuf_schema_binary).app()
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2.0,
                           access_log=log if args.verbose else None)
    await runner.setup()
    await web.SockSite(runner, sock, ssl_context=ctx).start()
    on_serving()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sweeper = asyncio.ensure_future(_sweep(api))
    try:
        await stop.wait()
    finally:
        sweeper.cancel()
        api.store.close_watches()
        api.store.save()
        await kubelet.close()
        await runner.cleanup()


async def _sweep(api: Api) -> None:
    """The namespace controller: finish terminating namespaces once their content is gone."""
    while True:
        await asyncio.sleep(1)
        for ns in api.store.list("namespaces."):
            if ns["metadata"].get("deletionTimestamp"):
                api.sweep_namespace(ns["metadata"]["name"])


def _real_mode(argv: list[str]) -> bool:
    """kube-apiserver's own flags: no ``--state-dir`` (which a real kube-apiserver does not have)."""
    return not any(a == "--state-dir" or a.startswith("--state-dir=") for a in argv) and \
        not any(a in ("-h", "--help") for a in argv)


def main(argv: list[str]) -> int:
    if _real_mode(argv):
        try:
            values = realflags.parse(argv)
        except realflags.FlagError as e:
            return realflags.fail(str(e))
        args = parse(["--state-dir", "/nonexistent"])  # the stand-in's own settings at their defaults
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s kube-apiserver %(levelname)s %(message)s")
        _say("flags accepted: " + " ".join(argv))
        try:
            asyncio.run(serve_real(values, args))
        except realflags.FlagError as e:
            return realflags.fail(str(e))
        except OSError as e:
            return realflags.fail(f"failed to create listener: {e}")
        _say("stopped")
        return 0
    args = parse(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s kube-apiserver %(levelname)s %(message)s")
    profile = os.environ.get(PROFILE_ENV, "")
    if not profile:
        asyncio.run(serve(args))
        return 0
    import cProfile  # a benchmark's look inside: where the stand-in's CPU goes per request

    prof = cProfile.Profile()
    try:
        prof.runcall(asyncio.run, serve(args))
    finally:
        prof.dump_stats(profile)
    return 0

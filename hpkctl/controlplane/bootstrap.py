"""The bootstrap inside the control-plane job (``hpkctl controlplane run``): start the control plane in
order, publish where it is, watch it, and stop it in reverse order.

Order, each step waiting for the previous one's health (``[controlplane] start_timeout`` each):

1. PKI (:func:`~hpkctl.controlplane.pki.ensure_pki`) for this node's names and address, reused from
   earlier runs (same CA, same client certificates; the serving certificate follows the node).
2. etcd, data under ``<state_dir>/etcd`` (kept across runs), loopback only; healthy when ``/health``
   answers ``"health": "true"`` over TLS with the API server's etcd client certificate.
3. kube-apiserver; healthy when ``/readyz`` answers ``ok`` to the admin certificate.
4. kube-controller-manager (its own client certificate); healthy when ``/healthz`` answers ``ok``.
5. CoreDNS with a token of ``kube-system/coredns``; healthy when ``/ready`` answers (its ``kubernetes``
   plugin has read the API); then the ``kube-dns`` Service and Endpoints.
6. The services rule (:mod:`hpkctl.controlplane.objects`: admission policies the API server runs itself)
   and the scheduler (``hpkctl scheduler``'s loop on a thread of this process, given by the caller),
   started once its kubeconfig can list nodes and pods.
7. Publication, each file written whole and renamed into place: ``admin.kubeconfig``,
   ``kubelet.kubeconfig`` (``system:node:<node>``, never the admin identity), ``scheduler.kubeconfig``
   with this node's address, then ``endpoint`` (JSON: server, kubeconfigs, pid, Slurm job): its
   presence means "ready". ``status`` (JSON) says the phase all along, for ``hpkctl start``.

A step that fails stops what was started and raises :class:`ControlPlaneError` naming the component,
its log file (``<state_dir>/logs/NAME.log``, the previous run's as ``NAME.log.1``), the last lines of
that log and the fix. Once ready, ``stop`` (SIGTERM/SIGINT/SIGHUP in the CLI) stops everything in
reverse order (each process: SIGTERM, up to ``STOP_TIMEOUT`` s, then SIGKILL); a component that ends
on its own is logged, the rest stopped, and :class:`ControlPlaneError` raised (the job then fails).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hpkctl.controlplane import components as comp
from hpkctl.controlplane import objects
from hpkctl.controlplane.health import Probe
from hpkctl.controlplane.kubeconfig import token_kubeconfig, write_kubeconfig
from hpkctl.controlplane.pki import Pki, ensure_pki
from hpkctl.controlplane.statedir import layout_of, lock_state, private_dir, utc_now, write_status
from hpkctl.controlplane.steps import Stopped, call_api, check_ports, find_binary, indent, wait_healthy
from hpkctl.errors import ControlPlaneError, HpkError
from hpkctl.files import write_atomic
from hpkctl.kube import Kube
from hpkctl.kube.address import host_address, is_ip, node_hosts
from hpkctl.runtime.supervise import Child, Supervisor, describe_status
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.controlplane")

#: ``(kubeconfig, stop) -> exit status``: the scheduler's loop, run on a thread until ``stop`` is set
SchedulerFn = Callable[[str, threading.Event], int]

#: seconds a component gets between SIGTERM and SIGKILL
STOP_TIMEOUT = 10.0
#: seconds the scheduler thread gets to end after its stop event
SCHEDULER_JOIN = 10.0
#: lifetime of CoreDNS's service-account token (asked again at every start; a job never runs this long)
COREDNS_TOKEN_SECONDS = 365 * 24 * 3600
SCHEDULER = "hpk-scheduler"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class Bootstrap:
    """One run of the control plane for ``profile`` (see the module docstring)."""

    def __init__(self, profile: SiteProfile, *, stop: threading.Event, scheduler: SchedulerFn | None,
                 env: Mapping[str, str] | None = None, stop_timeout: float = STOP_TIMEOUT) -> None:
        self.profile = profile
        self.cp = profile.controlplane
        self.layout = layout_of(profile)
        self.stop = stop
        self.scheduler_fn = scheduler
        self.env = dict(os.environ if env is None else env)
        self.stop_timeout = stop_timeout
        self.timeout = self.cp.start_timeout
        self.ports = comp.Ports(apiserver=self.cp.apiserver_port, etcd_client=self.cp.etcd_client_port,
                                etcd_peer=self.cp.etcd_peer_port, controller_manager=self.cp.controller_manager_port,
                                coredns=self.cp.coredns_port, coredns_ready=self.cp.coredns_ready_port)
        self.address = self.cp.address or host_address()
        self.node_name = profile.pods.node_name
        self.domain = profile.pods.cluster_domain
        self.supervisor = Supervisor()
        self.pki: Pki | None = None
        self.binaries: dict[str, str] = {}
        self._scheduler_thread: threading.Thread | None = None
        self._scheduler_stop = threading.Event()
        self._scheduler_result: list[BaseException | int] = []
        self._lock_fd: int | None = None

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        """Start, publish, watch until ``stop``; 0 when stopped as asked. Raises ControlPlaneError."""
        self._prepare()
        outcome = ("stopped", "stopped as asked")
        try:
            try:
                self._start()
            except Stopped:
                log.info("stopped before the control plane was ready")
                return 0
            self._publish()
            self._status("ready", f"serving {self._server()}")
            log.info("control plane ready: %s (endpoint %s)", self._server(), self.layout.endpoint)
            failure = self._watch()
            if failure is not None:
                raise failure
            return 0
        except BaseException as e:
            outcome = ("failed", e.message if isinstance(e, HpkError) else f"{type(e).__name__}: {e}")
            raise
        finally:
            self.layout.endpoint.unlink(missing_ok=True)
            self._shutdown()
            self._status(*outcome)
            self._unlock()

    def _prepare(self) -> None:
        root = self.layout.root
        for d in (root, self.layout.logs, self.layout.run, self.layout.etcd_data):
            private_dir(d)
        self._lock_fd = lock_state(self.layout)
        self.layout.endpoint.unlink(missing_ok=True)  # a stale one from a run that was killed
        self._status("starting", "")

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _status(self, phase: str, message: str) -> None:
        write_status(self.layout, phase, message, slurm_job_id=self.env.get("SLURM_JOB_ID", ""))

    def _server(self) -> str:
        return f"https://{_url_host(self.address)}:{self.ports.apiserver}"

    def _local_server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    # ------------------------------------------------------------------ start, in order

    def _start(self) -> None:
        self._status("pki", "")
        self.binaries = {name: self._binary(name) for name in ("etcd", "kube-apiserver", "kube-controller-manager",
                                                                "coredns")}
        hosts = node_hosts(self.address)
        log.info("PKI in %s for %s", self.layout.pki, ", ".join(hosts))
        pki = self.pki = ensure_pki(self.layout.pki, hosts=hosts, node_name=self.node_name,
                                    service_cidr=self.cp.service_cidr, cluster_domain=self.domain)
        advertise = self.address if is_ip(self.address) else self._resolve(self.address)

        self._status("etcd", "")
        self._check_ports("etcd", (("etcd_client_port", self.ports.etcd_client, "127.0.0.1", False),
                                   ("etcd_peer_port", self.ports.etcd_peer, "127.0.0.1", False)))
        etcd = self._spawn("etcd", comp.etcd_argv(self.binaries["etcd"], pki=pki, data_dir=self.layout.etcd_data,
                                                  ports=self.ports))
        self._wait("etcd", etcd, Probe(f"{comp.etcd_url(self.ports.etcd_client)}/health", ca=pki.etcd_ca.cert,
                                       client=pki.apiserver_etcd_client, etcd=True),
                   fix=f"read its log; a port in use: choose other [controlplane] etcd_client_port/etcd_peer_port; a "
                       f"damaged data directory: move {self.layout.etcd_data} away (the cluster's objects are in it)")

        self._status("kube-apiserver", "")
        self._check_ports("kube-apiserver", (("apiserver_port", self.ports.apiserver, "0.0.0.0", False),))
        api = self._spawn("kube-apiserver", comp.apiserver_argv(
            self.binaries["kube-apiserver"], pki=pki, ports=self.ports, advertise_address=advertise,
            service_cidr=self.cp.service_cidr, cluster_domain=self.domain))
        self._wait("kube-apiserver", api, Probe(f"{self._local_server()}/readyz", ca=pki.ca.cert, client=pki.admin,
                                                body="ok"),
                   fix="read its log: a flag this kube-apiserver refuses, etcd unreachable, or [controlplane] "
                       "apiserver_port in use")
        run = self.layout.run
        admin = write_kubeconfig(run / "admin.kubeconfig", server=self._local_server(), ca=pki.ca.cert,
                                 cert=pki.admin.cert, key=pki.admin.key, user="admin")
        kube = Kube(str(admin))
        try:
            self._rest(kube, pki)
        finally:
            kube.close()

    def _rest(self, kube: Kube, pki: Pki) -> None:
        run = self.layout.run
        self._status("kube-controller-manager", "")
        self._check_ports("kube-controller-manager",
                          (("controller_manager_port", self.ports.controller_manager, "127.0.0.1", False),))
        kcm_config = write_kubeconfig(run / "controller-manager.kubeconfig", server=self._local_server(),
                                      ca=pki.ca.cert, cert=pki.controller_manager.cert, key=pki.controller_manager.key,
                                      user="kube-controller-manager")
        kcm = self._spawn("kube-controller-manager", comp.controller_manager_argv(
            self.binaries["kube-controller-manager"], pki=pki, ports=self.ports, kubeconfig=kcm_config))
        self._wait("kube-controller-manager", kcm,
                   Probe(f"https://127.0.0.1:{self.ports.controller_manager}/healthz", body="ok"),
                   fix="read its log; [controlplane] controller_manager_port in use, or it cannot reach the API server")

        self._status("coredns", "")
        self._check_ports("coredns", (("coredns_port", self.ports.coredns, "0.0.0.0", False),
                                      ("coredns_port", self.ports.coredns, "0.0.0.0", True),
                                      ("coredns_ready_port", self.ports.coredns_ready, "127.0.0.1", False)))
        for obj in objects.coredns_identity():
            self._api("CoreDNS's service account and role", functools.partial(objects.apply, kube, obj))
        token = self._api("a token for CoreDNS",
                          lambda: objects.coredns_token(kube, seconds=COREDNS_TOKEN_SECONDS))
        dns_config = token_kubeconfig(run / "coredns.kubeconfig", server=self._local_server(), ca=pki.ca.cert,
                                      token=token, user="coredns")
        corefile = run / "Corefile"
        write_atomic(corefile, comp.corefile(ports=self.ports, cluster_domain=self.domain, kubeconfig=dns_config,
                                             upstream=self.cp.dns_upstream).encode())
        dns = self._spawn("coredns", comp.coredns_argv(self.binaries["coredns"], corefile=corefile))
        self._wait("coredns", dns, Probe(f"http://127.0.0.1:{self.ports.coredns_ready}/ready"),
                   fix=f"read its log; [controlplane] coredns_port/coredns_ready_port in use, a Corefile ({corefile}) "
                       f"it refuses, or it cannot read the API with {dns_config}")
        self._api("the kube-dns Service and Endpoints",
                  lambda: objects.ensure_kube_dns(kube, cluster_dns_ip=self.cp.cluster_dns_ip,
                                                  address=self._dns_address(), port=self.ports.coredns))

        self._status("services rule", "")
        for obj in objects.services_policies():
            self._api(f"{obj['kind']} {obj['metadata']['name']}", functools.partial(objects.apply, kube, obj))
            self._api(f"{obj['kind']} {obj['metadata']['name']} (read back)",
                      functools.partial(kube.get, objects.object_path(obj)))
        log.info("services rule: admission policies %s, %s in place", objects.HEADLESS_POLICY,
                 objects.SERVICE_TYPES_POLICY)

        if self.scheduler_fn is not None:
            self._status(SCHEDULER, "")
            sched_config = write_kubeconfig(run / "scheduler.kubeconfig", server=self._local_server(),
                                            ca=pki.ca.cert, cert=pki.scheduler.cert, key=pki.scheduler.key,
                                            user="scheduler")
            self._start_scheduler(sched_config)

    def _start_scheduler(self, kubeconfig: Path) -> None:
        probe = Kube(str(kubeconfig))
        try:
            self._api(f"{SCHEDULER}: list nodes and pods with its kubeconfig",
                      lambda: (probe.get("/api/v1/nodes", query={"limit": 1}),
                               probe.get("/api/v1/pods", query={"limit": 1})))
        finally:
            probe.close()
        fn = self.scheduler_fn
        assert fn is not None

        def target() -> None:
            try:
                self._scheduler_result.append(fn(str(kubeconfig), self._scheduler_stop))
            except BaseException as e:  # noqa: BLE001 - reported by the watch loop
                log.exception("%s: ended with an error", SCHEDULER)
                self._scheduler_result.append(e)

        t = self._scheduler_thread = threading.Thread(target=target, name=SCHEDULER, daemon=True)
        t.start()
        log.info("%s: started (thread in pid %d, kubeconfig %s)", SCHEDULER, os.getpid(), kubeconfig)
        if self.stop.wait(0.5):
            raise Stopped()
        if not t.is_alive():
            raise ControlPlaneError(f"{SCHEDULER} ended at once ({self._scheduler_outcome()})",
                                    hint="read the log above (this job's stderr)")
        log.info("%s: running", SCHEDULER)

    # ------------------------------------------------------------------ helpers of the start

    def _binary(self, name: str) -> str:
        return find_binary(name, bin_dir=self.cp.bin_dir, env=self.env)

    def _spawn(self, name: str, argv: list[str]) -> Child:
        log.info("%s: starting: %s", name, " ".join(argv))
        try:
            return self.supervisor.start(name, argv, log_file=self.layout.log(name), env=self.env,
                                         cwd=self.layout.root)
        except OSError as e:
            raise ControlPlaneError(f"{name}: cannot start {argv[0]}: {e.strerror or e}",
                                    hint=f"check that {argv[0]} is an executable for this machine") from None

    def _check_ports(self, name: str, ports: tuple[tuple[str, int, str, bool], ...]) -> None:
        check_ports(name, ports, profile=self.profile.name)

    def _wait(self, name: str, child: Child, probe: Probe, *, fix: str) -> None:
        wait_healthy(name, child, probe, fix=fix, timeout=self.timeout, stop=self.stop)

    def _api(self, what: str, call: Callable[[], Any]) -> Any:
        return call_api(what, call, timeout=self.timeout, stop=self.stop,
                        apiserver_log=self.layout.log("kube-apiserver"))

    def _resolve(self, name: str) -> str:
        try:
            return socket.gethostbyname(name)
        except OSError as e:
            raise ControlPlaneError(f"[controlplane] address {name!r} does not resolve: {e}",
                                    hint="give an IP address, or a name this node resolves") from None

    def _dns_address(self) -> str:
        return self.address if is_ip(self.address) else self._resolve(self.address)

    # ------------------------------------------------------------------ publish, watch, stop

    def _publish(self) -> None:
        pki = self.pki
        assert pki is not None
        server = self._server()
        paths = {}
        for user, pair in (("admin", pki.admin), ("kubelet", pki.kubelet), ("scheduler", pki.scheduler)):
            paths[user] = str(write_kubeconfig(self.layout.kubeconfig(user), server=server, ca=pki.ca.cert,
                                               cert=pair.cert, key=pair.key, user=user))
        doc = {"server": server, "address": self.address, "port": self.ports.apiserver,
               "host": socket.gethostname(), "node_name": self.node_name, "ca": str(pki.ca.cert),
               "kubeconfigs": paths, "pid": os.getpid(), "slurm_job_id": self.env.get("SLURM_JOB_ID", ""),
               "started": utc_now()}
        write_atomic(self.layout.endpoint, (json.dumps(doc, indent=1) + "\n").encode())
        log.info("published %s and the kubeconfigs %s", self.layout.endpoint, ", ".join(paths.values()))

    def _watch(self) -> ControlPlaneError | None:
        """Until ``stop``; the error when a component ends on its own first."""
        while not self.stop.wait(0.5):
            child = self.supervisor.exited()
            if child is not None:
                status = child.poll()
                assert status is not None
                up = time.time() - child.started
                log.error("%s (pid %d) ended on its own (%s) after %.0f s: stopping the control plane",
                          child.name, child.pid, describe_status(status), up)
                return ControlPlaneError(
                    f"{child.name} ended ({describe_status(status)}) after running {up:.0f} s; the control plane "
                    f"was stopped. Its log {child.log} ends:\n{indent(child.tail())}",
                    hint="read the log; then start the control plane again (hpkctl start): it resumes from "
                         f"{self.layout.root}")
            t = self._scheduler_thread
            if t is not None and not t.is_alive():
                log.error("%s ended on its own (%s): stopping the control plane", SCHEDULER, self._scheduler_outcome())
                return ControlPlaneError(f"{SCHEDULER} ended on its own ({self._scheduler_outcome()}); the control "
                                         "plane was stopped", hint="read this job's log (stderr) above")
        log.info("stop requested")
        return None

    def _scheduler_outcome(self) -> str:
        if not self._scheduler_result:
            return "no result"
        r = self._scheduler_result[0]
        return f"exit status {r}" if isinstance(r, int) else f"{type(r).__name__}: {r}"

    def _shutdown(self) -> None:
        self._status("stopping", "")
        t = self._scheduler_thread
        if t is not None:
            if t.is_alive():
                log.info("%s: stopping", SCHEDULER)
            self._scheduler_stop.set()
            t.join(SCHEDULER_JOIN)
            log.info("%s: stopped%s", SCHEDULER, "" if not t.is_alive() else f" (still running after {SCHEDULER_JOIN} s)")
            self._scheduler_thread = None
        self.supervisor.stop_all(self.stop_timeout)


def run_controlplane(profile: SiteProfile, *, stop: threading.Event, scheduler: SchedulerFn | None,
                     env: Mapping[str, str] | None = None) -> int:
    """``hpkctl controlplane run``: the control plane of ``profile`` until ``stop`` (see the module docstring)."""
    return Bootstrap(profile, stop=stop, scheduler=scheduler, env=env).run()


__all__ = ["Bootstrap", "ControlPlaneError", "SchedulerFn", "STOP_TIMEOUT", "host_address", "run_controlplane"]

"""``hpkctl kubelet``: wires the node, the lease, the pod reflector, the reconcile workers, the
status loop and the HTTPS API together, and takes them down again on SIGTERM.

Threads, each with a reason (``kubelet-api.md`` §3.2): the lease on its own client (nothing may
delay it), node status, the pod reflector on its own client (a watch pins a connection for
minutes), the bounded reconcile workers, one status loop (one ``squeue`` per round for every
pod), the HTTPS server's asyncio loop, and a janitor for old pod directories.

Stopping the kubelet stops none of the pods: their jobs run on, and a restarted kubelet adopts them
(records in ``<state_dir>/kubelet/<node>/pods``, job ids found by pod uid in Slurm's job comments).
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpkctl.errors import HpkError
from hpkctl.files import ExclusiveLock, LockHeld
from hpkctl.jobs import NodeInfo, Slurm
from hpkctl.kube import Kube, KubeError, KubeUnavailable
from hpkctl.kube.events import EventBroadcaster, EventRecorder
from hpkctl.kube.reflect import Reflector
from hpkctl.kube.address import host_address
from hpkctl.kubelet.node import LeaseKeeper, NodeReporter, NodeState
from hpkctl.kubelet.objects import cluster_dns
from hpkctl.kubelet.objwatch import ObjectWatches
from hpkctl.kubelet.pods import PodManager
from hpkctl.provider.jobpod import JobPodProvider, node_state_dir
from hpkctl.kubelet.wake import Wake
from hpkctl.runtime import apptainer_version
from hpkctl.sites.schema import SiteProfile

if TYPE_CHECKING:
    from hpkctl.kubelet.server import KubeletServer

log = logging.getLogger("hpkctl.kubelet")

#: The ConfigMaps and Secrets its pods name come from per-object watches (:mod:`hpkctl.kubelet.objwatch`,
#: the real kubelet's default ``Watch`` strategy), so no GET is on a pod's submit path (a burst read
#: ``kube-root-ca.crt`` with a GET per pod). A watch starts at a worker's first read of its object, never when
#: the kubelet merely hears of a pod: a LIST for a pod deleted before the kubelet heard of it is one
#: the Node authorizer refuses (off in b9fb849 for that, when watches started at the registration).
OBJECT_WATCHES = True

CLEAN_EVERY = 60.0
WATCH_TIMEOUT = 300  # seconds the server is asked to keep each pod watch open
# seconds the HTTPS API may wait for the first list's pods to be submitted: well below client-go's TLS
# handshake timeout (10 s), which kube-apiserver's logs/exec/port-forward requests to the kubelet use
API_AFTER = 3.0


@dataclass(frozen=True)
class KubeletOptions:
    kubeconfig: str
    node_name: str
    port: int
    address: str = ""
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None
    pilot: bool = False  # pods as job steps in held allocations (hpkctl kubelet --pilot), whatever [pilot] says


class Kubelet:
    """The running daemon; :meth:`start` returns once everything runs, :meth:`shutdown` stops it."""

    def __init__(self, profile: SiteProfile, opts: KubeletOptions, *, stop: threading.Event) -> None:
        self.profile = profile
        self.opts = opts
        self.stop = stop
        cfg = profile.kubelet
        self.kube = Kube(opts.kubeconfig, pool_size=cfg.workers + 8)  # + the token writers and the status loop
        self.slurm = Slurm(profile.slurm)
        self.address = opts.address or host_address()
        state = node_state_dir(profile, opts.node_name)
        self.state_dir = state
        self.wake = Wake(stop)
        # what the node's capacity sums: the partition's nodes, or the held allocations and what could be requested
        capacity: Callable[[], Sequence[NodeInfo]] = lambda: self.slurm.nodes(partition=self.profile.slurm.partition)
        if opts.pilot or profile.pilot.enabled:
            from hpkctl.provider.pilotpod import PilotPodProvider  # only then: 25 ms of imports

            pilot = PilotPodProvider.for_pilot_node(
                slurm=self.slurm, profile=profile, node_state=state, node=opts.node_name)
            pilot.changed = self.wake.poke  # a pod's step said it changed: a status round now
            self.provider: JobPodProvider = pilot
            capacity = pilot.capacity_nodes
        else:
            self.provider = JobPodProvider.for_node(slurm=self.slurm, profile=profile, node_name=opts.node_name)
        self.lock = ExclusiveLock(state / "kubelet.lock")
        # events are posted on their own thread, through client-go's spam filter and aggregation, and
        # after the submissions of pods waiting for them (a backlog's Submitted events: up to 5 s later)
        self.recorder = EventBroadcaster(EventRecorder(self.kube, component="kubelet", host=opts.node_name),
                                         name="kubelet-events", hold=lambda: self.pods.queue.urgent_pending())
        self.watches = ObjectWatches(lambda: self.kube.clone(pool_size=1)) if OBJECT_WATCHES else None
        self.pods = PodManager(kube=self.kube, provider=self.provider, profile=profile, node_name=opts.node_name,
                               recorder=self.recorder, host_ip=self.address, watches=self.watches,
                               prefetch=self.kube.clone(pool_size=cfg.workers + 4))  # its threads, the workers' GETs
        self.server: KubeletServer | None = None
        self.node_state = NodeState(name=opts.node_name, address=self.address, port=opts.port, site=profile.name,
                                    runtime_version="apptainer://unknown")
        # `apptainer --version` (a process; the stand-in's is a Python start) on the node thread, not the start's path
        self.reporter = NodeReporter(self.kube.clone(pool_size=2), self.node_state,
                                     slurm_nodes=capacity,
                                     max_pods=cfg.max_pods, stop=stop,
                                     runtime=lambda: apptainer_version(profile.apptainer.binary))
        self.lease = LeaseKeeper(self.kube.clone(pool_size=2), node_name=opts.node_name,
                                 node_uid=lambda: self.reporter.uid, stop=stop)
        self.reflector = Reflector(self.kube.clone(pool_size=2), "/api/v1/pods",
                                   field_selector=f"spec.nodeName={opts.node_name}",
                                   on_event=self.pods.on_event, on_sync=self.pods.on_sync, stop=stop,
                                   timeout_seconds=WATCH_TIMEOUT, name="pods")
        self._loops: list[threading.Thread] = []
        self.failed: BaseException | None = None  # what stopped the kubelet from a thread (its API's start)

    def _client_ca(self) -> str:
        ca = self.opts.client_ca_file or self.kube.ca_file
        if not ca:
            raise ValueError("no client CA for the kubelet API: pass --client-ca-file (the cluster CA that signs "
                             "the API server's kubelet client certificate)")
        return ca

    def _listener(self) -> tuple[socket.socket, ssl.SSLContext]:
        """The API's listening socket and TLS settings (its certificate, the cluster CA), made before the
        first pod is taken: a kubelet that cannot serve (a port in use, unreadable TLS files) stops before
        it submits anything."""
        from hpkctl.kubelet.certs import listen_socket, self_signed, serving_tls

        cert, key = self.opts.cert_file, self.opts.key_file
        if not cert or not key:
            cert, key = self_signed(self.state_dir / "pki", node_name=self.opts.node_name, addresses=[self.address])
        tls = serving_tls(cert, key, self._client_ca())
        return listen_socket(self.address, self.opts.port), tls

    def _serve(self, sock: socket.socket, tls: ssl.SSLContext) -> None:
        from hpkctl.kubelet.server import KubeletServer  # aiohttp: imported once the first pods are submitted

        self.server = KubeletServer(self.pods.table, provider=self.provider, node_name=self.opts.node_name,
                                    host=self.address, port=self.opts.port, tls=tls, sock=sock,
                                    clients=self.profile.kubelet.api_clients, review=self.access_review,
                                    denied_ttl=self.profile.kubelet.authz_denied_ttl)
        self.server.start()

    def _serve_after_backlog(self, sock: socket.socket, tls: ssl.SSLContext) -> None:
        """Start the HTTPS API once no pod of the first list waits to be submitted (at most ``API_AFTER`` s):
        its import and app (~0.15 s of CPU) would hold the GIL while the workers render and submit a backlog.
        Its socket listens from the start, so a request meanwhile (logs, exec) waits for it, at most
        ``API_AFTER`` s: far less than the API server's TLS handshake timeout, so none is refused."""
        until = time.monotonic() + API_AFTER
        while (not self.reflector.synced.is_set() or self.pods.queue.urgent_pending()) and \
                not self.stop.wait(0.05) and time.monotonic() < until:
            pass
        if self.stop.is_set():
            sock.close()
            return
        try:
            self._serve(sock, tls)
        except BaseException as exc:  # noqa: BLE001 - the kubelet stops, as it did when this ran at its start
            log.exception("the kubelet API cannot start")
            self.failed = exc
            self.stop.set()

    def access_review(self, user: str, groups: Sequence[str], verb: str, subresource: str) -> bool:
        """Whether the API server lets ``user`` do ``verb`` on this node's ``subresource`` (the real
        kubelet's webhook authorisation: a SubjectAccessReview, which the Node authorizer lets a
        kubelet create)."""
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": list(groups), "resourceAttributes": {
                    "verb": verb, "resource": "nodes", "subresource": subresource, "name": self.opts.node_name}}}
        out = self.kube.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", body, timeout=(5, 10))
        return bool(((out or {}).get("status") or {}).get("allowed"))

    def check_identity(self) -> str:
        """Who the kubeconfig authenticates as (SelfSubjectReview); a node credential for another node
        is fatal, since the Node authorizer would refuse every pod, Secret and lease of this one.

        The check is advisory when the API server cannot answer it now (down, or too old): the
        kubelet's own loops retry and report what they are refused."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            out = self.kube.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", body, timeout=(5, 10))
        except (KubeError, KubeUnavailable) as exc:
            log.warning("cannot ask the API server who the kubeconfig authenticates as: %s", exc)
            return ""
        info = ((out or {}).get("status") or {}).get("userInfo") or {}
        user, groups = str(info.get("username") or ""), list(info.get("groups") or [])
        expected = f"system:node:{self.opts.node_name}"
        if user.startswith("system:node:") and "system:nodes" not in groups:
            raise HpkError(f"{self.opts.kubeconfig} authenticates as {user} but not in group system:nodes, so the "
                           "API server treats it as an ordinary user without rights. Fix: use a certificate with "
                           "O=system:nodes (the kubelet.kubeconfig `hpkctl start` writes has it)")
        if user.startswith("system:node:") and user != expected:
            raise HpkError(f"{self.opts.kubeconfig} authenticates as {user}, but this kubelet serves node "
                           f"{self.opts.node_name!r}: the API server's Node authorizer lets a node touch only its "
                           f"own Node, lease and pods. Fix: pass --node-name {user[len('system:node:'):]}, or the "
                           f"kubeconfig issued for {expected}")
        if user != expected:
            log.warning("%s authenticates as %r, not %s: the kubelet works, but with more rights than a node "
                        "needs; use the kubelet.kubeconfig that `hpkctl start` writes", self.opts.kubeconfig,
                        user, expected)
        return user

    def refresh_dns(self) -> str:
        """Give ClusterFirst pods the cluster's DNS when CoreDNS answers on port 53 (the kube-dns
        Endpoints say where), unless the site profile names a nameserver itself ([pods] dns_server).
        Checked at start and every janitor round: the control plane may move to another node."""
        if self.profile.pods.dns_server:
            return self.profile.pods.dns_server
        try:
            ip = cluster_dns(self.kube)
        except (KubeError, KubeUnavailable) as exc:
            log.debug("kube-dns Endpoints not read: %s", exc)
            return self.pods.profile.pods.dns_server
        if ip != self.pods.profile.pods.dns_server:
            pods = self.profile.pods.model_copy(update={"dns_server": ip})
            self.pods.profile = self.profile.model_copy(update={"pods": pods})
            self.provider.profile = self.pods.profile  # the pods it renders from now on get the cluster's DNS
            log.info("pods get %s", f"the cluster's DNS at {ip}" if ip else "the node's resolver (no cluster DNS on "
                     "port 53)")
        return ip

    def start(self) -> None:
        try:
            self.lock.acquire()  # one kubelet per node and state directory, or both submit every pod
        except LockHeld as e:
            raise HpkError(f"another kubelet (pid {e.holder or 'unknown'}) already serves node {self.opts.node_name} "
                           f"from {self.state_dir}", hint="stop that one first, or give this one its own --node-name "
                           "and [pods] state_dir") from None
        self.check_identity()
        self.refresh_dns()
        self.provider.start()  # before any pod is submitted: its job writes markers from the start
        self.pods.load_records()
        # the first list (a restarted kubelet's backlog of bound pods) goes out first: the API server reads and
        # sends it while the kubelet loads its TLS files; its pods are queued, and submitted once those are made
        self.reflector.start()
        try:
            listener = self._listener()  # a kubelet that cannot serve its API stops before it submits anything
        except BaseException:
            self.stop.set()
            raise
        self.node_state.port = listener[0].getsockname()[1]  # listening now: connections wait for the server
        self.pods.queue.start()
        self.reporter.thread.start()
        self.lease.thread.start()
        for target, name in ((self._status_loop, "status"), (self._janitor, "janitor"),
                             (lambda: self._serve_after_backlog(*listener), "kubelet-api")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._loops.append(t)
        log.info("kubelet for node %s (site %s) running; API on port %d, state in %s", self.opts.node_name,
                 self.profile.name, self.node_state.port, self.state_dir)

    def _status_loop(self) -> None:
        every = self.profile.kubelet.status_poll
        while not self.stop.is_set():
            began = self.wake.begin()
            try:
                self.pods.poll()
            except Exception:  # noqa: BLE001 - Slurm down or a surprise: log, keep polling
                log.exception("status round failed")
                self.stop.wait(self.profile.kubelet.slurm_poll)
            self.wake.pause(every, began)  # a pod's step that says it changed ends it early (pilot mode)

    def _janitor(self) -> None:
        while not self.stop.wait(CLEAN_EVERY):
            for what, step in (("cleaning old pod directories", self.pods.clean),
                               ("refreshing tokens", self.pods.refresh_tokens),
                               ("looking for the cluster's DNS", self.refresh_dns)):
                try:
                    step()
                except Exception:  # noqa: BLE001 - one failing chore must not stop the others
                    log.exception("%s failed", what)

    def shutdown(self) -> None:
        self.stop.set()
        self.wake.poke()
        self.reflector.join(10)
        self.pods.queue.stop()
        if self.pods.prefetch is not None:
            self.pods.prefetch.close()
        self.pods.token_writer.close()
        if self.watches is not None:
            self.watches.close()
        self.provider.shutdown()
        for t in (*self._loops, self.reporter.thread, self.lease.thread):
            t.join(5)  # the API's thread too, before its server is stopped
        if self.server is not None:
            self.server.stop()
        self.recorder.close()
        self.lock.release()
        log.info("kubelet stopped; the pods' Slurm jobs keep running")


def run_kubelet(profile: SiteProfile, opts: KubeletOptions, *, stop: threading.Event) -> int:
    try:
        kubelet = Kubelet(profile, opts, stop=stop)
        kubelet.start()
    except OSError as e:  # its state directory cannot be written: a full disk, a quota, permissions
        where = e.filename or os.path.expanduser(profile.pods.state_dir)
        raise HpkError(f"the kubelet cannot write its state: {where}: {e.strerror or e}",
                       hint="free space (or quota) on that file system, or give the kubelet another [pods] "
                            "state_dir in the site profile") from None
    try:
        stop.wait()
    finally:
        kubelet.shutdown()
    if kubelet.failed is not None:
        raise kubelet.failed
    return 0

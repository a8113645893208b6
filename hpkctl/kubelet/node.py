"""The virtual node: its object, its status reports, and its Lease.

The Node is registered once and never deleted or re-created: a missing Node for 40 s makes the
pod garbage collector force-delete every pod bound to it, and the kubelet would then cancel every
job (``kubelet-api.md`` §1.9). Status goes as a strategic-merge patch of ``nodes/{n}/status``,
computed every ``STATUS_TICK`` seconds but posted only on change or every ``REPORT_EVERY`` seconds
(the real kubelet's ``nodeStatusReportFrequency``; a conformance test fails when heartbeats move
faster than the lease without a change).

The Lease is renewed on its own thread with its own client, so no slow Slurm command, image pull
or API hiccup elsewhere can delay it past the 40 s after which the node turns NotReady.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from hpkctl import __version__
from hpkctl.backoff import Backoff
from hpkctl.jobs import NodeInfo
from hpkctl.kube import Kube, KubeError, KubeUnavailable, lease_path, node_path
from hpkctl.kube.events import rfc3339

log = logging.getLogger("hpkctl.kubelet.node")

# nodeInfo.kubeletVersion base until the API server's own version is known: the kubelet then reports the
# server's major.minor (a kubelet newer than its API server is outside Kubernetes' version-skew policy,
# and hpkctl speaks whichever version it is registered with)
KUBE_VERSION = "v1.36.0"
STATUS_TICK = 10.0
REPORT_EVERY = 300.0
LEASE_SECONDS = 40
RENEW_EVERY = LEASE_SECONDS * 0.25  # 10 s, as the real kubelet
CAPACITY_EVERY = 60.0


def micro_time(dt: datetime | None = None) -> str:
    """metav1.MicroTime: exactly six fractional digits (the client library drops them at .000000,
    and the API server then refuses the lease with 400)."""
    return (dt or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def capacity(nodes: Sequence[NodeInfo], *, max_pods: int) -> dict[str, str]:
    """The virtual node's capacity: the sum over the Slurm nodes the profile's partition has
    (drained and down nodes excluded: Slurm will not place jobs there)."""
    usable = [n for n in nodes if not any(n.state.startswith(s) for s in ("down", "drain", "fail", "inval"))]
    out = {"cpu": str(sum(n.cpus for n in usable)),
           "memory": f"{sum(n.memory_mb for n in usable) * 1024}Ki",
           "pods": str(max_pods),
           "ephemeral-storage": "0"}
    gpus = sum(n.gpus for n in usable)
    if gpus:
        out["nvidia.com/gpu"] = str(gpus)
    return out


def _condition(kind: str, ok: bool, reason: str, message: str, *, beat: str, since: str) -> dict[str, str]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message,
            "lastHeartbeatTime": beat, "lastTransitionTime": since}


class NodeState:
    """What the node says about itself; :meth:`status` builds ``status`` for a given heartbeat."""

    def __init__(self, *, name: str, address: str, port: int, site: str, runtime_version: str,
                 labels: dict[str, str] | None = None) -> None:
        self.name = name
        self.address = address
        self.port = port
        self.site = site
        self.runtime_version = runtime_version
        self.labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(),
                                                                                         platform.machine()),
                       "node.kubernetes.io/instance-type": "slurm", "type": "virtual-kubelet",
                       "hpk.io/site": site, **(labels or {})}
        self.capacity: dict[str, str] = {"cpu": "0", "memory": "0", "pods": "0"}
        self.kube_version = KUBE_VERSION
        self.ready = True
        self.ready_message = "hpk kubelet is posting ready status"
        self.transitions: dict[str, str] = {}

    def _since(self, kind: str, ok: bool) -> str:
        key = f"{kind}={ok}"
        if key not in self.transitions:
            self.transitions = {k: v for k, v in self.transitions.items() if not k.startswith(f"{kind}=")}
            self.transitions[key] = rfc3339()
        return self.transitions[key]

    def status(self, *, beat: str) -> dict[str, Any]:
        conds = [_condition("Ready", self.ready, "KubeletReady" if self.ready else "KubeletNotReady",
                            self.ready_message, beat=beat, since=self._since("Ready", self.ready))]
        for kind, reason, msg in (("MemoryPressure", "KubeletHasSufficientMemory", "Slurm manages memory"),
                                  ("DiskPressure", "KubeletHasNoDiskPressure", "Slurm manages disks"),
                                  ("PIDPressure", "KubeletHasSufficientPID", "Slurm manages processes")):
            conds.append(_condition(kind, False, reason, msg, beat=beat, since=self._since(kind, False)))
        return {
            "capacity": dict(self.capacity), "allocatable": dict(self.capacity), "conditions": conds,
            # only the address the API server can dial: it tries Hostname first, and the node's name
            # (or this host's short name) rarely resolves on the control plane's node
            "addresses": [{"type": "InternalIP", "address": self.address}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": platform.release(),
                         "osImage": f"Slurm via hpkctl {__version__}", "containerRuntimeVersion": self.runtime_version,
                         "kubeletVersion": f"{self.kube_version}-hpkctl-{__version__}", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": self.labels["kubernetes.io/arch"]},
            "declaredFeatures": ["ExtendWebSocketsToKubelet"],
        }

    def obj(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": dict(self.labels)},
                "spec": {}, "status": self.status(beat=rfc3339())}


def _without_beats(status: dict[str, Any]) -> dict[str, Any]:
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in status["conditions"]]
    return out


class NodeReporter:
    """Registers the Node (adopting an existing one), then reports its status on change or every
    five minutes, and refreshes capacity from Slurm every minute."""

    def __init__(self, kube: Kube, state: NodeState, *, slurm_nodes: Callable[[], Sequence[NodeInfo]],
                 max_pods: int, stop: threading.Event, runtime: Callable[[], str] | None = None) -> None:
        self.kube = kube
        self.state = state
        self.runtime = runtime  # the container runtime's version, asked on this thread before the registration
        self.slurm_nodes = slurm_nodes
        self.max_pods = max_pods
        self.stop = stop
        self.uid = ""
        self.registered = threading.Event()
        self._last_posted: dict[str, Any] | None = None
        self._last_post = 0.0
        self._last_capacity = 0.0
        self.thread = threading.Thread(target=self._run, name="node-status", daemon=True)

    def refresh_capacity(self) -> None:
        try:
            self.state.capacity = capacity(self.slurm_nodes(), max_pods=self.max_pods)
        except Exception as exc:  # noqa: BLE001 - Slurm down: keep the last capacity, say so
            log.warning("cannot read the Slurm nodes' capacity (keeping the last one): %s", exc)
        self._last_capacity = time.monotonic()

    def register(self) -> None:
        """Create the Node, or adopt it if it exists (a restart): never delete and re-create it."""
        try:
            v = self.kube.get("/version", timeout=(5, 10)) or {}
            if str(v.get("major", "")).isdigit() and str(v.get("minor", "")).rstrip("+").isdigit():
                self.state.kube_version = f"v{v['major']}.{str(v['minor']).rstrip('+')}.0"
        except KubeError as exc:
            log.info("cannot read the API server's version (%s); reporting %s", exc, self.state.kube_version)
        try:
            node = self.kube.post(node_path(), self.state.obj())
            log.info("registered node %s", self.state.name)
        except KubeError as exc:
            if exc.code != 409:
                raise
            node = self.kube.get(node_path(self.state.name))
            log.info("node %s exists: adopting it", self.state.name)
        self.uid = node["metadata"]["uid"]
        self.post(force=True)
        self.registered.set()

    def post(self, *, force: bool = False) -> bool:
        status = self.state.status(beat=rfc3339())
        same = self._last_posted is not None and _without_beats(status) == _without_beats(self._last_posted)
        if same and not force and time.monotonic() - self._last_post < REPORT_EVERY:
            return False
        body = {"metadata": {"labels": self.state.labels}, "status": status}
        self.kube.patch(node_path(self.state.name, "status"), body, timeout=(5, 15))
        self._last_posted, self._last_post = status, time.monotonic()
        return True

    def _run(self) -> None:
        backoff = Backoff(initial=2.0, cap=30.0)
        while not self.stop.is_set():
            try:
                if not self.registered.is_set():
                    if self.runtime is not None:
                        self.state.runtime_version, self.runtime = self.runtime(), None
                    self.refresh_capacity()
                    self.register()
                else:
                    if time.monotonic() - self._last_capacity >= CAPACITY_EVERY:
                        self.refresh_capacity()
                    self.post()
                backoff.reset()
                self.stop.wait(STATUS_TICK)
            except (KubeError, KubeUnavailable) as exc:
                delay = backoff.next()
                log.warning("node status: %s (retrying in %.0f s)", exc, delay)
                self.stop.wait(delay)
            except Exception:  # noqa: BLE001 - never let the node thread die
                log.exception("node status failed (retrying)")
                self.stop.wait(backoff.next())


class LeaseKeeper:
    """Renews ``kube-node-lease/<node>`` every 10 s by PUT of the object the server last returned
    (a Lease refuses updates without resourceVersion); on 409 re-reads it and retries; on 404
    creates it with the Node as owner. Waits until the Node's uid is known."""

    def __init__(self, kube: Kube, *, node_name: str, node_uid: Callable[[], str], stop: threading.Event) -> None:
        self.kube = kube
        self.node_name = node_name
        self.node_uid = node_uid
        self.stop = stop
        self.lease: dict[str, Any] | None = None
        self.renewals = 0
        self.thread = threading.Thread(target=self._run, name="lease", daemon=True)

    def _create(self) -> dict[str, Any]:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.node_name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.node_name,
                                                  "uid": self.node_uid()}]},
                "spec": {"holderIdentity": self.node_name, "leaseDurationSeconds": LEASE_SECONDS,
                         "renewTime": micro_time()}}
        try:
            return dict(self.kube.post(lease_path(), body, timeout=(3, 8)))
        except KubeError as exc:
            if exc.code != 409:
                raise
            return dict(self.kube.get(lease_path(self.node_name), timeout=(3, 8)))

    def renew(self) -> None:
        backoff = Backoff(initial=0.2, cap=7.0)
        for _ in range(5):
            if self.lease is None:
                try:
                    self.lease = dict(self.kube.get(lease_path(self.node_name), timeout=(3, 8)))
                except KubeError as exc:
                    if exc.code != 404:
                        raise
                    self.lease = self._create()
                    self.renewals += 1
                    return
            lease = dict(self.lease)
            lease["spec"] = {**(lease.get("spec") or {}), "holderIdentity": self.node_name,
                             "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro_time()}
            try:
                self.lease = dict(self.kube.put(lease_path(self.node_name), lease, timeout=(3, 8)))
                self.renewals += 1
                return
            except KubeError as exc:
                if exc.code not in (404, 409):
                    raise
                self.lease = None  # someone else wrote it, or it vanished: read (or create) again
                self.stop.wait(backoff.next())
        log.warning("lease: five conflicts in a row; trying again at the next renewal")

    def _run(self) -> None:
        while not self.stop.is_set() and not self.node_uid():
            self.stop.wait(0.2)
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.renew()
            except (KubeError, KubeUnavailable) as exc:
                log.warning("lease renewal failed: %s", exc)
                self.lease = None if isinstance(exc, KubeError) else self.lease
            except Exception:  # noqa: BLE001 - the lease thread must outlive any surprise
                log.exception("lease renewal failed")
            self.stop.wait(max(0.5, RENEW_EVERY - (time.monotonic() - started)))

"""The pods of a kubelet end-to-end module, created all at once so they run concurrently on Slurm.

A test names what it needs with ``@launch(builder)``: ``builder(env)`` returns the API objects
(Namespaces, ConfigMaps, Secrets, Jobs, Pods; an entry may also be ``fn(created) -> object`` when it
needs another object's uid). A module's fixture calls :func:`launch_selected` once: it runs the
builders of the tests selected in that module and creates their objects in one go — namespaces,
then ConfigMaps/Secrets/Jobs, then the pods in test order (``early`` ones first) — before the first
test runs. Each test then checks only its own pods, so tests stay independent (``-k`` launches only
what is selected).

:class:`PodHistory` watches every pod from before the first one is created and keeps each version the
API server stored, so a test can prove a state that has already passed (``ready`` false before
true, ``started`` false while running) however late it comes to look.

At module end every pod still running or pending is deleted through the API (the kubelet runs the stop sequence and
cancels the job), then any job still carrying one of the module's pod uids is ``scancel``-ed: a
stopped kubelet leaves its pods' jobs running by design, so a test module must not.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from hpkctl.pod.flags import pod_of_job
from tests.support.cluster import Cluster
from tests.support.waiting import wait_for

Obj = dict[str, Any]
Entry = Obj | Callable[[dict[tuple[str, str, str], Obj]], Obj]
BUSYBOX = "busybox:1.36"
DEBIAN = "debian:12"
JOBCOMP = "/var/log/slurm/jobcomp.log"


# ---------------------------------------------------------------------------- manifests


def pod(name: str, containers: list[Obj], *, namespace: str | None = None, labels: Obj | None = None,
        annotations: Obj | None = None, **spec: Any) -> Obj:
    spec.setdefault("restartPolicy", "Never")
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers, **spec}}


def sh(name: str, script: str, image: str = BUSYBOX, **kw: Any) -> Obj:
    """A container running ``sh -c script``."""
    return {"name": name, "image": image, "command": ["sh", "-c", script], **kw}


def configmap(name: str, data: dict[str, str], **extra: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data, **extra}


def secret(name: str, data: dict[str, bytes]) -> Obj:
    import base64
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def outdir(cluster: Cluster, name: str) -> Path:
    """A directory the pods (user hpk) may write to, as a hostPath: the test reads what they wrote
    there even after the pod object is gone. Idempotent (the builder and the test both call it)."""
    d = cluster.root / "out" / name
    d.parent.mkdir(exist_ok=True)
    d.parent.chmod(0o755)
    d.mkdir(exist_ok=True)
    d.chmod(0o777)
    return d


def host_volume(path: Path, name: str = "out") -> Obj:
    return {"name": name, "hostPath": {"path": str(path), "type": "Directory"}}


# ---------------------------------------------------------------------------- launching


@dataclass
class Env:
    """What a builder gets: the cluster and the test's parameters (``{}`` when not parametrized)."""

    cluster: Cluster
    params: dict[str, Any] = field(default_factory=dict)


def launch(builder: Callable[[Env], list[Entry]], *, early: bool = False) -> Callable[[Callable[..., Any]],
                                                                                      Callable[..., Any]]:
    """Mark a test with the builder of its objects; ``early``: its pods are created before those of
    the other tests (a slow pod whose test comes last, so that the wait overlaps the others)."""
    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn._hpk_launch = builder  # type: ignore[attr-defined]
        fn._hpk_early = early  # type: ignore[attr-defined]
        return fn
    return mark


_ORDER = {"Namespace": 0, "ConfigMap": 1, "Secret": 1, "Job": 2, "Pod": 3}


def _collection(obj: Obj) -> str:
    ns = (obj.get("metadata") or {}).get("namespace") or "default"
    kind = obj["kind"]
    if kind == "Namespace":
        return "/api/v1/namespaces"
    if kind == "Job":
        return f"/apis/batch/v1/namespaces/{ns}/jobs"
    return f"/api/v1/namespaces/{ns}/{kind.lower()}s"


def _key(obj: Obj) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return obj["kind"], meta.get("namespace") or "default", meta["name"]


@dataclass
class Launched:
    cluster: Cluster
    history: PodHistory
    created: dict[tuple[str, str, str], Obj] = field(default_factory=dict)

    def uid(self, name: str, namespace: str = "default") -> str:
        return str(self.created[("Pod", namespace, name)]["metadata"]["uid"])


def launch_selected(request: pytest.FixtureRequest, cluster: Cluster,
                    which: Callable[[pytest.Item], bool] = lambda item: True) -> Iterator[Launched]:
    """Create the objects of every selected test of the requesting module (that ``which`` accepts) on
    ``cluster``; yields a :class:`Launched`; cleans up after the module (see the module docstring)."""
    history = PodHistory(cluster)
    history.start()
    out = Launched(cluster, history)
    try:
        entries: list[tuple[int, int, int, Entry]] = []
        for n, item in enumerate(request.session.items):
            if getattr(item, "module", None) is not request.module or not which(item):
                continue
            fn = getattr(item, "function", None)
            builder = getattr(fn, "_hpk_launch", None)
            if builder is None:
                continue
            params = dict(item.callspec.params) if hasattr(item, "callspec") else {}
            for obj in builder(Env(cluster, params)):
                kind = _ORDER[obj["kind"]] if isinstance(obj, dict) else _ORDER["Pod"]
                entries.append((kind, 0 if getattr(fn, "_hpk_early", False) else 1, n, obj))
        entries.sort(key=lambda e: e[:3])  # kinds in order; within a kind early ones, then test order
        for *_, entry in entries:
            obj = entry(out.created) if callable(entry) else entry
            key = _key(obj)
            if key in out.created:  # shared by several parametrized cases
                continue
            code, body = cluster.api.post(_collection(obj), obj)
            assert code == 201, f"creating {key}: {code} {body}"
            out.created[key] = body
        yield out
    finally:
        try:
            _clean_up(cluster, [o for k, o in out.created.items() if k[0] == "Pod"])
        finally:
            history.stop()


def _clean_up(cluster: Cluster, pods: list[Obj]) -> None:
    uids = {str(p["metadata"]["uid"]) for p in pods}
    live = [p for p in pods if (cur := cluster.pod(p["metadata"]["name"], p["metadata"].get("namespace") or "default"))
            and cur["metadata"]["uid"] == p["metadata"]["uid"]
            and (cur.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    by_ns: dict[str, list[str]] = {}
    for p in live:
        by_ns.setdefault(p["metadata"].get("namespace") or "default", []).append(p["metadata"]["name"])
    for ns, names in by_ns.items():
        cluster.kubectl("delete", "pod", "-n", ns, "--grace-period=2", "--wait", "--timeout=90s", *names,
                        timeout=120, check=False)
    # a pod's own job, or its element of a batch's array (whose comment lists the uids: pod_of_job)
    q = subprocess.run(["squeue", "--noheader", "--all", "--array", "--format=%i|%k"], capture_output=True,
                       text=True, check=False).stdout
    left = [found[1] for ln in q.splitlines() if (found := pod_of_job(*ln.split("|", 1))) and found[0] in uids]
    if left:
        subprocess.run(["scancel", *left], check=False)


# ---------------------------------------------------------------------------- history


class PodHistory:
    """Every version of every pod the API server stored since :meth:`start` (a watch of all
    namespaces on its own connection; resumes from the last resourceVersion, re-lists after 410)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str], list[Obj]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-history", daemon=True)
        self._ready = threading.Event()
        self._session = requests.Session()
        self._session.trust_env = False
        self._session.verify = cluster.api.session.verify
        self._session.cert = cluster.api.session.cert

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(30), "the pod history watch did not start"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._session.close()

    def _add(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace") or "default", meta.get("name") or "")
        with self._lock:
            seen = self._versions.setdefault(key, [])
            if not seen or seen[-1].get("metadata", {}).get("resourceVersion") != meta.get("resourceVersion"):
                seen.append(obj)

    def _list(self) -> str:
        r = self._session.get(f"{self.cluster.api.url}/api/v1/pods", timeout=30)
        r.raise_for_status()
        body = r.json()
        for p in body.get("items") or []:
            self._add(p)
        return str(body["metadata"]["resourceVersion"])

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._list()
                    self._ready.set()
                params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                          "timeoutSeconds": "2"}
                with self._session.get(f"{self.cluster.api.url}/api/v1/pods", params=params, stream=True,
                                       timeout=(5, 15)) as r:
                    for line in r.iter_lines():
                        if not line:
                            continue
                        ev = json.loads(line)
                        if ev["type"] == "ERROR":
                            rv = ""  # 410 Expired: list again
                            break
                        rv = str(ev["object"]["metadata"]["resourceVersion"])
                        if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            self._add(ev["object"])
                        if self._stop.is_set():
                            break
            except (requests.RequestException, OSError, ValueError, KeyError):
                if self._stop.wait(0.5):
                    return

    def versions(self, name: str, namespace: str = "default", uid: str | None = None) -> list[Obj]:
        with self._lock:
            out = list(self._versions.get((namespace, name), []))
        return [p for p in out if uid is None or p["metadata"].get("uid") == uid]

    def statuses(self, name: str, namespace: str = "default", uid: str | None = None) -> list[Obj]:
        return [p.get("status") or {} for p in self.versions(name, namespace, uid)]


# ---------------------------------------------------------------------------- reading


def container(status: Obj, name: str, *, init: bool = False) -> Obj:
    """The container status of ``name`` (``{}`` when the status has none yet)."""
    key = "initContainerStatuses" if init else "containerStatuses"
    return next((c for c in status.get(key) or [] if c.get("name") == name), {})


def conditions(status: Obj) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


def terminated(status: Obj, name: str, *, init: bool = False) -> Obj:
    return dict((container(status, name, init=init).get("state") or {}).get("terminated") or {})


def wait_status(cluster: Cluster, name: str, what: str, cond: Callable[[Obj], bool], *, namespace: str = "default",
                timeout: float = 120) -> Obj:
    """Poll the pod until ``cond(status)``; the status."""
    def probe() -> Obj | None:
        p = cluster.pod(name, namespace)
        st = (p or {}).get("status") or {}
        return st if p and cond(st) else None
    try:
        return wait_for(f"pod {namespace}/{name}: {what}", probe, timeout=timeout)
    except AssertionError:
        raise AssertionError(f"pod {namespace}/{name}: not {what} within {timeout:g} s: {cluster.pod(name, namespace)}"
                             f"\n--- kubelet log:\n{cluster.log('kubelet')[-3000:]}") from None


def finished(cluster: Cluster, name: str, *, namespace: str = "default", timeout: float = 150) -> Obj:
    """The pod object once Succeeded or Failed."""
    return cluster.wait_phase(name, "Succeeded", "Failed", namespace=namespace, timeout=timeout)


def logs(cluster: Cluster, name: str, *args: str, namespace: str = "default") -> str:
    """``kubectl logs`` (through the API server's proxy to the kubelet); fails on a non-zero exit."""
    return cluster.kubectl("logs", "-n", namespace, name, *args, timeout=60).stdout


def events(cluster: Cluster, name: str, uid: str, namespace: str = "default") -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events about this pod (this uid: not an earlier pod of the name)."""
    return [(e.get("type", ""), e["reason"], e["message"]) for e in cluster.events(name, namespace)
            if e["involvedObject"].get("uid") == uid]


def jobcomp_states(job_id: str, timeout: float = 30) -> list[str]:
    """Every JobState the jobcomp log has for the job, once it has one (empty at the deadline); an
    element ``A_i`` of an array (a batch of pods) by its ``ArrayJobId=A ArrayTaskId=i``."""
    deadline = time.monotonic() + timeout
    array, _, index = job_id.partition("_")
    needles = {f"ArrayJobId={array}", f"ArrayTaskId={index}"} if index else {f"JobId={job_id}"}
    while True:
        with open(JOBCOMP) as fh:
            states = [ln.split("JobState=")[1].split()[0] for ln in fh if needles <= set(ln.split())]
        if states or time.monotonic() > deadline:
            return states
        time.sleep(0.2)


def jobs_of_uid(uid: str) -> list[str]:
    """Ids of the Slurm jobs (any state squeue still knows) whose comment names the pod uid (its own
    job's, or its place in a batch's uid list: ``pod_of_job``)."""
    q = subprocess.run(["squeue", "--noheader", "--all", "--states=all", "--array", "--format=%i|%k"],
                       capture_output=True, text=True, check=True).stdout
    return [found[1] for ln in q.splitlines() if (found := pod_of_job(*ln.split("|", 1))) and found[0] == uid]


def node_capacity() -> tuple[int, int]:
    """(CPUs, memory MiB) of the biggest node of the local Slurm (sinfo)."""
    out = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%c %m"], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    rows = [tuple(int(x) for x in ln.split()) for ln in out if ln.strip()]
    return max(r[0] for r in rows), max(r[1] for r in rows)

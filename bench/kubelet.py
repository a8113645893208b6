#!/usr/bin/env python3
"""The kubelet's benchmark: ``hpkctl kubelet`` (with ``hpkctl scheduler`` and the Kubernetes API
stand-in) against bare ``sbatch`` on the same Slurm, measured in one run.

Run as the normal user with the Apptainer stand-in first on PATH: ``sudo bench/run kubelet [args]``
(see ``bench/README.md`` for the exact definitions and how to read the output). Five measurements:

1. **start latency**: pod create (``POST``) to the container running, against bare ``sbatch`` of an
   equivalent script to the same moment; one job at a time, ABBA-interleaved, random 0-1 s pause
   before each sample, warm-up discarded. Spans end at mtimes the job itself writes.
2. **burst**: B pods (command ``true``) from the first ``POST`` to all ``Succeeded`` in the API,
   against B bare ``sbatch`` of the same work to all finished.
3. **Slurm commands per status poll** with K tracked pods, counted over a window by logging shims.
4. **memory**: the kubelet process's VmRSS and VmHWM (``/proc/PID/status``), up to 1,000 tracked
   pods (their jobs wait for a ``--begin`` an hour ahead, so Slurm never runs them).
5. **exit to API**: the container writes its own exit file just before exiting; the span to the
   moment a watch on the pod (raw HTTPS, admin client certificate, in this process) sees
   ``Succeeded``.

As in ``pod_start.py``: Slurm commands are counted by logging shims first on the PATH the product
(kubelet, scheduler, their jobs) and the bare ``sbatch`` see; the benchmark's own Slurm calls
(waiting for jobs to end, cancelling leftovers) use the real binaries by absolute path.
Speed claims come from here, never from timed assertions in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import json
import os
import random
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pod_start import TERMINAL, environment, hpkctl_program, mtime, p90, random_phase

REPO = Path(__file__).resolve().parents[1]
# sinfo too: the kubelet asks it for the node's capacity
SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sacct", "srun", "sinfo")
NS = "default"
JOB_ID_ANNOTATION = "hpk.io/slurm-job-id"
FLAGS_ANNOTATION = "slurm-job.hpk.io/flags"
IMAGE = "busybox:1.36"
START_GOAL = 0.2  # s over bare sbatch, median and p90
EXIT_GOAL = 1.0  # s, median and p90
RSS_GOAL_MB = 150.0  # 10^6 bytes


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- Slurm, counted and not


class Calls:
    """Logging shims for Slurm's commands (each logs its name and, for ``--jobs=``, how many ids it
    asked about: no fork, one short line), and the real binaries for the benchmark's own use."""

    def __init__(self, root: Path) -> None:
        self.real = {name: shutil.which(name) for name in SLURM_COMMANDS}
        if not self.real["sbatch"] or not self.real["squeue"]:
            raise SystemExit("bench: sbatch/squeue not on PATH")
        self.dir = root / "shims"
        self.dir.mkdir()
        self.log = root / "calls.log"
        for name, real in self.real.items():
            if real:
                shim = self.dir / name
                shim.write_text(
                    "#!/bin/sh\nn=0\n"
                    'for a; do case $a in --jobs=*) o=$IFS; IFS=,; set -f; for j in ${a#--jobs=}; do n=$((n+1)); '
                    'done; IFS=$o;; esac; done\n'
                    f'echo "{name} $n" >> "{self.log}"\nexec "{real}" "$@"\n')
                shim.chmod(0o755)

    def take(self) -> list[tuple[str, int]]:
        """The commands logged since the last ``take`` (name, ids asked about), and forget them."""
        try:
            text = self.log.read_text()
        except FileNotFoundError:
            return []
        self.log.unlink()
        out = []
        for line in text.splitlines():
            name, _, n = line.partition(" ")
            out.append((name, int(n) if n.isdigit() else 0))
        return out

    def states(self, job_ids: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for i in range(0, len(job_ids), 400):
            # --array: a pending element of a batch is "A_i" on a line of its own, not in "A_[0-7]"
            r = subprocess.run([self.real["squeue"] or "squeue", "--noheader", "--all", "--states=all", "--array",
                                "--jobs=" + ",".join(job_ids[i:i + 400]), "--format=%i %T"],
                               capture_output=True, text=True, check=False)
            for line in r.stdout.splitlines():
                jid, _, state = line.strip().partition(" ")
                out[jid] = state
        return out

    def wait_ended(self, job_ids: Sequence[str], timeout: float = 300) -> list[str]:
        """Until Slurm says every job ended (or forgot it); the ids still not ended at the timeout."""
        end = time.monotonic() + timeout
        pending = [j for j in job_ids if j]
        while pending:
            st = self.states(pending)
            pending = [j for j in pending if st.get(j, "COMPLETED") not in TERMINAL]
            if pending:
                if time.monotonic() > end:
                    return pending
                time.sleep(0.05 if len(pending) < 10 else 0.5)
        return []

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = [j for j in job_ids if j]
        for i in range(0, len(ids), 200):
            subprocess.run([self.real["scancel"] or "scancel", *ids[i:i + 200]], capture_output=True, check=False)

    def jobs_of_uids(self, uids: set[str]) -> list[str]:
        """Job ids of this user whose comment names one of ``uids`` (``hpk-uid=<uid>``; an element ``A_i``
        of a batch of pods, ``hpk-uids=<uid 0>,<uid 1>,...``: the i-th)."""
        r = subprocess.run([self.real["squeue"] or "squeue", "--noheader", "--me", "--all", "--array",
                            "--format=%i %k"], capture_output=True, text=True, check=False)
        out = []
        for line in r.stdout.splitlines():
            jid, _, comment = line.strip().partition(" ")
            first = comment.split(maxsplit=1)[0] if comment.strip() else ""
            index = jid.partition("_")[2]
            if first.startswith("hpk-uid=") and first[len("hpk-uid="):] in uids:
                out.append(jid)
            elif first.startswith("hpk-uids=") and index.isdigit():
                named = first[len("hpk-uids="):].split(",")
                if int(index) < len(named) and named[int(index)] in uids:
                    out.append(jid)
        return out


def count(calls: list[tuple[str, int]]) -> Counter[str]:
    return Counter(name for name, _ in calls)


def per(calls: Counter[str], n: int) -> str:
    if not calls:
        return "none"
    return " ".join(f"{k} {v / n:.3g}" for k, v in sorted(calls.items()))


# ---------------------------------------------------------------------------- the API, raw HTTPS


class Api:
    """Raw HTTPS to the API server with the admin client certificate; one keep-alive connection
    per instance (not shared between threads)."""

    def __init__(self, port: int, pki: Path) -> None:
        self.port = port
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "user-admin.crt"), str(pki / "user-admin.key"))
        self._conn: http.client.HTTPSConnection | None = None

    def connect(self, timeout: float | None = 60) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)

    def call(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json") -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = ctype
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = self.connect()
            try:
                self._conn.request(method, path, body=data, headers=headers)
                r = self._conn.getresponse()
                raw = r.read()
            except (OSError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt or method == "POST":
                    raise
                continue
            try:
                return r.status, json.loads(raw) if raw else None
            except ValueError:
                return r.status, raw.decode(errors="replace")
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class Seen:
    """What a watch saw of one pod, each moment the wall-clock time its event arrived here."""

    uid: str
    bound: float | None = None
    annotated: float | None = None
    job_id: str = ""
    phases: dict[str, float] = field(default_factory=dict)
    deleted: float | None = None

    def terminal(self) -> str:
        return next((p for p in ("Succeeded", "Failed") if p in self.phases), "")


class Watch(threading.Thread):
    """A watch on the namespace's pods (raw HTTPS, the admin client certificate), in this process:
    records when each pod was first seen bound, annotated with its job id, in each phase, deleted.
    Resumes by resourceVersion; relists on 410."""

    def __init__(self, api: Api) -> None:
        super().__init__(name="watch", daemon=True)
        self.api = api
        self.cond = threading.Condition()
        self.pods: dict[str, Seen] = {}
        self.rv = ""
        self.relists = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._conn: http.client.HTTPSConnection | None = None

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.rv:
                    self._list()
                self._watch()
            except Exception as e:  # noqa: BLE001 - reconnect, note it
                if self._stop.is_set():
                    return
                self.errors.append(f"{type(e).__name__}: {e}")
                time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _list(self) -> None:
        code, body = self.api.call("GET", f"/api/v1/namespaces/{NS}/pods")
        if code != 200:
            raise RuntimeError(f"list pods: {code} {body}")
        now = time.time()
        for item in body.get("items") or []:
            self._see("LISTED", item, now)
        self.rv = body["metadata"]["resourceVersion"]

    def _watch(self) -> None:
        conn = self._conn = self.api.connect(timeout=None)
        try:
            # no bookmarks (see --bookmark-interval); the server ends it after 300 s and it resumes
            conn.request("GET", f"/api/v1/namespaces/{NS}/pods?watch=true"
                                f"&timeoutSeconds=300&resourceVersion={self.rv}",
                         headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watch: {resp.status} {resp.read()[:300]!r}")
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    return  # the server ended the watch: resume
                now = time.time()
                if not line.strip():
                    continue
                ev = json.loads(line)
                typ, obj = ev.get("type"), ev.get("object") or {}
                if typ == "ERROR":
                    if obj.get("code") == 410:
                        self.rv = ""
                        self.relists += 1
                        return
                    raise RuntimeError(f"watch error event: {obj}")
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if typ != "BOOKMARK":
                    self._see(typ, obj, now)
                if rv:
                    self.rv = rv
        finally:
            conn.close()
            self._conn = None

    def _see(self, typ: str, pod: dict[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        name, uid = meta.get("name", ""), meta.get("uid", "")
        with self.cond:
            s = self.pods.get(name)
            if s is None or s.uid != uid:
                s = self.pods[name] = Seen(uid)
            if typ == "DELETED":
                s.deleted = s.deleted or now
            if (pod.get("spec") or {}).get("nodeName") and s.bound is None:
                s.bound = now
            job = (meta.get("annotations") or {}).get(JOB_ID_ANNOTATION)
            if job and s.annotated is None:
                s.annotated, s.job_id = now, job
            phase = (pod.get("status") or {}).get("phase")
            if phase and phase not in s.phases:
                s.phases[phase] = now
            self.cond.notify_all()

    def wait(self, what: str, pred: Callable[[], bool], timeout: float) -> bool:
        with self.cond:
            ok = self.cond.wait_for(pred, timeout)
        if not ok:
            log(f"timed out after {timeout:g} s waiting for {what} (watch at resourceVersion {self.rv}, "
                f"{self.relists} relist(s), errors: {self.errors[-3:] or 'none'})")
        return ok

    def get(self, name: str) -> Seen | None:
        with self.cond:
            return self.pods.get(name)


# ---------------------------------------------------------------------------- the cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (kB) and Threads of a process, from /proc/PID/status."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                out[key] = int(value.split()[0])
    except (OSError, ValueError):
        pass
    return out


class Cluster:
    """The API stand-in, ``hpkctl scheduler`` and ``hpkctl kubelet`` as this user (hpk), with a
    private site profile (``extends = "ci"``, its own state_dir) and the shims first on PATH.
    ``pilot``: a ``[pilot]`` section's lines, and the kubelet runs with ``--pilot`` (bench/pilot.py);
    ``node``: the node's name ([pods] node_name; a pilot kubelet's allocations are named after it)."""

    def __init__(self, root: Path, args: argparse.Namespace, hpkctl: str, *, pilot: str | None = None,
                 node: str = "hpk") -> None:
        self.root, self.args, self.hpkctl, self.pilot, self.node = root, args, hpkctl, pilot, node
        self.api_state = root / "api"
        self.state = root / "hpk-state"
        self.profile = root / "site.toml"
        kubelet = ["keep_pod_dirs = 0"]
        if args.slurm_poll is not None:
            kubelet.append(f"slurm_poll = {args.slurm_poll}")
        if args.status_poll is not None:
            kubelet.append(f"status_poll = {args.status_poll}")
        self.profile.write_text(f'extends = "{args.site}"\n\n[pods]\nstate_dir = "{self.state}"\nnode_name = "{node}"\n\n'
                                "[kubelet]\n" + "\n".join(kubelet) + "\n"
                                + ("" if pilot is None else f"\n[pilot]\n{pilot}\n"))
        self.state.mkdir()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._saved: tuple[int, dict[str, float]] = (-1, {})  # the records log's size, uid -> first "submitted" time
        self.api: Api | None = None
        self.watch: Watch | None = None

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        logf = open(self.root / f"{name}.log", "ab")
        env = dict(os.environ)
        env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
        p = subprocess.Popen(argv, stdout=logf, stderr=logf, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
        self.procs[name] = p
        return p

    def start(self) -> None:
        self.api_state.mkdir()
        port = free_port()
        self._spawn("apiserver", [str(REPO / "ci" / "standin" / "kube-apiserver"), "--state-dir", str(self.api_state),
                                  "--port", str(port), "--node-name", self.node,
                                  "--history-size", str(self.args.history_size),
                                  "--bookmark-interval", str(self.args.bookmark_interval)])
        self._until("the API stand-in", lambda: (self.api_state / "port").exists(), 30, "apiserver")
        self.api = Api(port, self.api_state / "pki")
        self._until("the API stand-in /readyz", lambda: self.api.call("GET", "/readyz")[1] == "ok", 30, "apiserver")
        self.start_scheduler()
        self.start_kubelet()
        self._until(f"the node {self.node} to be Ready", self.node_ready, 60, "kubelet")
        self.watch = Watch(Api(port, self.api_state / "pki"))
        self.watch.start()

    def start_scheduler(self) -> None:
        self._spawn("scheduler", [self.hpkctl, "scheduler", "--site", str(self.profile), "--kubeconfig",
                                  str(self.api_state / "scheduler.kubeconfig")])

    def start_kubelet(self) -> None:
        self._spawn("kubelet", [self.hpkctl, "kubelet", "--site", str(self.profile), "--kubeconfig",
                                str(self.api_state / "kubelet.kubeconfig"), "--port", "0", "--address", "127.0.0.1",
                                *(["--pilot"] if self.pilot is not None else [])])

    def stop_scheduler(self) -> None:
        """Stop ``hpkctl scheduler`` (pods created meanwhile stay unbound until it is started again)."""
        self._stop_proc("scheduler")

    def stop_kubelet(self) -> None:
        """Stop ``hpkctl kubelet`` (its pods' jobs run on; pods bound meanwhile wait for its restart)."""
        self._stop_proc("kubelet")

    def _stop_proc(self, name: str) -> None:
        p = self.procs.pop(name)
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def _until(self, what: str, probe: Callable[[], bool], timeout: float, proc: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited {p.returncode}:\n{self.log(name)[-3000:]}")
            try:
                if probe():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.log(proc)[-3000:]}")

    def node_ready(self) -> bool:
        assert self.api is not None
        code, node = self.api.call("GET", f"/api/v1/nodes/{self.node}")
        return code == 200 and any(c["type"] == "Ready" and c["status"] == "True"
                                   for c in node.get("status", {}).get("conditions", []))

    @property
    def kubelet_pid(self) -> int:
        return self.procs["kubelet"].pid

    def memory(self) -> dict[str, int]:
        return proc_status(self.kubelet_pid)

    def cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) each process used so far."""
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for name, p in self.procs.items():
            try:
                fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[name] = (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError, ValueError):
                pass
        return out

    def log(self, name: str) -> str:
        p = self.root / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def pod_dir(self, uid: str) -> Path:
        return self.state / "pods" / uid

    def submitted_at(self, uid: str) -> float | None:
        """When the kubelet's sbatch for pod ``uid`` returned: the ``saved`` time of its record's first
        line with the job id in the kubelet's log (``records.log``), written right then. The job id
        annotation comes later, with the pod's first status patch, at the API server's pace."""
        p = self.state / "kubelet" / self.node / "records.log"
        try:
            size = p.stat().st_size
        except OSError:
            return None
        if self._saved[0] != size:  # read again only once the log grew (200 pods: one read, not 200)
            first: dict[str, float] = {}
            for line in p.read_bytes().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("job_id") and rec.get("state") == "submitted":
                    first.setdefault(str(rec.get("uid")), float(rec.get("saved") or 0.0))
            self._saved = (size, first)
        return self._saved[1].get(uid) or None

    def alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited {p.returncode}:\n{self.log(name)[-3000:]}")

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        for name in ("kubelet", "scheduler", "apiserver"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            os.killpg(p.pid, signal.SIGTERM)  # the session this benchmark started for it
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if self.api is not None:
            self.api.close()


def pod_body(name: str, command: list[str], *, out: Path | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": IMAGE, "command": command}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [c]}
    if out is not None:
        c["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
        spec["volumes"] = [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}]
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path, calls: Calls, cluster: Cluster) -> None:
        from hpkctl.sites import load_site

        self.args, self.root, self.calls, self.cluster = args, root, calls, cluster
        self.work = root / "work"
        self.work.mkdir()
        self.profile = load_site(str(cluster.profile))
        self.time_limit = self.profile.slurm.default_time or "00:10:00"  # what the pods' jobs get too
        self.uids: set[str] = set()  # every pod created, for the final sweep
        self.bare_jobs: list[str] = []
        self.memory: list[dict[str, Any]] = []
        # pilot mode: a pod's job id is its allocation's, which runs on for other pods: a pod has
        # ended when its files say so, and its job is never waited for nor cancelled
        self.steps = cluster.pilot is not None

    def job_ids(self, ids: Iterable[str]) -> list[str]:
        """The job ids to wait for (none in pilot mode: they are the held allocations)."""
        return [] if self.steps else [j for j in ids if j]

    @property
    def api(self) -> Api:
        assert self.cluster.api is not None
        return self.cluster.api

    @property
    def watch(self) -> Watch:
        assert self.cluster.watch is not None
        return self.cluster.watch

    def rss(self, moment: str, pods: int) -> None:
        m = self.cluster.memory()
        self.memory.append({"moment": moment, "pods_tracked": pods, "rss_kb": m.get("VmRSS"),
                            "hwm_kb": m.get("VmHWM"), "threads": m.get("Threads"), "cpu_s": self.cluster.cpu()})

    def requests(self) -> dict[str, dict[str, int]]:
        """The stand-in's counts so far: requests by client and kind, watch events sent (GET /standin/requests)."""
        code, body = self.api.call("GET", "/standin/requests")
        return body if code == 200 and isinstance(body, dict) else {}

    # ------------------------------------------------------------------ pods
    def create(self, body: dict[str, Any]) -> str:
        code, obj = self.api.call("POST", f"/api/v1/namespaces/{NS}/pods", body)
        if code != 201:
            raise RuntimeError(f"POST pod {body['metadata']['name']}: {code} {obj}")
        uid = str(obj["metadata"]["uid"])
        self.uids.add(uid)
        return uid

    def delete(self, names: Sequence[str], timeout: float) -> tuple[list[str], list[tuple[str, int]]]:
        """Delete pods the normal way (graceful; the kubelet stops each job and finishes the
        delete); wait until the watch saw them go and Slurm says their jobs ended (real squeue).
        Returns the job ids and the product's Slurm commands meanwhile (cleanup, never timed)."""
        self.calls.take()
        for n in names:
            code, body = self.api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{n}")
            if code not in (200, 202, 404):
                log(f"DELETE pod {n}: {code} {body}")
        self.watch.wait(f"{len(names)} pod(s) to be deleted",
                        lambda: all((s := self.watch.pods.get(n)) is None or s.deleted for n in names), timeout)
        jobs = [s.job_id for n in names if (s := self.watch.get(n)) and s.job_id]
        left = self.calls.wait_ended(self.job_ids(jobs), timeout=120)
        if left:
            log(f"{len(left)} job(s) still not ended after their pods were deleted: cancelling them")
            self.calls.cancel(left)
        return jobs, self.calls.take()

    # ------------------------------------------------------------------ 1 + 5: latency, one at a time
    def latency(self) -> dict[str, Any]:
        args = self.args
        bare: list[dict[str, Any]] = []
        hpk: list[dict[str, Any]] = []
        timed: dict[str, Counter[str]] = {"bare": Counter(), "hpk": Counter()}
        cleanup: Counter[str] = Counter()
        for i in range(args.warmup + args.n):
            keep = i >= args.warmup
            order = ("bare", "hpk") if i % 2 == 0 else ("hpk", "bare")  # ABBA
            for side in order:
                if side == "bare":
                    s, c = self.lat_bare()
                else:
                    s, c, cl = self.lat_hpk(f"lat-{i}-{uuid.uuid4().hex[:6]}")
                    if keep:
                        cleanup += count(cl)
                if keep:
                    (bare if side == "bare" else hpk).append(s)
                    timed[side] += count(c)
            self.cluster.alive()
        return {"bare": bare, "hpk": hpk, "calls_bare": dict(timed["bare"]), "calls_hpk": dict(timed["hpk"]),
                "calls_cleanup": dict(cleanup)}

    def sleep(self) -> float:
        """The container's (and the bare script's) sleep between its first and last action: S plus a
        random 0-1 s, so the exit falls at a random phase of the kubelet's status rounds (a fixed
        sleep that is a multiple of status_poll would exit at the same phase as the start was seen)."""
        return self.args.exit_after + random.random()

    def _script(self, d: Path, work: str) -> Path:
        d.mkdir()
        script = d / "job.sh"
        script.write_text(f"#!/bin/bash\ntouch {d}/started\n{work}\ntouch {d}/finished\n")
        return script

    def _sbatch(self, script: Path) -> str:
        # no --quiet: with it, sbatch 22.05 prints no job id even with --parsable
        r = subprocess.run(["sbatch", "--parsable", f"--partition={self.args.partition}",
                            "--output=/dev/null", f"--time={self.time_limit}", str(script)],
                           check=True, capture_output=True, text=True)
        job = r.stdout.strip().split(";")[0]
        if not job.isdigit():
            raise RuntimeError(f"sbatch printed no job id: {r.stdout!r} {r.stderr!r}")
        self.bare_jobs.append(job)
        return job

    def lat_bare(self) -> tuple[dict[str, Any], list[tuple[str, int]]]:
        d = self.work / f"lat-bare-{uuid.uuid4().hex[:8]}"
        # the same work as the pod's container: its first action, a sleep, its last action
        script = self._script(d, f"touch {d}/ran\nsleep {self.sleep():.3f}\ntouch {d}/exited")
        self.calls.take()
        random_phase()
        t0 = time.time()
        job = self._sbatch(script)
        submitted = time.time()
        ok = wait_file(d / "finished", self.args.timeout)
        times = {"submitted": submitted - t0}
        for key in ("started", "ran", "exited", "finished"):
            m = mtime(d / key)
            times[key] = None if m is None else m - t0
        if not ok:
            log(f"bare job {job} did not finish within {self.args.timeout} s")
            self.calls.cancel([job])
        self.calls.wait_ended([job])  # outside the timed span: the next sample starts on an idle node
        return {"job": job, "ok": ok and None not in times.values(), "t": times}, self.calls.take()

    def lat_hpk(self, name: str) -> tuple[dict[str, Any], list[tuple[str, int]], list[tuple[str, int]]]:
        d = self.work / name
        d.mkdir()
        body = pod_body(name, ["sh", "-c", f"touch /out/ran; sleep {self.sleep():.3f}; touch /out/exited"], out=d)
        self.calls.take()
        random_phase()
        t0 = time.time()
        uid = self.create(body)
        submitted = time.time()
        w = self.watch
        ok = w.wait(f"pod {name} to end", lambda: bool((s := w.pods.get(name)) and s.terminal()), self.args.timeout)
        seen = w.get(name) or Seen(uid)
        st = self.cluster.pod_dir(uid) / "status"
        files = {"job_started": st / "job.started", "c_started": st / "c.started", "ran": d / "ran",
                 "exited": d / "exited", "c_finished": st / "c.finished", "pod_done": st / "pod.done"}
        times: dict[str, float | None] = {"submitted": submitted - t0}
        for key, path in files.items():
            m = mtime(path)
            times[key] = None if m is None else m - t0
        for key, at in (("bound", seen.bound), ("annotated", seen.annotated), ("running", seen.phases.get("Running")),
                        ("succeeded", seen.phases.get("Succeeded"))):
            times[key] = None if at is None else at - t0
        at = self.cluster.submitted_at(uid)  # the kubelet's sbatch/srun returned (its record's line)
        times["srun"] = None if at is None else at - t0
        phase = seen.terminal()
        if not ok or phase != "Succeeded":
            log(f"pod {name} (job {seen.job_id or '?'}) ended as {phase or 'nothing'}; kubelet log tail:\n"
                + self.cluster.log("kubelet")[-2000:])
        self.calls.wait_ended(self.job_ids([seen.job_id]))
        counted = self.calls.take()
        _, cl = self.delete([name], 60)
        # "running" may be missed if the pod ended within one status round: then it is absent
        needed = [k for k in times if k not in ("running", "srun")]
        return ({"name": name, "job": seen.job_id, "ok": phase == "Succeeded" and all(times[k] is not None
                                                                                       for k in needed),
                 "t": times}, counted, cl)

    # ------------------------------------------------------------------ 2: burst
    def burst(self, count_: int, first: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for side in (first, "hpk" if first == "bare" else "bare"):
            out[side] = self.burst_bare(count_) if side == "bare" else self.burst_hpk(count_)
            self.cluster.alive()
        return out

    def burst_bare(self, n: int) -> dict[str, Any]:
        dirs = [self.work / f"burst-bare-{uuid.uuid4().hex[:8]}" for _ in range(n)]
        scripts = [self._script(d, "true") for d in dirs]  # inputs ready before t0, as the pods' bodies
        self.calls.take()
        t0 = time.time()
        jobs = [self._sbatch(s) for s in scripts]
        submitted = time.time()
        wait_files([d / "finished" for d in dirs], 900)
        started = [m for d in dirs if (m := mtime(d / "started")) is not None]
        finished = [m for d in dirs if (m := mtime(d / "finished")) is not None]
        durations = [f - a for d in dirs if (a := mtime(d / "started")) is not None
                     and (f := mtime(d / "finished")) is not None]
        left = self.calls.wait_ended(jobs)
        self.calls.cancel(left)
        c = self.calls.take()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        return {"n": n, "ok": len(finished),
                "t": {"submitted": submitted - t0, "started": max(started) - t0 if started else None,
                      "finished": max(finished) - t0 if finished else None},
                "job_duration_median": statistics.median(durations) if durations else None,
                "calls": dict(count(c))}

    def burst_hpk(self, n: int) -> dict[str, Any]:
        tag = uuid.uuid4().hex[:6]
        names = [f"burst-{tag}-{i}" for i in range(n)]
        bodies = [pod_body(nm, ["true"]) for nm in names]
        self.calls.take()
        w = self.watch
        cpu0 = self.cluster.cpu()
        req0 = self.requests()
        t0 = time.time()
        uids, created = [], []
        for b in bodies:
            uids.append(self.create(b))
            created.append(time.time())  # the POST returned: the pod exists
        submitted = time.time()
        w.wait(f"{n} burst pods to end", lambda: all((s := w.pods.get(nm)) and s.terminal() for nm in names), 900)
        cpu = {k: v - cpu0.get(k, 0.0) for k, v in self.cluster.cpu().items()}
        req = {k: dict(Counter(v) - Counter(req0.get(k) or {})) for k, v in self.requests().items()}
        seen = [w.get(nm) or Seen(u) for nm, u in zip(names, uids)]
        timed = self.calls.take()

        def last(xs: Iterable[float | None]) -> float | None:
            got = [x for x in xs if x is not None]
            return max(got) - t0 if got else None

        t = {"submitted": submitted - t0,
             "bound": last(s.bound for s in seen),
             "annotated": last(s.annotated for s in seen),
             "started": last(mtime(self.cluster.pod_dir(u) / "status" / "job.started") for u in uids),
             "finished": last(mtime(self.cluster.pod_dir(u) / "status" / "pod.done") for u in uids),
             "succeeded": last(s.phases.get("Succeeded") for s in seen)}
        # per pod, from its own creation: how far behind the burst the scheduler and the kubelet are
        lag_bound = [s.bound - c for s, c in zip(seen, created) if s.bound is not None]
        lag_annotated = [s.annotated - c for s, c in zip(seen, created) if s.annotated is not None]
        sbatched = [self.cluster.submitted_at(u) for u in uids]
        lag_submitted = [a - c for a, c in zip(sbatched, created) if a is not None]
        t["sbatched"] = last(sbatched)
        firsts = [s.bound for s in seen if s.bound is not None]
        t["first_bound"] = min(firsts) - t0 if firsts else None
        succeeded = sum(1 for s in seen if s.terminal() == "Succeeded")
        durations = []
        for u in uids:
            st = self.cluster.pod_dir(u) / "status"
            a, f = mtime(st / "job.started"), mtime(st / "pod.done")
            if a is not None and f is not None:
                durations.append(f - a)
        jobs, cl = self.delete(names, 600)
        return {"n": n, "ok": succeeded, "t": t, "lag_bound": lag_bound, "lag_annotated": lag_annotated,
                "lag_submitted": lag_submitted,
                "calls": dict(count(timed)), "calls_cleanup": dict(count(cl)),
                "jobs": len(set(jobs)), "job_duration_median": statistics.median(durations) if durations else None,
                "cpu_s": cpu, "api_requests": req}

    # ------------------------------------------------------------------ 2b: a backlog of bound pods
    def backlog(self, n: int) -> dict[str, Any]:
        """``n`` pods created and bound (the scheduler running) while the kubelet is stopped, then the
        kubelet started: it finds ``n`` bound pods in its first list. From the kubelet's start to its
        last ``sbatch`` returned and to the last pod ``Succeeded``, against a bare loop of ``n`` sbatch
        run just before (its duration, and its first submit to its last job finished): the kubelet's
        own pace, free of the API server's POSTs and the scheduler's binds (which the burst includes)."""
        bare = self.burst_bare(n)
        self.cluster.alive()
        tag = uuid.uuid4().hex[:6]
        names = [f"backlog-{tag}-{i}" for i in range(n)]
        w = self.watch
        self.cluster.stop_kubelet()
        uids = []
        tp = time.time()
        for nm in names:
            uids.append(self.create(pod_body(nm, ["true"])))
        posted = time.time() - tp
        w.wait(f"{n} backlog pods to be bound", lambda: all((x := w.pods.get(nm)) and x.bound for nm in names), 900)
        bound = [x.bound for nm in names if (x := w.get(nm)) is not None and x.bound is not None]
        self.calls.take()
        cpu0 = self.cluster.cpu()
        t0 = time.time()
        self.cluster.start_kubelet()
        w.wait(f"{n} backlog pods to be submitted", lambda: all((x := w.pods.get(nm)) and x.annotated for nm in names),
               900)  # the job id annotation follows the sbatch (the records' saved times say when that returned)
        cpu = {k: v - cpu0.get(k, 0.0) for k, v in self.cluster.cpu().items()}
        timed = self.calls.take()
        submitted = [a for u in uids if (a := self.cluster.submitted_at(u)) is not None]
        w.wait(f"{n} backlog pods to end", lambda: all((x := w.pods.get(nm)) and x.terminal() for nm in names), 900)
        seen = [x for nm in names if (x := w.get(nm)) is not None]
        annotated = [x.annotated for x in seen if x.annotated is not None]
        succeeded = [x.phases["Succeeded"] for x in seen if x.phases.get("Succeeded") is not None]
        ok = sum(1 for x in seen if x.terminal() == "Succeeded")
        self.delete(names, 600)
        return {"n": n, "ok": ok, "bare_loop": bare["t"]["submitted"], "bare_finished": bare["t"]["finished"],
                "bare_ok": bare["ok"], "posted_s": posted, "bind_span": max(bound) - tp if bound else None,
                "first_submitted": min(submitted) - t0 if submitted else None,
                "last_submitted": max(submitted) - t0 if len(submitted) == n else None,
                "last_annotated": max(annotated) - t0 if len(annotated) == n else None,
                "last_succeeded": max(succeeded) - t0 if len(succeeded) == n else None,
                "calls": dict(count(timed)), "cpu_s": cpu}

    # ------------------------------------------------------------------ 3: Slurm commands per poll
    def tracked(self, names: Sequence[str], bodies: Sequence[dict[str, Any]], what: str,
                timeout: float) -> tuple[float, float]:
        """Create the pods and wait until the kubelet submitted every one (job id annotated);
        (seconds for the POSTs, seconds until all annotated), both from the first POST."""
        w = self.watch
        t0 = time.time()
        for b in bodies:
            self.create(b)
        posted = time.time() - t0
        w.wait(f"{len(names)} {what} pods to be submitted",
               lambda: all((s := w.pods.get(n)) and s.annotated for n in names), timeout)
        got = [s.annotated for n in names if (s := w.get(n)) and s.annotated]
        return posted, (max(got) - t0) if got else float("nan")

    def window(self, k: int, seconds: float, names: Sequence[str]) -> dict[str, Any]:
        """The product's Slurm commands over ``seconds`` with these ``k`` pods tracked and settled."""
        w = self.watch
        jobs = [s.job_id for n in names if (s := w.get(n)) and s.job_id]
        states = Counter(self.calls.states(jobs).values())
        self.calls.take()
        a = time.monotonic()
        time.sleep(seconds)
        c = self.calls.take()
        span = time.monotonic() - a
        squeue_ids = [n for name, n in c if name == "squeue"]
        poll = self.profile.kubelet.slurm_poll
        return {"k": k, "window_s": span, "slurm_states": dict(states), "calls": dict(count(c)),
                "squeue_ids": squeue_ids, "expected_rounds": span / poll, "slurm_poll": poll}

    def poll(self, k: int) -> dict[str, Any]:
        tag = uuid.uuid4().hex[:6]
        names = [f"poll-{k}-{tag}-{i}" for i in range(k)]
        bodies = [pod_body(nm, ["sleep", "3600"]) for nm in names]
        posted, annotated = self.tracked(names, bodies, "sleeping", 600)
        time.sleep(self.settle())
        res = self.window(k, self.args.poll_window, names)
        res.update(posted_s=posted, annotated_s=annotated, pods="sleep 3600")
        self.rss(f"{k} sleeping pods tracked", k)
        _, cl = self.delete(names, 600)
        res["calls_cleanup"] = dict(count(cl))
        return res

    def settle(self) -> float:
        """Time for the start-up status changes to die down: two Slurm rounds and a bit."""
        return 2 * self.profile.kubelet.slurm_poll + 2 * self.profile.kubelet.status_poll + 3

    # ------------------------------------------------------------------ 4: memory with many pods
    def many(self, k: int) -> dict[str, Any]:
        tag = uuid.uuid4().hex[:6]
        names = [f"mem-{tag}-{i}" for i in range(k)]
        # never runs: the job waits for a begin time an hour ahead (--hold is refused by hpkctl.pod.flags)
        bodies = [pod_body(nm, ["true"], annotations={FLAGS_ANNOTATION: "--begin=now+1hour"}) for nm in names]
        self.calls.take()
        posted, annotated = self.tracked(names, bodies, "pending", self.args.timeout_many)
        submit_calls = count(self.calls.take())
        time.sleep(self.settle())
        self.rss(f"{k} pending pods tracked (settled)", k)
        res = self.window(k, self.args.poll_window, names)
        self.rss(f"{k} pending pods tracked (after the window)", k)
        t_del = time.time()
        jobs, cl = self.delete(names, self.args.timeout_many)
        res.update(posted_s=posted, annotated_s=annotated, pods="true, --begin=now+1hour",
                   submit_calls=dict(submit_calls), delete_s=time.time() - t_del, calls_cleanup=dict(count(cl)),
                   jobs=len(set(jobs)))
        return res

    # ------------------------------------------------------------------ the end
    def sweep(self) -> None:
        """Cancel whatever this run left in Slurm: jobs of every pod created here (found by the
        uid in their comment) and every bare job (real scancel, uncounted)."""
        left = [] if self.steps else self.calls.jobs_of_uids(self.uids)
        st = self.calls.states(self.bare_jobs) if self.bare_jobs else {}
        left += [j for j, s in st.items() if s not in TERMINAL]
        if left:
            log(f"cancelling {len(left)} leftover job(s)")
            self.calls.cancel(left)


def wait_file(path: Path, timeout: float) -> bool:
    return wait_files([path], timeout)


def wait_files(paths: Sequence[Path], timeout: float) -> bool:
    end = time.monotonic() + timeout
    pending = list(paths)
    while pending:
        pending = [p for p in pending if not p.exists()]
        if pending:
            if time.monotonic() > end:
                log(f"{len(pending)} of {len(paths)} files did not appear within {timeout:g} s, e.g. {pending[0]}")
                return False
            time.sleep(0.01 if len(paths) == 1 else 0.05)
    return True


# ---------------------------------------------------------------------------- report


def stats(xs: Sequence[float]) -> tuple[float, float] | None:
    return (statistics.median(xs), p90(xs)) if xs else None


def mark(ok: bool) -> str:
    return "met" if ok else "MISSED"


LAT_ROWS = (  # (label, bare key, hpkctl key, goal)
    ("submit returned (sbatch / POST)", "submitted", "submitted", False),
    ("job script started", "started", "job_started", False),
    ("container started (c.started)", "ran", "c_started", True),
    ("workload ran (its own file)", "ran", "ran", True),
)
API_ROWS = (  # hpkctl only: when the watch saw it
    ("API: pod bound (scheduler)", "bound"),
    ("API: job id annotated", "annotated"),
    ("API: phase Running", "running"),
)
BREAKDOWN = (  # (label, hpkctl from, hpkctl to, bare from, bare to); "" = t0
    ("  POST -> bound (scheduler)", "", "bound", None, None),
    ("  bound -> job id annotated (kubelet)", "bound", "annotated", None, None),
    ("  annotated -> job script started", "annotated", "job_started", "", "started"),
    ("  job script started -> c.started", "job_started", "c_started", "started", "ran"),
    ("  c.started -> workload ran", "c_started", "ran", None, None),
)
EXIT_ROWS = (  # (label, bare end key or None, hpkctl start key, hpkctl end key, goal)
    ("exited -> job script finished", "finished", "exited", "pod_done", False),
    ("exited -> c.finished", None, "exited", "c_finished", False),
    ("exited -> API phase Succeeded", None, "exited", "succeeded", True),
    ("c.finished -> API Succeeded", None, "c_finished", "succeeded", False),
    ("pod.done -> API Succeeded", None, "pod_done", "succeeded", False),
)


def latency_table(lat: dict[str, Any], n_warm: int) -> tuple[list[str], dict[str, Any]]:
    ob = [s for s in lat["bare"] if s["ok"]]
    oh = [s for s in lat["hpk"] if s["ok"]]
    summary: dict[str, Any] = {}
    lines = [f"1. start latency: n = {len(ob)} bare, {len(oh)} hpkctl samples (after {n_warm} warm-up pair(s), "
             "discarded), interleaved ABBA, one job at a time",
             "   bare: sbatch of 'touch started; touch ran; sleep S+U(0,1); touch exited; touch finished'; hpkctl: POST of a "
             "pod whose container runs 'touch /out/ran; sleep S+U(0,1); touch /out/exited'",
             f"  {'seconds from submit':38} {'bare median':>11} {'p90':>7}  {'hpkctl median':>13} {'p90':>7}  "
             f"{'ratio median':>12} {'p90':>6}  {'diff median':>11} {'p90':>7}"]
    for label, bk, hk, goal in LAT_ROWS:
        b = stats([s["t"][bk] for s in ob])
        h = stats([s["t"][hk] for s in oh])
        if b is None or h is None:
            lines.append(f"  {label:38} (no successful samples)")
            continue
        (mb, pb), (mh, ph) = b, h
        line = (f"  {label:38} {mb:11.3f} {pb:7.3f}  {mh:13.3f} {ph:7.3f}  {mh / mb:12.2f} {ph / pb:6.2f}  "
                f"{mh - mb:+11.3f} {ph - pb:+7.3f}")
        if goal:
            met = mh - mb <= START_GOAL and ph - pb <= START_GOAL
            line += f"   goal <= +{START_GOAL:.1f} s: {mark(met)}"
            summary[hk] = {"bare_median": mb, "bare_p90": pb, "hpk_median": mh, "hpk_p90": ph,
                           "diff_median": mh - mb, "diff_p90": ph - pb, "goal_met": met}
        lines.append(line)
    for label, hk in API_ROWS:
        xs = [s["t"][hk] for s in oh if s["t"].get(hk) is not None]
        h = stats(xs)
        lines.append(f"  {label:38} {'':11} {'':7}  {h[0]:13.3f} {h[1]:7.3f}" if h else f"  {label:38} (not seen)")
        if hk == "running" and len(xs) < len(oh):
            lines.append(f"    (phase Running not reported for {len(oh) - len(xs)} sample(s): the pod ended within "
                         "one status round)")
    lines.append("  where the time goes (median of each sample's step; API moments are when the watch saw them; "
                 "bare: sbatch -> started, started -> ran)")
    for label, hs, he, bs, be in BREAKDOWN:
        h = stats([s["t"][he] - (s["t"][hs] if hs else 0.0) for s in oh])
        b = stats([s["t"][be] - (s["t"][bs] if bs else 0.0) for s in ob]) if be else None
        if h is None:
            continue
        bb = f"{b[0]:11.3f} {b[1]:7.3f}" if b else f"{'':11} {'':7}"
        lines.append(f"  {label:38} {bb}  {h[0]:13.3f} {h[1]:7.3f}")
    lines.append("5. container exit -> pod phase in the API (same samples; the container touches /out/exited just "
                 "before it exits)")
    lines.append(f"  {'seconds':38} {'bare median':>11} {'p90':>7}  {'hpkctl median':>13} {'p90':>7}")
    for label, bend, hstart, hend, goal in EXIT_ROWS:
        h = stats([s["t"][hend] - s["t"][hstart] for s in oh])
        b = stats([s["t"][bend] - s["t"]["exited"] for s in ob]) if bend else None
        if h is None:
            lines.append(f"  {label:38} (no successful samples)")
            continue
        bb = f"{b[0]:11.3f} {b[1]:7.3f}" if b else f"{'':11} {'':7}"
        line = f"  {label:38} {bb}  {h[0]:13.3f} {h[1]:7.3f}"
        if goal:
            met = h[0] <= EXIT_GOAL and h[1] <= EXIT_GOAL
            line += f"   goal <= {EXIT_GOAL:.1f} s: {mark(met)}"
            summary["exit_to_succeeded"] = {"median": h[0], "p90": h[1], "goal_met": met}
        lines.append(line)
    nb, nh = max(len(lat["bare"]), 1), max(len(lat["hpk"]), 1)
    lines.append(f"  Slurm commands per sample (timed part): bare {per(Counter(lat['calls_bare']), nb)}; hpkctl "
                 f"{per(Counter(lat['calls_hpk']), nh)} (squeue: the kubelet's status rounds while the pod lives); "
                 f"cleanup (pod delete, untimed): {per(Counter(lat['calls_cleanup']), nh)}")
    failed = (len(lat["bare"]) - len(ob), len(lat["hpk"]) - len(oh))
    if any(failed):
        lines.append(f"  FAILED samples (excluded): bare {failed[0]}, hpkctl {failed[1]}")
    return lines, summary


def burst_table(bursts: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    n = bursts[0]["bare"]["n"]

    def med(side: str, key: str) -> float:
        xs = [b[side]["t"][key] for b in bursts if b[side]["t"].get(key) is not None]
        return statistics.median(xs) if xs else float("nan")

    lines = [f"2. burst: {n} jobs per side submitted back to back (bare: sbatch of 'touch started; true; touch "
             f"finished'; hpkctl: POST of pods running 'true'), {len(bursts)} round(s), sides alternating;",
             "  time until the LAST job reached each moment" + (", median over rounds" if len(bursts) > 1 else ""),
             f"  {'seconds from first submit':42} {'bare':>9} {'hpkctl':>9} {'ratio':>7}"]
    rows = (("all submitted (sbatch / POST loop)", "submitted", "submitted"),
            ("all: job script started", "started", "started"),
            ("all: job script finished", "finished", "finished"),
            ("all Succeeded in the API (bare: finished)", "finished", "succeeded"))
    for label, bk, hk in rows:
        b, h = med("bare", bk), med("hpk", hk)
        lines.append(f"  {label:42} {b:9.2f} {h:9.2f} {h / b:7.2f}")
    bd = [b["bare"]["job_duration_median"] for b in bursts if b["bare"].get("job_duration_median") is not None]
    hd = [b["hpk"]["job_duration_median"] for b in bursts if b["hpk"].get("job_duration_median") is not None]
    if bd and hd:
        b, h = statistics.median(bd), statistics.median(hd)
        lines.append(f"  {'median job script duration (started->end)':42} {b:9.3f} {h:9.3f} {h / b if b else float('nan'):7.1f}")
    lines.append(f"  {'(hpkctl) all bound by the scheduler':42} {'':9} {med('hpk', 'bound'):9.2f}")
    lines.append(f"  {'(hpkctl) all job ids annotated':42} {'':9} {med('hpk', 'annotated'):9.2f}")
    # issue 23's goal: each pod bound and submitted (its sbatch returned) within 1 s of its creation; the
    # job id reaches the API with the pod's first status patch ([kubelet] status_poll later): no goal
    for what, key, goal in (("bound", "lag_bound", True), ("job id annotated in the API", "lag_annotated", False),
                            ("submitted (sbatch returned: its record)", "lag_submitted", True)):
        lags = [x for b in bursts for x in b["hpk"].get(key) or []]
        if lags:
            verdict = f"   goal: max <= 1 s: {'met' if max(lags) <= 1.0 else 'NOT met'}" if goal else ""
            lines.append(f"  (hpkctl) each pod, its creation -> {what}: median {statistics.median(lags):.2f} s, "
                         f"p90 {p90(lags):.2f} s, max {max(lags):.2f} s{verdict}")
    span = med("hpk", "sbatched") - med("hpk", "first_bound")
    bare_loop = med("bare", "submitted")
    # no verdict: the pods are bound at the POST loop's pace (the API server's), which alone may take longer
    # than the bare loop; issue 23's 1.2x is for pods already bound, the backlog's line (2b)
    lines.append(f"  (hpkctl) submitting: first bound -> last sbatch returned {span:.2f} s, against the bare sbatch loop "
                 f"{bare_loop:.2f} s: ratio {span / bare_loop:.2f} (it includes the POST loop's pace, "
                 f"{med('hpk', 'submitted'):.2f} s here; 200 pods already bound: the backlog, 2b)")
    bf, hs, hf = med("bare", "finished"), med("hpk", "succeeded"), med("hpk", "finished")
    lines.append(f"  throughput (jobs/s): bare {n / bf:.1f} (to all finished); hpkctl {n / hs:.1f} (to all Succeeded "
                 f"in the API), {n / hf:.1f} (to all job scripts finished)")
    bc = sum((Counter(b["bare"]["calls"]) for b in bursts), Counter())
    hc = sum((Counter(b["hpk"]["calls"]) for b in bursts), Counter())
    cl = sum((Counter(b["hpk"]["calls_cleanup"]) for b in bursts), Counter())
    k = n * len(bursts)
    lines.append(f"  Slurm commands per job (timed part): bare {per(bc, k)}; hpkctl {per(hc, k)}; deleting the pods "
                 f"(untimed): {per(cl, k)}")
    cpu = sum((Counter(b["hpk"].get("cpu_s") or {}) for b in bursts), Counter())
    lines.append("  CPU seconds used by the hpkctl side's processes while it ran: "
                 + ", ".join(f"{name} {v / len(bursts):.1f}" for name, v in sorted(cpu.items())))
    lines += api_requests_table([b["hpk"].get("api_requests") or {} for b in bursts], k)
    lines.append(f"  succeeded: bare {sum(b['bare']['ok'] for b in bursts)}/{k}, hpkctl "
                 f"{sum(b['hpk']['ok'] for b in bursts)}/{k}; distinct jobs: "
                 f"{sum(b['hpk']['jobs'] for b in bursts)}")
    if len(bursts) > 1:
        lines.append("  per round: " + "; ".join(
            f"round {i + 1}: bare {b['bare']['t']['finished']:.1f} s, hpkctl {b['hpk']['t']['succeeded']:.1f} s"
            for i, b in enumerate(bursts)))
    return lines, {"bare_finished_s": bf, "hpk_succeeded_s": hs, "hpk_finished_s": hf, "bare_jobs_per_s": n / bf,
                   "hpk_jobs_per_s": n / hs}


#: the stand-in's users (client certificate CNs) by the component that uses them
CLIENTS = {"kubernetes-admin": "bench", "system:kube-scheduler": "scheduler"}


def api_requests_table(counts: list[dict[str, dict[str, int]]], pods: int) -> list[str]:
    """Requests per pod at the API stand-in by client and kind (and errors, watch events sent to each)."""
    if not any(counts):
        return []
    lines = ["  API requests per pod at the stand-in, from the first POST to all Succeeded (GET /standin/requests):"]
    for part, what in (("requests", "requests"), ("errors", "answered with an error"), ("events", "watch events sent")):
        total = sum((Counter(c.get(part) or {}) for c in counts), Counter())
        by: dict[str, list[str]] = {}
        for key, n in sorted(total.items()):
            user, _, kind = key.partition(" ")
            client = CLIENTS.get(user) or ("kubelet" if user.startswith("system:node:") else user)
            by.setdefault(client, []).append(f"{kind} {n / pods:.2f}")
        for client, kinds in sorted(by.items()):
            lines.append(f"    {what:24} {client:10} " + ", ".join(kinds))
    return lines


def poll_table(polls: list[dict[str, Any]]) -> list[str]:
    lines = ["3. Slurm commands per status poll: the product's commands over a window with K pods tracked "
             "(start-up settled first)",
             f"  {'K pods tracked (Slurm states)':44} {'window s':>8} {'rounds*':>7} {'squeue':>6} "
             f"{'per round':>9} {'ids per squeue':>14} {'sacct':>5} {'scontrol':>8} {'sinfo':>5} {'other':>5}"]
    for p in polls:
        c = Counter(p["calls"])
        other = sum(v for k, v in c.items() if k not in ("squeue", "sacct", "scontrol", "sinfo"))
        ids = p["squeue_ids"]
        idtxt = (f"{min(ids)}-{max(ids)}" if ids and min(ids) != max(ids) else str(ids[0]) if ids else "-")
        st = ", ".join(f"{v} {k.lower()}" for k, v in sorted(p["slurm_states"].items()))
        label = f"{p['k']} ({st})"
        lines.append(f"  {label:44} {p['window_s']:8.1f} {p['expected_rounds']:7.1f} {c['squeue']:6d} "
                     f"{c['squeue'] / p['expected_rounds']:9.2f} {idtxt:>14} {c['sacct']:5d} {c['scontrol']:8d} "
                     f"{c['sinfo']:5d} {other:5d}")
    if polls:
        lines.append(f"  * rounds = window / [kubelet] slurm_poll ({polls[0]['slurm_poll']:g} s): the Slurm rounds the "
                     "kubelet should make; 'per round' = squeue calls / rounds (goal: 1, independent of K; "
                     "squeue takes at most 500 ids per call)")
    return lines


def memory_table(mem: list[dict[str, Any]], many: dict[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
    lines = ["4. the kubelet's memory (/proc/PID/status of the hpkctl kubelet process)",
             f"  {'moment':52} {'pods':>5} {'VmRSS MB':>9} {'VmHWM MB':>9} {'threads':>7}"]
    for m in mem:
        rss = (m["rss_kb"] or 0) * 1024 / 1e6
        hwm = (m["hwm_kb"] or 0) * 1024 / 1e6
        lines.append(f"  {m['moment']:52} {m['pods_tracked']:5d} {rss:9.1f} {hwm:9.1f} {m['threads'] or 0:7d}")
    summary: dict[str, Any] = {}
    tracked = [m for m in mem if "pending pods tracked" in m["moment"]]
    if tracked:
        rss = max((m["rss_kb"] or 0) * 1024 / 1e6 for m in tracked)
        met = rss <= RSS_GOAL_MB
        lines.append(f"  VmRSS with {tracked[0]['pods_tracked']} pods tracked: {rss:.1f} MB (10^6 bytes)   goal <= "
                     f"{RSS_GOAL_MB:.0f} MB: {mark(met)}")
        summary = {"rss_mb_many": rss, "goal_met": met}
    if many:
        lines.append(f"  {many['k']} pods (command 'true', --begin=now+1hour: pending, never run): POSTs took "
                     f"{many['posted_s']:.1f} s; all submitted (job id annotated) {many['annotated_s']:.1f} s after the "
                     f"first POST ({many['k'] / many['annotated_s']:.1f} pods/s; Slurm commands meanwhile: "
                     f"{per(Counter(many['submit_calls']), many['k'])} per pod); deleting them took "
                     f"{many['delete_s']:.1f} s ({per(Counter(many['calls_cleanup']), many['k'])} per pod)")
    return lines, summary


def backlog_table(b: dict[str, Any]) -> list[str]:
    n, loop, fin = b["n"], b["bare_loop"], b["bare_finished"]

    def vs(label: str, key: str, bare: float | None, what: str, *, goal: bool = True) -> str:
        """A ratio to bare; issue 23's goal (<= 1.2) is printed only on the line it is about (submitted)."""
        h = b.get(key)
        if h is None or not bare:
            return f"  (hpkctl) {label}: not measured (not every pod got there)"
        verdict = f"   goal <= 1.2: {'met' if h <= 1.2 * bare else 'NOT met'}" if goal else ""
        return f"  (hpkctl) {label} {h:.2f} s, against {what} {bare:.2f} s: ratio {h / bare:.2f}{verdict}"

    first, last = b.get("first_submitted"), b.get("last_submitted")
    calls = " ".join(f"{k} {v / n:.2f}" for k, v in sorted(b["calls"].items()))
    return [
        f"2b. backlog: {n} pods created and bound (scheduler running) while the kubelet was stopped, then the "
        f"kubelet started: its first list has {n} bound pods; bare: a loop of {n} sbatch just before",
        f"  (the POSTs took {b['posted_s']:.2f} s, first POST -> last bound {b['bind_span']:.2f} s: the stand-in's "
        f"and the scheduler's pace, not timed below)" if b.get("bind_span") is not None else "  (binds: not measured)",
        vs("kubelet started -> last sbatch returned (its record)", "last_submitted", loop, "the bare sbatch loop"),
        f"  (hpkctl) of which kubelet started -> first sbatch returned {first:.2f} s (its start-up: imports, node, "
        f"first list), first -> last sbatch returned {last - first:.2f} s: ratio {(last - first) / loop:.2f} to the "
        f"bare loop" if first is not None and last is not None else "  (not every record was read)",
        f"  (hpkctl) kubelet started -> last job id annotated "
        + (f"{b['last_annotated']:.2f} s" if b.get("last_annotated") is not None else "not measured"),
        vs("kubelet started -> last pod Succeeded in the API", "last_succeeded", fin,
           "the bare loop's first submit -> last job finished", goal=False),
        f"  Slurm commands per pod (until the last sbatch returned): {calls or 'none'}; CPU seconds meanwhile: "
        + ", ".join(f"{k} {v:.1f}" for k, v in b["cpu_s"].items()),
        f"  succeeded: bare {b['bare_ok']}/{n}, hpkctl {b['ok']}/{n}",
    ]


# ---------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site", default="ci", help="profile the benchmark's private profile extends (default ci)")
    ap.add_argument("--partition", default="debug", help="partition of the bare jobs (default debug)")
    ap.add_argument("-n", type=int, default=10, help="latency samples per side (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up samples per side, discarded (default 2)")
    ap.add_argument("--exit-after", type=float, default=1.0,
                    help="the latency pod's container sleeps this plus a random 0-1 s between its first and last "
                         "action (default 1)")
    ap.add_argument("--burst", type=int, default=200, help="jobs per side in a burst (0 skips it; default 200)")
    ap.add_argument("--burst-rounds", type=int, default=1, help="bursts per side, alternating order (default 1)")
    ap.add_argument("--backlog", type=int, default=200,
                    help="bound pods the kubelet finds at its start (created and bound while it is stopped), against "
                         "a bare sbatch loop of as many (0 skips; default 200)")
    ap.add_argument("--poll-pods", default="1,50",
                    help="K values for the poll count, comma-separated ('' skips; default 1,50)")
    ap.add_argument("--poll-window", type=float, default=60, help="seconds each poll count lasts (default 60)")
    ap.add_argument("--memory-pods", type=int, default=1000,
                    help="pods tracked for the memory measurement, also counted like --poll-pods (0 skips; "
                         "default 1000)")
    ap.add_argument("--slurm-poll", type=float, default=None, help="override [kubelet] slurm_poll (default: profile's)")
    ap.add_argument("--status-poll", type=float, default=None,
                    help="override [kubelet] status_poll (default: profile's)")
    ap.add_argument("--history-size", type=int, default=100000,
                    help="watch events the API stand-in keeps for resuming (default 100000: a real API server's "
                         "watch cache is not a 1000-event ring)")
    ap.add_argument("--bookmark-interval", type=float, default=86400,
                    help="seconds between the stand-in's watch BOOKMARKs (default 86400, i.e. none: the stand-in's "
                         "_follow livelocks a watch, spinning a CPU, when a bookmark falls due while events are "
                         "queued)")
    ap.add_argument("--timeout", type=float, default=180, help="seconds one latency job may take (default 180)")
    ap.add_argument("--timeout-many", type=float, default=1800,
                    help="seconds the memory section's pods may take to be submitted or deleted (default 1800)")
    ap.add_argument("--json", default="", help="write the results here (default /tmp/hpk-bench-kubelet-<UTC>.json)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, pod directories)")
    args = ap.parse_args()
    if args.n < 1 or args.warmup < 0 or args.burst < 0 or args.burst_rounds < 1 or args.memory_pods < 0 \
            or args.backlog < 0:
        ap.error("-n and --burst-rounds must be >= 1, --warmup, --burst, --backlog and --memory-pods >= 0")
    poll_ks = [int(x) for x in args.poll_pods.split(",") if x.strip()]
    if shutil.which("apptainer") is None:
        log("no apptainer on PATH (put ci/standin first on PATH for the local stand-in)")
        return 2
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    json_path = Path(args.json or f"/tmp/hpk-bench-kubelet-{stamp}.json")
    root = Path(tempfile.mkdtemp(prefix="hpk-bench-kubelet-",
                                 dir=os.environ.get("HPK_BENCH_DIR", "/tmp")))
    root.chmod(0o755)
    hpkctl = hpkctl_program(root)
    calls = Calls(root)
    # From here on every Slurm command the product (and the bare side) runs goes through a shim.
    os.environ["PATH"] = f"{calls.dir}:{os.environ['PATH']}"
    env_lines = environment(args)
    for line in env_lines:
        print(f"# {line}")
    cluster = Cluster(root, args, hpkctl)
    from hpkctl.sites import load_site

    k = load_site(str(cluster.profile)).kubelet
    extra = [f"kubelet   hpkctl kubelet + hpkctl scheduler against the Kubernetes API STAND-IN (ci/standin/kube-apiserver,"
             f" --history-size {args.history_size} --bookmark-interval {args.bookmark_interval:g}), not a real kube-apiserver; [kubelet] slurm_poll = {k.slurm_poll:g} s,"
             f" status_poll = {k.status_poll:g} s, workers = {k.workers}",
             f"sizes     -n {args.n} --warmup {args.warmup} --exit-after {args.exit_after:g} --burst {args.burst} "
             f"--burst-rounds {args.burst_rounds} --backlog {args.backlog} --poll-pods '{args.poll_pods}' --poll-window "
             f"{args.poll_window:g} --memory-pods {args.memory_pods}"]
    for line in extra:
        print(f"# {line}", flush=True)
    results: dict[str, Any] = {"environment": env_lines + extra, "args": vars(args)}
    started = time.monotonic()
    with session(cluster, root, keep=args.keep) as made:
        cluster.start()
        bench = Bench(args, root, calls, cluster)
        made.append(bench)
        bench.rss("kubelet up, Node Ready, no pods yet", 0)
        lat = bench.latency()
        bench.rss("after the latency samples (pods deleted)", 0)
        lines, summary = latency_table(lat, args.warmup)
        print("\n".join(lines), flush=True)
        results["latency"] = {"samples": lat, "summary": summary}
        if args.burst:
            bursts = [bench.burst(args.burst, "bare" if r % 2 == 0 else "hpk") for r in range(args.burst_rounds)]
            bench.rss(f"after the burst(s) of {args.burst} (pods deleted)", 0)
            lines, summary = burst_table(bursts)
            print("\n".join(lines), flush=True)
            results["burst"] = {"rounds": bursts, "summary": summary}
        if args.backlog:
            backlog = bench.backlog(args.backlog)
            print("\n".join(backlog_table(backlog)), flush=True)
            results["backlog"] = backlog
        polls = [bench.poll(kk) for kk in poll_ks]
        many = bench.many(args.memory_pods) if args.memory_pods else None
        if many:
            polls.append(many)
            bench.rss(f"after deleting the {args.memory_pods} pods", 0)
        if polls:
            print("\n".join(poll_table(polls)), flush=True)
            results["poll"] = polls
        lines, summary = memory_table(bench.memory, many)
        print("\n".join(lines))
        results["memory"] = {"moments": bench.memory, "summary": summary}
        w = cluster.watch
        if w is not None and (w.relists or w.errors):
            print(f"  (the benchmark's watch relisted {w.relists} time(s), reconnected after {len(w.errors)} error(s))")
        cpu = cluster.cpu()
        print("# CPU seconds used: " + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items()))
        results["cpu_s"] = cpu
        warnings = sum(1 for line in cluster.log("kubelet").splitlines() if " WARNING " in line or " ERROR " in line)
        print(f"# kubelet log: {warnings} warning/error line(s); duration {time.monotonic() - started:.0f} s; "
              f"load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        results["duration_s"] = time.monotonic() - started
        results["load_end"] = os.getloadavg()
        json_path.write_text(json.dumps(results, indent=1, default=str))
        print(f"# results   {json_path}")
    return 0


@contextlib.contextmanager
def session(cluster: Cluster, root: Path, *, keep: bool) -> Iterator[list[Bench]]:
    """Around a run: on failure the kubelet's log tail; always cancel what the run left in Slurm (the
    ``Bench`` appended to the list yielded), stop the cluster, remove (or keep) the temporary directory."""
    made: list[Bench] = []
    try:
        yield made
    except BaseException:
        log(f"failed; kubelet log tail:\n{cluster.log('kubelet')[-3000:]}")
        raise
    finally:
        for bench in made:
            try:
                bench.sweep()
            except Exception as e:  # noqa: BLE001
                log(f"sweep failed: {e}")
        cluster.stop()
        if keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

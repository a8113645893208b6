#!/usr/bin/env python3
"""Pilot mode against its anchors and job-per-pod, in one run: ``sudo bench/run pilot [args]``.

Two mini clusters run side by side (``bench/kubelet.py``'s ``Cluster``: the API stand-in,
``hpkctl scheduler``, ``hpkctl kubelet``), one job-per-pod and one ``--pilot``, each with a private
profile (``extends`` the site, its own state directory, node name and ``[pilot]`` shape), plus an
in-process pool of ``hpkctl.pilot`` (what ``hpkctl run --pilot`` uses). Sections:

1. **Start latency**, one pod at a time, sides in a fresh random order each round, a random 0-1 s
   pause before each sample (Slurm's 1 s tick), a warm-up round discarded. Each span runs from
   ``t0`` just before the submitting call to a file the job writes (mtime, same clock):
   bare ``sbatch`` (its first line), bare ``srun --jobid=J --exact -n1 -c1`` in a held allocation
   (pilot mode's own anchor), ``hpkctl run --detach`` (job per pod, the container's own file),
   job per pod through the API (``POST`` → ``status/c.started``), pilot in-process (render, pod
   directory, placement, ``srun`` → ``c.started``) and pilot through the API (``POST`` →
   ``c.started``). Goal: pilot through the API, median 0.15 s or less.
2. **Allocation use**: a steady stream of 1-CPU pods (``sleep 2``, one every 0.6 s, never more than
   the allocation's CPUs) through the in-process path: the steps' CPU time over the allocation's.
3. **Backlog**: ``--pods N`` pods (command ``true``) created while the scheduler is stopped, then the
   scheduler started: from its start to the last pod ``Succeeded`` (watch), for the pilot kubelet and
   the job-per-pod one, against N bare ``sbatch`` (to the last finished) and N bare 1-CPU steps in
   one allocation of the pilot shape, at most one per CPU at a time (to the last finished). Goal:
   pilot 50 pods/s or more.
4. **Memory**: ``--memory-pods K`` pods (``sleep 3600``) given to the pilot kubelet at once (most wait
   for room); its VmRSS, and its Slurm commands over ``--window`` seconds with them all tracked.
5. **Burst** (``--burst N``, off by default): N pods POSTed back to back with the scheduler running, to
   the last ``Succeeded``, and the kubelet's most VmRSS meanwhile (``--burst 1000``: issue 23's burst).

Slurm commands are counted by ``bench/kubelet.py``'s logging shims (the product's only; the
benchmark's own waits use the real binaries). Goals from issue 23 are printed next to each figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import kubelet as kb  # noqa: E402
from cpu import Meter, cpu_table  # noqa: E402
from pod_start import (TERMINAL, Latency as RunLatency, Side, environment, hpkctl_program, mtime, p90,  # noqa: E402
                       wait_files)

from hpkctl.jobs import Slurm  # noqa: E402
from hpkctl.local.pilotrun import run_pool  # noqa: E402
from hpkctl.pilot.launch import find_spot, need_of, start_pod_step  # noqa: E402
from hpkctl.pilot.pool import comment_owner  # noqa: E402
from hpkctl.pod import render_pod, write_pod_dir  # noqa: E402
from hpkctl.provider.pilotpod import pilot_enabled  # noqa: E402
from hpkctl.sites import load_site  # noqa: E402

GOALS = {"pilot API": ("pilot: create -> container running", "median 0.15 s or less"),
         "backlog": ("pilot: pods created before the scheduler starts, to all Succeeded", "50 pods/s or more"),
         "use": ("pilot: allocation use, steady stream of small pods", "80% or more"),
         "rpcs": ("Slurm RPCs per pilot pod", "1 or fewer (the step), plus O(1) per poll")}
START_GOAL, BACKLOG_GOAL, USE_GOAL = 0.15, 50.0, 0.80


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def pod(name: str, script: str, cpu: str = "1") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "uid": str(uuid.uuid4())},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "containers": [{
                "name": "c", "image": "busybox:1.36", "command": ["sh", "-c", script],
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}


def pilot_toml(args: argparse.Namespace, cpus: int, allocations: int) -> str:
    """The ``[pilot]`` shape of the benchmark's profiles (256 MB per CPU; 128 MB per pod's step)."""
    return (f"cpus = {cpus}\nmemory = \"{cpus * 256}M\"\nmax_allocations = {allocations}\n"
            f"time_limit = \"00:30:00\"\nrenewal_margin = 60\nstep_memory = \"128M\"")


class InProcess:
    """Pods through ``hpkctl.pilot`` in this process (``hpkctl run --pilot``'s pool), and bare
    ``sbatch`` and ``srun`` steps: the anchors."""

    def __init__(self, root: Path, profile_path: Path) -> None:
        self.root = root
        self.profile = pilot_enabled(load_site(str(profile_path)))
        self.slurm = Slurm(self.profile.slurm)
        self.pool = run_pool(self.slurm, self.profile)
        self.script = root / "touch.sh"
        self.script.write_text('#!/bin/bash\ntouch "$1"\n')
        self.script.chmod(0o755)
        self.bare_jobs: list[str] = []

    def held(self) -> tuple[str, str]:
        """A running allocation of the pool (requested and waited for, if none), outside any sample."""
        need = need_of(render_pod(pod("warm", "true"), self.profile))
        spot = find_spot(self.pool, need, timeout=300)
        self.pool.done(need.uid)
        return spot

    def sbatch(self, i: int, timeout: float) -> float | None:
        """Seconds to the job's first line; None (and the job cancelled) when it waited ``timeout``
        seconds in the queue: other people's jobs fill the node."""
        mark = self.root / f"sbatch-{i}"
        t0 = time.time()
        r = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--time=5",
                            f"--partition={self.profile.slurm.partition}", str(self.script), str(mark)],
                           check=True, capture_output=True, text=True)
        job = r.stdout.strip().split(";")[0]
        self.bare_jobs.append(job)
        try:
            wait_files([mark], timeout)
        except TimeoutError:
            log(f"bare sbatch job {job} waited {timeout:g} s in the queue: sample left out")
            subprocess.run(["scancel", job], capture_output=True, check=False)
            return None
        return mark.stat().st_mtime - t0

    def step(self, i: int, spot: tuple[str, str]) -> float:
        mark = self.root / f"step-{i}"
        t0 = time.time()
        proc = subprocess.Popen(["srun", f"--jobid={spot[0]}", "--exact", "-n1", "-c1", "--mem=64M", "--quiet",
                                 "--output=/dev/null", str(self.script), str(mark)])
        wait_files([mark], 60)
        proc.wait()
        return mark.stat().st_mtime - t0

    def inproc(self, i: int, script: str = "true", *, wait: bool = True) -> tuple[float, Path, Any, str]:
        doc = pod(f"bench-inproc-{i}", script)
        t0 = time.time()
        rendered = render_pod(doc, self.profile)
        write_pod_dir(rendered)
        need = need_of(rendered)
        spot = find_spot(self.pool, need, timeout=60)
        proc = start_pod_step(self.slurm, rendered, spot, need)
        started = Path(rendered.plan.pod_dir, "status", "c.started")
        if wait:
            wait_files([started], 60)
        return (started.stat().st_mtime - t0 if wait else 0.0), Path(rendered.plan.pod_dir), proc, need.uid

    def steps_burst(self, n: int, spot: tuple[str, str], cpus: int) -> dict[str, Any]:
        """``n`` bare 1-CPU steps, at most ``cpus`` at a time (as many as the allocation holds):
        from the first srun to the last step's file."""
        marks = [self.root / f"burst-step-{uuid.uuid4().hex[:8]}" for _ in range(n)]
        live: list[subprocess.Popen[bytes]] = []
        meter = Meter({}, self_children="srun (the benchmark's children)")
        t0 = time.time()
        for mark in marks:
            while len(live) >= cpus:
                live = [p for p in live if p.poll() is None]
                if len(live) >= cpus:
                    time.sleep(0.005)
            live.append(subprocess.Popen(["srun", f"--jobid={spot[0]}", "--exact", "-n1", "-c1", "--mem=64M",
                                          "--quiet", "--output=/dev/null", str(self.script), str(mark)]))
        for p in live:
            p.wait()
        wait_files(marks, 120)
        ends = [m.stat().st_mtime for m in marks if m.exists()]
        cpu = meter.stop(spot[0], "", n)
        return {"n": n, "ok": len(ends), "finished": max(ends) - t0 if ends else float("nan"), "cpu": cpu}


# ---------------------------------------------------------------------------- 1: latency


def latency(args: argparse.Namespace, ip: InProcess, spot: tuple[str, str], run: RunLatency,
            jpp: kb.Bench | None, pil: kb.Bench, calls: kb.Calls) -> dict[str, Any]:
    keys = ["sbatch", "srun step", "pilot in-process", "pilot API"]
    keys += ["hpkctl run", "API job per pod"] if jpp is not None else []
    sides: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    run_side = Side("hpkctl run --detach")
    rpcs: list[Counter[str]] = []

    def one(side: str, i: int) -> dict[str, Any]:
        if side == "sbatch":
            took = ip.sbatch(i, args.timeout)
            return {"start": took, "ok": took is not None}
        if side == "srun step":
            return {"start": ip.step(i, spot), "ok": True}
        if side == "hpkctl run":
            run.hpk(run_side, True)
            got = run_side.samples[-1]
            return {"start": got.times["ran"], "ok": got.ok}
        if side == "pilot in-process":
            calls.take()
            took, _, proc, uid = ip.inproc(i)
            rpcs.append(kb.count(calls.take()))
            proc.wait()
            ip.pool.done(uid)
            return {"start": took, "ok": True}
        bench = pil if side == "pilot API" or jpp is None else jpp
        s, counted, _ = bench.lat_hpk(f"lat-{'p' if bench is pil else 'j'}{i}-{uuid.uuid4().hex[:6]}")
        t = s["t"]
        return {"start": t["c_started"], "ok": s["ok"], "t": t, "calls": dict(kb.count(counted))}

    for i in range(args.n + 1):
        order = list(sides)
        random.shuffle(order)
        for side in order:
            time.sleep(random.random())
            got = one(side, i)
            if i > 0:  # round 0 warms up (image cache, imports, allocations)
                sides[side].append(got)
        if i == 0:
            rpcs.clear()
        for b in (jpp, pil):
            if b is not None:
                b.cluster.alive()
    return {"sides": sides, "inproc_calls": [dict(c) for c in rpcs]}


def latency_lines(lat: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    sides = lat["sides"]
    anchor = [s["start"] for s in sides["srun step"]]
    labels = {"sbatch": "bare sbatch: job script started",
              "srun step": "bare srun step in a held allocation: started",
              "hpkctl run": "job per pod, hpkctl run --detach: workload ran",
              "API job per pod": "job per pod through the API: container started",
              "pilot in-process": "pilot in-process: container started",
              "pilot API": GOALS["pilot API"][0] + " (API)"}
    out = ["1. start latency, seconds from the submitting call (one pod at a time, sides in random order per round)",
           f"  {'side':58} {'n':>3} {'median':>7} {'p90':>7}  {'/srun':>6}"]
    summary: dict[str, Any] = {}
    for key, label in labels.items():
        if key not in sides:
            continue
        xs = [s["start"] for s in sides[key] if s["ok"] and s["start"] is not None]
        if not xs:
            out.append(f"  {label:58} (no successful samples)")
            continue
        med = statistics.median(xs)
        line = f"  {label:58} {len(xs):3d} {med:7.3f} {p90(xs):7.3f}  {med / statistics.median(anchor):6.2f}"
        if key == "pilot API":
            met = med <= START_GOAL
            line += f"   goal: {GOALS['pilot API'][1]}: {'met' if met else 'MISSED'}"
            summary = {"median": med, "p90": p90(xs), "goal_met": met}
        out.append(line)
        if key == "pilot API":  # what a user sees: kubectl's Running (the kubelet noticed and patched)
            run = [s["t"]["running"] for s in sides[key] if s["ok"] and s["t"].get("running") is not None]
            if run:
                rmed = statistics.median(run)
                out.append(f"  {'pilot: create -> phase Running in the API (API)':58} {len(run):3d} {rmed:7.3f} "
                           f"{p90(run):7.3f}  {rmed / statistics.median(anchor):6.2f}   goal: {GOALS['pilot API'][1]}: "
                           f"{'met' if rmed <= START_GOAL else 'MISSED'}")
                summary["running_median"] = rmed
        failed = sum(1 for s in sides[key] if not s["ok"])
        if failed:
            out.append(f"    ({failed} failed sample(s) excluded)")
    steps = (("POST -> bound (scheduler)", "", "bound"),
             ("bound -> sbatch/srun returned (kubelet: watch, queue, render, pod dir)", "bound", "srun"),
             ("sbatch/srun returned -> job script started (Slurm)", "srun", "job_started"),
             ("job script started -> c.started (the runtime's set-up)", "job_started", "c_started"),
             ("c.started -> phase Running seen (status round, patch, watch)", "c_started", "running"),
             ("c.started -> workload ran (the container)", "c_started", "ran"))
    out.append("  where the time goes through the API (median of each sample's step; sbatch/srun returned = the "
               "kubelet's record rewritten with the job id)")
    out.append(f"  {'step':58} {'job per pod':>11} {'pilot':>7}")
    for label, a, b in steps:
        vals = []
        for key in ("API job per pod", "pilot API"):
            xs = [s["t"][b] - (s["t"][a] if a else 0.0) for s in sides.get(key, [])
                  if s["ok"] and s["t"].get(b) is not None and (not a or s["t"].get(a) is not None)]
            vals.append(f"{statistics.median(xs):.3f}" if xs else "-")
        out.append(f"  {label:58} {vals[0]:>11} {vals[1]:>7}")
    ip_calls = sum((Counter(c) for c in lat["inproc_calls"]), Counter())
    n_ip = max(len(lat["inproc_calls"]), 1)
    api_calls = sum((Counter(s.get("calls") or {}) for s in sides["pilot API"]), Counter())
    n_api = max(len(sides["pilot API"]), 1)
    per_pod = sum(ip_calls.values()) / n_ip
    out.append(f"  {GOALS['rpcs'][0]}: in-process {per_pod:.1f} per pod ({kb.per(ip_calls, n_ip)}); through the "
               f"pilot kubelet, a pod's whole life (its status rounds included): {kb.per(api_calls, n_api)}   "
               f"goal: {GOALS['rpcs'][1]}: {'met' if per_pod <= 1.0 else 'MISSED'}")
    return out, summary


# ---------------------------------------------------------------------------- 2: allocation use


def stream(ip: InProcess, pods: int) -> dict[str, Any]:
    """A 1-CPU pod sleeping 2 s every 0.6 s (not waiting for its container), never more pods at
    once than the allocation has CPUs: a pod whose step ended frees its CPU in the books at once."""
    cpus = ip.profile.pilot.cpus
    started: list[tuple[Any, str, Path]] = []
    live: list[tuple[Any, str]] = []
    due = time.monotonic()
    for i in range(pods):
        while True:
            for proc, uid in [x for x in live if x[0].poll() is not None]:
                ip.pool.done(uid)
                live.remove((proc, uid))
            if len(live) < cpus:
                break
            time.sleep(0.01)
        _, pod_dir, proc, uid = ip.inproc(1000 + i, "sleep 2", wait=False)
        started.append((proc, uid, pod_dir))
        live.append((proc, uid))
        due += 0.6
        time.sleep(max(0.0, due - time.monotonic()))
    spans = []
    for proc, uid, pod_dir in started:
        proc.wait()
        ip.pool.done(uid)
        st = pod_dir / "status"
        spans.append(((st / "job.started").stat().st_mtime, (st / "pod.done").stat().st_mtime))
    window = max(e for _, e in spans) - min(s for s, _ in spans)
    return {"pods": pods, "cpus": cpus, "window_s": window,
            "use": sum(e - s for s, e in spans) / (cpus * window)}


# ---------------------------------------------------------------------------- 3: backlog to Succeeded


def backlog(bench: kb.Bench, n: int) -> dict[str, Any]:
    """``n`` pods created while the scheduler is stopped, then the scheduler started: from its start
    to the last pod seen ``Succeeded``; then they are deleted (untimed)."""
    tag = uuid.uuid4().hex[:6]
    names = [f"backlog-{tag}-{i}" for i in range(n)]
    w, cluster = bench.watch, bench.cluster
    cluster.stop_scheduler()
    uids = []
    try:
        posted = time.time()
        for nm in names:
            uids.append(bench.create(kb.pod_body(nm, ["true"])))
        posted = time.time() - posted
    finally:
        bench.calls.take()
        cpu0 = cluster.cpu()
        meter = Meter({"API stand-in": cluster.procs["apiserver"].pid, "kubelet": cluster.kubelet_pid})
        t0 = time.time()
        cluster.start_scheduler()
        meter.add_new("scheduler", cluster.procs["scheduler"].pid)
    w.wait(f"{n} backlog pods to end", lambda: all((x := w.pods.get(nm)) and x.terminal() for nm in names), 1800)
    cpu = {k: v - cpu0.get(k, 0.0) for k, v in cluster.cpu().items()}
    held = owned_jobs(bench.calls, {("kubelet", cluster.node)})
    by_part = meter.stop(held[0] if held else "", tag, n) if cluster.pilot is not None else None
    timed = kb.count(bench.calls.take())
    seen = [x for nm in names if (x := w.get(nm)) is not None]

    def last(xs: list[float | None]) -> float | None:
        got = [x for x in xs if x is not None]
        return max(got) - t0 if got else None

    t = {"bound": last([x.bound for x in seen]), "annotated": last([x.annotated for x in seen]),
         "succeeded": last([x.phases.get("Succeeded") for x in seen])}
    ok = sum(1 for x in seen if x.terminal() == "Succeeded")
    occupancy = steps_at_once(cluster, uids)
    bench.delete(names, 1800)
    return {"n": n, "ok": ok, "posts_s": posted, "t": t, "calls": dict(timed), "cpu_s": cpu, "steps": occupancy,
            "cpu": by_part}


def steps_at_once(cluster: kb.Cluster, uids: list[str]) -> dict[str, Any]:
    """What bounds a backlog: each pod's job script started -> ``pod.done`` (its step's busy time), the
    most steps that ran at once, and the mean (the steps' busy time over the span from the first start
    to the last end): a mean below the allocation's CPUs is room left idle between steps."""
    spans = []
    for uid in uids:
        st = cluster.pod_dir(uid) / "status"
        a, b = mtime(st / "job.started"), mtime(st / "pod.done")
        if a is not None and b is not None:
            spans.append((a, b))
    if not spans:
        return {}
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    window = max(b for _, b in spans) - min(a for a, _ in spans)
    busy = [b - a for a, b in spans]
    # room idle between steps: each start after the first wave, from the last pod.done before it (that
    # pod's srun ending, the kubelet's create, Slurm's step launch)
    dones = sorted(b for _, b in spans)
    gaps = [a - max(d for d in dones if d <= a) for a, _ in sorted(spans)[most:] if dones[0] <= a]
    return {"n": len(spans), "busy_median": statistics.median(busy), "busy_p90": p90(busy), "most": most,
            "mean": sum(busy) / window if window > 0 else float("nan"),
            "gap_median": statistics.median(gaps) if gaps else None, "window": window}


def backlog_lines(n: int, res: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    out = [f"3. backlog: {n} pods ('true') created while the scheduler was stopped, then the scheduler started; "
           "seconds from its start (bare: from the first submit)",
           f"  {'side':42} {'ok':>5} {'all bound':>9} {'all submitted':>13} {'all done':>9} {'pods/s':>7}"]
    summary: dict[str, Any] = {}
    for key, label in (("sbatch", "bare sbatch loop, to the last finished"),
                       ("steps", "bare 1-CPU steps, one per CPU at a time"),
                       ("jpp", "job per pod (kubelet), to all Succeeded"),
                       ("pilot", "pilot (kubelet --pilot), to all Succeeded")):
        r = res.get(key)
        if r is None:
            continue
        t = r.get("t") or {}
        done = t.get("succeeded") if key in ("jpp", "pilot") else r["finished"]
        rate = n / done if done else float("nan")

        def f(x: float | None) -> str:
            return f"{x:.2f}" if x is not None else "-"

        line = (f"  {label:42} {r['ok']:5d} {f(t.get('bound')):>9} {f(t.get('annotated')):>13} {f(done):>9} "
                f"{rate:7.1f}")
        if key == "pilot":
            met = rate >= BACKLOG_GOAL
            line += f"   goal: {GOALS['backlog'][1]}: {'met' if met else 'MISSED'}"
            summary = {"pods_per_s": rate, "goal_met": met}
        out.append(line)
    for key in ("jpp", "pilot"):
        r = res.get(key)
        if r is not None:
            out.append(f"  {key}: Slurm commands per pod {kb.per(Counter(r['calls']), n)}; CPU seconds "
                       + ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["cpu_s"].items())))
            out += occupancy_lines(r.get("steps") or {})
    sides = {label: res[key]["cpu"] for key, label in (("pilot", "pilot"), ("steps", "bare steps"))
             if key in res and res[key].get("cpu")}
    if sides:
        out += cpu_table(sides, n)
    return out, summary


def occupancy_lines(s: dict[str, Any]) -> list[str]:
    if not s:
        return []
    return [f"    what bounds it: a pod's job script started -> pod.done median {s['busy_median']:.2f} s "
            f"(p90 {s['busy_p90']:.2f}); pods running at once: at most {s['most']}, on average {s['mean']:.2f}; "
            f"a step's start after the last pod.done before it: median "
            + (f"{s['gap_median']:.2f} s" if s.get("gap_median") is not None else "-"),
            f"    steady state, without the allocation's start: the first job script started -> the last pod.done "
            f"{s['window']:.2f} s, {s['n'] / s['window']:.1f} pods/s" if s.get("window") else "    steady state: -"]


# ---------------------------------------------------------------------------- 5: a burst to Succeeded


def burst(bench: kb.Bench, n: int) -> dict[str, Any]:
    """``n`` pods (``true``) POSTed back to back with the scheduler running (``bench/kubelet.py``'s
    burst), to the last seen ``Succeeded``; the kubelet's VmRSS read every 0.5 s meanwhile (its most
    is the figure: the pods are deleted at the end, untimed)."""
    before = bench.cluster.memory().get("VmRSS") or 0
    most = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            most.append(bench.cluster.memory().get("VmRSS") or 0)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        res = bench.burst_hpk(n)
    finally:
        stop.set()
        t.join()
    res["rss_kb"] = {"before": before, "most": max(most)}
    return res


def burst_lines(r: dict[str, Any]) -> list[str]:
    t = r["t"]
    done = t.get("succeeded")
    rate = r["n"] / done if done else float("nan")
    mb = {k: v * 1024 / 1e6 for k, v in r["rss_kb"].items()}
    return [f"5. burst: {r['n']} pods ('true') POSTed back to back to the pilot kubelet (scheduler running): "
            f"{r['ok']} Succeeded; all POSTed {t['submitted']:.1f} s, all bound {t['bound'] or 0:.1f} s, all Succeeded "
            f"{done or 0:.1f} s: {rate:.1f} pods/s   goal (the backlog's): {GOALS['backlog'][1]}: "
            f"{'met' if rate >= BACKLOG_GOAL else 'MISSED'}",
            f"  a pod's job script started -> pod.done median {r['job_duration_median'] or 0:.2f} s; Slurm commands "
            f"per pod {kb.per(Counter(r['calls']), r['n'])}; CPU seconds "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["cpu_s"].items())),
            f"  kubelet VmRSS: {mb['before']:.1f} MB before, at most {mb['most']:.1f} MB during the burst   goal "
            f"(kubelet.py's): <= {kb.RSS_GOAL_MB:.0f} MB: {'met' if mb['most'] <= kb.RSS_GOAL_MB else 'MISSED'}"]


# ---------------------------------------------------------------------------- 4: memory with many pods


def many(bench: kb.Bench, k: int, window: float) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    names = [f"mem-{tag}-{i}" for i in range(k)]
    w = bench.watch
    before = bench.cluster.memory()
    t0 = time.time()
    for nm in names:
        bench.create(kb.pod_body(nm, ["sleep", "3600"]))
    posted = time.time() - t0
    w.wait(f"{k} pods to be bound", lambda: all((x := w.pods.get(nm)) and x.bound for nm in names), 1800)
    time.sleep(bench.settle())
    settled = bench.cluster.memory()
    res = bench.window(k, window, names)
    after = bench.cluster.memory()
    running = sum(1 for nm in names if (x := w.get(nm)) and x.annotated)
    t_del = time.time()
    bench.delete(names, 1800)
    res.update(posted_s=posted, running=running, delete_s=time.time() - t_del,
               rss_kb={"before": before.get("VmRSS"), "settled": settled.get("VmRSS"), "after": after.get("VmRSS")},
               hwm_kb=after.get("VmHWM"))
    return res


def many_lines(m: dict[str, Any]) -> list[str]:
    mb = {k: (v or 0) * 1024 / 1e6 for k, v in m["rss_kb"].items()}
    c = Counter(m["calls"])
    return [f"4. the pilot kubelet with {m['k']} pods (sleep 3600) at once: {m['running']} running as steps, the rest "
            f"waiting for room; POSTs took {m['posted_s']:.1f} s, deleting them {m['delete_s']:.1f} s",
            f"  VmRSS: {mb['before']:.1f} MB before, {mb['settled']:.1f} MB with them all tracked, {mb['after']:.1f} MB "
            f"after the window (VmHWM {(m['hwm_kb'] or 0) * 1024 / 1e6:.1f} MB)   goal (kubelet.py's): <= "
            f"{kb.RSS_GOAL_MB:.0f} MB: {'met' if mb['settled'] <= kb.RSS_GOAL_MB else 'MISSED'}",
            f"  Slurm commands over {m['window_s']:.0f} s with them tracked: " + kb.per(c, 1) +
            f" ({sum(c.values()) / m['window_s']:.1f} per s; [kubelet] slurm_poll {m['slurm_poll']:g} s)"]


# ---------------------------------------------------------------------------- main


class CountedCalls:
    """``bench/kubelet.py``'s shims seen as ``pod_start.py``'s (``take`` gives a Counter)."""

    def __init__(self, calls: kb.Calls) -> None:
        self._calls = calls

    def take(self) -> Counter[str]:
        return kb.count(self._calls.take())

    def queued(self) -> float | None:
        """Not timed: these shims log commands only (pod_start.py's time when sbatch returned)."""
        return None

    def timed_env(self) -> dict[str, str]:
        return dict(os.environ)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._calls, name)


def owned_jobs(calls: kb.Calls, comments: set[tuple[str, str]]) -> list[str]:
    """This user's pilot allocations whose job comment names one of ``comments`` (owner, node)."""
    r = subprocess.run([calls.real["squeue"] or "squeue", "--noheader", "--me", "--format=%i|%k"],
                       capture_output=True, text=True, check=False)
    return [jid for line in r.stdout.splitlines() for jid, _, comment in [line.strip().partition("|")]
            if comment_owner(comment.strip()) in comments]


def sweep(calls: kb.Calls, comments: set[tuple[str, str]], jobs: list[str]) -> None:
    """Cancel this run's allocations (by their job comment) and bare jobs still there (real scancel)."""
    left = owned_jobs(calls, comments)
    st = calls.states(jobs) if jobs else {}
    left += [j for j, s in st.items() if s not in TERMINAL]
    if left:
        log(f"cancelling {len(left)} leftover job(s)")
        calls.cancel(left)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10, help="latency samples per side, after a warm-up round (default 10)")
    ap.add_argument("--stream", type=int, default=16, help="pods in the allocation-use stream (0 skips; default 16)")
    ap.add_argument("--pods", type=int, default=200, help="pods in the backlog (0 skips; default 200)")
    ap.add_argument("--burst", type=int, default=0, help="pods POSTed back to back to the pilot kubelet, to all "
                    "Succeeded, with its most VmRSS meanwhile (0 skips, the default: 1000 takes ~5 min here)")
    ap.add_argument("--memory-pods", type=int, default=1000, help="pods for the memory section (0 skips; default 1000)")
    ap.add_argument("--window", type=float, default=20, help="seconds Slurm commands are counted with the memory "
                    "section's pods tracked (default 20)")
    ap.add_argument("--pilot-cpus", type=int, default=4, help="CPUs of each pilot allocation of the kubelet and of "
                    "the bare steps' backlog (default 4; the in-process pool's are 2: other people's jobs share "
                    "the node, and a job-per-pod sample must not wait for a free CPU)")
    ap.add_argument("--pilot-allocations", type=int, default=1, help="[pilot] max_allocations of the kubelet (default 1)")
    ap.add_argument("--no-job-per-pod", action="store_true", help="leave out the job-per-pod kubelet and hpkctl run")
    ap.add_argument("--site", default="ci")
    ap.add_argument("--partition", default="debug")
    ap.add_argument("--timeout", type=float, default=180, help="seconds one latency sample may take (default 180)")
    ap.add_argument("--json", default="", help="write the results here (default /tmp/hpk-bench-pilot-<UTC>.json)")
    args = ap.parse_args()
    # what bench/kubelet.py's Cluster and Bench read
    args.slurm_poll = args.status_poll = None
    args.history_size, args.bookmark_interval, args.exit_after, args.warmup = 100000, 86400, 0.0, 0
    root = Path(tempfile.mkdtemp(prefix="hpk-bench-pilot-", dir=os.environ.get("HPK_BENCH_DIR", "/tmp")))
    root.chmod(0o755)
    calls = kb.Calls(root)
    os.environ["PATH"] = f"{calls.dir}:{os.environ['PATH']}"
    tag = f"{os.getpid()}"
    hpkctl = hpkctl_program(root)
    env_lines = environment(args)
    for line in env_lines:
        print(f"# {line}")
    sub = {name: root / name for name in ("jpp", "pilot", "inproc")}
    for d in sub.values():
        d.mkdir()
    # idle_release 600: an idle pilot kubelet never refreshes its books (no status round without pods), so
    # its allocation could end by itself (after 2 x idle_release) between two sections unseen
    site_pilot = pilot_toml(args, args.pilot_cpus, args.pilot_allocations) + "\nidle_release = 600"
    pilot_cluster = kb.Cluster(sub["pilot"], args, hpkctl, pilot=site_pilot, node=f"bench-pilot-{tag}")
    jpp_cluster = None if args.no_job_per_pod else kb.Cluster(sub["jpp"], args, hpkctl)
    ip_profile = sub["inproc"] / "site.toml"
    ip_profile.write_text(f'extends = "{args.site}"\n\n[pods]\nstate_dir = "{sub["inproc"] / "state"}"\n'
                          f'node_name = "bench-run-{tag}"\n\n[pilot]\n{pilot_toml(args, 2, 1)}\nidle_release = 600\n')
    (sub["inproc"] / "state").mkdir()
    comments = {("kubelet", f"bench-pilot-{tag}"), ("run", f"bench-run-{tag}")}  # (owner, node), any state dir
    print(f"# pilot     kubelet --pilot, [pilot] {site_pilot.replace(chr(10), '; ')}; in-process: 2 CPUs; "
          f"sizes -n {args.n} --stream {args.stream} --pods {args.pods} --burst {args.burst} --memory-pods "
          f"{args.memory_pods}", flush=True)
    comments.add(("run", f"bench-steps-{tag}"))
    ip: list[InProcess] = []
    try:
        with contextlib.ExitStack() as stack:  # each cluster: log tail on failure, sweep, stop
            made = stack.enter_context(kb.session(pilot_cluster, sub["pilot"], keep=True))
            pilot_cluster.start()
            made.append(kb.Bench(args, sub["pilot"], calls, pilot_cluster))
            if jpp_cluster is not None:
                made_j = stack.enter_context(kb.session(jpp_cluster, sub["jpp"], keep=True))
                jpp_cluster.start()
                made_j.append(kb.Bench(args, sub["jpp"], calls, jpp_cluster))
                made.append(made_j[0])
            run(args, root, calls, made, ip, sub, tag, site_pilot, hpkctl, env_lines)
    finally:
        for one in ip:
            one.pool.release_all()
        sweep(calls, comments, [j for one in ip for j in one.bare_jobs])
        if os.environ.get("HPK_BENCH_KEEP"):
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def run(args: argparse.Namespace, root: Path, calls: kb.Calls, made: list[kb.Bench], ip: list[InProcess],
        sub: dict[str, Path], tag: str, site_pilot: str, hpkctl: str, env_lines: list[str]) -> None:
    """The sections, in order; ``made``: the pilot kubelet's bench, then the job-per-pod one's (if any);
    ``ip`` gets each in-process pool made, for the caller to release."""
    pil, jpp = made[0], (made[1] if len(made) > 1 else None)
    results: dict[str, Any] = {"environment": env_lines, "args": vars(args)}
    started = time.monotonic()
    first = InProcess(sub["inproc"], sub["inproc"] / "site.toml")
    ip.append(first)
    spot = first.held()
    print(f"# in-process pilot allocation {spot[0]} on {spot[1]} ({first.profile.pilot.cpus} CPUs)", flush=True)
    summary: dict[str, Any] = {}
    if args.n:
        lat = latency(args, first, spot, RunLatency(args, root, CountedCalls(calls), hpkctl),  # type: ignore[arg-type]
                      jpp, pil, calls)
        lines, summary["latency"] = latency_lines(lat)
        print("\n".join(lines), flush=True)
        results["latency"] = lat
    if args.stream:
        use = stream(first, args.stream)
        met = use["use"] >= USE_GOAL
        print(f"2. {GOALS['use'][0]}: {use['use']:.0%} of {use['cpus']} CPUs over {use['window_s']:.1f} s "
              f"({use['pods']} pods)   goal: {GOALS['use'][1]}: {'met' if met else 'MISSED'}", flush=True)
        results["stream"] = use
        summary["use"] = {"use": use["use"], "goal_met": met}
    first.pool.release_all()
    if args.pods:
        res: dict[str, Any] = {}
        bare = pil.burst_bare(args.pods)
        res["sbatch"] = {"ok": bare["ok"], "finished": bare["t"]["finished"]}
        big = InProcess(sub["inproc"], _shaped(sub["inproc"], args, tag, site_pilot))
        ip.append(big)
        res["steps"] = big.steps_burst(args.pods, big.held(), args.pilot_cpus)
        big.pool.release_all()
        if jpp is not None:
            res["jpp"] = backlog(jpp, args.pods)
        res["pilot"] = backlog(pil, args.pods)
        lines, summary["backlog"] = backlog_lines(args.pods, res)
        print("\n".join(lines), flush=True)
        results["backlog"] = res
    if args.burst:
        b = burst(pil, args.burst)
        print("\n".join(burst_lines(b)), flush=True)
        results["burst"] = b
    if args.memory_pods:
        m = many(pil, args.memory_pods, args.window)
        print("\n".join(many_lines(m)), flush=True)
        results["memory"] = m
    results["summary"] = summary
    results["cpu_s"] = {"pilot": pil.cluster.cpu(), "jpp": jpp.cluster.cpu() if jpp else {}}
    print(f"# duration {time.monotonic() - started:.0f} s; load average at end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(args.json or f"/tmp/hpk-bench-pilot-{stamp}.json")
    out.write_text(json.dumps(results, indent=1, default=str))
    print(f"# results   {out}")


def _shaped(d: Path, args: argparse.Namespace, tag: str, site_pilot: str) -> Path:
    """A profile for the bare steps' backlog: the kubelet's allocation shape, its own owner name."""
    p = d / "steps.toml"
    p.write_text(f'extends = "{args.site}"\n\n[pods]\nstate_dir = "{d / "state"}"\nnode_name = "bench-steps-{tag}"\n'
                 f"\n[pilot]\n{site_pilot}\n")  # idle_release: the kubelet's, longer than the steps' backlog
    return p


if __name__ == "__main__":
    sys.exit(main())

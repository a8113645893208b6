#!/usr/bin/env python3
"""Pilot mode against its anchors, in one run: ``sudo bench/run pilot [-n 10] [--stream 16]``.

Sides, interleaved (each sample after a random 0-1 s pause, so Slurm's 1 s tick hits all alike):

* ``sbatch``: bare ``sbatch`` of a script whose first line touches a file (the job-per-pod anchor);
* ``srun step``: bare ``srun --jobid=J --exact -n1 -c1 --mem=64M`` of the same script in an
  allocation held for the whole run (pilot mode's own anchor: what a step costs at best);
* ``pilot in-process``: a one-container pod through ``hpkctl.pilot`` from a running process (render,
  pod directory, placement, ``srun``) until its container started (``status/c.started``): what a
  pilot kubelet would pay per pod after the API. ``hpkctl run --pilot`` adds the CLI's start-up,
  the same as for a job of its own (``bench/run`` measures that).

Span: ``t0`` just before the command starts → the file's mtime. Then a steady stream of small
pods (1 CPU, ``sleep 2``, one every 0.5 s) through the in-process path measures allocation use:
the CPU time the pods' steps held (their CPUs x their start-to-end) over the CPU time the allocation
held while the stream ran (its CPUs x first start to last end). Slurm commands per pilot pod are
counted with logging shims. Goals from issue 23 are printed next to each figure. Not measured here:
the path through the API server and the kubelet (pilot mode has no kubelet yet), bursts of 1,000.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pod_start import Calls, p90, wait_files  # noqa: E402
from hpkctl.jobs import Slurm  # noqa: E402
from hpkctl.local.pilotrun import run_pool  # noqa: E402
from hpkctl.provider.pilotpod import pilot_enabled  # noqa: E402
from hpkctl.pilot.launch import find_spot, need_of, start_pod_step  # noqa: E402
from hpkctl.pod import render_pod, write_pod_dir  # noqa: E402
from hpkctl.sites import load_site  # noqa: E402

GOALS = {"pilot: create -> container running": "median 0.15 s or less",
         "pilot: allocation use, steady stream of small pods": "80% or more",
         "Slurm RPCs per pilot pod": "1 or fewer (the step), plus O(1) per poll"}


def pod(name: str, script: str, cpu: str = "1") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "uid": str(uuid.uuid4())},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "containers": [{
                "name": "c", "image": "busybox:1.36", "command": ["sh", "-c", script],
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}


class Bench:
    def __init__(self, root: Path, site: str) -> None:
        self.root = root
        self.calls = Calls(root)
        os.environ["PATH"] = f"{self.calls.dir}:{os.environ['PATH']}"
        self.profile = pilot_enabled(load_site(site))
        self.slurm = Slurm(self.profile.slurm)
        self.pool = run_pool(self.slurm, self.profile)
        self.script = root / "touch.sh"
        self.script.write_text('#!/bin/bash\ntouch "$1"\n')
        self.script.chmod(0o755)

    def held(self) -> tuple[str, str]:
        """A running allocation of the run pool (requested and waited for, if none), outside any sample."""
        need = need_of(render_pod(pod("warm", "true"), self.profile))
        spot = find_spot(self.pool, need, timeout=300)
        self.pool.done(need.uid)
        return spot

    def sbatch(self, i: int) -> float:
        mark = self.root / f"sbatch-{i}"
        t0 = time.time()
        subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--time=5", f"--partition={self.profile.slurm.partition}",
                        str(self.script), str(mark)], check=True, capture_output=True)
        wait_files([mark], 120)
        return mark.stat().st_mtime - t0

    def step(self, i: int, spot: tuple[str, str]) -> float:
        mark = self.root / f"step-{i}"
        t0 = time.time()
        proc = subprocess.Popen(["srun", f"--jobid={spot[0]}", "--exact", "-n1", "-c1", "--mem=64M", "--quiet",
                                 "--output=/dev/null", str(self.script), str(mark)])
        wait_files([mark], 60)
        proc.wait()
        return mark.stat().st_mtime - t0

    def inproc(self, i: int, script: str = "true", *, wait: bool = True) -> tuple[float, Path, object, int]:
        doc = pod(f"bench-inproc-{i}", script)
        t0 = time.time()
        rendered = render_pod(doc, self.profile)
        write_pod_dir(rendered)
        need = need_of(rendered)
        spot = find_spot(self.pool, need, timeout=60)
        proc = start_pod_step(self.slurm, rendered, spot, need)
        started = Path(rendered.plan.pod_dir, "status", "c.started")
        if not wait:
            return 0.0, Path(rendered.plan.pod_dir), (proc, need.uid), need.cpus
        wait_files([started], 60)
        return started.stat().st_mtime - t0, Path(rendered.plan.pod_dir), (proc, need.uid), need.cpus


def summary(label: str, xs: list[float], anchor: list[float] | None = None) -> str:
    med = statistics.median(xs)
    ratio = f"  ratio to anchor {med / statistics.median(anchor):.2f}" if anchor else ""
    goal = f"   goal: {GOALS[label]}" if label in GOALS else ""
    return f"{label:<42} median {med:6.3f} s  p90 {p90(xs):6.3f} s  (n={len(xs)}){ratio}{goal}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="samples per side")
    ap.add_argument("--stream", type=int, default=16, help="pods in the allocation-use stream")
    ap.add_argument("--site", default="ci")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hpk-bench-pilot-", dir="/tmp"))
    b = Bench(root, args.site)
    spot = b.held()
    print(f"pilot allocation {spot[0]} on {spot[1]} ({b.profile.pilot.cpus} CPUs), commit "
          f"{os.environ.get('HPK_BENCH_COMMIT', '?')}", flush=True)
    sides: dict[str, list[float]] = {"sbatch": [], "srun step": [], "pilot in-process": []}
    rpcs: list[int] = []
    for i in range(args.n + 1):
        order: list[Callable[[], None]] = [
            lambda: sides["sbatch"].append(b.sbatch(i)),
            lambda: sides["srun step"].append(b.step(i, spot)),
        ]
        for run in order:
            time.sleep(random.random())
            run()
        time.sleep(random.random())
        b.calls.take()
        took, _, (proc, uid), _ = b.inproc(i)
        counted = b.calls.take()
        proc.wait()  # type: ignore[attr-defined]
        b.pool.done(uid)  # type: ignore[arg-type]
        sides["pilot in-process"].append(took)
        rpcs.append(sum(counted.values()))
        if i == 0:  # warm-up (image cache, imports)
            for xs in sides.values():
                xs.clear()
            rpcs.clear()
    print(summary("sbatch (job-per-pod anchor): start", sides["sbatch"]))
    print(summary("srun step in a held allocation: start", sides["srun step"]))
    print(summary("pilot: create -> container running", sides["pilot in-process"], sides["srun step"]))
    print(f"{'Slurm RPCs per pilot pod':<42} {statistics.mean(rpcs):.1f} commands per pod "
          f"(shims: srun, squeue, scontrol...)   goal: {GOALS['Slurm RPCs per pilot pod']}")
    # steady stream: a 1-CPU pod sleeping 2 s every 0.6 s (not waiting for its container): about as
    # many at once as the allocation has CPUs; a pod whose step ended frees its CPU in the books at
    # once, and the stream never runs more pods than CPUs (so it needs no second allocation)
    cpus = b.profile.pilot.cpus
    running: list[tuple[object, Path]] = []
    live: list[tuple[object, str]] = []
    due = time.monotonic()
    for i in range(args.stream):
        while True:
            for proc, uid in [x for x in live if x[0].poll() is not None]:  # type: ignore[attr-defined]
                b.pool.done(uid)
                live.remove((proc, uid))
            if len(live) < cpus:
                break
            time.sleep(0.01)
        _, pod_dir, (proc, uid), _ = b.inproc(1000 + i, "sleep 2", wait=False)
        running.append(((proc, uid), pod_dir))
        live.append((proc, uid))
        due += 0.6
        time.sleep(max(0.0, due - time.monotonic()))
    spans = []
    for (proc, uid), pod_dir in running:  # type: ignore[misc]
        proc.wait()
        b.pool.done(uid)
        s, e = (pod_dir / "status" / "job.started").stat().st_mtime, (pod_dir / "status" / "pod.done").stat().st_mtime
        spans.append((s, e))
    window = max(e for _, e in spans) - min(s for s, _ in spans)
    use = sum(e - s for s, e in spans) / (b.profile.pilot.cpus * window)
    print(f"{'pilot: allocation use, steady stream of small pods':<42} {use:.0%} of {b.profile.pilot.cpus} CPUs "
          f"over {window:.1f} s ({args.stream} pods)   goal: {GOALS['pilot: allocation use, steady stream of small pods']}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

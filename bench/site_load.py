#!/usr/bin/env python3
"""The load ``hpkctl kubelet`` puts on a site: Slurm commands per minute and file-system metadata
operations per second, for K tracked pods, idle and busy (README.md, "Load on your site").

Run as the normal user with the Apptainer stand-in first on PATH: ``sudo bench/run site-load [args]``.
The mini cluster is ``bench/kubelet.py``'s (API stand-in, ``hpkctl scheduler``, ``hpkctl kubelet``,
private profile extending ``--site``); for each K in ``--pods``:

* **idle**: K pods, created, submitted and settled; then a window of ``--window`` seconds in which
  nothing of theirs changes. ``--running`` of them (4) run ``sleep 3600``; the rest wait for a
  ``--begin`` an hour ahead (pending), so the benchmark never fills a Slurm others share (the
  kubelet tracks both alike: a pending pod's job may start at any moment).
* **busy**: K pods ``true`` created at once; the window runs from the first ``POST`` until the last
  pod is seen ``Succeeded`` (every pod is submitted, starts, writes its status files and ends).

Every pod's job gets ``--nice=1000`` (other users' jobs go first), and the kubelet keeps pod
directories (``keep_pod_dirs``) for the whole run, so no clean-up of earlier pods falls into a window.

In each window: the product's Slurm commands, counted by the logging shims of ``kubelet.py``
(``squeue`` apart from the rest: ``sbatch``/``scancel`` follow the pods created and deleted, the
polling is ``squeue``), and the kubelet process's file-system metadata calls, counted by ``strace
-c -e trace=%file,getdents64`` attached to every thread of the kubelet (not its children: ``squeue``'s
own library loading is not the kubelet's load). %file are the calls that take a path (open, stat,
rename, unlink, mkdir...), each a metadata operation on GPFS/Lustre; getdents64 is readdir.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kubelet import FLAGS_ANNOTATION, Bench, Calls, Cluster, count, log, pod_body, session
from pod_start import environment, hpkctl_program

TRACE = "%file,getdents64"
NICE = "--nice=1000"


def strace_start(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """strace -c on every thread of ``pid`` (without -f: children are not the kubelet's load)."""
    tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    argv = ["strace", "-c", "-o", str(out), "-e", f"trace={TRACE}"]
    for t in tids:
        argv += ["-p", t]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    attached = 0
    end = time.monotonic() + 30
    while attached < len(tids) and time.monotonic() < end:  # "Process N attached" per thread
        line = p.stderr.readline()
        if not line:
            break
        attached += b"attached" in line
    return p


def strace_stop(p: subprocess.Popen[bytes], out: Path) -> Counter[str]:
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    calls: Counter[str] = Counter()
    for line in out.read_text().splitlines():
        cols = line.split()
        if len(cols) < 5 or not cols[0][0].isdigit() or cols[-1] == "total":
            continue
        calls[cols[-1]] = int(cols[3])
    return calls


class Load:
    def __init__(self, bench: Bench, cluster: Cluster, calls: Calls, root: Path, *, running: int) -> None:
        self.bench, self.cluster, self.calls, self.root = bench, cluster, calls, root
        self.running = running

    def _window(self, what: str, k: int, run: Any) -> dict[str, Any]:
        out = self.root / f"strace-{what}-{k}.txt"
        self.calls.take()
        tracer = strace_start(self.cluster.kubelet_pid, out)
        t0 = time.monotonic()
        try:
            run()
        finally:
            span = time.monotonic() - t0
            slurm = count(self.calls.take())
            fs = strace_stop(tracer, out)
        return {"what": what, "k": k, "window_s": span, "slurm": dict(slurm), "fs": dict(fs)}

    def idle(self, k: int, seconds: float) -> dict[str, Any]:
        tag = uuid.uuid4().hex[:6]
        names = [f"idle-{k}-{tag}-{i}" for i in range(k)]
        bodies = [pod_body(n, ["sleep", "3600"], annotations={FLAGS_ANNOTATION: NICE if i < self.running else
                                                              f"{NICE} --begin=now+1hour"})
                  for i, n in enumerate(names)]
        self.bench.tracked(names, bodies, "idle", 1800)
        time.sleep(self.bench.settle())
        jobs = [s.job_id for n in names if (s := self.bench.watch.get(n)) and s.job_id]
        states = Counter(self.calls.states(jobs).values())
        res = self._window("idle", k, lambda: time.sleep(seconds))
        res["slurm_states"] = dict(states)
        self.bench.delete(names, 1800)
        return res

    def busy(self, k: int) -> dict[str, Any]:
        tag = uuid.uuid4().hex[:6]
        names = [f"busy-{k}-{tag}-{i}" for i in range(k)]
        bodies = [pod_body(n, ["true"], annotations={FLAGS_ANNOTATION: NICE}) for n in names]
        w = self.bench.watch

        def run() -> None:
            for b in bodies:
                self.bench.create(b)
            w.wait(f"{k} pods to succeed", lambda: all((s := w.pods.get(n)) and s.terminal() for n in names), 1800)

        res = self._window("busy", k, run)
        res["succeeded"] = sum(1 for n in names if (s := w.get(n)) and s.terminal() == "Succeeded")
        self.bench.delete(names, 1800)
        return res


def table(rows: list[dict[str, Any]], k_poll: Any) -> list[str]:
    lines = ["load on the site: the product's Slurm commands and the kubelet's file-system metadata calls",
             f"  [kubelet] slurm_poll = {k_poll.slurm_poll:g} s, status_poll = {k_poll.status_poll:g} s"
             + (f", status_audit = {k_poll.status_audit:g} s" if hasattr(k_poll, "status_audit") else ""),
             "  pods  state  window s  squeue/min  other Slurm/min (which)                 fs ops/s  (top calls)"]
    for r in rows:
        minutes = r["window_s"] / 60
        squeue = r["slurm"].get("squeue", 0) / minutes
        other = {c: n for c, n in r["slurm"].items() if c != "squeue"}
        other_s = " ".join(f"{c} {n / minutes:.1f}" for c, n in sorted(other.items())) or "-"
        fs_total = sum(r["fs"].values())
        top = ", ".join(f"{c} {n / r['window_s']:.1f}" for c, n in Counter(r["fs"]).most_common(3))
        extra = f" ({r['slurm_states']})" if "slurm_states" in r else f" ({r.get('succeeded', 0)} succeeded)"
        lines.append(f"  {r['k']:>4}  {r['what']:<5}  {r['window_s']:8.1f}  {squeue:10.2f}  "
                     f"{sum(other.values()) / minutes:6.1f} ({other_s})".ljust(80)
                     + f" {fs_total / r['window_s']:8.1f}  ({top}){extra}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site", default="ci", help="profile the private profile extends (default ci)")
    ap.add_argument("--partition", default="debug", help="partition shown in the header (default debug)")
    ap.add_argument("--pods", default="1,100,1000", help="K values, comma-separated (default 1,100,1000)")
    ap.add_argument("--busy-pods", default=None, help="K values of the busy runs (default: --pods)")
    ap.add_argument("--window", type=float, default=60, help="seconds of each idle window (default 60)")
    ap.add_argument("--running", type=int, default=4, help="idle pods that run (the rest pend; default 4)")
    ap.add_argument("--slurm-poll", type=float, default=None, help="override [kubelet] slurm_poll")
    ap.add_argument("--status-poll", type=float, default=None, help="override [kubelet] status_poll")
    ap.add_argument("--history-size", type=int, default=100000)
    ap.add_argument("--bookmark-interval", type=float, default=86400)
    ap.add_argument("--json", default="", help="results (default /tmp/hpk-bench-site-load-<UTC>.json)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    ks = [int(x) for x in args.pods.split(",") if x.strip()]
    busy_ks = ks if args.busy_pods is None else [int(x) for x in args.busy_pods.split(",") if x.strip()]
    if shutil.which("strace") is None or shutil.which("apptainer") is None:
        log("needs strace, and apptainer on PATH (ci/standin first for the stand-in)")
        return 2
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    json_path = Path(args.json or f"/tmp/hpk-bench-site-load-{stamp}.json")
    root = Path(tempfile.mkdtemp(prefix="hpk-bench-load-", dir=os.environ.get("HPK_BENCH_DIR", "/tmp")))
    root.chmod(0o755)
    hpkctl = hpkctl_program(root)
    calls = Calls(root)
    os.environ["PATH"] = f"{calls.dir}:{os.environ['PATH']}"
    for line in environment(args):
        print(f"# {line}", flush=True)
    cluster = Cluster(root, args, hpkctl)
    text = cluster.profile.read_text()  # keep every pod directory: no clean-up inside a window
    cluster.profile.write_text(text.replace("keep_pod_dirs = 0", "keep_pod_dirs = 86400"))
    from hpkctl.sites import load_site

    kp = load_site(str(cluster.profile)).kubelet
    bench_args = argparse.Namespace(**vars(args), timeout=180, timeout_many=1800)
    rows: list[dict[str, Any]] = []
    with session(cluster, root, keep=args.keep) as made:
        cluster.start()
        bench = Bench(bench_args, root, calls, cluster)
        made.append(bench)
        load = Load(bench, cluster, calls, root, running=args.running)
        for k in ks:
            rows.append(load.idle(k, args.window))
            print("\n".join(table(rows[-1:], kp)[3:]), flush=True)
        for k in busy_ks:
            rows.append(load.busy(k))
            print("\n".join(table(rows[-1:], kp)[3:]), flush=True)
        print("\n".join(table(rows, kp)))
        json_path.write_text(json.dumps({"rows": rows, "args": vars(args)}, indent=1, default=str))
        print(f"# results   {json_path}; load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

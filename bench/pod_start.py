#!/usr/bin/env python3
"""Pod start latency and burst throughput of hpkctl against bare ``sbatch``, in one run.

Measures on the local Slurm (run as the normal user, the Apptainer stand-in first on PATH; see
``bench/README.md`` or just run ``sudo bench/run``):

1. start latency, median of N: bare ``sbatch`` of a trivial script → the script running, versus
   ``hpkctl run --detach`` of a trivial pod → its container running (the container touches a file on
   a hostPath; the file's mtime is the moment it ran);
2. a burst of B pods submitted back to back as a kubelet would (in-process), versus B bare jobs: time
   until all ran, and how many Slurm commands each side issued (counted by shims on PATH).

Prints the numbers and hpkctl/bare ratios. Speed claims come from here, never from tests.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sacct", "srun")


def make_shims(root: Path) -> Path:
    """Wrappers that log each Slurm command to ``calls.log`` before running the real one."""
    shim_dir = root / "shims"
    shim_dir.mkdir()
    log = root / "calls.log"
    for name in SLURM_COMMANDS:
        real = shutil.which(name)
        if real is None:
            continue
        shim = shim_dir / name
        shim.write_text(f'#!/bin/sh\necho {name} >> "{log}"\nexec "{real}" "$@"\n')
        shim.chmod(0o755)
    return shim_dir


def count_calls(root: Path) -> Counter[str]:
    log = root / "calls.log"
    calls: Counter[str] = Counter(log.read_text().split()) if log.exists() else Counter()
    log.unlink(missing_ok=True)
    return calls


def wait_for_file(path: Path, timeout: float = 120) -> float:
    """mtime of ``path`` once it exists (the moment the job or container wrote it)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            return path.stat().st_mtime
        except FileNotFoundError:
            time.sleep(0.01)
    raise TimeoutError(f"{path} did not appear within {timeout} s")


def random_phase() -> None:
    """Sleep 0-1 s: slurmctld schedules on a 1 s tick, so a loop that submits right after the
    previous job started would always land at the same phase of it and bias the median."""
    time.sleep(random.random())


def bare_latency(work: Path, n: int, partition: str) -> list[float]:
    out = []
    for i in range(n):
        random_phase()
        marker = work / f"bare-{i}"
        script = work / f"bare-{i}.sh"
        script.write_text(f"#!/bin/bash\ntouch {marker}\n")
        t0 = time.time()
        subprocess.run(["sbatch", "--parsable", "--quiet", f"--partition={partition}", "--output=/dev/null",
                        "--time=00:05:00", str(script)], check=True, capture_output=True)
        out.append(wait_for_file(marker) - t0)
    return out


def pod_manifest(work: Path, name: str, marker_dir: Path, marker: str) -> Path:
    manifest = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": "busybox:1.36", "command": ["touch", f"/out/{marker}"],
            "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
            "volumes": [{"name": "out", "hostPath": {"path": str(marker_dir), "type": "Directory"}}]},
    }
    path = work / f"{name}.json"  # JSON is YAML
    path.write_text(json.dumps(manifest))
    return path


def hpkctl_latency(work: Path, n: int, site: str, hpkctl: str) -> list[float]:
    out = []
    for i in range(n):
        name = f"bench-{uuid.uuid4().hex[:8]}"
        manifest = pod_manifest(work, name, work, name)
        random_phase()
        t0 = time.time()
        subprocess.run([hpkctl, "run", "--detach", "-q", "-f", str(manifest), "--site", site], check=True,
                       capture_output=True)
        out.append(wait_for_file(work / name) - t0)
        subprocess.run([hpkctl, "delete", name, "--site", site], capture_output=True, check=False)
    return out


def bare_burst(work: Path, count: int, partition: str) -> tuple[float, float]:
    t0 = time.time()
    for i in range(count):
        script = work / f"burst-bare-{i}.sh"
        script.write_text(f"#!/bin/bash\ntouch {work}/burst-bare-{i}.done\n")
        subprocess.run(["sbatch", "--parsable", "--quiet", f"--partition={partition}", "--output=/dev/null",
                        "--time=00:05:00", str(script)], check=True, capture_output=True)
    submitted = time.time() - t0
    last = max(wait_for_file(work / f"burst-bare-{i}.done", timeout=600) for i in range(count))
    return submitted, last - t0


def hpkctl_burst(work: Path, count: int, site: str) -> tuple[float, float, int]:
    from hpkctl.jobs import Slurm
    from hpkctl.local.records import forget_run
    from hpkctl.local.submit import submit_pod
    from hpkctl.sites import load_site

    profile = load_site(site)
    slurm = Slurm(profile.slurm)
    names = []
    t0 = time.time()
    records = []
    for i in range(count):
        name = f"burst-{uuid.uuid4().hex[:8]}"
        names.append(name)
        rec, _ = submit_pod(profile, str(pod_manifest(work, name, work, name)), out=open(os.devnull, "w"))
        records.append(rec)
    submitted = time.time() - t0
    # Poll all jobs with one squeue per round until every pod's container has run.
    slurm.wait_for([r.job_id for r in records], backoff=(0.5, 1.0, 2.0), timeout=900)
    last = max(wait_for_file(work / n, timeout=60) for n in names)
    ok = sum((Path(r.pod_dir) / "status" / "pod.done").read_text().strip() == "0" for r in records)
    for r in records:
        forget_run(profile, r)
    return submitted, last - t0, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site", default="ci")
    ap.add_argument("--partition", default="debug")
    ap.add_argument("-n", type=int, default=10, help="samples for the latency medians")
    ap.add_argument("--burst", type=int, default=200, help="pods in the burst (0 skips it)")
    args = ap.parse_args()
    if shutil.which("apptainer") is None:
        print("bench: no apptainer on PATH (put ci/standin first on PATH for the local stand-in)", file=sys.stderr)
        return 2
    hpkctl = shutil.which("hpkctl") or str(Path(sys.executable).parent / "hpkctl")
    root = Path(tempfile.mkdtemp(prefix="hpk-bench-", dir=os.environ.get("HPK_BENCH_DIR", os.path.expanduser("~"))))
    work = root / "work"
    work.mkdir()
    os.environ["PATH"] = f"{make_shims(root)}:{os.environ['PATH']}"
    try:
        # Warm-up: the first pod pulls the image into the cache; not part of the measurement.
        hpkctl_latency(work, 1, args.site, hpkctl)
        count_calls(root)
        bare = bare_latency(work, args.n, args.partition)
        bare_calls = count_calls(root)
        hpk = hpkctl_latency(work, args.n, args.site, hpkctl)
        hpk_calls = count_calls(root)
        mb, mh = statistics.median(bare), statistics.median(hpk)
        print(f"start latency, median of {args.n} (submit → running):")
        print(f"  bare sbatch        {mb:7.3f} s   (min {min(bare):.3f}, max {max(bare):.3f})")
        print(f"  hpkctl run         {mh:7.3f} s   (min {min(hpk):.3f}, max {max(hpk):.3f})")
        print(f"  difference         {mh - mb:7.3f} s   ratio hpkctl/bare {mh / mb:.2f}")
        print(f"  Slurm commands: bare {dict(bare_calls)}, hpkctl (run --detach + delete) {dict(hpk_calls)}")
        if args.burst:
            bs, ball = bare_burst(work, args.burst, args.partition)
            bcalls = count_calls(root)
            hs, hall, ok = hpkctl_burst(work, args.burst, args.site)
            hcalls = count_calls(root)
            print(f"burst of {args.burst}:")
            print(f"  bare sbatch  submitted in {bs:6.2f} s, all ran after {ball:6.2f} s; "
                  f"Slurm commands {sum(bcalls.values())} {dict(bcalls)}")
            print(f"  hpkctl pods  submitted in {hs:6.2f} s, all ran after {hall:6.2f} s; "
                  f"Slurm commands {sum(hcalls.values())} {dict(hcalls)}; {ok}/{args.burst} succeeded")
            print(f"  ratio hpkctl/bare: all-ran time {hall / ball:.2f}, submit time {hs / bs:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

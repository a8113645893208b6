#!/usr/bin/env python3
"""What the job-side runtime costs per job, as bash (what hpkctl ships) and as a Python supervisor
would, each as a ratio against a bare ``bash -c :`` measured in the same run (best of N, so the
other load on the machine counts least); and what Slurm stores per job script, with the runtime as a
file against the runtime pasted into every script (as before).

    bench/runtime_start.py [N]          # N runs of each variant (default 30)

"Python supervisor" is the interpreter with the standard modules such a supervisor needs (processes,
signals, JSON, sockets, HTTP, TLS for probes), before any of its own code: a lower bound.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpkctl.local.manifest import load_manifest, select_pod, with_api_defaults  # noqa: E402
from hpkctl.pod import render_pod  # noqa: E402
from hpkctl.pod.runtimefile import current_runtime  # noqa: E402
from hpkctl.sites import load_site  # noqa: E402

RUNTIME = REPO / "sbatch" / "runtime.sh"
PYTHON = next((p for p in ("/usr/libexec/platform-python", "/usr/bin/python3") if os.access(p, os.X_OK)), "python3")
IMPORTS = "import subprocess, signal, json, socket, http.client, ssl, time, os"
HWM_SH = '; grep VmHWM /proc/$$/status'
HWM_PY = "; print([x for x in open('/proc/self/status') if x.startswith('VmHWM')][0])"
# name → (argv, argv that also prints its own peak resident memory, VmHWM, after exec)
VARIANTS = {
    "bash -c : (baseline)": (["bash", "-c", ":"], ["bash", "-c", ":" + HWM_SH]),
    "bash sourcing sbatch/runtime.sh": (["bash", "-c", f'. "{RUNTIME}"'], ["bash", "-c", f'. "{RUNTIME}"' + HWM_SH]),
    f"{PYTHON} -I -c pass": ([PYTHON, "-I", "-c", "pass"], [PYTHON, "-I", "-c", "pass" + HWM_PY]),
    f"{PYTHON} + supervisor imports": ([PYTHON, "-I", "-c", IMPORTS], [PYTHON, "-I", "-c", IMPORTS + HWM_PY]),
}


def _best(argv: list[str], n: int) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t)
    return best


def _peak_mib(argv: list[str]) -> float:
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return int(out.split()[-2]) / 1024  # "VmHWM:    3456 kB"


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    times = {name: _best(argv, n) for name, (argv, _) in VARIANTS.items()}
    base = times["bash -c : (baseline)"]
    print(f"job-side runtime start, best of {n} (ratio to bash -c :), peak resident memory of the process:")
    for name, (_, hwm) in VARIANTS.items():
        print(f"  {name:48s} {times[name] * 1000:7.1f} ms  x{times[name] / base:6.1f}  {_peak_mib(hwm):6.1f} MiB")
    manifest = load_manifest(REPO / "ci" / "pods" / "demo.yaml")
    pod = with_api_defaults(select_pod(manifest))
    script = render_pod(pod, load_site("ci"), objects=manifest.objects).script
    pasted = script.replace('. "$HPK_RUNTIME"\n', current_runtime().data.decode())
    print("what Slurm stores per job (ci/pods/demo.yaml, --site ci):")
    print(f"  runtime as a file (now):      {len(script.encode()):7d} bytes, {script.count(chr(10)):5d} lines")
    print(f"  runtime pasted into the job:  {len(pasted.encode()):7d} bytes, {pasted.count(chr(10)):5d} lines")
    print(f"  1,000 pods: {len(script.encode()) * 1000 / 1e6:.1f} MB instead of {len(pasted.encode()) * 1000 / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What the job-side runtime costs per job, as bash (what hpkctl ships) and as a Python supervisor
would, each as a ratio against a bare ``bash -c :`` measured in the same run (best of N, so the
other load on the machine counts least); and what Slurm stores per job script, with the runtime as a
file against the runtime pasted into every script (as before).

    bench/runtime_start.py [N]          # N runs of each variant (default 30)

Then what a pilot pod's whole job script costs (CPU-s per start, ``getrusage`` of its processes): a
``true`` pod rendered for pilot mode, its container a no-op (``apptainer`` is ``/bin/true``), started
N times as the steps of one allocation on one node would be (SLURM_JOB_ID, SLURMD_NODENAME; the
first step learns the node, the later ones read it), and the processes it starts (strace, when
installed): the runtime's own share of a pilot pod's "steps' processes" in ``bench/run pilot``.

"Python supervisor" is the interpreter with the standard modules such a supervisor needs (processes,
signals, JSON, sockets, HTTP, TLS for probes), before any of its own code: a lower bound.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import tempfile
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpkctl.local.manifest import load_manifest, select_pod, with_api_defaults  # noqa: E402
from hpkctl.pod import render_pod, write_pod_dir  # noqa: E402
from hpkctl.pod.runtimefile import current_runtime  # noqa: E402
from hpkctl.sites import SiteProfile, load_site  # noqa: E402

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
    pilot_steps(n)
    return 0


def pilot_steps(n: int) -> None:
    """A pilot ``true`` pod's job script, ``n`` starts as steps of one allocation (see the docstring)."""
    tmp = Path(tempfile.mkdtemp(prefix="hpk-runtime-start-"))
    try:
        (tmp / "shm").mkdir()
        profile = SiteProfile.model_validate({
            "name": "bench", "slurm": {"partition": "debug"}, "pilot": {"enabled": True},
            "pods": {"state_dir": str(tmp / "state"), "memory_dir": str(tmp / "shm")},
            "apptainer": {"image_cache": str(tmp / "images"), "binary": "/bin/true"}})
        scripts = []
        for i in range(n + 1):
            pod = with_api_defaults({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"p{i}", "namespace": "default", "uid": f"00000000-0000-0000-0000-{i:012d}"}, "spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]}})
            rendered = render_pod(pod, profile)
            scripts.append(write_pod_dir(rendered) / "job" / "job.sh")
            for sif in re.findall(r"^  hpk_image (\S+) ", rendered.script, re.M):  # cached: no pull
                Path(sif).parent.mkdir(parents=True, exist_ok=True)
                Path(sif).write_text("sif")
        env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "1", "SLURMD_NODENAME": "n1", "HPK_NOTIFY": "1"}

        def run(i: int, *prefix: str) -> None:
            subprocess.run([*prefix, "bash", str(scripts[i])], env={**env, "SLURM_STEP_ID": str(i)}, check=True,
                           stdout=subprocess.DEVNULL)

        strace = shutil.which("strace")
        programs = {}
        for i, label in ((0, "first"), (1, "later")):
            if strace is None:
                run(i)
                continue
            trace = tmp / f"trace.{i}"
            run(i, strace, "-f", "-qq", "-e", "trace=process", "-o", str(trace))
            text = trace.read_text()
            programs[label] = (len(re.findall(r"(?:clone3?|v?fork)\(", text)),
                               [m.rsplit("/", 1)[-1] for m in re.findall(r'execve\("([^"]+)"', text)][1:])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        for i in range(2, n + 1):
            run(i)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / max(1, n - 1)
        print(f"a pilot pod's job script ('true', apptainer = /bin/true), {n - 1} later steps of one allocation:")
        print(f"  CPU per start (user + sys of all its processes): {cpu * 1000:.1f} ms")
        for label, (forks, progs) in programs.items():
            print(f"  processes, {label} step on the node: {forks} (programs: {' '.join(progs)})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

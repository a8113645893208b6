"""CPU seconds per pod by component, for a span of the benchmark (``bench/pilot.py``'s backlog).

The machine has few cores, and a pod's life crosses many processes: the API stand-in, ``hpkctl
scheduler``, ``hpkctl kubelet`` and what it runs (``srun``, ``squeue``), Slurm's daemons
(``slurmctld``, ``slurmd``, ``slurmdbd``), one ``slurmstepd`` per step, and in the step the job script
and the container (the Apptainer stand-in). Read how each is measured:

* long-lived processes: ``utime + stime`` of ``/proc/PID/stat`` before and after (all threads); the
  kubelet's and the benchmark's own reaped children (``srun``...) from ``cutime + cstime`` (or
  ``os.times()`` for this process);
* Slurm's daemons of the local cluster (``-f /etc/slurm/slurm.conf``) by name: they serve every
  engineer's jobs, so their share is an upper bound;
* ``slurmstepd``: daemonized, re-parented to PID 1, so no one's ``cutime``: a thread samples every
  ``/proc/*/stat`` named ``slurmstepd`` whose command line names the allocation (``[JOB.STEP]``) each
  0.1 s and keeps each one's last value (its zombie keeps it until PID 1 reaps it);
* the steps' own processes (job script, runtime, container): ``sacct``'s ``TotalCPU`` (accounting is
  on). Slurm 22.05's cgroup v1 plugin here makes no ``cpuacct`` group for jobs (``task/cgroup``
  constrains cores and memory only), so the cgroup cannot give it.

Everything else running (other engineers' tests) is in the machine's ``/proc/stat`` total, printed
as the share of the capacity (cores x span) that was not ours.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
SLURM_CONF = "/etc/slurm/slurm.conf"


def stat_cpu(pid: int, children: bool = False) -> float | None:
    """CPU seconds of a process (user + system, all threads); ``children``: its reaped children's."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    i = 13 if children else 11
    return (int(fields[i]) + int(fields[i + 1])) / TICK


def slurm_daemons() -> dict[str, int]:
    """PIDs of the local cluster's slurmctld, slurmd and slurmdbd (not the multi-node one's)."""
    out: dict[str, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        name = os.path.basename(argv[0].decode(errors="replace"))
        if name in ("slurmctld", "slurmd") and SLURM_CONF.encode() in argv or name == "slurmdbd":
            out.setdefault(name, int(d.name))
    return out


def machine_busy() -> float:
    """CPU seconds all processes used since boot (``/proc/stat``: all but idle and iowait)."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / TICK


class Stepds(threading.Thread):
    """The last CPU seconds of each ``slurmstepd`` seen (sampled each 0.1 s), by allocation; those
    already running at the start count from their first sample."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, tuple[str, float]] = {}
        self.base: dict[int, float] = {}
        self._halt = threading.Event()

    def _sample(self, first: bool) -> None:
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            pid = int(d.name)
            try:
                text = (d / "stat").read_text()
                if "(slurmstepd)" not in text:
                    continue
                job = self.seen[pid][0] if pid in self.seen else \
                    (d / "cmdline").read_bytes().decode(errors="replace").partition("[")[2].partition(".")[0]
                f = text.rsplit(")", 1)[1].split()
                self.seen[pid] = (job, (int(f[11]) + int(f[12])) / TICK)
                if first:
                    self.base[pid] = self.seen[pid][1]
            except (OSError, IndexError, ValueError):
                continue

    def run(self) -> None:
        self._sample(True)
        while not self._halt.wait(0.1):
            self._sample(False)

    def stop(self, job: str) -> tuple[float, int]:
        """CPU seconds of allocation ``job``'s stepds over the span, and how many were seen."""
        self._halt.set()
        self.join()
        mine = [(pid, v) for pid, (j, v) in self.seen.items() if j == job]
        return sum(v - self.base.get(pid, 0.0) for pid, v in mine), len(mine)


def parse_cpu(text: str) -> float:
    """sacct's ``TotalCPU`` (``[D-][HH:]MM:SS[.mmm]``) in seconds."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    secs = 0.0
    for p in parts:
        secs = secs * 60 + p
    return secs + (int(days) * 86400 if days else 0)


def sacct_steps(job: str, match: str, want: int, timeout: float = 60) -> tuple[float, int]:
    """TotalCPU summed over allocation ``job``'s numbered steps whose name contains ``match`` (all
    when empty), waiting up to ``timeout`` s for ``want`` of them to be recorded: (seconds, steps)."""
    end = time.monotonic() + timeout
    while True:
        r = subprocess.run(["sacct", "-j", job, "--noheader", "-P", "--format=JobID,JobName,TotalCPU,State"],
                           capture_output=True, text=True, check=False)
        rows = [line.split("|") for line in r.stdout.splitlines()]
        steps = [row for row in rows if len(row) == 4 and row[0].rpartition(".")[2].isdigit()
                 and match in row[1] and row[3] not in ("RUNNING", "PENDING")]
        if len(steps) >= want or time.monotonic() > end:
            return sum(parse_cpu(row[2]) for row in steps if row[2]), len(steps)
        time.sleep(1)


class Meter:
    """CPU by component over a span: ``procs`` (name -> pid, long-lived: own CPU; ``name children``:
    their reaped children's), Slurm's daemons, the stepds of the allocation given to :meth:`stop`,
    this process's reaped children (``self_children``: the bare side's ``srun``), and the machine."""

    def __init__(self, procs: dict[str, int], *, self_children: str = "") -> None:
        self.procs = {**procs, **slurm_daemons()}
        self.self_children = self_children
        self.stepds = Stepds()
        self.stepds_seen = 0
        self.t0 = time.time()
        self.before = self._read()
        self.stepds.start()

    def _read(self) -> dict[str, float]:
        out = {"machine": machine_busy()}
        for name, pid in self.procs.items():
            own = stat_cpu(pid)
            if own is not None:
                out[name] = own
            if not name.startswith("slurm"):
                kids = stat_cpu(pid, children=True)
                if kids:
                    out[f"{name} children"] = kids
        if self.self_children:
            t = os.times()
            out[self.self_children] = t.children_user + t.children_system
        return out

    def add_new(self, name: str, pid: int) -> None:
        """A process started within the span: all its CPU counts."""
        self.procs[name] = pid
        self.before[name] = self.before[f"{name} children"] = 0.0

    def stop(self, job: str, match: str, want: int) -> dict[str, Any]:
        span = time.time() - self.t0
        after = self._read()
        stepd, self.stepds_seen = self.stepds.stop(job)
        comps = {k: v - self.before.get(k, 0.0) for k, v in after.items() if k != "machine"}
        comps["slurmstepd (sampled)"] = stepd
        comps["steps' processes (sacct TotalCPU)"], got = sacct_steps(job, match, want)
        return {"span_s": span, "cores": os.cpu_count() or 1, "machine_s": after["machine"] - self.before["machine"],
                "components": comps, "sacct_steps": got, "stepds": self.stepds_seen, "want_steps": want, "job": job}


def cpu_table(sides: dict[str, dict[str, Any]], n: int) -> list[str]:
    """One line per component: CPU seconds per pod on each side, and the totals against the capacity."""
    names: list[str] = []
    for r in sides.values():
        names += [k for k in r["components"] if k not in names]
    keys = list(sides)
    out = [f"  CPU seconds per pod by component ({n} pods; /proc/PID/stat before and after, slurmstepd "
           "sampled, steps from sacct)",
           f"  {'component':44} " + " ".join(f"{k:>12}" for k in keys)]
    for name in names:
        out.append(f"  {name:44} " + " ".join(
            f"{sides[k]['components'][name] / n:12.4f}" if name in sides[k]["components"] else f"{'-':>12}"
            for k in keys))
    tot = {k: sum(r["components"].values()) for k, r in sides.items()}
    out.append(f"  {'total':44} " + " ".join(f"{tot[k] / n:12.4f}" for k in keys))
    def total(r: dict[str, Any]) -> float:
        return float(sum(r["components"].values()))

    rows: list[tuple[str, Callable[[dict[str, Any]], float]]] = [
        ("span s", lambda r: float(r["span_s"])),
        ("capacity: cores x span, CPU-s", lambda r: float(r["cores"] * r["span_s"])),
        ("ours / capacity", lambda r: total(r) / (r["cores"] * r["span_s"])),
        ("machine busy / capacity (everyone)", lambda r: float(r["machine_s"] / (r["cores"] * r["span_s"])))]
    for label, f in rows:
        out.append(f"  {label:44} " + " ".join(f"{f(sides[k]):12.3f}" for k in keys))
    out.append("  steps' sacct records found / stepds sampled / pods: " + ", ".join(
        f"{k} {r['sacct_steps']}/{r['stepds']}/{r['want_steps']} (job {r['job']})" for k, r in sides.items()))
    return out

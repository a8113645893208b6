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
* ``slurmstepd``: daemonized, re-parented to PID 1, so no one's ``cutime``: a thread lists ``/proc``
  each 10 ms and follows every ``slurmstepd`` (:class:`Stepds`: its job from its title or memory cgroup,
  its last CPU value; its zombie keeps the final one until PID 1 reaps it);
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
    """The last CPU seconds of each ``slurmstepd`` seen, by allocation, sampled each ``interval`` s.

    A step's stepd lives 30-60 ms here, and is first seen as ``/usr/sbin/slurmstepd`` (it retitles
    itself ``slurmstepd: [J.S]`` later, and a zombie has no command line): the first version sampled
    each 0.1 s and took the job from the first command line it read, so it missed most short steps'
    stepds or filed them under no job. Now only new PIDs are read (a listing of ``/proc`` per tick);
    a stepd is known by PID and start time (PIDs wrap in a long run), its job is read from its command
    line or its memory cgroup (``.../job_J/step_S``) on every tick until found, and a forked
    ``slurmd`` is watched until it execs. Its CPU is the last value seen: a zombie keeps its final
    value until PID 1 reaps it (ms to seconds later). Stepds whose job was never read (dead within a
    tick) are counted apart as unattributed, so the undercount is visible, not silent."""

    def __init__(self, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.cpu: dict[tuple[int, str], float] = {}
        self.job: dict[tuple[int, str], str] = {}
        self.base: dict[tuple[int, str], float] = {}
        self.watch: set[int] = set()   # stepds (alive or not yet reaped), slurmd and its forks
        self.listed: set[int] = set()
        self.stepd_pids: set[int] = set()
        self._halt = threading.Event()

    @staticmethod
    def _job_of(pid: int) -> str:
        """The allocation a stepd serves, from its title or its memory cgroup; empty before it set either."""
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if "[" in title:
                return title.partition("[")[2].partition(".")[0]
            for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                if "/job_" in line:
                    return line.partition("/job_")[2].partition("/")[0]
        except OSError:
            pass
        return ""

    def _look(self, pid: int, first: bool) -> None:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            self.watch.discard(pid)
            return
        head, _, tail = text.rpartition(")")
        f = tail.split()
        if len(f) < 20:
            return
        comm, state, ppid, start = head.partition("(")[2], f[0], int(f[1]), f[19]
        if comm == "slurmd":
            self.watch.add(pid)     # the daemons, and their forks: a fork becomes a stepd when it execs
            return
        if comm != "slurmstepd" or ppid in self.stepd_pids:
            self.watch.discard(pid)   # not a stepd, or a stepd's fork before it execs a task (sacct has it)
            return
        key = (pid, start)
        self.stepd_pids.add(pid)
        self.cpu[key] = (int(f[11]) + int(f[12])) / TICK
        if first:
            self.base[key] = self.cpu[key]
        if not self.job.get(key) and state != "Z":
            self.job[key] = self._job_of(pid)
        self.job.setdefault(key, "")
        self.watch.add(pid)

    def _sample(self, first: bool) -> None:
        try:
            now = {int(n) for n in os.listdir("/proc") if n.isdigit()}
        except OSError:
            return
        fresh = now if first else now - self.listed
        for pid in fresh:
            self._look(pid, first)
        for pid in list(self.watch):
            if pid in fresh:
                continue
            if pid in now:
                self._look(pid, False)
            else:
                self.watch.discard(pid)
                self.stepd_pids.discard(pid)
        self.listed = now

    def run(self) -> None:
        self._sample(True)
        while not self._halt.wait(self.interval):
            self._sample(False)

    def stop(self, job: str) -> tuple[float, int, float, int]:
        """CPU seconds of allocation ``job``'s stepds over the span and how many were seen; the same
        for stepds (anyone's) whose job could not be read."""
        self._halt.set()
        self.join()
        def part(want: str) -> tuple[float, int]:
            keys = [k for k, j in self.job.items() if j == want]
            return sum(self.cpu[k] - self.base.get(k, 0.0) for k in keys), len(keys)
        return (*part(job), *part(""))


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
        stepd, self.stepds_seen, lost, lost_n = self.stepds.stop(job)
        comps = {k: v - self.before.get(k, 0.0) for k, v in after.items() if k != "machine"}
        comps["slurmstepd (sampled)"] = stepd
        comps["steps' processes (sacct TotalCPU)"], got = sacct_steps(job, match, want)
        return {"span_s": span, "cores": os.cpu_count() or 1, "machine_s": after["machine"] - self.before["machine"],
                "components": comps, "sacct_steps": got, "stepds": self.stepds_seen, "want_steps": want, "job": job,
                "stepds_unattributed": lost_n, "stepds_unattributed_s": lost}


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
    out.append("  stepds of no known job (dead within a sampling tick; anyone's, not counted above): " + ", ".join(
        f"{k} {r.get('stepds_unattributed', 0)} ({r.get('stepds_unattributed_s', 0.0):.3f} CPU-s)"
        for k, r in sides.items()))
    return out

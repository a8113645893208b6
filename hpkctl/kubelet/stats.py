"""``/stats/summary``: what can honestly be measured of a virtual node whose pods are Slurm jobs.

A pod's containers all run in its job's cgroup, which Slurm creates on the pod's node, so per pod
there is CPU time and memory *when the job runs on the host this kubelet runs on* and its cgroup
can be read; otherwise the fields are left out (a summary without ``cpu``/``memory`` is valid and
means "not measured"). Per container nothing is measured (they share the job's cgroup), and the
node (a whole partition) gets only its name and start time. Where Slurm puts a job's cgroup:

* cgroup v2 (``cgroup/v2`` plugin, Slurm >= 22.05): ``/sys/fs/cgroup/system.slice/slurmstepd.scope/job_<id>``
  (``cpu.stat`` usage_usec, ``memory.current``, ``memory.stat`` inactive_file);
* cgroup v1: ``/sys/fs/cgroup/memory/slurm[_<node>]/uid_<uid>/job_<id>`` (``memory.usage_in_bytes``,
  ``memory.stat`` total_inactive_file) and the same under ``cpuacct/`` (``cpuacct.usage``) when
  Slurm constrains that controller (often it does not: then there is no CPU figure).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class JobUsage:
    cpu_ns: int | None = None  # CPU time used by the job, nanoseconds
    memory: int | None = None  # bytes in use
    working_set: int | None = None  # memory minus inactive file cache (what the kubelet reports)


def _number(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stat_field(path: Path, name: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def _first(root: Path, pattern: str) -> Path | None:
    try:
        return next(iter(sorted(root.glob(pattern))), None)
    except OSError:
        return None


def job_usage(job_id: str, *, root: Path = CGROUP_ROOT) -> JobUsage:
    """CPU and memory of Slurm job ``job_id`` from its cgroup on this host; ``None`` fields where unreadable."""
    if not job_id.isdigit():
        return JobUsage()
    v2 = root / "system.slice" / "slurmstepd.scope" / f"job_{job_id}"
    if v2.is_dir():
        usec = _stat_field(v2 / "cpu.stat", "usage_usec")
        memory = _number(v2 / "memory.current")
        inactive = _stat_field(v2 / "memory.stat", "inactive_file")
        return JobUsage(cpu_ns=usec * 1000 if usec is not None else None, memory=memory,
                        working_set=max(0, memory - (inactive or 0)) if memory is not None else None)
    mem = _first(root, f"memory/slurm*/uid_*/job_{job_id}")
    cpu = _first(root, f"cpuacct/slurm*/uid_*/job_{job_id}")
    memory = _number(mem / "memory.usage_in_bytes") if mem else None
    inactive = _stat_field(mem / "memory.stat", "total_inactive_file") if mem else None
    return JobUsage(cpu_ns=_number(cpu / "cpuacct.usage") if cpu else None, memory=memory,
                    working_set=max(0, memory - (inactive or 0)) if memory is not None else None)


class CpuRates:
    """``usageNanoCores`` needs two readings: the last one per pod is kept here (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}

    def rate(self, uid: str, *, now: float, cpu_ns: int) -> int | None:
        with self._lock:
            before = self._last.get(uid)
            self._last[uid] = (now, cpu_ns)
        if before is None or now <= before[0] or cpu_ns < before[1]:
            return None
        return int((cpu_ns - before[1]) / (now - before[0]))

    def forget_except(self, uids: set[str]) -> None:
        with self._lock:
            for uid in set(self._last) - uids:
                del self._last[uid]


def pod_usage(usage: JobUsage, *, stamp: str, nano_cores: int | None) -> dict[str, Any]:
    """The ``cpu`` and ``memory`` members of a PodStats (only what was measured)."""
    out: dict[str, Any] = {}
    if usage.cpu_ns is not None:
        out["cpu"] = {"time": stamp, "usageCoreNanoSeconds": usage.cpu_ns}
        if nano_cores is not None:
            out["cpu"]["usageNanoCores"] = nano_cores
    if usage.memory is not None:
        out["memory"] = {"time": stamp, "usageBytes": usage.memory, "workingSetBytes": usage.working_set}
    return out

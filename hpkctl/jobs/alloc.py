"""Pilot allocations: a held job whose batch script only waits, and its nodes' resources.

Pilot mode runs pods as job steps in allocations a kubelet holds (``hpkctl.pilot``). This module is
the Slurm side of the allocation itself; the steps are in :mod:`hpkctl.jobs.steps`. Measured on
Slurm 22.05 (tests/jobs/test_jobs_pilot_slurm.py proves it on every run):

* The batch step does not count against the resources steps may take: a holder whose script runs
  ``sleep`` leaves every CPU and all the memory of the allocation to ``srun --exact`` steps.
* A whole-node allocation needs ``--mem=0`` as well as ``--exclusive``: without it the job gets
  ``DefMemPerCPU`` x CPUs, not the node's memory, and steps can use no more than that.
* ``scontrol show job -d -o`` is the one place that says what each node of a running job holds
  (``Nodes=n[1-2] CPU_IDs=0-7 Mem=6600 GRES=gpu:2(IDX:0-1)``); squeue has no per-node figures.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpkctl.jobs.command import Commands, failure
from hpkctl.jobs.hostlist import expand_hostlist
from hpkctl.jobs.info import parse_time
from hpkctl.jobs.query import check_id
from hpkctl.jobs.submit import sbatch

_GPU = re.compile(r"(?:^|,)gpu(?::[^:(,]+)?:(\d+)")


@dataclass(frozen=True)
class NodeShare:
    """What one node of an allocation holds: CPUs, memory (MB) and GPUs."""

    cpus: int
    memory_mb: int
    gpus: int = 0


@dataclass(frozen=True)
class AllocationInfo:
    """A held allocation as ``scontrol show job -d`` reports it. ``nodes`` is empty until it runs;
    ``end`` is Slurm's end time (the time limit's), ``None`` when Slurm has none yet."""

    job_id: str
    state: str
    nodes: dict[str, NodeShare] = field(default_factory=dict)
    end: float | None = None
    comment: str = ""


def _field(line: str, key: str) -> str:
    m = re.search(rf"(?:^|\s){re.escape(key)}=(\S*)", line)
    return m.group(1) if m else ""


def _cpu_count(ids: str) -> int:
    count = 0
    for r in ids.split(","):
        if r:
            lo, _, hi = r.partition("-")
            count += int(hi or lo) - int(lo) + 1
    return count


def parse_allocation(text: str, job_id: str) -> AllocationInfo | None:
    """``scontrol show job -d -o ID``: the job's state, end, comment and each node's share."""
    line = next((ln for ln in text.splitlines() if _field(ln, "JobId") == job_id), "")
    if not line:
        return None
    nodes: dict[str, NodeShare] = {}
    # the per-node details: "Nodes=n[1-2] CPU_IDs=0-7 Mem=800 GRES=..." (one group per layout)
    for m in re.finditer(r"(?:^|\s)Nodes=(\S+) CPU_IDs=(\S+) Mem=(\d+) GRES=(\S*)", line):
        gpus = sum(int(g) for g in _GPU.findall(m.group(4)))
        share = NodeShare(cpus=_cpu_count(m.group(2)), memory_mb=int(m.group(3)), gpus=gpus)
        nodes.update({name: share for name in expand_hostlist(m.group(1))})
    comment = re.search(r"(?:^|\s)Comment=(.*?)(?=\s[A-Z][A-Za-z]+=|$)", line)
    end = parse_time(_field(line, "EndTime"))
    return AllocationInfo(job_id=job_id, state=_field(line, "JobState").upper(), nodes=nodes,
                          end=end.timestamp() if end else None, comment=comment.group(1).strip() if comment else "")


def allocation(commands: Commands, job_id: str) -> AllocationInfo | None:
    """One allocation's details; ``None`` once Slurm forgot it."""
    check_id(job_id)
    done = commands.run("scontrol", ["show", "job", "-d", "-o", job_id])
    if done.returncode != 0:
        if "invalid job id" in done.stderr.lower():
            return None
        raise failure(done)
    return parse_allocation(done.stdout, job_id)


def hold_args(*, name: str, comment: str, partition: str, time_limit: str, nodes: int, cpus: int,
              memory_mb: int, gpus: int, gres_name: str, output: Path,
              extra_args: Sequence[str] = ()) -> list[str]:
    """sbatch options of a holder: whole nodes (``nodes`` > 0: ``--exclusive --mem=0``) or one node's
    share (CPUs, memory in MB, GPUs)."""
    args = [f"--job-name={name}", f"--comment={comment}", f"--time={time_limit}", f"--output={output}",
            "--open-mode=append"]
    if partition:
        args.append(f"--partition={partition}")
    if nodes > 0:
        args += [f"--nodes={nodes}", "--exclusive", "--mem=0"]
    else:
        args += ["--nodes=1", "--ntasks=1", f"--cpus-per-task={max(cpus, 1)}"]
        if memory_mb > 0:
            args.append(f"--mem={memory_mb}M")
        if gpus > 0:
            args.append(f"--gres={gres_name}:{gpus}")
    return [*args, *extra_args]


def hold(commands: Commands, script: Path, *, args: Sequence[str], script_args: Sequence[str] = ()) -> str:
    """Submit the holder ``script`` (with ``script_args``) under ``args``; the job id."""
    return sbatch(commands, script, extra_args=args, script_args=script_args)

"""The tasks of an MPI (or any multi-task) pod and the ``srun`` that starts them, pure.

A pod whose main container is an MPI launch (the mpi-flags annotation, or more than one task or node
in its flags annotation: :func:`hpkctl.pod.slurmopts.slurm_options`) starts its ranks as
``srun MPI-FLAGS bash -c "$HPK_MPI_ENV" hpk-mpi apptainer ...``. In a job of its own that srun takes
the job's tasks and nodes from the batch script's environment. In pilot mode the script runs as a
step of a held allocation, whose environment says one task on one node: the ranks' srun is a step
of its own there, with the pod's geometry written out (:class:`Ranks`, from the same options the
job's ``#SBATCH`` lines would carry) and the nodes the pod was placed on (``HPK_RANKS_NODES``, set
by hpkctl when it starts the script's step); the runtime's ``hpk_pilot_srun`` clears the script
step's ``SLURM_*`` variables for it. The allocator packs the same geometry (:mod:`hpkctl.pilot`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hpkctl.pod.flags import SlurmOption
from hpkctl.pod.plan import PodPlan
from hpkctl.pod.shell import quote
from hpkctl.sites.pilot import mem_mb

_FIRST = re.compile(r"^[0-9]+")
_MEM = re.compile(r"^([0-9]+)([KMGTkmgt]?)[Bb]?$")


@dataclass(frozen=True)
class Ranks:
    """The ranks' step: ``nodes`` nodes, ``tasks`` tasks of ``cpus_per_task`` CPUs, at most
    ``tasks_per_node`` of them on a node (Slurm's block distribution puts the rounded-up share first),
    ``memory_mb`` and ``gpus`` on each node (``gres`` is the ``--gres`` value, "" for none)."""

    nodes: int
    tasks: int
    tasks_per_node: int
    cpus_per_task: int
    memory_mb: int
    gpus: int = 0
    gres: str = ""

    def srun_words(self) -> list[str]:
        """The ranks' ``srun`` options in pilot mode (``--exact``: exactly these, as the pod's step)."""
        words = ["--exact", f"--nodes={self.nodes}", f"--ntasks={self.tasks}",
                 f"--cpus-per-task={self.cpus_per_task}", f"--mem={self.memory_mb}M"]
        return words + ([f"--gres={self.gres}"] if self.gres else [])


def _value(options: list[SlurmOption], name: str) -> str | None:
    return next((o.value for o in reversed(options) if o.name == name and o.value), None)


def _count(options: list[SlurmOption], name: str) -> int:
    """An option's count; a range (``--nodes=2-4``) counts its least: the step gets exactly that."""
    value = _value(options, name) or ""
    m = _FIRST.match(value)
    return max(int(m.group(0)), 1) if m else 0


def _mb(value: str) -> int:
    m = _MEM.match(value)
    return mem_mb(m.group(1) + m.group(2).upper()) if m else 0


def ranks_of(plan: PodPlan, *, gpus: int = 0) -> Ranks:
    """The geometry of ``plan``'s ranks from its Slurm options (the flags annotation's ``--nodes``,
    ``--ntasks``, ``--ntasks-per-node``, ``--cpus-per-task``, ``--mem``/``--mem-per-cpu`` win over the
    pod's resources) and, without a memory request, ``[pilot] step_memory`` per node."""
    opts = plan.options
    nodes = _count(opts, "--nodes") or 1
    per_node = _count(opts, "--ntasks-per-node")
    tasks = _count(opts, "--ntasks") or (per_node * nodes if per_node else 1)
    if not _value(opts, "--nodes") and per_node:
        nodes = math.ceil(tasks / per_node)
    nodes = min(nodes, tasks)
    cpus = _count(opts, "--cpus-per-task") or max(plan.resources.cpus, 1)
    slots = max(per_node, math.ceil(tasks / nodes))
    memory = _mb(_value(opts, "--mem") or "") or _mb(_value(opts, "--mem-per-cpu") or "") * cpus * slots
    memory = memory or mem_mb(plan.profile.pilot.step_memory)
    return Ranks(nodes=nodes, tasks=tasks, tasks_per_node=slots, cpus_per_task=cpus, memory_mb=memory, gpus=gpus,
                 gres=_value(opts, "--gres") or "")


def launch_words(plan: PodPlan) -> list[str]:
    """The start of the MPI container's command line: its ranks' srun with the mpi-flags annotation's
    options. In pilot mode that srun is ``hpk_pilot_srun`` (the runtime) with the ranks' geometry."""
    mpi = [quote(f) for f in plan.mpi_flags]
    if not plan.profile.pilot.enabled:
        return ["exec", "setsid", "srun", *mpi]
    # the ranks' step is named after the pod too (squeue --steps: NAME-ranks beside the script's NAME)
    return ["hpk_pilot_srun", quote(f"--job-name={plan.name}-ranks"), *(quote(w) for w in ranks_of(plan).srun_words()),
            *mpi]


__all__ = ["Ranks", "launch_words", "ranks_of"]

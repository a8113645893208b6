"""A rendered pod as a step of a held allocation: what it needs, where it goes, and its ``srun``.

The pod's directory and script are the job-per-pod ones (``render_pod`` with ``[pilot] enabled``:
no ``#SBATCH`` lines, ``HPK_PILOT=1`` for the runtime), so init order, probes, hooks, logs, exec,
restart policy and the stop sequence are the same code. The step runs ``bash job/job.sh`` with the
pod's CPUs and memory (``srun --exact``); its output goes to ``logs/slurm.out`` as a job's does, and
srun's own words to ``logs/srun.log``. An MPI pod (or one of several tasks or nodes) is placed on as
many nodes as its ranks need; its script's step only supervises, and its main container starts the
ranks as a step of their own there (:mod:`hpkctl.pod.ranks`), as in a job of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from hpkctl.errors import PodError
from hpkctl.jobs import Slurm
from hpkctl.jobs.steps import StepProcess
from hpkctl.pilot.plan import Need, unfit
from hpkctl.pilot.pool import Pool
from hpkctl.pod import RenderedPod
from hpkctl.pod.ranks import ranks_of
from hpkctl.sites.pilot import mem_mb


def need_of(rendered: RenderedPod) -> Need:
    """The pod's step: its CPUs, memory (else ``[pilot] step_memory``), GPUs, and the time it must be
    able to run (activeDeadlineSeconds + grace + 10 s). ``[pods] default_memory`` (a Kubernetes
    quantity, ``2Gi``) is in ``mem_mib`` already: the render applies it to a pod that requests none.
    An MPI pod (or one of several tasks or nodes) needs its ranks' room on each of their nodes
    (:func:`hpkctl.pod.ranks.ranks_of`: the tasks one node gets, times their CPUs, and the memory
    per node), as its job of its own would hold."""
    plan = rendered.plan
    profile = plan.profile
    res = plan.resources
    gpus = sum(n for name, n in res.gres.items() if name.split(":")[0] == profile.gpu.gres_name)
    runtime = plan.active_deadline + plan.grace + 10 if plan.active_deadline else 0
    if is_mpi(rendered):
        r = ranks_of(plan, gpus=gpus)
        return Need(uid=plan.uid, cpus=r.tasks_per_node * r.cpus_per_task, memory_mb=r.memory_mb, gpus=r.gpus,
                    runtime=runtime, nodes=r.nodes)
    memory = res.mem_mib or mem_mb(profile.pilot.step_memory)
    return Need(uid=plan.uid, cpus=max(res.cpus, 1), memory_mb=memory, gpus=gpus, runtime=runtime)


def is_mpi(rendered: RenderedPod) -> bool:
    """The pod's main container is an MPI launch: its script's step only supervises the ranks' step."""
    return any(c.mpi for c in rendered.plan.containers)


def find_spot(pool: Pool, need: Need, *, timeout: float, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> tuple[str, str]:
    """Place ``need`` in a running allocation, requesting one when none has room, waiting up to
    ``timeout`` seconds for it to start: (allocation, node). ``PodError`` when it can never fit."""
    why = unfit(need, pool.rules)
    if why:
        raise PodError("PilotTooLarge", why)
    end = clock() + timeout
    pause = 0.1
    while True:
        spot = pool.place(need)  # the books first: a pod that fits costs no Slurm call but its srun
        if spot is not None:
            return spot
        pool.refresh()
        spot = pool.place(need)
        if spot is not None:
            return spot
        pool.tick([need])
        if clock() >= end:
            held = ", ".join(f"{h.job_id} {h.state}" for h in pool.helds()) or "none"
            raise PodError("PilotNoAllocation", f"no pilot allocation had room within {timeout:g} s (held: {held}); "
                           "Slurm may be busy: `squeue --me` shows the requested allocation and why it waits")
        sleep(pause)
        pause = min(pause * 2, 1.0)


def step_launch(mpi: bool, spot: tuple[str, str], argv: list[str]) -> tuple[str, bool, list[str]]:
    """Where and how a pod's script runs as a step of ``spot``: (node, overlap, argv). An MPI pod's
    script runs on the first of its nodes, overlapping (``srun --overlap``: Slurm counts none of its
    resources, as it counts none of a batch script's) the ranks' step, which holds the pod's room on
    every node (``HPK_RANKS_NODES``, read by the runtime's ``hpk_pilot_srun``)."""
    if not mpi:
        return spot[1], False, argv
    return spot[1].split(",")[0], True, ["/usr/bin/env", f"HPK_RANKS_NODES={spot[1]}", *argv]


def start_pod_step(slurm: Slurm, rendered: RenderedPod, spot: tuple[str, str], need: Need, *,
                   notify: bool = False) -> StepProcess:
    """Start the pod's script as a step on ``spot`` (allocation, node); returns once srun runs.
    ``notify``: the script says on its output when it wrote a status change (the kubelet's
    :meth:`~hpkctl.jobs.steps.StepProcess.wait_changes`)."""
    root = Path(rendered.plan.pod_dir)
    node, overlap, argv = step_launch(is_mpi(rendered), spot, ["/bin/bash", str(root / "job" / "job.sh")])
    return slurm.start_step(spot[0], argv, name=rendered.plan.name, node=node, cpus=need.cpus,
                            memory_mb=need.memory_mb, gpus=need.gpus,
                            gres_name=rendered.plan.profile.gpu.gres_name, output=root / "logs" / "slurm.out",
                            workdir=root, srun_log=root / "logs" / "srun.log", overlap=overlap, notify=notify)

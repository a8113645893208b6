"""A rendered pod as a step of a held allocation: what it needs, where it goes, and its ``srun``.

The pod's directory and script are the job-per-pod ones (``render_pod`` with ``[pilot] enabled``:
no ``#SBATCH`` lines, ``HPK_PILOT=1`` for the runtime), so init order, probes, hooks, logs, exec,
restart policy and the stop sequence are the same code. The step runs ``bash job/job.sh`` with the
pod's CPUs and memory (``srun --exact``); its output goes to ``logs/slurm.out`` as a job's does, and
srun's own words to ``logs/srun.log``.
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
from hpkctl.sites.pilot import mem_mb


def need_of(rendered: RenderedPod) -> Need:
    """The pod's step: its CPUs, memory (else ``[pilot] step_memory``), GPUs, and the time it must be
    able to run (activeDeadlineSeconds + grace + 10 s). ``[pods] default_memory`` (a Kubernetes
    quantity, ``2Gi``) is in ``mem_mib`` already: the render applies it to a pod that requests none."""
    plan = rendered.plan
    profile = plan.profile
    if plan.mpi_flags:
        raise PodError("PilotUnsupported", "an MPI pod (annotation slurm-job.hpk.io/mpi-flags) starts its ranks "
                       "with srun across its own job's nodes, which a pod run as a step of a pilot allocation cannot: "
                       "run it as a job of its own ('hpkctl run' without --pilot, or on a kubelet without pilot mode: "
                       "[pilot] enabled = false and no --pilot)")
    res = plan.resources
    memory = res.mem_mib or mem_mb(profile.pilot.step_memory)
    gpus = sum(n for name, n in res.gres.items() if name.split(":")[0] == profile.gpu.gres_name)
    runtime = plan.active_deadline + plan.grace + 10 if plan.active_deadline else 0
    return Need(uid=plan.uid, cpus=max(res.cpus, 1), memory_mb=memory, gpus=gpus, runtime=runtime)


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


def start_pod_step(slurm: Slurm, rendered: RenderedPod, spot: tuple[str, str], need: Need) -> StepProcess:
    """Start the pod's script as a step on ``spot`` (allocation, node); returns once srun runs."""
    root = Path(rendered.plan.pod_dir)
    return slurm.start_step(spot[0], ["/bin/bash", str(root / "job" / "job.sh")], name=rendered.plan.name,
                            node=spot[1], cpus=need.cpus, memory_mb=need.memory_mb, gpus=need.gpus,
                            gres_name=rendered.plan.profile.gpu.gres_name, output=root / "logs" / "slurm.out",
                            workdir=root, srun_log=root / "logs" / "srun.log")

"""Placing a pod in allocations that several processes share (``hpkctl run --pilot``).

Each ``hpkctl run --pilot`` is a process of its own, and they all use this user's ``run`` allocations,
so no process's books know what the others started. Slurm does: each placement reads the steps Slurm
runs in the allocations (``scontrol show step -o``, :meth:`Pool.book_steps`) and places the pod in
what is left, under a lock of the owner's (:meth:`Pool.placing`) held until the pod's step has
started, so two runs never book the same room. A pod that fits nowhere waits, as an unschedulable
pod stays Pending: for an allocation to be requested and start (up to ``[pilot] max_allocations``),
or for a step to end; ``on_wait`` hears why, each time the reason changes. Should Slurm still refuse
the step (``srun --immediate``: "Unable to create step", a process on another host placed meanwhile),
the pod is placed again; its script never ran, so nothing runs twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from hpkctl.errors import PodError
from hpkctl.files import ExclusiveLock, LockHeld
from hpkctl.jobs.steps import StepProcess
from hpkctl.pilot.plan import RUNNING, Need, Plan, unfit
from hpkctl.pilot.pool import Pool
from hpkctl.pod.paths import JOB_ID, POD_DONE, POD_FAILED, PodDir

REFUSED = "Unable to create step"  # srun's words when the step's room is taken (--immediate)
TRIES = 3  # refusals by Slurm before the pod fails PilotNoRoom
START_WAIT = 60.0  # seconds past srun's --immediate for a started step's script to say so

Spot = tuple[str, str]


def waiting_message(pool: Pool, need: Need, decision: Plan) -> str:
    """Why ``need`` has no place now, in the words of an unschedulable pod's condition."""
    helds = pool.helds()
    queued = [h for h in helds if h.state != RUNNING]
    want = need.room("CPU(s)")
    if queued or decision.request:
        ids = ", ".join(f"{h.job_id} ({h.state})" for h in queued) or "requested now"
        return f"waiting for a pilot allocation to start for {want}: {ids}"
    free = "; ".join(f"{h.job_id}: " + ", ".join(f"{n} {h.free(n).cpus} CPUs/{h.free(n).memory_mb} MB free"
                                                  for n in sorted(h.nodes)) for h in helds)
    return (f"no pilot allocation has room for {want} ({free or 'none held'}; [pilot] max_allocations "
            f"{pool.rules.max_allocations} held): waiting for a step to end")


def _locked(pool: Pool, sleep: Callable[[float], None]) -> ExclusiveLock:
    """The owner's placement lock, held (``with`` releases it); waits while another process holds it."""
    lock = pool.placing()
    while True:
        try:
            return lock.acquire()
        except LockHeld:
            sleep(0.05)


def _started(pod_dir: PodDir, proc: StepProcess, *, timeout: float, sleep: Callable[[float], None],
             clock: Callable[[], float]) -> bool:
    """True once the pod's script runs in its step (or ran: its files say so); False when srun ended
    without a step (Slurm refused it)."""
    end = clock() + timeout
    while clock() < end:
        if any(pod_dir.exists(f) for f in (JOB_ID, POD_DONE, POD_FAILED)):
            return True
        if proc.poll() is not None:
            return any(pod_dir.exists(f) for f in (JOB_ID, POD_DONE, POD_FAILED))
        sleep(0.02)
    return True  # srun runs on: the step exists and its script is slow to start; it is followed


def place_and_start(pool: Pool, need: Need, pod_dir: Path, start: Callable[[Spot], StepProcess], *,
                    on_wait: Callable[[str], None], immediate: float,
                    sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> tuple[Spot, StepProcess]:
    """Place ``need`` where Slurm has room, seeing every process's steps, and ``start`` its step there;
    wait (telling ``on_wait``) while none has room. ``PodError`` when it can never fit, or Slurm
    refused its step ``TRIES`` times."""
    why = unfit(need, pool.rules)
    if why:
        raise PodError("PilotTooLarge", why)
    pd = PodDir(pod_dir)
    said, pause, refusals = "", 0.1, 0
    while True:
        with _locked(pool, sleep):
            pool.refresh()
            pool.book_steps()
            spot = pool.place(need)
            if spot is not None:
                log = pod_dir / "logs" / "srun.log"
                before = log.stat().st_size if log.exists() else 0
                proc = start(spot)
                if _started(pd, proc, timeout=immediate + START_WAIT, sleep=sleep, clock=clock):
                    return spot, proc
                said_now = log.read_bytes()[before:].decode(errors="replace").strip() if log.exists() else ""
                refusals += 1
                if REFUSED not in said_now or refusals >= TRIES:
                    raise PodError("PilotNoRoom", f"the pod's step did not start in allocation {spot[0]}: "
                                   f"{said_now or 'srun exited ' + str(proc.poll())}")
                continue
            decision = pool.tick([need])
        message = waiting_message(pool, need, decision)
        if message != said:
            on_wait(message)
            said = message
        sleep(pause)
        pause = min(pause * 2, 1.0)

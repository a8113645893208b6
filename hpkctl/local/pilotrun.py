"""``hpkctl run --pilot``: the prepared pod as a step of an allocation this user holds (pilot mode).

The allocations are this user's ``hpkctl run`` pool for the profile's node (comment ``hpk-pilot
kubelet=run state=<[pods] state_dir's mark> node=<[pods] node_name>``): a run adopts the ones an
earlier run of the same state directory left, requests one when none has room, and leaves it held
when it ends; the allocation's own script gives it back once no step ran for twice ``[pilot]
idle_release`` (``sbatch/pilot-holder.sh``). The step's start and the record are the provider's
(:mod:`hpkctl.provider.pilotelements`). The run follows the pod's files as ``hpkctl run`` does (the
step's srun is this process's child, in a session of its own); an interrupt deletes the pod through
the pilot provider (``hpkctl.local.runs.stop_run``: ``pod.deleting``, then TERM to the step's task
alone, the grace period, the step killed) and waits for it. Concurrent runs share the allocations and
see each other's steps in Slurm (:mod:`hpkctl.pilot.shared`); a pod with no room waits Pending.
``--detach`` returns once the step runs. A workload's pods run as steps from this process
(:mod:`hpkctl.local.pilotarray`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from hpkctl.errors import HpkError, PodError
from hpkctl.jobs import Slurm
from hpkctl.jobs.poll import poll
from hpkctl.jobs.steps import StepProcess
from hpkctl.local.follow import FILE_POLL, LogTail, describe
from hpkctl.provider.runrecords import SUBMITTED, RunRecord, forget_run
from hpkctl.local.signals import Interrupts
from hpkctl.local.submit import PreparedRun, prepare_run
from hpkctl.pilot.launch import need_of
from hpkctl.pilot.pool import Pool
from hpkctl.local.runs import stop_run
from hpkctl.pod.status import PodStatus, containers_of
from hpkctl.provider import PodProvider, PodRef
from hpkctl.provider.pilotelements import start_run_pod
from hpkctl.provider.pilotpod import pilot_run_provider
from hpkctl.sites.schema import SiteProfile


def run_pool(slurm: Slurm, profile: SiteProfile) -> Pool:
    """This user's run pool, the allocations earlier runs left adopted (bench/pilot.py drives one)."""
    pool = pilot_run_provider(slurm, profile).pool
    pool.adopt()
    return pool


def prepare_pilot(profile: SiteProfile, manifest: str, *, pod_name: str | None, namespace: str | None,
                  replace: bool, slurm: Slurm, now: bool = False, detach: bool = False, out: TextIO) -> PreparedRun:
    """``prepare_run`` in pilot mode; a workload with ``detach`` is refused (this process runs it)."""
    prep = prepare_run(profile, manifest, pod_name=pod_name, namespace=namespace, replace=replace, slurm=slurm,
                       now=now, out=out)
    if prep.record.is_array and detach:
        forget_run(profile, prep.record)
        raise HpkError("--pilot runs a workload's pods as steps from this process: it cannot --detach",
                       hint="leave out --detach, or leave out --pilot (a job array runs on without hpkctl)")
    return prep


def run_pilot_workload(slurm: Slurm, prep: PreparedRun, interrupts: Interrupts, *, manifest: str,
                       pod_name: str | None, now: bool, out: TextIO, log_out: TextIO, quiet: bool) -> int:
    """A workload's pods as steps (:mod:`hpkctl.local.pilotarray`) until it finished; 0 when it succeeded.
    An interrupt stops its running pods as a delete does."""
    from hpkctl.local.arrays import workload_of
    from hpkctl.local.manifest import load_manifest, select_pod
    from hpkctl.local.pilotarray import PilotArray

    loaded = load_manifest(manifest)
    workload = workload_of(loaded, select_pod(loaded, pod_name), now=now)
    count = workload.count if workload is not None else 1
    parallelism = (workload.parallelism if workload is not None else None) or count
    array = PilotArray(slurm, prep, interrupts, parallelism=parallelism, out=out, quiet=quiet)
    try:
        st = array.run(log_out=log_out)
    except BaseException:
        array.stop()
        raise
    why = (f" ({st.reason})" if st.reason else "") + (f": {st.message}" if st.message else "")
    print(f"{prep.record.kind.lower()} {prep.record.namespace}/{prep.record.name} (pilot allocation "
          f"{prep.record.allocation}): {st.phase}{why}; {st.summary()}", file=out)
    return 0 if st.phase in ("Complete", "Succeeded") else 1


def start_pilot(slurm: Slurm, prep: PreparedRun, interrupts: Interrupts, *, out: TextIO,
                quiet: bool = False) -> tuple[RunRecord, StepProcess]:
    """Place the prepared pod, seeing the steps of every run, and start its step (the provider's
    :func:`~hpkctl.provider.pilotelements.start_run_pod`; the record then names the allocation). While
    no allocation has room the pod is Pending: the record says why (``hpkctl status``), and so does a
    line on ``out``. A signal once the step started stops it again (the pod's stop sequence) before it
    is raised: the caller never saw the step."""
    profile, rec = prep.profile, prep.record

    def waiting(message: str) -> None:
        if not quiet:
            print(f"pod {rec.namespace}/{rec.name}: Pending: {message}", file=out)

    try:
        spot, proc = start_run_pod(pilot_run_provider(slurm, profile), rec, prep.rendered, on_wait=waiting,
                                   guard=interrupts.deferred)
    except BaseException as exc:
        if rec.state == SUBMITTED and isinstance(exc, KeyboardInterrupt):
            stop_run(slurm, profile, rec, out=out)  # the step started: its delete (provider); the record stays
        else:
            forget_run(profile, rec)  # nothing ran (a refused step never started its script)
        raise
    if not quiet:
        need = need_of(prep.rendered)
        print(f"pod {rec.namespace}/{rec.name}: started as a step of pilot allocation {spot[0]} on {spot[1]} "
              f"({need.room()}; pod directory {rec.pod_dir})", file=out)
    return rec, proc


def follow_pilot(provider: PodProvider, rec: RunRecord, proc: StepProcess, *, out: TextIO, log_out: TextIO,
                 quiet: bool = False, sleep: Callable[[float], None] = time.sleep) -> PodStatus:
    """Stream the containers' logs and progress until the pod is done (or its step ended), through the
    pilot provider (``provider`` knows ``rec``): its status from the pod's files, its logs' files."""
    pod = rec.pod()
    containers = containers_of(pod)
    mains = [n for n, init in containers if not init]
    tail = LogTail(lambda n: provider.log_file(rec.uid, n), [n for n, _ in containers], log_out,
                   prefixed={n for n, init in containers if init or len(mains) > 1})
    ref = PodRef(rec.uid, rec.namespace, rec.name)
    last = {"line": ""}

    deleted = PodStatus("Failed", "Terminated", "the pod was deleted (hpkctl delete); its containers were "
                        "stopped with their grace period", None, None, None, None)

    def gone() -> bool:
        return rec.dir_missing

    def status() -> PodStatus:
        st = provider.pod_statuses([ref], fresh=False)[rec.uid]  # its files: this process's srun says its end
        assert isinstance(st, PodStatus)
        return st

    def ended_deleted() -> PodStatus:
        # `hpkctl delete` stopped the pod and removed its directory: once the step ended, the
        # containers' last lines (a TERM trap's) are read through the log files the tail holds open
        proc.wait()
        tail.pump(final=True)
        return deleted

    def step() -> PodStatus | None:
        if gone():
            return ended_deleted()
        tail.pump()
        ended = proc.poll() is not None
        st = status()
        if st.finished or ended:
            if ended and gone():
                return ended_deleted()
            if ended and st.started_at is None:
                log = provider.log_file(rec.uid, "srun")  # srun's own messages
                said = log.read_text(errors="replace").strip() if log is not None else ""
                raise PodError("PilotNoRoom", f"the pod's step did not start in allocation {rec.allocation}: "
                               f"{said or 'srun exited ' + str(proc.poll())}")
            proc.wait()
            tail.pump(final=True)
            return status()
        line = describe(st)
        if not quiet and line != last["line"]:
            print(f"pod {rec.namespace}/{rec.name} (pilot allocation {rec.allocation}): {line}", file=out)
            last["line"] = line
        return None

    return poll(step, every=FILE_POLL, sleep=sleep)

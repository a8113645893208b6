"""How ``delete`` ends a run (through the provider), and ``run``'s exit status.

A run's state as ``hpkctl status`` shows it is the provider's (:mod:`hpkctl.provider.runstatus`).
"""

from __future__ import annotations

import os
from typing import TextIO

from hpkctl.errors import HpkError
from hpkctl.jobs import Slurm
from hpkctl.jobs.steps import StepProcess
from hpkctl.pod.lifecycle import grace_period
from hpkctl.pod.status import PodStatus
from hpkctl.provider import PodRef, delete_and_wait
from hpkctl.provider.runrecords import SUBMITTING, RunRecord, forget_run
from hpkctl.provider.runstatus import Unrecorded, fatal_exit, pid_alive, pod_jobs
from hpkctl.provider.workloads import found_record
from hpkctl.sites.schema import SiteProfile

# ---------------------------------------------------------------------------- exit statuses of 'hpkctl run'
# As `docker run` and `podman run` do: the pod's own exit code, except for these, which say that
# hpkctl (or the runtime around the container) failed. README.md has the table.
EXIT_HPKCTL = 125  # hpkctl's own error: usage, invalid manifest or profile, Slurm refused the job
EXIT_CANNOT_INVOKE = 126  # the container's command cannot be invoked (permission denied)
EXIT_NOT_FOUND = 127  # the container's command was not found
EXIT_NO_CODE = 1  # the pod failed without an exit code of its own (cancelled, node lost...)

# Pod failure reasons (status/pod.failed) that mean no container of the pod ever ran: setting the
# pod up failed (docker run answers 125 for these too: a failed pull, a missing bind source).
SETUP_REASONS = frozenset({"ErrImagePull", "ErrImageNeverPull", "HostPathCheckFailed", "CreateContainerError",
                           "PodSetupFailed", "ParentContainerFailed"})

# Pod failure reasons that come with no exit code of the pod's own: Slurm or someone outside ended
# the job (README: "1 when the pod failed without one (cancelled by Slurm, node lost)").
NO_CODE_REASONS = frozenset({"Cancelled", "NodeLost", "Preempted", "BootFailure", "Revoked"})


class NeverStarts(HpkError):
    """Slurm accepted the job but will never start it (``NEVER_STARTS``); ``status`` says why."""

    def __init__(self, rec: RunRecord, status: PodStatus) -> None:
        reason = status.job.reason if status.job is not None else status.reason
        super().__init__(f"Slurm will never start job {rec.job_id} of pod {rec.namespace}/{rec.name}: {reason}: "
                         f"{status.message}",
                         hint="lower the pod's resources (cpu → --cpus-per-task, memory → --mem) or node count, "
                              "or choose a partition whose nodes can hold it; 'sinfo -o \"%P %c %m %G %l\"' "
                              "shows what the partitions offer")
        self.record = rec
        self.status = status


def delete_run(slurm: Slurm, profile: SiteProfile, rec: RunRecord, *, out: TextIO) -> None:
    """End the run's pod as a delete does (:func:`stop_run`), wait for its job to end, forget the run."""
    if rec.state == SUBMITTING and not rec.job_id and pid_alive(rec.pid) and rec.pid != os.getpid():
        raise HpkError(f"pod {rec.namespace}/{rec.name} is being submitted right now (hpkctl process {rec.pid})",
                       hint="try again in a moment, once it has a Slurm job")
    if rec.state == SUBMITTING and not rec.job_id:  # hpkctl stopped during sbatch: a job may carry the uid
        rec.job_id = next((job.job_id for uid, job in pod_jobs(slurm) if uid == rec.uid), "")
    stop_run(slurm, profile, rec, out=out, wait=True)
    forget_run(profile, rec)


def stop_run(slurm: Slurm, profile: SiteProfile, rec: RunRecord, *, out: TextIO, wait: bool = False,
             step: StepProcess | None = None) -> bool:
    """Delete the run's pod through its provider, as the kubelet deletes one: the delete marker (its
    status then says deleted, not cancelled from outside or timed out), SIGTERM to the batch shell
    alone (or to a pilot pod's step; it stops the containers as Kubernetes does: preStop, SIGTERM,
    SIGKILL after the grace period, sidecars last), a wait for ``pod.done`` up to the grace periods
    plus a margin, then ``scancel``; a pending job is cancelled at once. A workload's running pods
    are stopped so, then its whole array is cancelled. ``wait``: then wait for the job to end (its
    directory may go); ``step``: a pilot pod's srun, started by this process. True if a job was
    cancelled."""
    # here, not at import: hpkctl run of a job-per-pod pod imports this module, and pilot mode's code
    # (its pool, plans and step launch) is needed only to stop a run (tests/misc/test_cli_imports.py)
    from hpkctl.provider.pilotpod import PilotPodProvider, run_provider

    provider = run_provider(slurm, profile, pilot=bool(rec.allocation))
    provider.know(rec)
    if step is not None and isinstance(provider, PilotPodProvider):
        provider.know_step(rec.uid, step)
    ref = PodRef(rec.uid, rec.namespace, rec.name)
    try:
        pod = {} if rec.is_array else rec.pod()
    except (OSError, ValueError):
        pod = {"metadata": {"uid": rec.uid, "name": rec.name, "namespace": rec.namespace}, "spec": {}}
    what = f"{rec.kind.lower()} {rec.namespace}/{rec.name}"
    last = provider.delete(ref, grace=None, pod=pod, report=False)
    if not last.done:
        grace = max(grace_period(pod.get("spec") or {}), 2)
        where = f"; a step of pilot allocation {rec.allocation}" if rec.allocation else ""
        print(f"{what}: stopping its running pods (each with its grace period)" if rec.is_array else
              f"{what}: stopping its containers (grace period {grace}s{where})", file=out)
        last = delete_and_wait(provider, [(ref, pod)])[rec.uid]
    if last.cancelled and not rec.allocation:
        print(f"{what}: cancelled Slurm job {'array ' if rec.is_array else ''}{rec.job_id}", file=out)
    if wait:
        provider.wait_ended(ref)  # let the job end before its directory goes (KillWait is short)
    return last.cancelled


def delete_unrecorded(slurm: Slurm, profile: SiteProfile, found: Unrecorded, *, out: TextIO) -> None:
    """``hpkctl delete`` of a pod whose job Slurm still runs but no record names (found by the uid in
    its comment): adopted as a run of its own and deleted as any run is, through the provider's stop
    sequence (the delete marker, TERM, the grace period, scancel), as ``kubectl delete`` of an existing
    pod stops it gracefully; its pod directory goes with it."""
    print(f"pod {found.namespace}/{found.name}: Slurm job {found.job.job_id} carries its uid {found.uid} but had no "
          f"run record: deleting it as a run", file=out)
    delete_run(slurm, profile, found_record(profile, uid=found.uid, namespace=found.namespace, name=found.name,
                                            job_id=found.job.job_id), out=out)


def exit_status(rec: RunRecord, st: PodStatus) -> int:
    """What ``hpkctl run`` exits with for a pod that ended (README.md, "Exit status")."""
    if st.phase == "Succeeded":
        return 0
    if st.reason in SETUP_REASONS:
        return EXIT_HPKCTL
    if st.reason in NO_CODE_REASONS:
        return EXIT_NO_CODE
    for c in st.containers:
        if c.state == "terminated" and c.reason == "ContainerCannotRun" and c.exit_code in (126, 127):
            return c.exit_code  # read_pod_status mapped Apptainer's FATAL already
        if c.state == "terminated" and c.exit_code == 255:
            fatal = fatal_exit(rec, c.name)
            if fatal is not None:
                return fatal
    code = st.exit_code
    return code if code is not None and 0 < code < 256 else EXIT_NO_CODE

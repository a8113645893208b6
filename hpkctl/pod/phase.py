"""The phase of a pod whose job runs, from its containers' states: the kubelet's ``getPhase``.

A running job is not a Running pod: the kubelet keeps a pod Pending until every regular init
container has succeeded, every sidecar (an init container with ``restartPolicy: Always``) has
started, and every main container has been started once. ``kubectl wait``, ``helm --wait`` and
operators believe the phase, so an init container in a restart back-off must leave it Pending
(kubectl's ``Init:CrashLoopBackOff``). Ported from pkg/kubelet/kubelet_pods.go ``getPhase`` for a
pod that is not terminal (the job's own ``pod.done`` and Slurm decide that).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpkctl.pod.status import ContainerStatus


def live_phase(containers: Sequence[ContainerStatus], *, restart_policy: str) -> str:
    """``Pending`` or ``Running`` (a terminal answer of ``getPhase`` is ``Running`` here: the job has
    not finished the pod yet)."""
    pending_init = failed_init = pending_sidecars = 0
    running = waiting = stopped = 0
    initialized = any(not c.init and (c.started_at or c.last_exit_code is not None) for c in containers)
    for c in containers:
        ran_before = c.state == "waiting" and c.last_exit_code is not None
        if c.init and not c.sidecar:
            if c.state == "terminated":
                failed_init += c.exit_code != 0
            elif ran_before:
                failed_init += c.last_exit_code != 0
            else:  # running, or not started yet
                pending_init += 1
        elif c.init:  # a sidecar: only its start counts
            if c.state == "running":
                pending_sidecars += not c.started
                running += 1
            elif c.state == "waiting" and not ran_before:
                pending_sidecars += 1
                waiting += 1
        elif c.state == "running":
            running += 1
        elif c.state == "terminated" or ran_before:
            stopped += 1
        else:
            waiting += 1
    if failed_init:  # kubelet getPhase: not initialized; Never: Failed (the job writes pod.failed at once)
        return "Running" if restart_policy == "Never" else "Pending"
    if pending_init or (pending_sidecars and not initialized) or waiting:
        return "Pending"
    if running or stopped:
        return "Running"
    return "Pending"


def init_summary(containers: Sequence[ContainerStatus]) -> str:
    """kubectl's STATUS column for a pod still initializing: ``Init:REASON`` for the first regular
    init container that is waiting with a reason or terminated with a failure, else
    ``Init:DONE/ALL``; empty once the init containers are through."""
    inits = [c for c in containers if c.init]
    done = 0
    for c in inits:
        if c.state == "terminated" and c.exit_code == 0:
            done += 1
        elif c.sidecar and c.state == "running" and c.started:
            done += 1
        elif c.state == "terminated":
            return f"Init:{c.reason or 'Error'}"
        elif c.state == "waiting" and c.reason not in ("", "Waiting", "PodInitializing", "NotStarted"):
            return f"Init:{c.reason}"
    return f"Init:{done}/{len(inits)}" if inits and done < len(inits) else ""


def main_summary(containers: Sequence[ContainerStatus]) -> str:
    """kubectl's STATUS for a pod past its init containers: the reason of the first main container
    in spec order that waits (CrashLoopBackOff, ContainerCreating) or ended (Error, OOMKilled...);
    empty while they run (Completed beside a ready running container too)."""
    reason, running = "", False
    for c in reversed([c for c in containers if not c.init]):
        if c.state == "waiting" and c.reason:
            reason = c.reason
        elif c.state == "terminated":
            reason = c.reason or f"ExitCode:{c.exit_code}"
        elif c.state == "running" and c.ready:
            running = True
    return "" if reason == "Completed" and running else reason

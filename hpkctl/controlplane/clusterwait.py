"""``hpkctl start``'s waits: the control-plane job until its API serves, the kubelet job until its node is Ready.

Split out of :mod:`hpkctl.controlplane.lifecycle`. Each wait follows Slurm (queued, running on NODE) and
says each change once; the control plane's also follows the bootstrap's ``status`` file (its phases) and
probes the published endpoint's ``/readyz``; the node's asks the API for its Ready condition and a Lease
renewed since the kubelet job started. A job that ends first, or the deadline, is a
:class:`~hpkctl.controlplane.clusterview.ClusterError` naming the job's output (its tail included).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpkctl.controlplane.clusterview import (
    PHASES,
    ClusterError,
    ClusterJob,
    cluster_job,
    condition,
    read_json,
    slurm_line,
    tail,
    utc,
)
from hpkctl.controlplane.health import Probe
from hpkctl.controlplane.launch import CONTROLPLANE, KUBELET
from hpkctl.controlplane.pki import CertKey
from hpkctl.controlplane.statedir import read_endpoint
from hpkctl.jobs import JobInfo
from hpkctl.jobs.states import PENDING_STATES, TERMINAL_STATES
from hpkctl.kube import Kube, KubeError, KubeUnavailable
from hpkctl.kube.client import lease_path, node_path

if TYPE_CHECKING:
    from hpkctl.controlplane.lifecycle import Cluster

#: a lease renewed this long before the kubelet job started still counts as the new kubelet's (clock skew)
LEASE_SLACK = 5.0
POLL = 0.5


def wait_controlplane(cluster: Cluster, job_id: str, deadline: float, *,
                      known: ClusterJob | None = None) -> tuple[JobInfo, dict[str, Any]]:
    out = cluster.layout.logs / f"controlplane-job-{job_id}.out"
    shown: set[str] = set()
    last_slurm = slurm_line(known) if known is not None else ""
    info: JobInfo | None = None
    next_query = 0.0
    while True:
        now = cluster.clock()
        status = read_json(cluster.layout.status)
        if status is not None and str(status.get("slurm_job_id", "")) != job_id:
            status = None
        if status is not None and (info is None or info.state in PENDING_STATES):
            next_query = now  # the job runs: say so before its first phase
        if now >= next_query:
            info = _job_state(cluster, job_id)
            next_query = now + (1.0 if info is not None and info.state == "RUNNING" else 2.0)
            if info is None or info.state in TERMINAL_STATES:
                raise _controlplane_failed(cluster, job_id, info, out)
            line = slurm_line(cluster_job(CONTROLPLANE, info))
            if line != last_slurm:
                cluster.say(f"control plane: {line}")
                last_slurm = line
        if status is not None:
            phase = str(status.get("phase", ""))
            if phase == "failed":
                raise _controlplane_failed(cluster, job_id, info, out, status=status)
            if phase not in shown and phase != "ready":
                shown.add(phase)
                cluster.say(f"control plane: {PHASES.get(phase, phase)}")
        ep = read_endpoint(cluster.layout.root)
        if ep is not None and str(ep.get("slurm_job_id", "")) == job_id:
            ok, detail = _probe(cluster, ep)
            if ok:
                cluster.say(f"control plane: ready at {ep.get('server')} (Slurm job {job_id} on "
                            f"{ep.get('host', '?')})")
                assert info is not None
                return info, ep
        if now >= deadline:
            where = f"still queued ({info.reason})" if info is not None and info.state in PENDING_STATES else \
                "not ready yet"
            raise ClusterError(
                f"the control plane (Slurm job {job_id}) is {where} after the --timeout; the job stays",
                hint=f"hpkctl start again waits for it again, hpkctl stop cancels it; its output: {out}, "
                     f"the components' logs: {cluster.layout.logs}")
        cluster.sleep(POLL)


def _probe(cluster: Cluster, ep: dict[str, Any]) -> tuple[bool, str]:
    pki = cluster.layout.pki
    return Probe(f"{ep.get('server')}/readyz", ca=pki / "ca.crt",
                 client=CertKey(pki / "admin.crt", pki / "admin.key"), body="ok")()


def _controlplane_failed(cluster: Cluster, job_id: str, info: JobInfo | None, out: Path, *,
                          status: dict[str, Any] | None = None) -> ClusterError:
    if status is None:
        status = read_json(cluster.layout.status)
        if status is not None and str(status.get("slurm_job_id", "")) != job_id:
            status = None
    ended = f"ended ({info.state}{f', {info.reason}' if info and info.reason else ''})" if info else \
        "is gone from Slurm"
    if status is not None and status.get("phase") == "failed":
        why = f"the control plane failed (Slurm job {job_id}): {status.get('message', '')}"
    else:
        why = f"the control-plane job {job_id} {ended} before the control plane was ready"
    return ClusterError(f"{why}\n  the job's output {out} ends:\n{tail(out)}",
                        hint=f"read the job's output and the components' logs in {cluster.layout.logs}; "
                             "fix the cause, then hpkctl start again (it resumes from "
                             f"{cluster.layout.root})")


def wait_node(cluster: Cluster, job_id: str, deadline: float, *, known: ClusterJob | None = None) -> None:
    out = cluster.layout.logs / f"kubelet-job-{job_id}.out"
    kube = Kube(str(cluster.layout.kubeconfig("admin")), pool_size=2)
    try:
        last_slurm = slurm_line(known) if known is not None else ""
        next_query = 0.0
        info: JobInfo | None = None
        detail = "not asked yet"
        while True:
            now = cluster.clock()
            if now >= next_query:
                info = _job_state(cluster, job_id)
                next_query = now + 2.0
                if info is None or info.state in TERMINAL_STATES:
                    state = f"ended ({info.state})" if info else "is gone from Slurm"
                    raise ClusterError(f"the kubelet job {job_id} {state} before the node {cluster.node_name} was "
                                       f"Ready\n  its output {out} ends:\n{tail(out)}",
                                       hint="read its output; fix the cause, then hpkctl start again")
                line = slurm_line(cluster_job(KUBELET, info))
                if line != last_slurm:
                    cluster.say(f"kubelet: {line}")
                    last_slurm = line
            if info is not None and info.state not in PENDING_STATES:
                ready, detail = _node_ready(cluster, kube, since=info.start_time)
                if ready:
                    cluster.say(f"kubelet: node {cluster.node_name} is Ready")
                    return
            if now >= deadline:
                raise ClusterError(
                    f"the node {cluster.node_name} is not Ready after the --timeout ({detail}); the kubelet job "
                    f"{job_id} stays", hint=f"read its output {out}; hpkctl start again waits again")
            cluster.sleep(POLL)
    finally:
        kube.close()


def _node_ready(cluster: Cluster, kube: Kube, *, since: dt.datetime | None) -> tuple[bool, str]:
    """Ready, and its Lease renewed by the kubelet of this job (not a Ready left by an earlier one)."""
    try:
        node = kube.get(node_path(cluster.node_name))
        lease = kube.get(lease_path(cluster.node_name))
    except KubeError as e:
        return False, "not registered yet" if e.code == 404 else str(e)
    except KubeUnavailable as e:
        return False, f"the API server did not answer: {e}"
    if condition(node, "Ready") != "True":
        return False, f"Ready is {condition(node, 'Ready') or 'not reported'}"
    renewed = utc(str((lease.get("spec") or {}).get("renewTime", "")))
    if since is not None and (renewed is None or renewed < since - dt.timedelta(seconds=LEASE_SLACK)):
        return False, "its lease was not renewed since the kubelet job started"
    return True, "Ready"


def _job_state(cluster: Cluster, job_id: str) -> JobInfo | None:
    info = cluster.slurm.query([job_id]).get(job_id)
    if info is None or info.state in TERMINAL_STATES:
        return cluster.slurm.final(job_id) or info
    return info


__all__ = ["LEASE_SLACK", "POLL", "wait_controlplane", "wait_node"]

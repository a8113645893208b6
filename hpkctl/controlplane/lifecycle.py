"""A private cluster's life as Slurm jobs: ``hpkctl start``, ``stop`` and the cluster part of ``status``.

A cluster is the state directory ``[controlplane] state_dir`` (PKI, etcd data, logs, the published
endpoint and kubeconfigs, the job scripts under ``jobs/``) plus at most one running job of each kind,
the control plane and the kubelet (:mod:`hpkctl.controlplane.launch`), found through one
``squeue --me`` by their comments (``hpk-controlplane hpk-cluster=<id>``). Nothing else is recorded:
Slurm's queue is the truth about jobs, the bootstrap's ``status`` and ``endpoint`` files the truth about
the control plane, the API the truth about the node.

:meth:`Cluster.start` is idempotent. It submits what is missing (control plane first, then the kubelet),
waits for each, and shows progress from Slurm (queued, running on NODE) and from the bootstrap's
``status`` file (starting etcd, kube-apiserver ...); a job that already runs is reported. A job with less
than ``[controlplane] takeover_before`` seconds left (or any, with ``takeover``) gets a successor: the same
script again, which ``--dependency=singleton`` holds until the old job has ended; it then resumes from the
state directory (same CA and credentials, same etcd data, so the same objects). The kubelet job restarts
its kubelet when the control plane comes back at another address.

:meth:`Cluster.stop` cancels waiting successors, then stops the kubelet job and the control-plane job the
way ``hpkctl delete`` stops a pod: ``scancel --signal=TERM --batch`` (the batch shell is the bootstrap,
which stops its components in reverse order), a bounded wait, then ``scancel``. With ``all_pods`` the
kubelet's pods' jobs are stopped too (found in the kubelet's records, cross-checked with the uid in each
job's comment; never from the pods' ``hpk.io/slurm-job-id`` annotations, which pod authors can write).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpkctl.files import ExclusiveLock, LockHeld, private_dirs, write_atomic
from hpkctl.controlplane.bootstrap import Layout, read_endpoint
from hpkctl.controlplane.health import Probe
from hpkctl.controlplane.launch import (
    CONTROLPLANE,
    KUBELET,
    JobScripts,
    cluster_id,
    controlplane_time,
    kubelet_time,
    parse_comment,
    render_jobs,
)
from hpkctl.controlplane.pki import CertKey
from hpkctl.errors import HpkError
from hpkctl.jobs import JobInfo, Slurm, SlurmError
from hpkctl.jobs.states import PENDING_STATES, TERMINAL_STATES
from hpkctl.kube import Kube, KubeError, KubeUnavailable
from hpkctl.kube.client import lease_path, node_path
from hpkctl.pod.flags import uid_from_comment
from hpkctl.sites.schema import SiteProfile, slurm_time_to_seconds

Say = Callable[[str], None]

#: what the bootstrap's ``status`` phases mean to a user watching ``hpkctl start``
PHASES = {
    "starting": "the bootstrap started",
    "pki": "preparing the PKI (certificates for this node)",
    "etcd": "starting etcd",
    "kube-apiserver": "etcd ready; starting the API server",
    "kube-controller-manager": "API server ready; starting kube-controller-manager",
    "coredns": "kube-controller-manager ready; starting CoreDNS",
    "services rule": "CoreDNS ready; installing the services rule",
    "hpk-scheduler": "starting the scheduler",
    "ready": "ready",
    "stopping": "stopping",
    "stopped": "stopped",
    "failed": "failed",
}
#: seconds a stopped job's batch shell gets after SIGTERM before it is cancelled
STOP_WAIT = {CONTROLPLANE: 90.0, KUBELET: 30.0}
#: seconds pods' jobs get after SIGTERM with ``stop --all`` (the default grace period + 10 s)
POD_STOP_WAIT = 40.0
#: a lease renewed this long before the kubelet job started still counts as the new kubelet's (clock skew)
LEASE_SLACK = 5.0
POLL = 0.5
JOB_LOG_LINES = 20


class ClusterError(HpkError):
    """A job of the cluster failed, was refused, or did not get ready in time; names the log to read."""


@dataclass(frozen=True)
class ClusterJob:
    kind: str  # CONTROLPLANE or KUBELET
    job_id: str
    state: str
    reason: str = ""
    node: str = ""
    start: dt.datetime | None = None
    end: dt.datetime | None = None

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    def left(self, now: dt.datetime | None = None) -> float | None:
        """Seconds until the time limit of a running job (Slurm's expected end), else None."""
        if self.pending or self.end is None:
            return None
        return (self.end - (now or dt.datetime.now(dt.timezone.utc))).total_seconds()


@dataclass
class ClusterJobs:
    """The cluster's jobs Slurm still has, oldest first: the first of each kind is the current one,
    the others are successors waiting for it (``--dependency=singleton``)."""

    controlplane: list[ClusterJob] = field(default_factory=list)
    kubelet: list[ClusterJob] = field(default_factory=list)

    def of(self, kind: str) -> list[ClusterJob]:
        return self.controlplane if kind == CONTROLPLANE else self.kubelet

    def all(self) -> list[ClusterJob]:
        return self.controlplane + self.kubelet


@dataclass(frozen=True)
class PodRow:
    namespace: str
    name: str
    phase: str
    job_id: str
    job_state: str = ""
    job_node: str = ""
    uid: str = ""


@dataclass
class ClusterStatus:
    """Everything ``hpkctl status`` shows about the cluster."""

    state_dir: str
    cluster: str
    jobs: ClusterJobs
    phase: dict[str, Any] | None  # the bootstrap's status file
    endpoint: dict[str, Any] | None
    api: str  # "ok", or why the API did not answer
    node_name: str
    node: str  # Ready, NotReady, Unknown, "missing", or "" when the API did not answer
    pods: list[PodRow] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        """Whether there is anything to show: jobs, or state of an earlier start."""
        return bool(self.jobs.all()) or self.phase is not None or self.endpoint is not None


def _utc(text: str) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def duration(seconds: float) -> str:
    """``1h05m``, ``12m``, ``40s``."""
    s = max(0, int(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m" if s >= 60 else f"{s}s"


def tail(path: Path, lines: int = JOB_LOG_LINES) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 32 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError:
        return "    (no output yet)"
    return "\n".join("    " + ln for ln in text.splitlines()[-lines:]) or "    (empty)"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Cluster:
    """The cluster of ``profile`` (its ``[controlplane] state_dir``), as seen from a login node.

    ``site`` is what the jobs get as ``--site`` (a name or an absolute .toml path), ``python`` the
    interpreter of this hpkctl (``python -m hpkctl`` runs it in the jobs), ``image`` the control-plane
    image (used when ``[controlplane] bin_dir`` is empty). Progress lines go to ``say``.
    """

    def __init__(self, profile: SiteProfile, *, slurm: Slurm, site: str, python: str, image: str = "",
                 say: Say = lambda _line: None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.profile = profile
        self.slurm = slurm
        self.site = site
        self.python = python
        self.image = image
        self.say = say
        self.clock = clock
        self.sleep = sleep
        self.layout = Layout(Path(profile.controlplane.state_dir))
        self.cid = cluster_id(profile.controlplane.state_dir)
        self.node_name = profile.pods.node_name

    # ------------------------------------------------------------------ jobs

    def scripts(self, *, strict: bool = True) -> JobScripts:
        return render_jobs(self.profile, site=self.site, python=self.python, image=self.image, strict=strict)

    def jobs(self) -> ClusterJobs:
        """The cluster's jobs Slurm still has (pending or running): one ``squeue --me``, then one
        ``squeue --jobs`` for their nodes and times."""
        mine = []
        for j in self.slurm.user_jobs():
            found = parse_comment(j.comment)
            if found is not None and found[1] == self.cid and j.state not in TERMINAL_STATES:
                mine.append((found[0], j.job_id))
        infos = self.slurm.query([j for _, j in mine]) if mine else {}
        out = ClusterJobs()
        for kind, job_id in sorted(mine, key=lambda kj: int(kj[1].split("_")[0])):
            info = infos.get(job_id)
            if info is None or info.state in TERMINAL_STATES:
                continue
            out.of(kind).append(_cluster_job(kind, info))
        return out

    def _submit(self, kind: str, scripts: JobScripts) -> str:
        jobs_dir = self.layout.root / "jobs"
        for d in (self.layout.root, self.layout.logs, jobs_dir):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = Path(scripts.path(str(self.layout.root), kind))
        write_atomic(path, (scripts.controlplane if kind == CONTROLPLANE else scripts.kubelet).encode())
        try:
            return self.slurm.submit(path)
        except SlurmError as e:
            what = "control-plane" if kind == CONTROLPLANE else "kubelet"
            raise ClusterError(f"the {what} job was not accepted: {e.message}",
                               hint=f"{e.hint}; the script is {path}") from None

    # ------------------------------------------------------------------ start

    def start(self, *, timeout: float, takeover: bool = False) -> ClusterStatus:
        """Submit what is missing, wait until the control plane serves and the node is Ready
        (``timeout`` seconds in all); a :class:`ClusterError` names what failed and its log."""
        deadline = self.clock() + timeout
        scripts = self.scripts()  # refuses an incomplete profile before anything is submitted
        if scripts.image and not os.path.isfile(scripts.image):
            raise ClusterError(f"the control-plane image {scripts.image} is not built",
                               hint=f"build it: hpkctl build --site {self.site} (or set [controlplane] bin_dir to "
                                    "where the binaries are on the compute nodes)")
        with self._start_lock(deadline):
            jobs = self.jobs()
            self._successors(jobs, scripts, force=takeover)
            job_id, cp = self._ensure(jobs, CONTROLPLANE, scripts, label="control plane", script="controlplane.sh")
            self._wait_controlplane(job_id, deadline, known=cp)
            kjob, kubelet = self._ensure(jobs, KUBELET, scripts, label="kubelet", script="kubelet.sh")
            self._wait_node(kjob, deadline, known=kubelet)
        return self.status()

    def _start_lock(self, deadline: float) -> ExclusiveLock:
        """One ``hpkctl start`` per state directory at a time (issue 20.14: two at once each submitted
        the cluster's jobs): a second one waits for the first, then finds its jobs running."""
        lock = ExclusiveLock(private_dirs(self.layout.root) / "start.lock")
        said = False
        while True:
            try:
                return lock.acquire()
            except LockHeld as e:
                if not said:
                    self.say(f"waiting for the other hpkctl start (pid {e.holder or 'unknown'}) of this cluster")
                    said = True
                if self.clock() >= deadline:
                    raise ClusterError(f"another hpkctl start (pid {e.holder or 'unknown'}) of the cluster in "
                                       f"{self.layout.root} still runs after the --timeout",
                                       hint="wait for it, then 'hpkctl status'") from None
                self.sleep(1.0)

    def _ensure(self, jobs: ClusterJobs, kind: str, scripts: JobScripts, *, label: str,
                script: str) -> tuple[str, ClusterJob | None]:
        """The running (or queued) job of ``kind``, or a new one submitted: its id and the job found."""
        found = self._current(jobs, kind)
        if found is None:
            job_id = self._submit(kind, scripts)
            self.say(f"{label}: submitted Slurm job {job_id} ({self.layout.root / 'jobs' / script})")
            return job_id, None
        self.say(f"{label}: Slurm job {found.job_id} is already {self._where(found)}")
        return found.job_id, found

    @staticmethod
    def _current(jobs: ClusterJobs, kind: str) -> ClusterJob | None:
        of = jobs.of(kind)
        return next((j for j in of if not j.pending), of[0] if of else None)

    @staticmethod
    def _where(job: ClusterJob) -> str:
        if job.pending:
            return f"queued ({job.reason or 'pending'})"
        left = job.left()
        return f"running on {job.node or '?'}" + (f", {duration(left)} left" if left is not None else "")

    def _successors(self, jobs: ClusterJobs, scripts: JobScripts, *, force: bool) -> None:
        """A successor for each running job near its end (or every running job with ``force``)."""
        for kind, what in ((CONTROLPLANE, "control plane"), (KUBELET, "kubelet")):
            of = jobs.of(kind)
            running = [j for j in of if not j.pending]
            if not running or len(of) > 1:  # nothing to take over from, or a successor already waits
                continue
            window = takeover_window(self.profile, kind)
            left = running[0].left()
            if not force and (window <= 0 or left is None or left >= window):
                continue
            job_id = self._submit(kind, scripts)
            when = f"in {duration(left)}" if left is not None else "when it ends"
            self.say(f"{what}: submitted successor Slurm job {job_id}: it waits for job {running[0].job_id} to end "
                     f"({when}) and then resumes from {self.layout.root}")
            of.append(ClusterJob(kind, job_id, "PENDING", "Dependency"))

    def _job_state(self, job_id: str) -> JobInfo | None:
        info = self.slurm.query([job_id]).get(job_id)
        if info is None or info.state in TERMINAL_STATES:
            return self.slurm.final(job_id) or info
        return info

    def _wait_controlplane(self, job_id: str, deadline: float, *,
                           known: ClusterJob | None = None) -> tuple[JobInfo, dict[str, Any]]:
        out = self.layout.logs / f"controlplane-job-{job_id}.out"
        shown: set[str] = set()
        last_slurm = _slurm_line(known) if known is not None else ""
        info: JobInfo | None = None
        next_query = 0.0
        while True:
            now = self.clock()
            status = _read_json(self.layout.status)
            if status is not None and str(status.get("slurm_job_id", "")) != job_id:
                status = None
            if status is not None and (info is None or info.state in PENDING_STATES):
                next_query = now  # the job runs: say so before its first phase
            if now >= next_query:
                info = self._job_state(job_id)
                next_query = now + (1.0 if info is not None and info.state == "RUNNING" else 2.0)
                if info is None or info.state in TERMINAL_STATES:
                    raise self._controlplane_failed(job_id, info, out)
                line = _slurm_line(_cluster_job(CONTROLPLANE, info))
                if line != last_slurm:
                    self.say(f"control plane: {line}")
                    last_slurm = line
            if status is not None:
                phase = str(status.get("phase", ""))
                if phase == "failed":
                    raise self._controlplane_failed(job_id, info, out, status=status)
                if phase not in shown and phase != "ready":
                    shown.add(phase)
                    self.say(f"control plane: {PHASES.get(phase, phase)}")
            ep = read_endpoint(self.layout.root)
            if ep is not None and str(ep.get("slurm_job_id", "")) == job_id:
                ok, detail = self._probe(ep)
                if ok:
                    self.say(f"control plane: ready at {ep.get('server')} (Slurm job {job_id} on "
                             f"{ep.get('host', '?')})")
                    assert info is not None
                    return info, ep
            if now >= deadline:
                where = f"still queued ({info.reason})" if info is not None and info.state in PENDING_STATES else \
                    "not ready yet"
                raise ClusterError(
                    f"the control plane (Slurm job {job_id}) is {where} after the --timeout; the job stays",
                    hint=f"hpkctl start again waits for it again, hpkctl stop cancels it; its output: {out}, "
                         f"the components' logs: {self.layout.logs}")
            self.sleep(POLL)

    def _probe(self, ep: dict[str, Any]) -> tuple[bool, str]:
        pki = self.layout.pki
        return Probe(f"{ep.get('server')}/readyz", ca=pki / "ca.crt",
                     client=CertKey(pki / "admin.crt", pki / "admin.key"), body="ok")()

    def _controlplane_failed(self, job_id: str, info: JobInfo | None, out: Path, *,
                             status: dict[str, Any] | None = None) -> ClusterError:
        if status is None:
            status = _read_json(self.layout.status)
            if status is not None and str(status.get("slurm_job_id", "")) != job_id:
                status = None
        ended = f"ended ({info.state}{f', {info.reason}' if info and info.reason else ''})" if info else \
            "is gone from Slurm"
        if status is not None and status.get("phase") == "failed":
            why = f"the control plane failed (Slurm job {job_id}): {status.get('message', '')}"
        else:
            why = f"the control-plane job {job_id} {ended} before the control plane was ready"
        return ClusterError(f"{why}\n  the job's output {out} ends:\n{tail(out)}",
                            hint=f"read the job's output and the components' logs in {self.layout.logs}; "
                                 "fix the cause, then hpkctl start again (it resumes from "
                                 f"{self.layout.root})")

    def _wait_node(self, job_id: str, deadline: float, *, known: ClusterJob | None = None) -> None:
        out = self.layout.logs / f"kubelet-job-{job_id}.out"
        kube = Kube(str(self.layout.kubeconfig("admin")), pool_size=2)
        try:
            last_slurm = _slurm_line(known) if known is not None else ""
            next_query = 0.0
            info: JobInfo | None = None
            detail = "not asked yet"
            while True:
                now = self.clock()
                if now >= next_query:
                    info = self._job_state(job_id)
                    next_query = now + 2.0
                    if info is None or info.state in TERMINAL_STATES:
                        state = f"ended ({info.state})" if info else "is gone from Slurm"
                        raise ClusterError(f"the kubelet job {job_id} {state} before the node {self.node_name} was "
                                           f"Ready\n  its output {out} ends:\n{tail(out)}",
                                           hint="read its output; fix the cause, then hpkctl start again")
                    line = _slurm_line(_cluster_job(KUBELET, info))
                    if line != last_slurm:
                        self.say(f"kubelet: {line}")
                        last_slurm = line
                if info is not None and info.state not in PENDING_STATES:
                    ready, detail = self._node_ready(kube, since=info.start_time)
                    if ready:
                        self.say(f"kubelet: node {self.node_name} is Ready")
                        return
                if now >= deadline:
                    raise ClusterError(
                        f"the node {self.node_name} is not Ready after the --timeout ({detail}); the kubelet job "
                        f"{job_id} stays", hint=f"read its output {out}; hpkctl start again waits again")
                self.sleep(POLL)
        finally:
            kube.close()

    def _node_ready(self, kube: Kube, *, since: dt.datetime | None) -> tuple[bool, str]:
        """Ready, and its Lease renewed by the kubelet of this job (not a Ready left by an earlier one)."""
        try:
            node = kube.get(node_path(self.node_name))
            lease = kube.get(lease_path(self.node_name))
        except KubeError as e:
            return False, "not registered yet" if e.code == 404 else str(e)
        except KubeUnavailable as e:
            return False, f"the API server did not answer: {e}"
        if _condition(node, "Ready") != "True":
            return False, f"Ready is {_condition(node, 'Ready') or 'not reported'}"
        renewed = _utc(str((lease.get("spec") or {}).get("renewTime", "")))
        if since is not None and (renewed is None or renewed < since - dt.timedelta(seconds=LEASE_SLACK)):
            return False, "its lease was not renewed since the kubelet job started"
        return True, "Ready"

    # ------------------------------------------------------------------ status

    def status(self, *, pods: bool = True) -> ClusterStatus:
        jobs = self.jobs()
        ep = read_endpoint(self.layout.root)
        st = ClusterStatus(state_dir=str(self.layout.root), cluster=self.cid, jobs=jobs,
                           phase=_read_json(self.layout.status), endpoint=ep, api="no endpoint published",
                           node_name=self.node_name, node="")
        if ep is None:
            return st
        kube = None
        try:
            kube = Kube(str(self.layout.kubeconfig("admin")), pool_size=2)
            node = kube.get(node_path(self.node_name))
            st.api = "ok"
            st.node = _condition(node, "Ready") or "Unknown"
            st.node = {"True": "Ready", "False": "NotReady"}.get(st.node, st.node)
            if pods:
                listed = kube.get("/api/v1/pods", query={"fieldSelector": f"spec.nodeName={self.node_name}"})
                st.pods = [_pod_row(p) for p in listed.get("items", [])]
        except KubeError as e:
            st.api = "ok" if e.code == 404 else str(e)
            st.node = "missing" if e.code == 404 else ""
        except (KubeUnavailable, HpkError) as e:
            st.api = f"no answer: {e}"
        finally:
            if kube is not None:
                kube.close()
        if st.pods:  # job ids from the kubelet's records, not from annotations pod authors can write
            try:
                recorded = self._recorded_jobs()[0]
            except SlurmError:
                recorded = {}
            st.pods = [PodRow(p.namespace, p.name, p.phase, recorded.get(p.uid, ""), uid=p.uid) for p in st.pods]
        ids = [p.job_id for p in st.pods if p.job_id]
        if ids:
            try:
                infos = self.slurm.query(ids)
            except SlurmError:
                infos = {}
            st.pods = [PodRow(p.namespace, p.name, p.phase, p.job_id,
                              infos[p.job_id].state if p.job_id in infos else ("gone" if p.job_id else ""),
                              infos[p.job_id].nodes if p.job_id in infos else "", uid=p.uid) for p in st.pods]
        return st

    # ------------------------------------------------------------------ stop

    def stop(self, *, all_pods: bool = False) -> list[tuple[str, str, str]]:
        """Stop the cluster's jobs (see the module docstring); ``(what, job id, final state)`` each."""
        jobs = self.jobs()
        done: list[tuple[str, str, str]] = []
        # waiting successors first: once their predecessor ends they would start
        for job in [j for j in jobs.all() if j.pending]:
            self.slurm.cancel(job.job_id)
            self.say(f"{_what(job.kind)}: cancelled queued Slurm job {job.job_id}")
            done.append((_what(job.kind), job.job_id, "CANCELLED"))
        pod_ids = self._pod_jobs() if all_pods else []
        for job in [j for j in jobs.kubelet if not j.pending]:
            done.append(self._stop_job(job.job_id, _what(job.kind), STOP_WAIT[KUBELET]))
        if all_pods:
            for what, job_id, state in self._stop_pods(pod_ids):
                done.append((what, job_id, state))
        for job in [j for j in jobs.controlplane if not j.pending]:
            done.append(self._stop_job(job.job_id, _what(job.kind), STOP_WAIT[CONTROLPLANE]))
        return done

    def _stop_job(self, job_id: str, what: str, wait: float) -> tuple[str, str, str]:
        self.say(f"{what}: stopping Slurm job {job_id} (SIGTERM to its batch shell, up to {wait:.0f} s)")
        self.slurm.cancel(job_id, signal="TERM", batch_only=True)
        try:
            snap = self.slurm.wait_for([job_id], timeout=wait, backoff=(0.5, 1.0))
        except TimeoutError:
            self.say(f"{what}: Slurm job {job_id} still runs after {wait:.0f} s: cancelling it")
            self.slurm.cancel(job_id)
            snap = self.slurm.wait_for([job_id], timeout=60, backoff=(0.5, 1.0))
        info = snap.get(job_id)
        state = info.state if info is not None else "gone"
        self.say(f"{what}: Slurm job {job_id} ended ({state})")
        return what, job_id, state

    def _recorded_jobs(self) -> tuple[dict[str, str], set[str]]:
        """The kubelet's own records, never the pods' ``hpk.io/slurm-job-id`` annotation (any pod author
        can set that to another job of this user, issue 20.10): ``({uid: job id}, uids of records
        still being submitted)``. A recorded job id counts only while Slurm either no longer lists
        the job or lists it with that pod's uid in its comment."""
        listed = {j.job_id: j.comment for j in self.slurm.user_jobs()}
        jobs: dict[str, str] = {}
        submitting: set[str] = set()
        records = Path(os.path.expanduser(self.profile.pods.state_dir)) / "kubelet" / self.node_name / "pods"
        for path in sorted(records.glob("*.json")):
            rec = _read_json(path)  # hpkctl.kubelet.records.PodRecord, read as plain JSON (a sibling layer)
            if rec is None or rec.get("state") not in ("submitting", "submitted"):
                continue
            uid, job_id = str(rec.get("uid", "")), str(rec.get("job_id", "") or "")
            if not job_id:
                submitting.add(uid)
            elif job_id not in listed or uid_from_comment(listed[job_id]) == uid:
                jobs[uid] = job_id
        return jobs, submitting

    def _pod_jobs(self) -> list[str]:
        """Job ids of the kubelet's pods that Slurm still runs: the records' (``_recorded_jobs``), and
        jobs whose comment names the uid of a record written just before sbatch."""
        recorded, submitting = self._recorded_jobs()
        ids = dict.fromkeys(recorded.values())
        for j in self.slurm.user_jobs():
            if (uid_from_comment(j.comment) or "") in submitting and j.state not in TERMINAL_STATES:
                ids[j.job_id] = None
        return list(ids)

    def _stop_pods(self, job_ids: Iterable[str]) -> list[tuple[str, str, str]]:
        live = [j for j, info in self.slurm.query(list(job_ids)).items() if info.state not in TERMINAL_STATES]
        if not live:
            self.say("pods: no Slurm job of a pod of this node runs")
            return []
        self.say(f"pods: stopping {len(live)} Slurm job(s) of the node's pods: {' '.join(live)}")
        for j in live:
            self.slurm.cancel(j, signal="TERM", batch_only=True)
        try:
            snap = self.slurm.wait_for(live, timeout=POD_STOP_WAIT)
        except TimeoutError:
            for j in live:
                self.slurm.cancel(j)
            snap = self.slurm.wait_for(live, timeout=60)
        return [("pod", j, info.state if info is not None else "gone") for j, info in snap.items()]


def takeover_window(profile: SiteProfile, kind: str) -> float:
    """Seconds before its end from which a running job gets a successor at ``hpkctl start``:
    ``[controlplane] takeover_before``, but at most half the job's time (else every start of a short
    job would queue a successor at once)."""
    total = slurm_time_to_seconds(controlplane_time(profile) if kind == CONTROLPLANE else kubelet_time(profile))
    return float(min(profile.controlplane.takeover_before, total // 2))


def _what(kind: str) -> str:
    return "control plane" if kind == CONTROLPLANE else "kubelet"


def _slurm_line(job: ClusterJob) -> str:
    if job.pending:
        return f"Slurm job {job.job_id} queued ({job.reason or 'pending'})"
    return f"Slurm job {job.job_id} running on {job.node or '?'}"


def _cluster_job(kind: str, info: JobInfo) -> ClusterJob:
    return ClusterJob(kind, info.job_id, info.state, info.reason, info.nodes, info.start_time, info.end_time)


def _condition(obj: dict[str, Any], kind: str) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status", ""))
    return ""


def _pod_row(pod: dict[str, Any]) -> PodRow:
    """A pod of the node as the API lists it; its job id is filled in from the kubelet's records."""
    meta = pod.get("metadata") or {}
    phase = str((pod.get("status") or {}).get("phase", "")) or "Pending"
    if meta.get("deletionTimestamp"):
        phase = "Terminating"
    return PodRow(str(meta.get("namespace", "")), str(meta.get("name", "")), phase, "", uid=str(meta.get("uid", "")))



__all__ = ["Cluster", "ClusterError", "ClusterJob", "ClusterJobs", "ClusterStatus", "PHASES", "PodRow", "duration",
           "tail"]

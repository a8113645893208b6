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

The waits are in :mod:`hpkctl.controlplane.clusterwait`, the stop in :mod:`hpkctl.controlplane.clusterstop`,
the jobs and status rows in :mod:`hpkctl.controlplane.clusterview`. None of them imports the bootstrap
(:mod:`hpkctl.controlplane.bootstrap` runs inside the job): the state directory's files are read through
:mod:`hpkctl.controlplane.statedir`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from hpkctl.files import ExclusiveLock, LockHeld, private_dirs, write_atomic
from hpkctl.controlplane import clusterstop
from hpkctl.controlplane.clusterview import (
    ClusterError,
    ClusterJob,
    ClusterJobs,
    ClusterStatus,
    PodRow,
    condition,
    cluster_job,
    duration,
    pod_row,
    read_json,
)
from hpkctl.controlplane.clusterwait import wait_controlplane, wait_node
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
from hpkctl.controlplane.statedir import Layout, read_endpoint
from hpkctl.errors import HpkError
from hpkctl.jobs import Slurm, SlurmError
from hpkctl.jobs.states import TERMINAL_STATES
from hpkctl.kube import Kube, KubeError, KubeUnavailable
from hpkctl.kube.client import node_path
from hpkctl.sites.schema import SiteProfile, slurm_time_to_seconds

Say = Callable[[str], None]


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
            out.of(kind).append(cluster_job(kind, info))
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
            wait_controlplane(self, job_id, deadline, known=cp)
            kjob, kubelet = self._ensure(jobs, KUBELET, scripts, label="kubelet", script="kubelet.sh")
            wait_node(self, kjob, deadline, known=kubelet)
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

    # ------------------------------------------------------------------ status

    def status(self, *, pods: bool = True) -> ClusterStatus:
        jobs = self.jobs()
        ep = read_endpoint(self.layout.root)
        st = ClusterStatus(state_dir=str(self.layout.root), cluster=self.cid, jobs=jobs,
                           phase=read_json(self.layout.status), endpoint=ep, api="no endpoint published",
                           node_name=self.node_name, node="")
        if ep is None:
            return st
        kube = None
        try:
            kube = Kube(str(self.layout.kubeconfig("admin")), pool_size=2)
            node = kube.get(node_path(self.node_name))
            st.api = "ok"
            st.node = condition(node, "Ready") or "Unknown"
            st.node = {"True": "Ready", "False": "NotReady"}.get(st.node, st.node)
            if pods:
                listed = kube.get("/api/v1/pods", query={"fieldSelector": f"spec.nodeName={self.node_name}"})
                st.pods = [pod_row(p) for p in listed.get("items", [])]
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
                recorded = clusterstop.recorded_jobs(self)[0]
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
        return clusterstop.stop(self, all_pods=all_pods)

def takeover_window(profile: SiteProfile, kind: str) -> float:
    """Seconds before its end from which a running job gets a successor at ``hpkctl start``:
    ``[controlplane] takeover_before``, but at most half the job's time (else every start of a short
    job would queue a successor at once)."""
    total = slurm_time_to_seconds(controlplane_time(profile) if kind == CONTROLPLANE else kubelet_time(profile))
    return float(min(profile.controlplane.takeover_before, total // 2))




__all__ = ["Cluster", "ClusterError", "ClusterJob", "ClusterJobs", "ClusterStatus", "PodRow", "takeover_window"]

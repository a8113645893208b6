"""A private cluster's life as Slurm jobs: ``hpkctl start``, ``stop`` and the cluster part of ``status``.

A cluster is the state directory ``[controlplane] state_dir`` (PKI, etcd data, logs, the published
endpoint and kubeconfigs, the job scripts under ``jobs/``) plus at most one running job of each kind,
the control plane and the kubelet (:mod:`hpkctl.controlplane.launch`), found through one
``squeue --me`` by their comments (``hpk-controlplane hpk-cluster=<id>``). Nothing else is recorded:
Slurm's queue is the truth about jobs, the bootstrap's ``status`` and ``endpoint`` files the truth about
the control plane, the API the truth about the node.

:class:`Cluster` is that cluster seen from a login node: its jobs (one ``squeue``) and how one is
submitted. Each command is a module of its own, handed the cluster: ``hpkctl start`` in
:mod:`hpkctl.controlplane.clusterstart` (idempotent; successors before a job's end) with its waits in
:mod:`hpkctl.controlplane.clusterwait`, ``status`` in :mod:`hpkctl.controlplane.clusterstatus`, ``stop``
in :mod:`hpkctl.controlplane.clusterstop`, the jobs and status rows and their wording in
:mod:`hpkctl.controlplane.clusterview`; the state directory's files in :mod:`hpkctl.controlplane.statedir`,
its kubeconfigs in :mod:`hpkctl.controlplane.kubeconfig`.

None of them imports what runs inside the control-plane job (the bootstrap, its steps, components and
API objects, the process supervisor): an import-linter contract ("submit-host") holds that.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from hpkctl.controlplane import clusterstart, clusterstatus, clusterstop
from hpkctl.controlplane.clusterstart import takeover_window
from hpkctl.controlplane.clusterview import ClusterError, ClusterJob, ClusterJobs, ClusterStatus, PodRow, cluster_job
from hpkctl.controlplane.launch import CONTROLPLANE, JobScripts, cluster_id, parse_comment, render_jobs
from hpkctl.controlplane.statedir import Layout
from hpkctl.files import write_atomic
from hpkctl.jobs import Slurm, SlurmError
from hpkctl.jobs.states import TERMINAL_STATES
from hpkctl.sites.schema import SiteProfile

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

    def submit(self, kind: str, scripts: JobScripts) -> str:
        """Write the job script of ``kind`` under ``jobs/`` and submit it; its job id."""
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

    # ------------------------------------------------------------------ start, status, stop

    def start(self, *, timeout: float, takeover: bool = False) -> ClusterStatus:
        """Submit what is missing, wait until the control plane serves and the node is Ready
        (``timeout`` seconds in all; :mod:`hpkctl.controlplane.clusterstart`); a :class:`ClusterError`
        names what failed and its log."""
        clusterstart.start(self, timeout=timeout, takeover=takeover)
        return self.status()

    def status(self, *, pods: bool = True) -> ClusterStatus:
        """Jobs, phase, endpoint, node and pods (:mod:`hpkctl.controlplane.clusterstatus`)."""
        return clusterstatus.status(self, pods=pods)

    def stop(self, *, all_pods: bool = False) -> list[tuple[str, str, str]]:
        """Stop the cluster's jobs (:mod:`hpkctl.controlplane.clusterstop`); ``(what, job id, final state)`` each."""
        return clusterstop.stop(self, all_pods=all_pods)


__all__ = ["Cluster", "ClusterError", "ClusterJob", "ClusterJobs", "ClusterStatus", "PodRow", "takeover_window"]

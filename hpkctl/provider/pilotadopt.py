"""A restarted pilot kubelet books the pods an earlier one left running in its allocations again, each
with its whole room: its need from the saved pod (an MPI pod's CPUs and memory on each of its nodes,
:func:`hpkctl.pilot.launch.need_of`), its nodes from its script's ``status/job.node`` (Slurm's names:
``n1,n2`` for an MPI pod's ranks), else from Slurm's running steps. Booked on fewer nodes than it uses,
an allocation's books would let new pods onto the cores and memory its ranks still hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpkctl.errors import PodError
from hpkctl.jobs import Slurm
from hpkctl.jobs.steps import StepShare
from hpkctl.pilot.launch import need_of
from hpkctl.pilot.plan import Need
from hpkctl.pilot.pool import Pool
from hpkctl.pod import render_pod
from hpkctl.pod.paths import JOB_ID, JOB_NODE, POD_DONE, PodDir
from hpkctl.provider.api import PodRef
from hpkctl.provider.records import PodRecord
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger("hpkctl.provider.pilotadopt")


def placed_by_files(pool: Pool, pd: PodDir, job_id: str, need: Need) -> str:
    """The nodes the pod's script says it was placed on (``status/job.node``), when they are as many as
    it needs and all nodes of its allocation (an older runtime wrote the host name there); else ""."""
    nodes = [n for n in (pd.read(JOB_NODE) or "").strip().split(",") if n]
    held = next((h for h in pool.helds() if h.job_id == job_id), None)
    known = held is not None and bool(held.nodes) and all(n in held.nodes for n in nodes)
    return ",".join(nodes) if len(nodes) == need.nodes and known else ""


def placed_by_steps(steps: Sequence[StepShare], rec: PodRecord, step: str, need: Need) -> str:
    """The nodes of a running pod as Slurm's steps say: an MPI pod's ranks step (``NAME-ranks``) spans
    them all, else its script's step ``J.S`` is on its one node; "" when neither runs."""
    ranks = [s.node for s in steps if s.job_id == rec.job_id and s.name == f"{rec.name}-ranks"]
    own = [s.node for s in steps if s.step_id == step]
    found = ranks if need.nodes > 1 else own
    return found[0] if len(found) == 1 else ""


def rebook(pool: Pool, slurm: Slurm, profile: SiteProfile,
           pods: Sequence[tuple[PodRef, PodRecord, Callable[[], Mapping[str, Any]]]]) -> None:
    """Book each pod (ref, record, its saved pod) that still runs in its allocation; one ``scontrol show
    step`` at most, for all whose files do not say where."""
    steps: list[StepShare] | None = None
    for ref, rec, saved in pods:
        pd = PodDir(Path(rec.pod_dir)) if rec.pod_dir else None
        if not rec.job_id or pd is None or pd.exists(POD_DONE) or not pd.exists(JOB_ID):
            continue
        try:
            need = need_of(render_pod(saved(), profile, strict=False))
        except PodError:
            continue
        nodes = placed_by_files(pool, pd, rec.job_id, need)
        if not nodes:
            steps = slurm.step_shares() if steps is None else steps
            nodes = placed_by_steps(steps, rec, (pd.read(JOB_ID) or "").strip(), need)
        if nodes:
            pool.assign(ref.uid, need, rec.job_id, nodes)
            log.info("pilot: pod %s booked again in allocation %s on %s (%s)", ref.key, rec.job_id, nodes,
                     need.room())
        else:
            log.warning("pilot: pod %s: where its step runs in allocation %s is unknown; not booked",
                        ref.key, rec.job_id)

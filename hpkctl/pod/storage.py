"""Local ephemeral storage the job watches (issue 20, item 7): what the kubelet's eviction manager
does for ``emptyDir.sizeLimit`` and ``resources.limits.ephemeral-storage``.

A pod's disk usage lands in its pod directory on the state disk: emptyDirs (``volumes/``), each
container's ``/tmp`` (``tmp/<name>``) and its logs. (The rest of a container's writable root is
Apptainer's ``--writable-tmpfs``, in memory, counted against the memory limit.) The job sums them
every ``[pods] size_check_interval`` seconds (``hpk_size_limit`` in ``sbatch/runtime.sh``) and evicts
the pod (``Evicted``, with the kubelet's message) when one is over its limit, so no tenant fills the
state disk past what its pod declared.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from decimal import Decimal

from hpkctl.pod.quantity import ceil_int, format_bytes
from hpkctl.pod.plan import PodPlan


@dataclass(frozen=True)
class SizeLimit:
    limit_kib: int
    message: str  # the kubelet's eviction message
    paths: tuple[str, ...]  # what counts against the limit


def size_limits(plan: PodPlan) -> list[SizeLimit]:
    out = [SizeLimit(d.size_limit_kib, f'Usage of EmptyDir volume "{d.volume}" exceeds the limit "{d.size_limit}". ',
                     (d.path,))
           for d in plan.volumes.job_dirs if d.size_limit_kib is not None]
    for c in plan.containers:
        limit = plan.resources.per_container[c.name].eph_limit
        if limit is None:
            continue
        logs = posixpath.join(plan.pod_dir, "logs")
        out.append(SizeLimit(max(1, ceil_int(limit / 1024)),
                             f'Container {c.name} exceeded its local ephemeral storage limit "{format_bytes(limit)}". ',
                             (posixpath.join(plan.pod_dir, "tmp", c.name), posixpath.join(logs, f"{c.name}.log"),
                              posixpath.join(logs, f"{c.name}.previous.log"))))
    return out

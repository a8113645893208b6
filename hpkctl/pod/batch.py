"""Pods submitted together → one Slurm job array (``sbatch/batch.sh.j2``): one ``sbatch`` for many pods.

Why: a kubelet that finds many pods to start at once (a backlog after its restart, a Job's fan-out)
would otherwise run ``sbatch`` once per pod, and each is a process start plus an RPC that slurmctld
serves one at a time; on 2 cores that, not Kubernetes, bounded a backlog (issue 23). Slurm's own
answer to many similar jobs is an array, which admins prefer too (one RPC, one record to schedule).

Unlike a workload's array (:mod:`hpkctl.pod.array`), the elements are unrelated pods: element ``i``
execs pod ``i``'s own job script, unchanged, as its batch shell, so every pod behaves as with a job of
its own (its TERM trap, time limit, exit code, ``scancel ARRAY_i``). Only pods whose sbatch options
are the same but for name, output, directory and comment go together (:func:`batch_key`), and never
a pod that carries its own ``--comment`` (it is in the array's comment's place). Pure: renders only.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from hpkctl import __version__
from hpkctl.pod.flags import COMMENT_UIDS, SlurmOption, sbatch_directive_word
from hpkctl.pod.paths import NOTICES_DIR
from hpkctl.pod.plan import PodPlan
from hpkctl.pod.shell import Shell, quote
from hpkctl.pod.template import environment

# Each pod's own options that the array sets for itself: an element's output goes to its pod's
# logs/slurm.out from the array script, which runs in the pod's directory.
_OWN_OPTIONS = ("--job-name", "--output", "--chdir", "--comment", "--array")
# Options (from the flags annotation) whose meaning changes in an array: mail is sent once for the
# whole array, ``--dependency=singleton`` would wait on the array's shared name, and the element's
# output goes where the array script sends it.
_ALONE_OPTIONS = frozenset({"--mail-type", "--dependency", "--error", "--input", "--open-mode"})
JOB_NAME = "hpk-pods"  # squeue's name for a batch (each element's pod: its comment, hpkctl status)


def notices_file(pods_dir: str, job_id: str) -> str:
    """The file of Slurm's notices for element ``job_id`` (``A_i``) of a batch run from ``pods_dir``."""
    return posixpath.join(pods_dir, NOTICES_DIR, f"{job_id}.out")
#: Slurm's longest ``--comment`` (longer ones are refused): how many uids one array can name
COMMENT_MAX = 1024


def batch_key(plan: PodPlan) -> tuple[str, ...] | None:
    """What pods must share to be submitted as one array: their sbatch options apart from their own
    (name, output, directory, comment); ``None`` for a pod that must have a job of its own: one whose
    own options are not hpkctl's (a name, output or comment of the user's: the array has its own) or
    that asks for what an array does differently (:data:`_ALONE_OPTIONS`)."""
    own = {o.name: str(o.value) for o in plan.options if o.name in _OWN_OPTIONS}
    if (own.get("--job-name") != plan.name or own.get("--chdir") != plan.pod_dir
            or own.get("--output") != posixpath.join(plan.pod_dir, "logs", "slurm.out")
            or own.get("--comment", "").split(maxsplit=2)[2:]  # "hpk-uid=U hpk-pod=NS/NAME", then the user's
            or any(o.name in _ALONE_OPTIONS for o in plan.options)):
        return None
    return tuple(o.word for o in plan.options if o.name not in _OWN_OPTIONS)


def batch_options(plans: Sequence[PodPlan], workdir: str) -> list[SlurmOption]:
    """The array's options: its name, Slurm's own notices per element in :data:`NOTICES_DIR` (the pod's
    output goes to its logs/), a directory that outlives any one pod, the uids in index order, the
    range; then the pods' shared ones."""
    own = [
        SlurmOption("--job-name", JOB_NAME),
        SlurmOption("--output", posixpath.join(workdir, NOTICES_DIR, "%A_%a.out")),
        SlurmOption("--chdir", workdir),
        SlurmOption("--comment", batch_comment([p.uid for p in plans])),
        SlurmOption("--array", f"0-{len(plans) - 1}"),
    ]
    return own + [o for o in plans[0].options if o.name not in _OWN_OPTIONS]


def render_batch(plans: Sequence[PodPlan], workdir: str, *, version: str = __version__) -> str:
    """The batch script of ``plans`` (all with the same :func:`batch_key`), elements in their order."""
    if not plans:
        raise ValueError("a batch has at least one pod")
    directives = [Shell(o.name if o.value is None else f"{o.name}={sbatch_directive_word(o.value)}")
                  for o in batch_options(plans, workdir)]
    return environment().get_template("batch.sh.j2").render(
        directives=directives, version=Shell(version), count=len(plans), pod_dirs=[quote(p.pod_dir) for p in plans])


def batch_comment(uids: Sequence[str]) -> str:
    """The array's ``--comment``: ``hpk-uids=`` and the uids in index order (``pod_of_job`` reads it)."""
    return COMMENT_UIDS + ",".join(uids)


__all__ = ["COMMENT_MAX", "JOB_NAME", "NOTICES_DIR", "notices_file", "batch_comment", "batch_key", "batch_options", "render_batch"]

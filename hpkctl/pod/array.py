"""A workload's pods → one Slurm job array script (``sbatch/array.sh.j2``).

Element ``i`` of the array runs pod ``i``'s own job script (written and rendered as for any pod),
so each pod keeps its directory, status files and logs; the array script adds only what a Job
controller would do: run a failed pod again while the Job's ``backoffLimit`` (or, per index,
``backoffLimitPerIndex``) allows, fail the whole Job when it does not or when its
``activeDeadlineSeconds`` has passed, and record each index's result in the array's status
directory. Pure: it renders, it runs nothing.
"""

from __future__ import annotations

import functools
import posixpath
from dataclasses import dataclass

from hpkctl import __version__
from hpkctl.pod.flags import SlurmOption, job_comment, sbatch_directive_word
from hpkctl.pod.render import _comment
from hpkctl.pod.runtimefile import current_runtime
from hpkctl.pod.template import environment
from hpkctl.pod.shell import Shell, quote
from hpkctl.resources import data_dir
from hpkctl.sites.schema import SiteProfile

# Options of the pods' scripts the array script sets for itself: its name, output and directory
# are the workload's, and its comment names the workload's uid.
_OWN_OPTIONS = ("--job-name", "--output", "--chdir", "--comment", "--array")
NO_LIMIT = -1  # a backoff limit or index limit that does not apply


@dataclass
class ArrayPlan:
    """Everything the array script needs; the pods themselves are rendered on their own."""

    profile: SiteProfile
    kind: str  # Job | Deployment | ReplicaSet | StatefulSet
    namespace: str
    name: str
    uid: str
    array_dir: str  # the workload's directory: job/job.sh, status/ (per index), logs/ (Slurm's)
    pod_dirs: list[str]  # by index
    options: list[SlurmOption]  # pod 0's sbatch options (they are the same for every pod)
    parallelism: int | None = None
    retries: bool = False  # a Job: failed pods run again within the limits below
    backoff_limit: int = NO_LIMIT
    backoff_limit_per_index: int = NO_LIMIT
    max_failed_indexes: int = NO_LIMIT
    active_deadline: int = 0  # seconds; 0: none
    version: str = __version__


CLOCK_BEGIN = "# ---- the deadline clock:"
CLOCK_END = "# ---- end of the deadline clock ----\n"


@functools.cache
def _array_runtime() -> Shell:
    """``sbatch/array-runtime.sh``, after the deadline clock (``hpk_deadline_left``) of the pod runtime,
    ``sbatch/runtime.sh``: one clock for a pod's ``activeDeadlineSeconds`` and a Job's."""
    pod_runtime = current_runtime().data.decode()
    clock = pod_runtime[pod_runtime.index(CLOCK_BEGIN):pod_runtime.index(CLOCK_END) + len(CLOCK_END)]
    return Shell(clock + (data_dir("sbatch") / "array-runtime.sh").read_text())


def array_options(plan: ArrayPlan) -> list[SlurmOption]:
    """The array's sbatch options: the pods' own, with the array's name, output, directory and range."""
    count = len(plan.pod_dirs)
    limit = f"%{plan.parallelism}" if plan.parallelism is not None and plan.parallelism < count else ""
    own = [
        SlurmOption("--job-name", plan.name),
        SlurmOption("--output", posixpath.join(plan.array_dir, "logs", "slurm-%a.out")),
        SlurmOption("--chdir", plan.array_dir),
        SlurmOption("--comment", job_comment(plan.uid, namespace=plan.namespace, name=plan.name)),
        SlurmOption("--array", f"0-{count - 1}{limit}"),
    ]
    return own + [o for o in plan.options if o.name not in _OWN_OPTIONS]


def render_array(plan: ArrayPlan) -> str:
    """The array's batch script."""
    directives = [Shell(o.name if o.value is None else f"{o.name}={sbatch_directive_word(o.value)}")
                  for o in array_options(plan)]
    pods = plan.profile.pods
    context = {
        "directives": directives,
        "version": Shell(plan.version),
        "label": Shell(f"{plan.kind} {_comment(plan.namespace)}/{_comment(plan.name)} (uid {_comment(plan.uid)})"),
        "count": len(plan.pod_dirs),
        "array_dir": quote(plan.array_dir),
        "pod_dirs": [quote(d) for d in plan.pod_dirs],
        "retries": int(plan.retries),
        "backoff_limit": plan.backoff_limit,
        "backoff_limit_per_index": plan.backoff_limit_per_index,
        "max_failed_indexes": plan.max_failed_indexes,
        "active_deadline": plan.active_deadline,
        "restart_backoff": pods.restart_backoff,
        "restart_backoff_max": pods.restart_backoff_max,
        "runtime": _array_runtime(),
    }
    return environment().get_template("array.sh.j2").render(**context)


__all__ = ["NO_LIMIT", "ArrayPlan", "array_options", "render_array"]

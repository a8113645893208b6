"""``hpkctl status`` of many runs at once, where one odd record never hides the others.

One ``squeue`` (and one batched final-state lookup) answers for every pod and every workload
element. When that fails (other than Slurm being unreachable, which is everyone's problem and is
raised), each record is asked on its own, so the Slurm problem shows on the
line of the record that caused it; a record whose status cannot be read (a workload file that is
not JSON, a job id Slurm answers strangely) becomes an ``Unknown`` status with the error as its
message, and every other run is still shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hpkctl.errors import HpkError
from hpkctl.jobs import Slurm, SlurmUnavailable
from hpkctl.local.arrays import ArrayStatus, WorkloadFile, array_status, element_ids
from hpkctl.provider.runrecords import RunRecord
from hpkctl.local.runs import run_status
from hpkctl.provider.slurmjobs import job_states
from hpkctl.pod.status import PodStatus

STATUS_UNREADABLE = "StatusUnreadable"
_PROBLEMS = (HpkError, OSError, ValueError, TypeError, KeyError)


def _ids(rec: RunRecord, arrays: Mapping[str, WorkloadFile]) -> list[str]:
    return element_ids(rec, arrays[rec.uid].count) if rec.uid in arrays else [rec.job_id]


def problem_status(rec: RunRecord, error: Exception) -> PodStatus:
    """The status line of a record whose state could not be read: what went wrong and what to do."""
    text = error.message if isinstance(error, HpkError) else f"{type(error).__name__}: {error}"
    hint = f" ({error.hint})" if isinstance(error, HpkError) and error.hint else ""
    return PodStatus("Unknown", STATUS_UNREADABLE,
                     f"{text}{hint}; 'hpkctl delete {rec.name} -n {rec.namespace}' cancels its job and forgets "
                     f"the run", None, None, None, None)


def run_statuses(slurm: Slurm, records: Sequence[RunRecord],
                 arrays: Mapping[str, WorkloadFile]) -> list[PodStatus | ArrayStatus]:
    """The status of each record, in order (``arrays``: the workloads' ``job/workload.json`` by uid)."""
    problems: dict[str, Exception] = {}
    try:
        jobs = job_states(slurm, [j for r in records for j in _ids(r, arrays)])
    except SlurmUnavailable:  # Slurm is down or slow for everyone: asking per record would only wait longer
        raise
    except _PROBLEMS:  # ask per record, so only the one that fails shows the error
        jobs = {}
        for r in records:
            try:
                jobs.update(job_states(slurm, _ids(r, arrays)))
            except _PROBLEMS as exc:
                problems[r.uid] = exc
    out: list[PodStatus | ArrayStatus] = []
    for r in records:
        try:
            if r.uid in problems:
                raise problems[r.uid]
            out.append(array_status(r, jobs, info=arrays[r.uid]) if r.uid in arrays else run_status(r, jobs.get(r.job_id)))
        except _PROBLEMS as exc:
            out.append(problem_status(r, exc))
    return out


__all__ = ["STATUS_UNREADABLE", "problem_status", "run_statuses"]

"""Runs ``Slurm`` calls in a process of the normal user (the tests run as root; Slurm jobs must not).

Usage: ``python hpk_driver.py '{"profile": {...}, "calls": [{"method": "submit", "args": [...],
"kwargs": {...}}, ...]}'``. Prints a JSON list with one result per call. An argument that is the
string ``"$N"`` is replaced by the result of call N (e.g. a job id from ``submit``). A call that
raises gives ``{"error": class name, "message", "hint", "reason", "mro": [...]}`` and the rest still
run. Extra methods besides ``Slurm``'s: ``wait_started`` (poll until no job is pending),
``pod_outcome`` (of ``final(job_id)``), ``environ`` (this process's SLURM_*/SBATCH_* variables),
``jobcomp`` (``find_many_in_jobcomp(file, [job_id])``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from datetime import datetime
from typing import Any

from hpkctl.jobs import JobInfo, Slurm
from hpkctl.pod.outcome import pod_outcome
from hpkctl.jobs.jobcomp import current_user, find_many_in_jobcomp
from hpkctl.jobs.states import PENDING_STATES
from hpkctl.sites.schema import SlurmSection


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _started(snapshot: dict[str, JobInfo | None]) -> bool:
    return all(info is None or info.state not in PENDING_STATES for info in snapshot.values())


def main() -> None:
    request = json.loads(sys.argv[1])
    slurm = Slurm(SlurmSection(**request.get("profile", {})))
    results: list[Any] = []
    for call in request["calls"]:

        def subst(a: Any) -> Any:
            if isinstance(a, str) and a.startswith("$") and a[1:].isdigit():
                return results[int(a[1:])]
            return [subst(x) for x in a] if isinstance(a, list) else a

        args = [subst(a) for a in call.get("args", [])]
        kwargs = {k: subst(v) for k, v in call.get("kwargs", {}).items()}
        method = call["method"]
        try:
            if method == "wait_started":
                result: Any = slurm.wait_for(args[0], until=_started, backoff=(0.2, 0.5, 1.0), timeout=120)
            elif method == "wait_for":
                result = slurm.wait_for(args[0], backoff=(0.2, 0.5, 1.0), timeout=kwargs.get("timeout", 180))
            elif method == "pod_outcome":
                result = pod_outcome(slurm.final(args[0]))
            elif method == "environ":
                result = {k: v for k, v in os.environ.items() if k.startswith(("SLURM", "SBATCH", "SQUEUE"))}
            elif method == "jobcomp":
                result = find_many_in_jobcomp(args[0], [args[1]], user=current_user()).get(args[1])
            elif method == "accounting":
                result = slurm.accounting
            else:
                result = getattr(slurm, method)(*args, **kwargs)
            results.append(_jsonable(result))
        except Exception as e:  # noqa: BLE001 - reported to the test, which asserts on it
            results.append(
                {
                    "error": type(e).__name__,
                    "mro": [c.__name__ for c in type(e).__mro__],
                    "message": getattr(e, "message", str(e)),
                    "hint": getattr(e, "hint", ""),
                    "reason": getattr(e, "reason", ""),
                }
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()

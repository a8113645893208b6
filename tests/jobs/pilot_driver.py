"""Drives pilot allocations and steps on the real Slurm in a process of user hpk (Slurm jobs must
not be root's): ``python pilot_driver.py '{"conf": ..., "dir": ..., "calls": [...]}'``.

Each call is ``[method, kwargs]`` on one ``Slurm``; ``start_step`` keeps its srun in a table (the
result is the srun's pid) and ``step_exit`` waits for one. Extra methods: ``wait_running`` (poll
``allocation`` until RUNNING), ``wait_file`` (until a file exists), ``step_id`` (the running step of a name), ``wait_gone`` (until the
allocation has ended; COMPLETING is Slurm still ending it, slower with accounting's gather). ``"$job"`` as a value is the id ``hold`` returned, ``"$N"`` call N's result. Prints a JSON list.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hpkctl.jobs import Slurm
from hpkctl.jobs.steps import StepProcess
from hpkctl.sites.schema import SlurmSection
from tests.jobs.hpk_driver import _jsonable as _json
from tests.support.waiting import wait_for


def _poll(what: str, probe: Any, timeout: float = 90) -> Any:
    return wait_for(what, probe, timeout=timeout, every=0.2)


def main() -> None:
    req = json.loads(sys.argv[1])
    slurm = Slurm(SlurmSection(conf_file=req.get("conf", ""), command_timeout=5))
    procs: dict[str, StepProcess] = {}
    out: list[Any] = []
    job = ""
    for method, kw in req["calls"]:
        kw = {k: job if v == "$job" else out[int(v[1:])] if isinstance(v, str) and v[1:].isdigit() and v[0] == "$"
              else v for k, v in kw.items()}
        try:
            if method == "wait_running":
                got: Any = _poll(f"allocation {kw['job_id']} running",
                                 lambda: (a := slurm.allocation(kw["job_id"])) and a.state == "RUNNING" and a.nodes and a)
            elif method == "wait_file":
                got = _poll(f"{kw['path']}", lambda: Path(kw["path"]).exists() and Path(kw["path"]).read_text())
            elif method == "step_id":  # the running step of this name
                got = _poll(f"step {kw['name']}", lambda: next((s.step_id for s in slurm.steps()
                                                                 if s.job_id == kw["job_id"] and s.name == kw["name"]), None))
            elif method == "wait_gone":
                got = _poll("allocation ended", lambda: (a := slurm.allocation(kw["job_id"])) is None
                            or a.state not in ("RUNNING", "PENDING", "CONFIGURING", "COMPLETING") and a, timeout=kw.get("timeout", 90))
            elif method == "start_step":
                kw = {**kw, **{k: Path(kw[k]) for k in ("output", "workdir", "srun_log")}}
                proc = slurm.start_step(kw.pop("job_id"), kw.pop("argv"), **kw)
                procs[kw["name"]] = proc
                got = proc.pid
            elif method == "step_exit":
                got = procs[kw["name"]].wait(timeout=kw.get("timeout", 60))
            elif method == "hold":
                got = job = slurm.hold(Path(kw["script"]), args=kw["args"], script_args=kw.get("script_args", ()))
            else:
                got = getattr(slurm, method)(**kw)
            out.append(_json(got))
        except Exception as e:  # noqa: BLE001 - reported to the test
            out.append({"error": type(e).__name__, "message": str(e)})
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""``hpkctl doctor --on-node``: submit the node-check job (:mod:`hpkctl.controlplane.nodecheck`), wait
for it, and turn what it printed into doctor's checks.

The job goes to the pods' partition with the profile's account and directives, and writes its
script and output under ``<state_dir>/doctor/`` (the pods' state directory, which the compute
nodes must share: that the output arrives is itself a check). Slurm is asked with back-off while it
waits (``Slurm.wait_for``); a job still pending after ``timeout`` is cancelled and reported with
Slurm's pending reason.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from hpkctl.controlplane.statedir import read_endpoint
from hpkctl.controlplane.doctor import FAIL, OK, Check
from hpkctl.controlplane.nodecheck import ALWAYS, JOB_NAME, parse_node_checks, render_node_check
from hpkctl.errors import HpkError
from hpkctl.files import write_atomic
from hpkctl.jobs import Slurm, SlurmError
from hpkctl.sites.schema import SiteProfile

#: Slurm states in which the job did what it could (its output tells the rest)
RAN = ("COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "CANCELLED")


def endpoints(profile: SiteProfile) -> list[tuple[str, str, int]]:
    """The running control plane's ports that pods use (API server, CoreDNS over TCP); [] when none runs."""
    ep = read_endpoint(Path(os.path.expanduser(profile.controlplane.state_dir)))
    if not ep:
        return []
    host = str(ep.get("address") or ep.get("host") or "")
    port = ep.get("port")
    if not host or not isinstance(port, int):
        return []
    return [("apiserver", host, port), ("coredns", host, profile.controlplane.coredns_port)]


def run_node_checks(profile: SiteProfile, slurm: Slurm, *, site: str, timeout: float = 300.0) -> list[Check]:
    out_dir = posixpath.join(os.path.expanduser(profile.pods.state_dir), "doctor")
    try:
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
        eps = endpoints(profile)
        script = render_node_check(profile, site=site, out_dir=out_dir, endpoints=eps)
        path = Path(out_dir) / "node-check.sh"
        write_atomic(path, script.encode(), mode=0o700)
    except HpkError as e:
        return [Check("node job", FAIL, e.message, e.hint)]
    except OSError as e:
        return [Check("node job", FAIL, f"cannot write the node-check job under {out_dir}: {e}",
                      "[pods] state_dir must be writable")]
    try:
        job_id = slurm.submit(path, workdir=Path(out_dir))
    except SlurmError as e:
        return [Check("node job", FAIL, f"sbatch of the node-check job ({path}) failed: {e.message}", e.hint)]
    log = Path(out_dir) / f"node-check-{job_id}.out"
    try:
        final = slurm.wait_for([job_id], timeout=timeout).get(job_id)
    except TimeoutError:
        reason = _pending_reason(slurm, job_id)
        try:
            slurm.cancel(job_id)
        except SlurmError:
            pass
        return [Check("node job", FAIL, f"the node-check job {job_id} ({JOB_NAME}) did not end within {timeout:g} s"
                      + (f" (Slurm: {reason})" if reason else "") + "; cancelled",
                      "run it when the partition has a free node, or give --timeout more seconds")]
    except SlurmError as e:
        return [Check("node job", FAIL, f"waiting for the node-check job {job_id}: {e.message}", e.hint)]
    state = final.state if final is not None else "unknown"
    node = final.nodes if final is not None and final.nodes else "?"
    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    found = parse_node_checks(text)
    checks = [Check("node job", OK if found else FAIL, f"Slurm job {job_id} ran on {node} ({state}); output {log}",
                    "" if found else "its output is missing or empty: is [pods] state_dir on a file system the "
                                     "compute nodes share? See the job's output file and slurm's logs")]
    checks += [Check(f"node: {c.name}", c.result, c.detail, c.fix) for c in found]
    names = {c.name for c in found}
    missing = [n for n in ALWAYS if n not in names]
    if found and missing:
        checks.append(Check("node: incomplete", FAIL, f"the job stopped before checking {', '.join(missing)} "
                            f"({state})", f"see {log}"))
    if not eps:
        checks.append(Check("node: ports", OK, "no control plane runs: its ports were not tried (start one and run "
                                               "doctor --on-node again to check them from a compute node)"))
    return checks


def _pending_reason(slurm: Slurm, job_id: str) -> str:
    try:
        job = slurm.query([job_id]).get(job_id)
    except SlurmError:
        return ""
    return f"{job.state} {job.reason}".strip() if job is not None else ""


__all__ = ["endpoints", "run_node_checks"]

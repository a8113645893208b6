"""The kubelet's intents on disk: one small JSON file per pod, written *before* each step that
creates something outside the process (a pod directory, a Slurm job).

Why: the kubelet can be killed at any instant. With the record written before ``sbatch``
(state ``submitting``) a restart knows a job may exist and looks for it by the pod's uid in the
job comments (``hpk-uid=<uid>``) before submitting again: a crash never duplicates or orphans a job.
Records are keyed by pod uid and live under ``<state_dir>/kubelet/<node>/pods/``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from hpkctl.files import private_dirs, write_atomic

SUBMITTING = "submitting"  # the pod directory may exist; a job may exist (look for its uid)
SUBMITTED = "submitted"  # job_id is the pod's job
FAILED = "failed"  # the pod could not be submitted; its status says why; no job
STOPPED = "stopped"  # deleted from the API: job cancelled; the directory waits for its cleanup time


@dataclass
class PodRecord:
    uid: str
    namespace: str
    name: str
    pod_dir: str
    state: str = SUBMITTING
    job_id: str = ""
    submitted: float = 0.0
    stopped: float = 0.0  # when the pod was removed (for keep_pod_dirs)


class Records:
    """The record files of one node. Writes are atomic (temporary file, fsync, rename)."""

    def __init__(self, root: Path) -> None:
        self.root = private_dirs(root / "pods")

    def path(self, uid: str) -> Path:
        if not uid or "/" in uid or uid.startswith("."):
            raise ValueError(f"not a pod uid: {uid!r}")
        return self.root / f"{uid}.json"

    def save(self, rec: PodRecord) -> None:
        write_atomic(self.path(rec.uid), json.dumps(asdict(rec), indent=1).encode(), mode=0o600)

    def remove(self, uid: str) -> None:
        self.path(uid).unlink(missing_ok=True)

    def load_all(self) -> dict[str, PodRecord]:
        """Every readable record; unreadable ones (a disk full during a write) are skipped — their pod
        will be treated as new and found by its uid in Slurm's job comments."""
        known = {f.name for f in fields(PodRecord)}
        out: dict[str, PodRecord] = {}
        for p in sorted(self.root.glob("*.json")):
            try:
                data = json.loads(p.read_text())
                rec = PodRecord(**{k: v for k, v in data.items() if k in known})
            except (OSError, ValueError, TypeError):
                continue
            out[rec.uid] = rec
        return out


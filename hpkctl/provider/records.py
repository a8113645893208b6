"""The job-per-pod provider's records, for the kubelet and ``hpkctl run`` alike: one small JSON file per
pod, written *before* each step that creates something outside the process (a pod directory, a Slurm
job). The kubelet's are keyed by pod uid (:class:`Records`, ``<state_dir>/kubelet/<node>/pods/``);
``hpkctl run``'s by namespace and name, the way users address them
(:class:`hpkctl.provider.runrecords.RunRecords`, ``<state_dir>/runs/<namespace>/<name>.json``): one
:class:`PodRecord` format, two indexes.

Why: the kubelet can be killed at any instant. With the record written before ``sbatch``
(state ``submitting``) a restart knows a job may exist and looks for it by the pod's uid in the
job comments (``hpk-uid=<uid>``) before submitting again: a crash never duplicates or orphans a job.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from hpkctl.files import private_dirs, write_atomic
from hpkctl.pod.paths import PodDir
from hpkctl.sites.schema import SiteProfile

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
    state: str = SUBMITTED
    job_id: str = ""
    submitted: float = 0.0
    stopped: float = 0.0  # when the pod was removed (for keep_pod_dirs)
    site: str = ""  # hpkctl run: the site profile it ran with
    pid: int = 0  # hpkctl run: the process that created the record (for a record stuck in 'submitting')
    kind: str = "Pod"  # hpkctl run: or a workload run as a job array (Job, Deployment, ...): hpkctl.local.arrays
    allocation: str = ""  # pilot mode (hpkctl run --pilot): the held allocation whose step runs the pod
    waiting: str = ""  # pilot mode (hpkctl run --pilot): why the pod has no place yet (it is Pending)

    @property
    def is_array(self) -> bool:
        return self.kind != "Pod"

    @property
    def dir(self) -> PodDir:
        return PodDir(Path(self.pod_dir))

    def saved(self) -> dict[str, Any]:
        """The pod as it was submitted, or a stand-in with its name and no spec when nothing was kept."""
        try:
            return self.pod()
        except (OSError, ValueError):
            return {"metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}, "spec": {}}

    def pod(self) -> dict[str, Any]:
        """The pod as it was submitted (``job/pod.json``); ``FileNotFoundError`` if the directory vanished."""
        return json.loads(self.dir.pod_json.read_text())  # type: ignore[no-any-return]

    @property
    def dir_missing(self) -> bool:
        return not self.dir.pod_json.is_file()


_FIELDS = tuple(f.name for f in fields(PodRecord))


def compact_json(obj: Any) -> bytes:
    """``obj`` as compact JSON: without ``indent`` ``json.dumps`` takes the C encoder (with it, the pure-Python
    one, ~0.7 ms of CPU for a pod manifest here); a kubelet writes a record twice and a manifest once per pod."""
    return json.dumps(obj, separators=(",", ":")).encode()


def record_json(rec: PodRecord) -> bytes:
    """A record's file (its fields are plain values: no ``dataclasses.asdict`` deep copy needed)."""
    return compact_json({name: getattr(rec, name) for name in _FIELDS})


def from_json(data: dict[str, Any]) -> PodRecord:
    """A record as written by this or another version (unknown fields of a newer one are left out)."""
    return PodRecord(**{k: v for k, v in data.items() if k in _FIELDS})


class RecordStore(Protocol):
    """Where the provider keeps its records (by uid for the kubelet, by name for ``hpkctl run``)."""

    def save(self, rec: PodRecord) -> None: ...

    def remove(self, uid: str) -> None: ...

    def load_all(self) -> dict[str, PodRecord]: ...


class Records:
    """The record files of one node. Writes are atomic (temporary file, rename); a record's intent
    (``submitting``) and its end (``failed``, ``stopped``) are flushed to disk before the rename
    (fsync), its ``submitted`` state with the job id is not: that write follows every ``sbatch`` and
    was half the records' cost on a create's path, and losing it cannot run anything twice. After a
    crash (even a power cut) that loses it, the pod's record says ``submitting`` again, or is
    unreadable and skipped (``load_all``), and either way the job is looked up by the pod's uid
    (``status/job.id``, ``squeue``, ``sacct``: :mod:`hpkctl.provider.adopt`) and adopted, exactly as
    for a kubelet killed between ``sbatch`` and that write."""

    def __init__(self, root: Path) -> None:
        self.root = private_dirs(root / "pods")

    def path(self, uid: str) -> Path:
        if not uid or "/" in uid or uid.startswith("."):
            raise ValueError(f"not a pod uid: {uid!r}")
        return self.root / f"{uid}.json"

    def save(self, rec: PodRecord) -> None:
        write_atomic(self.path(rec.uid), record_json(rec), mode=0o600, sync=rec.state != SUBMITTED)

    def remove(self, uid: str) -> None:
        self.path(uid).unlink(missing_ok=True)

    def load_all(self) -> dict[str, PodRecord]:
        """Every readable record; unreadable ones (a disk full during a write) are skipped — their pod
        will be treated as new and found by its uid in Slurm's job comments."""
        out: dict[str, PodRecord] = {}
        for p in sorted(self.root.glob("*.json")):
            try:
                rec = from_json(json.loads(p.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            out[rec.uid] = rec
        return out



def node_record_uids(profile: SiteProfile) -> set[str]:
    """Uids of the pods the kubelets of this profile run (their records): the cluster's pods, which
    ``hpkctl status`` shows in its cluster section, not as runs."""
    root = Path(os.path.expanduser(profile.pods.state_dir)) / "kubelet"
    return {p.stem for p in root.glob("*/pods/*.json")}

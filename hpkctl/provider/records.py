"""The job-per-pod provider's records, for the kubelet and ``hpkctl run`` alike: one small JSON record per
pod, written *before* each step that creates something outside the process (a pod directory, a Slurm
job). The kubelet's are keyed by pod uid (:class:`Records`, one log ``<state_dir>/kubelet/<node>/records.log``);
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
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from hpkctl.files import private_dirs
from hpkctl.pod.paths import PodDir
from hpkctl.provider.recordlog import AppendLog, read_log, tombstone
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


def record_json(rec: PodRecord, **extra: Any) -> bytes:
    """A record's file, or line (its fields are plain values: no ``dataclasses.asdict`` deep copy needed),
    with ``extra`` keys that readers of records leave out (:func:`from_json`)."""
    return compact_json({**{name: getattr(rec, name) for name in _FIELDS}, **extra})


def from_json(data: dict[str, Any]) -> PodRecord:
    """A record as written by this or another version (unknown fields of a newer one are left out)."""
    return PodRecord(**{k: v for k, v in data.items() if k in _FIELDS})


class RecordStore(Protocol):
    """Where the provider keeps its records (by uid for the kubelet, by name for ``hpkctl run``)."""

    def save(self, rec: PodRecord) -> None: ...

    def remove(self, uid: str) -> None: ...

    def load_all(self) -> dict[str, PodRecord]: ...


#: the states whose line is flushed to disk before ``save`` returns (see :class:`Records`)
DURABLE = frozenset({SUBMITTING, FAILED, STOPPED})
#: the log is compacted once it has this many lines more than ``COMPACT_FACTOR`` times the live records
COMPACT_SLACK = 512
COMPACT_FACTOR = 4
LOG_NAME = "records.log"
OLD_DIR = "pods"  # before the log: a file per record, ``pods/<uid>.json``


def _check_uid(uid: str) -> str:
    if not uid or "/" in uid or uid.startswith(".") or "\n" in uid:
        raise ValueError(f"not a pod uid: {uid!r}")
    return uid


def _old_files(node_dir: Path) -> dict[str, tuple[Path, int]]:
    """The record files an earlier version wrote (``pods/<uid>.json``): uid -> (path, mtime in ns)."""
    out: dict[str, tuple[Path, int]] = {}
    for p in sorted((node_dir / OLD_DIR).glob("*.json")):
        try:
            out[p.stem] = (p, p.stat().st_mtime_ns)
        except OSError:
            continue
    return out


def _merged(node_dir: Path) -> tuple[dict[str, bytes], dict[str, bytes], list[Path], int]:
    """The node's live records as lines (uid -> line): its log, and the files of an earlier version
    where they are newer (see :class:`Records`); those newer files' lines alone; all those files; the
    log's length in lines."""
    log = node_dir / LOG_NAME
    live, count = read_log(log, "uid")
    lines = {uid: line for uid, (_, line) in live.items()}
    newer: dict[str, bytes] = {}
    old = _old_files(node_dir)
    if old:
        try:
            log_mtime = log.stat().st_mtime_ns
        except FileNotFoundError:
            log_mtime = -1
        for uid, (p, mtime) in old.items():
            if mtime < log_mtime:
                continue  # the log was written after this file: its line (or its removal) is newer
            try:
                rec = from_json(json.loads(p.read_bytes()))
            except (OSError, ValueError, TypeError):
                continue
            if rec.uid == uid:
                lines[uid] = newer[uid] = record_json(rec) + b"\n"
    return lines, newer, [p for p, _ in old.values()], count


def _records(lines: dict[str, bytes]) -> dict[str, PodRecord]:
    out: dict[str, PodRecord] = {}
    for uid, line in lines.items():
        try:
            out[uid] = from_json(json.loads(line))
        except (ValueError, TypeError):
            continue
    return out


class Records:
    """The kubelet's records of one node: one append-only log, ``<node dir>/records.log``
    (:mod:`hpkctl.provider.recordlog`), a JSON line per save, the last line of a uid winning, a
    removal a tombstone line. O(1) namespace operations per pod (none: the log stays open), instead
    of a temporary file created and renamed over ``pods/<uid>.json`` at every save.

    Durability. A record's intent (``submitting``) and its end (``failed``, ``stopped``) are flushed
    (``fdatasync`` of the append, group-committed across threads) before ``save`` returns; its
    ``submitted`` state with the job id is not: losing it in a power cut leaves the intent, and the
    job is looked up by the pod's uid (``status/job.id``, ``squeue``, ``sacct``:
    :mod:`hpkctl.provider.adopt`) and adopted, as for a kubelet killed between ``sbatch`` and that
    write. The intent stays flushed although a pod with no record at all is never submitted blindly
    either (``JobFinder.find`` asks the same three places before any submission): the lookup only
    runs for a pod the API still lists. A pod deleted while the kubelet was down after a power cut
    that lost its unflushed intent would leave its job running with nothing naming it: no record (for
    ``hpkctl stop --all`` or the restarted kubelet to look its job up by) and no pod to adopt it.
    That flush is one ``fdatasync`` of an append (~0.1 ms here, shared by the threads flushing at
    once), not the create + fsync + rename of a file per save it replaces (whose rename was not even
    flushed). A process kill loses nothing that was written (the page cache survives it).

    Compaction (live lines to a new file, flushed, renamed over the log) runs at ``load_all`` when
    the log has over twice as many lines as live records, and after a save once it has
    ``COMPACT_FACTOR`` times more plus ``COMPACT_SLACK``; never while another process appends
    (:meth:`~hpkctl.provider.recordlog.AppendLog.compact`).

    Upgrade: the ``pods/<uid>.json`` files of an earlier version are read too (``load_all``, and
    before this process's first save), appended to the log (flushed) and removed. A file counts unless the
    log was written after it (their mtimes): this version never writes those files, so one still
    there is either left by a migration cut short (the log, appended to after it, is newer and has
    its line, or the line's later removal) or written by an earlier version run after this one (newer
    than any line). A migration that cannot append (a full disk) raises before it removes a file."""

    def __init__(self, root: Path) -> None:
        self.dir = private_dirs(root)
        self.log = AppendLog(self.dir / LOG_NAME)
        self._live: set[str] = set()
        self._migrated = False
        self._mlock = threading.Lock()

    def _load(self) -> dict[str, PodRecord]:
        """Read the log, and an earlier version's files, whose newer records are appended to it (flushed)
        before they are removed; compact the log when it has grown."""
        with self._mlock:
            lines, newer, old, count = _merged(self.dir)
            for line in newer.values():
                self.log.append(line)
            if newer:
                self.log.sync()
            for p in old:
                p.unlink(missing_ok=True)
            if old:
                try:
                    (self.dir / OLD_DIR).rmdir()
                except OSError:
                    pass
            self.log.appended = count + len(newer)
            if self.log.appended > 2 * len(lines) + COMPACT_SLACK // 8:
                live = self.log.compact("uid")
                lines = lines if live is None else {uid: line for uid, (_, line) in live.items()}
            self._migrated = True
            self._live = set(lines)
            return _records(lines)

    def save(self, rec: PodRecord) -> None:
        _check_uid(rec.uid)
        self._first_use()
        # "saved": when (the time a state was reached, e.g. sbatch returned: bench/kubelet.py, a reader's log)
        self.log.append(record_json(rec, saved=round(time.time(), 6)) + b"\n", sync=rec.state in DURABLE)
        self._live.add(rec.uid)
        self._maybe_compact()

    def remove(self, uid: str) -> None:
        _check_uid(uid)
        self._first_use()
        self.log.append(tombstone(uid))
        self._live.discard(uid)
        self._maybe_compact()

    def _first_use(self) -> None:
        """An earlier version's files are in the log before this process writes a line of its own."""
        if not self._migrated:  # load_all at a kubelet's start sets it; a race at first use loads twice, harmlessly
            self._load()

    def _maybe_compact(self) -> None:
        if self.log.appended > COMPACT_FACTOR * len(self._live) + COMPACT_SLACK:
            live = self.log.compact("uid")  # None: another process appends too; tried again as many lines later
            if live is not None:
                self._live = set(live)

    def load_all(self) -> dict[str, PodRecord]:
        """Every readable record; unreadable lines (cut short by a crash or a full disk) are skipped,
        as an unreadable record file was: their pod is treated as new and found by its uid in
        Slurm's job comments."""
        return self._load()

    def close(self) -> None:
        self.log.close()


def node_records(node_dir: Path) -> dict[str, PodRecord]:
    """The records of the kubelet whose state directory is ``node_dir``, read only (no compaction,
    no migration): its log and an earlier version's files."""
    return _records(_merged(node_dir)[0])


def node_record_uids(profile: SiteProfile) -> set[str]:
    """Uids of the pods the kubelets of this profile run (their records): the cluster's pods, which
    ``hpkctl status`` shows in its cluster section, not as runs."""
    root = Path(os.path.expanduser(profile.pods.state_dir)) / "kubelet"
    nodes = {p.parent for p in root.glob(f"*/{LOG_NAME}")} | {p.parent.parent for p in root.glob(f"*/{OLD_DIR}/*.json")}
    return {uid for node in sorted(nodes) for uid in node_records(node)}

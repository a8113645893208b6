"""Run records: how ``hpkctl status/logs/delete`` find a pod started by ``hpkctl run`` (moved here from
``hpkctl.local``: the provider's :class:`~hpkctl.provider.records.PodRecord`, indexed by name).

One JSON file per run, ``<state_dir>/runs/<namespace>/<name>.json`` (uid, Slurm job id, pod
directory), so a pod is addressed by name and namespace, as ``kubectl`` does.

A record is *created exclusively* before anything is submitted (written to a temp file, then
``os.link`` to its name, which fails if the name exists): of two concurrent ``hpkctl run`` of one
name exactly one gets the record, the other gets "already exists" and submits nothing. It starts
in state ``submitting`` (no job id yet) and is updated to ``submitted`` with the job id as soon as
``sbatch`` answers; a record left in ``submitting`` (hpkctl killed during ``sbatch``, a Slurm
timeout) still names the pod's uid, which the job carries in its comment.

The state directory, ``runs/`` and every namespace directory are 0700, records 0600: they name
pods and their directories, which are nobody else's business.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from hpkctl.errors import HpkError
from hpkctl.provider.records import SUBMITTED, SUBMITTING, PodRecord, from_json
from hpkctl.sites.schema import SiteProfile

# Kubernetes' rules (apimachinery validation): a namespace is a DNS-1123 label, a pod name a
# DNS-1123 subdomain. Checked here too because names from the command line become file names.
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class RunExists(HpkError):
    """A run of that name exists in that namespace (``kubectl``'s ``AlreadyExists``)."""


#: hpkctl run's record: the provider's record, by another index
RunRecord = PodRecord


def check_name(name: str, *, namespace: str) -> None:
    """``HpkError`` unless ``namespace`` is a DNS-1123 label and ``name`` a DNS-1123 subdomain."""
    if not (isinstance(namespace, str) and len(namespace) <= 63 and _LABEL.fullmatch(namespace)):
        raise HpkError(f"invalid namespace {namespace!r}: must be a DNS-1123 label (lower-case letters, digits "
                       "and '-', starting and ending with a letter or digit, at most 63 characters)")
    if not name:
        raise HpkError("invalid pod name '': metadata.name is missing or empty",
                       hint="set metadata.name, or metadata.generateName (a prefix completed with 5 random "
                            "characters, as the API server does)")
    if not (isinstance(name, str) and len(name) <= 253 and _SUBDOMAIN.fullmatch(name)):
        raise HpkError(f"invalid pod name {name!r}: must be a DNS-1123 subdomain (lower-case letters, digits, "
                       "'-' and '.', starting and ending with a letter or digit, at most 253 characters)")


def state_dir(profile: SiteProfile) -> Path:
    return Path(os.path.expanduser(profile.pods.state_dir))


def runs_dir(profile: SiteProfile) -> Path:
    return state_dir(profile) / "runs"


def private_dir(path: Path) -> Path:
    """``path`` (and missing parents) as a directory only its owner can use (0700)."""
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
    if path.stat().st_mode & 0o077 and path.stat().st_uid == os.getuid():
        path.chmod(0o700)
    return path


def ensure_state_dirs(profile: SiteProfile) -> None:
    """The state directory, ``runs/`` and ``pods/``, private (0700), before anything is written in them."""
    root = private_dir(state_dir(profile))
    private_dir(root / "runs")
    private_dir(root / "pods")


def record_path(profile: SiteProfile, namespace: str, name: str) -> Path:
    check_name(name, namespace=namespace)
    root = runs_dir(profile)
    path = root / namespace / f"{name}.json"
    if path.resolve().parent != (root / namespace).resolve():  # cannot happen with the rules above
        raise HpkError(f"run record of {namespace}/{name} would lie outside {root}")
    return path


def read_record(path: Path) -> RunRecord:
    return from_json(json.loads(path.read_text()))


def load_record(profile: SiteProfile, name: str, namespace: str = "default") -> RunRecord:
    try:
        return read_record(record_path(profile, namespace, name))
    except FileNotFoundError:
        here = [r for r in all_records(profile) if r.namespace == namespace]
        known = ", ".join(r.name for r in here) or "none"
        elsewhere = sorted({r.namespace for r in all_records(profile) if r.name == name and r.namespace != namespace})
        hint = (f"it exists in namespace {', '.join(elsewhere)}: pass -n {elsewhere[0]}" if elsewhere else
                "start one with 'hpkctl run -f POD.yaml', or pass the --site (and -n) it was started with")
        raise HpkError(f"pod {name!r} not found in namespace {namespace} (site {profile.name}); "
                       f"runs there: {known}", hint=hint) from None


def all_records(profile: SiteProfile, namespace: str | None = None) -> list[RunRecord]:
    """Every run (of ``namespace``, or of all namespaces), sorted by namespace and name."""
    out = []
    pattern = f"{namespace}/*.json" if namespace is not None else "*/*.json"
    for path in sorted(runs_dir(profile).glob(pattern)):
        try:
            out.append(read_record(path))
        except (OSError, ValueError, TypeError):  # deleted meanwhile, or written by an old version
            continue
    return out


def _write_private(path: Path, rec: RunRecord) -> Path:
    """``rec`` as JSON in a new 0600 temp file next to ``path``; the temp file's path."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(asdict(rec), indent=2))
        fh.flush()
        os.fsync(fh.fileno())
    return tmp


def create_record(profile: SiteProfile, rec: RunRecord) -> None:
    """Create the record of a new run, atomically and exclusively; ``RunExists`` if the name is taken."""
    path = record_path(profile, rec.namespace, rec.name)
    ensure_state_dirs(profile)
    private_dir(path.parent)
    tmp = _write_private(path, rec)
    try:
        os.link(tmp, path)  # atomic; fails if the name exists, whoever created it
    except FileExistsError:
        raise RunExists(f"pod {rec.name!r} already exists in namespace {rec.namespace}; delete it first",
                        hint=f"'hpkctl delete {rec.name} -n {rec.namespace} --site {profile.name}', "
                             "or run with --replace") from None
    finally:
        tmp.unlink(missing_ok=True)


def save_record(profile: SiteProfile, rec: RunRecord) -> None:
    """Replace the record of an existing run (atomically: readers see the old or the new one)."""
    path = record_path(profile, rec.namespace, rec.name)
    ensure_state_dirs(profile)
    private_dir(path.parent)
    os.replace(_write_private(path, rec), path)


def owns_pod_dir(profile: SiteProfile, rec: RunRecord) -> bool:
    """Whether the record's pod directory lies in the profile's ``pods/`` (only then is it removed)."""
    pods = (state_dir(profile) / "pods").resolve()
    return Path(rec.pod_dir).resolve().parent == pods


WORKLOAD_FILE = "job/workload.json"  # in a workload's directory: its rules and pods (hpkctl.local.arrays)


def member_dirs(rec: RunRecord) -> list[str]:
    """The pod directories of a workload's pods (none for a Pod, or when the file is gone)."""
    if not rec.is_array:
        return []
    try:
        data = json.loads((Path(rec.pod_dir) / WORKLOAD_FILE).read_text())
        return [str(p["dir"]) for p in data.get("pods", [])]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def forget_run(profile: SiteProfile, rec: RunRecord) -> None:
    """Remove a run's pod directory and its record (the job must have ended). A pod directory
    outside the profile's ``pods/`` (a hand-edited record) is left alone."""
    if rec.pod_dir and owns_pod_dir(profile, rec):
        pods = (state_dir(profile) / "pods").resolve()
        for member in member_dirs(rec):  # a workload's pods
            if Path(member).resolve().parent == pods:
                shutil.rmtree(member, ignore_errors=True)
        shutil.rmtree(rec.pod_dir, ignore_errors=True)
    record_path(profile, rec.namespace, rec.name).unlink(missing_ok=True)


class RunRecords:
    """``hpkctl run``'s records as the job-per-pod provider's :class:`~hpkctl.provider.records.RecordStore`."""

    def __init__(self, profile: SiteProfile) -> None:
        self.profile = profile

    def save(self, rec: PodRecord) -> None:
        save_record(self.profile, rec)

    def remove(self, uid: str) -> None:
        for rec in all_records(self.profile):
            if rec.uid == uid:
                record_path(self.profile, rec.namespace, rec.name).unlink(missing_ok=True)

    def load_all(self) -> dict[str, PodRecord]:
        return {r.uid: r for r in all_records(self.profile)}


__all__ = ["SUBMITTED", "SUBMITTING", "RunExists", "RunRecord", "RunRecords", "all_records", "check_name",
           "create_record", "ensure_state_dirs", "forget_run", "load_record", "member_dirs", "owns_pod_dir",
           "private_dir", "read_record", "record_path", "runs_dir", "save_record", "state_dir"]

"""Run records: how ``hpkctl status/logs/delete`` find a pod started by ``hpkctl run``.

One JSON file per run, ``<state_dir>/runs/<namespace>/<name>.json`` (uid, Slurm job id, pod
directory), so a pod is addressed by name, as ``kubectl`` does.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hpkctl.errors import HpkError
from hpkctl.pod.paths import PodDir
from hpkctl.sites.schema import SiteProfile


@dataclass
class RunRecord:
    name: str
    namespace: str
    uid: str
    job_id: str
    pod_dir: str
    site: str
    submitted: float

    @property
    def dir(self) -> PodDir:
        return PodDir(Path(self.pod_dir))

    def pod(self) -> dict[str, Any]:
        """The pod as it was submitted (``job/pod.json``)."""
        return json.loads(self.dir.pod_json.read_text())  # type: ignore[no-any-return]


def runs_dir(profile: SiteProfile) -> Path:
    return Path(os.path.expanduser(profile.pods.state_dir)) / "runs"


def record_path(profile: SiteProfile, namespace: str, name: str) -> Path:
    return runs_dir(profile) / namespace / f"{name}.json"


def read_record(path: Path) -> RunRecord:
    return RunRecord(**json.loads(path.read_text()))


def load_record(profile: SiteProfile, name: str, namespace: str = "default") -> RunRecord:
    try:
        return read_record(record_path(profile, namespace, name))
    except FileNotFoundError:
        known = ", ".join(r.name for r in all_records(profile)) or "none"
        raise HpkError(f"no run named {name!r} (site {profile.name}); runs: {known}",
                       hint="start one with 'hpkctl run -f POD.yaml', or pass the --site it was started with") from None


def all_records(profile: SiteProfile) -> list[RunRecord]:
    out = []
    for path in sorted(runs_dir(profile).glob("*/*.json")):
        try:
            out.append(read_record(path))
        except (OSError, ValueError, TypeError):  # deleted meanwhile, or half-written by an old version
            continue
    return out


def save_record(profile: SiteProfile, rec: RunRecord) -> None:
    path = record_path(profile, rec.namespace, rec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(rec), indent=2))
    os.replace(tmp, path)


def forget_run(profile: SiteProfile, rec: RunRecord) -> None:
    """Remove a run's record and its pod directory (the job must have ended)."""
    record_path(profile, rec.namespace, rec.name).unlink(missing_ok=True)
    shutil.rmtree(rec.pod_dir, ignore_errors=True)

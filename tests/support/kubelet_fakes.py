"""Fakes of the API server and of Slurm for the PodManager's unit tests (the real ones are in the
``*_slurm.py`` end-to-end tests), and a minimal pod bound to the node."""

from __future__ import annotations

from typing import Any

from hpkctl.jobs import JobInfo, UserJob


class FakeKube:
    host = "https://127.0.0.1:6443"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def get(self, path: str, **kw: Any) -> Any:
        self.calls.append(("GET", path, None))
        return {"items": []}

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        self.calls.append(("POST", path, body))
        return {**body, "metadata": {**body.get("metadata", {}), "name": "ev", "namespace": "default"}}

    def patch(self, path: str, body: Any, **kw: Any) -> Any:
        self.calls.append(("PATCH", path, body))
        return body

    def delete(self, path: str, body: Any = None, **kw: Any) -> Any:
        self.calls.append(("DELETE", path, body))
        return {}

    def status_patches(self) -> list[dict[str, Any]]:
        return [b for m, p, b in self.calls if m == "PATCH" and p.endswith("/status")]

    def events(self) -> list[dict[str, Any]]:
        return [b for m, p, b in self.calls if m == "POST" and p.endswith("/events")]


class FakeSlurm:
    def __init__(self) -> None:
        self.cancelled: list[tuple[str, str | None]] = []
        self.jobs: dict[str, JobInfo] = {}
        self.submitted = 0
        self.queries: list[list[str]] = []
        self.shortened: list[tuple[str, int]] = []
        self.max_time: dict[str, int] = {"short": 180}
        self.listed: list[UserJob] = []  # squeue --me
        self.accounted: list[UserJob] = []  # sacct
        self.listings = 0

    def query(self, ids: Any) -> dict[str, JobInfo]:
        self.queries.append(list(ids))
        return {j: self.jobs[j] for j in ids if j in self.jobs}

    def finals(self, ids: Any) -> dict[str, JobInfo | None]:
        """Jobs that left the queue: their final record, as scontrol/sacct/jobcomp would give it."""
        return {j: self.jobs.get(j) for j in ids}

    def cancel(self, job_id: str, *, signal: str | None = None, batch_only: bool = False) -> None:
        self.cancelled.append((job_id, signal))

    def shorten(self, job_id: str, seconds: int) -> None:
        self.shortened.append((job_id, seconds))

    def job_partition(self, job_id: str) -> str:
        return "short"

    def partition_limit(self, partition: str) -> int | None:
        return self.max_time.get(partition)

    def user_jobs(self) -> list[UserJob]:
        self.listings += 1
        return list(self.listed)

    def accounted_jobs(self, *, since: str) -> list[UserJob]:
        return list(self.accounted)

    def submit(self, *a: Any, **kw: Any) -> str:
        self.submitted += 1
        return "999"


def _pod(name: str = "p", uid: str = "u-1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "5"},
            "spec": {"nodeName": "hpk", "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]},
            "status": {"phase": "Pending"}}


def pod_manager(tmp_path: Any, kube: FakeKube, slurm: FakeSlurm, profile: Any) -> Any:
    """The kubelet's PodManager on the job-per-pod provider, its records under ``tmp_path/kubelet``."""
    from hpkctl.kube.events import EventRecorder
    from hpkctl.kubelet.pods import PodManager
    from hpkctl.provider.jobpod import JobPodProvider
    from hpkctl.provider.records import Records

    provider = JobPodProvider(slurm=slurm, profile=profile, records=Records(tmp_path / "kubelet"))  # type: ignore[arg-type]
    return PodManager(kube=kube, provider=provider, profile=profile, node_name="hpk",  # type: ignore[arg-type]
                      recorder=EventRecorder(kube, component="kubelet"))  # type: ignore[arg-type]


def poll_and_work(m: Any, **kw: Any) -> int:
    """A status round of a PodManager whose workers were not started, then what it queued worked off
    on this thread: the status loop only detects changes; the pods' workers patch them."""
    read = int(m.poll(**kw))
    m.queue.drain()
    return read

"""``hpkctl run --pilot``'s follow when ``hpkctl delete`` stops the pod and removes its directory
between two looks: the containers' last lines (a TERM trap's, written during the stop sequence) still
reach the run's output, read through the log file the follow holds open (the full suite once showed
"up" without "got TERM": the follow returned "deleted" without reading the log again)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from hpkctl.local.pilotrun import follow_pilot
from hpkctl.pod.status import PodStatus
from hpkctl.provider.runrecords import RunRecord

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u"},
       "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}}
RUNNING = PodStatus("Running", "", "", None, None, "n1", "2026-01-01T00:00:00Z")


class Deleted:
    """The stop sequence of ``hpkctl delete``, in another process: the TERM trap's line, the step's
    end, the pod directory removed. ``at`` says when the follow next looks: after its sleep, or as it
    asks whether the step ended."""

    def __init__(self, pod_dir: Path, at: str) -> None:
        self.pod_dir, self.at, self.done = pod_dir, at, False

    def happen(self) -> None:
        if not self.done:
            with (self.pod_dir / "logs" / "main.log").open("a") as log:
                log.write("got TERM\n")
            shutil.rmtree(self.pod_dir)
            self.done = True


class Step:
    """The step's srun: running until the delete happened."""

    def __init__(self, delete: Deleted) -> None:
        self.delete, self.polls = delete, 0

    def poll(self) -> int | None:
        self.polls += 1
        if self.delete.at == "step-end" and self.polls > 1:
            self.delete.happen()
        return 0 if self.delete.done else None

    def wait(self, timeout: float | None = None) -> int:
        assert self.delete.done, "the follow waited for a step that still runs"
        return 0


class Files:
    """The pilot provider's view of the pod's files: Running while the directory is there."""

    def __init__(self, pod_dir: Path) -> None:
        self.pod_dir = pod_dir

    def log_file(self, uid: str, container: str) -> Path | None:
        path = self.pod_dir / "logs" / f"{container}.log"
        return path if path.exists() else None

    def pod_statuses(self, refs: list[Any], *, fresh: bool) -> dict[str, PodStatus]:
        return {ref.uid: RUNNING for ref in refs}


@pytest.mark.parametrize("at", ["sleep", "step-end"])
def test_a_deleted_pods_last_log_lines_reach_the_run(tmp_path: Path, at: str) -> None:
    pod_dir = tmp_path / "pod"
    (pod_dir / "job").mkdir(parents=True)
    (pod_dir / "logs").mkdir()
    (pod_dir / "job" / "pod.json").write_text(json.dumps(POD))
    (pod_dir / "logs" / "main.log").write_text("up\n")
    rec = RunRecord(name="p", namespace="default", uid="u", job_id="42.0", pod_dir=str(pod_dir), site="t",
                    submitted=0, allocation="42")
    delete = Deleted(pod_dir, at)

    def sleep(_: float) -> None:
        if at == "sleep":
            delete.happen()

    logs = io.StringIO()
    st = follow_pilot(cast(Any, Files(pod_dir)), rec, cast(Any, Step(delete)), out=io.StringIO(), log_out=logs,
                      sleep=sleep)
    assert delete.done and not pod_dir.exists()
    assert st.reason == "Terminated" and "deleted" in st.message
    assert logs.getvalue() == "up\ngot TERM\n"

"""``JobFinder.find`` reads the pod directory's job id first: a job's (``123``), and a pilot step's
(``123.4``, found by its allocation), so a kubelet that died between starting a pilot step and
recording it adopts the step instead of starting a second one (nothing runs twice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod.paths import JOB_ID, PodDir
from hpkctl.provider.adopt import JobFinder


class _NoSlurm:
    """Any Slurm call fails the test: the pod directory must answer."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Slurm was asked ({name}) although the pod directory names the job")


def _pod_dir(tmp_path: Path, job_id: str) -> Path:
    pd = PodDir(tmp_path / "pod")
    pd.status_file(JOB_ID).parent.mkdir(parents=True)
    pd.status_file(JOB_ID).write_text(job_id + "\n")
    return tmp_path / "pod"


@pytest.mark.parametrize(("written", "job", "where"), [("123", "123", "status/job.id)"),
                                                        ("123_4", "123_4", "status/job.id)"),
                                                        ("123.4", "123", "step 123.4)")])
def test_the_pod_directory_names_the_job_or_the_pilot_steps_allocation(tmp_path, written, job, where) -> None:
    found = JobFinder(_NoSlurm()).find(uid="u1", pod={}, pod_dir=_pod_dir(tmp_path, written), fresh=True)  # type: ignore[arg-type]
    assert found is not None and found.job_id == job and found.where.endswith(where)


@pytest.mark.parametrize("written", ["123.", ".4", "123.4x", "12 3.4", "123.4.5"])
def test_a_malformed_id_is_no_answer(tmp_path, written) -> None:
    class _Empty:
        def user_jobs(self) -> list[Any]:
            return []

        def accounted_jobs(self, since: str) -> list[Any]:
            return []

    found = JobFinder(_Empty()).find(uid="u1", pod={}, pod_dir=_pod_dir(tmp_path, written), fresh=True)  # type: ignore[arg-type]
    assert found is None

"""``JobFinder.find`` reads the pod directory's job id first: a job's (``123``), and a pilot step's
(``123.4``, found by its allocation), so a kubelet that died between starting a pilot step and
recording it adopts the step instead of starting a second one (nothing runs twice)."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod.paths import JOB_ID, PodDir
from hpkctl.jobs import UserJob
from hpkctl.provider.adopt import ACCOUNTED_SPAN, JobFinder


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


class _Counting:
    """squeue knows nothing; sacct knows the jobs of ``accounted`` (uid -> job id), and every call
    is counted with its ``--starttime``."""

    def __init__(self, accounted: dict[str, str]) -> None:
        self.accounted = accounted
        self.squeues = 0
        self.saccts: list[str] = []

    def user_jobs(self) -> list[UserJob]:
        self.squeues += 1
        return []

    def accounted_jobs(self, *, since: str) -> list[UserJob]:
        self.saccts.append(since)
        return [UserJob(job_id=j, state="COMPLETED", comment=f"hpk-uid={u} pod default/x") for u, j in self.accounted.items()]


def _created_at(when: float) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(when, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"creationTimestamp": stamp}}


def test_a_restart_with_a_backlog_asks_sacct_once_for_all_its_pods(tmp_path) -> None:
    """Issue 23.2: N pods created before the kubelet (re)started, none with a record: one squeue and
    one sacct answer for all of them (the pods whose job sacct knows are adopted, the others are
    new), whatever N is and whichever pod comes first."""
    now = time.time()
    slurm = _Counting({f"u{i}": str(500 + i) for i in range(0, 40, 3)})
    finder = JobFinder(slurm, started=now)  # type: ignore[arg-type]
    order = list(range(40))
    random.Random(7).shuffle(order)  # the workers take the pods in no particular order
    found = {}
    for i in order:  # created over the last ten minutes
        pod = _created_at(now - 600 + i * 15)
        found[i] = finder.find(uid=f"u{i}", pod=pod, pod_dir=tmp_path / f"none-{i}", fresh=False)
    assert slurm.squeues == 1 and len(slurm.saccts) == 1
    assert {i: f.job_id for i, f in found.items() if f is not None} == {i: str(500 + i) for i in range(0, 40, 3)}
    assert all(f.where == "sacct (its job comment)" for f in found.values() if f is not None)


def test_an_older_pod_than_the_listing_reaches_is_looked_up_again(tmp_path) -> None:
    """The listing reaches ACCOUNTED_SPAN behind the first pod that needed it; a pod older than that
    gets a listing of its own (never an answer from a window that cannot hold its job), and a
    record left in ``submitting`` (``fresh``) always asks sacct anew."""
    now = time.time()
    slurm = _Counting({"old": "7"})
    finder = JobFinder(slurm, started=now)  # type: ignore[arg-type]
    assert finder.find(uid="new", pod=_created_at(now - 60), pod_dir=tmp_path / "a", fresh=False) is None
    assert finder.find(uid="new2", pod=_created_at(now - 60 - ACCOUNTED_SPAN / 2), pod_dir=tmp_path / "b",
                       fresh=False) is None
    assert len(slurm.saccts) == 1
    old = finder.find(uid="old", pod=_created_at(now - 3 * ACCOUNTED_SPAN), pod_dir=tmp_path / "c", fresh=False)
    assert old is not None and old.job_id == "7" and len(slurm.saccts) == 2
    assert slurm.saccts[1] < slurm.saccts[0]  # reaching further back
    slurm.accounted["fresh"] = "8"
    got = finder.find(uid="fresh", pod=_created_at(now - 60), pod_dir=tmp_path / "d", fresh=True)
    assert got is not None and got.job_id == "8" and len(slurm.saccts) == 3


def test_a_primed_finder_answers_new_pods_from_the_listing_it_took_at_start(tmp_path) -> None:
    """The kubelet's start takes the squeue listing (``prime``) while it reads its first list; the first
    pods' adoption checks then ask squeue nothing more, and a job an earlier kubelet submitted is found in it."""
    class _Squeue:
        def __init__(self) -> None:
            self.listings = 0
            self.down = True

        def user_jobs(self) -> list[UserJob]:
            self.listings += 1
            if self.down:
                raise OSError("slurmctld does not answer")
            return [UserJob(job_id="41", state="RUNNING", comment="hpk-uid=earlier")]

        def accounted_jobs(self, since: str) -> list[Any]:
            return []

    slurm = _Squeue()
    finder = JobFinder(slurm, started=time.time())  # type: ignore[arg-type]
    finder.prime()  # Slurm down: nothing raised, nothing kept; the first find asks again
    assert slurm.listings == 1
    slurm.down = False
    finder.prime()
    assert slurm.listings == 2
    found = finder.find(uid="earlier", pod={}, pod_dir=tmp_path / "a", fresh=False)
    assert found is not None and found.job_id == "41" and found.where.startswith("squeue")
    assert finder.find(uid="new", pod={}, pod_dir=tmp_path / "b", fresh=False) is None
    assert slurm.listings == 2  # both answered by the listing taken at start


def test_fresh_lookups_share_a_listing_begun_after_they_asked(tmp_path, monkeypatch) -> None:
    """The pods of an array whose sbatch gave no clear answer come back together, each asking squeue afresh:
    a listing begun at or after a pod asked answers it, so a batch of 27 costs one squeue, not 27, and a pod
    that asks after that listing began gets a new one (review of stop 32)."""
    import hpkctl.provider.adopt as adopt

    now = [100.0]
    monkeypatch.setattr(adopt, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time, strftime=time.strftime,
                                                       localtime=time.localtime))
    slurm = _Counting({})
    finder = JobFinder(slurm)  # type: ignore[arg-type]
    for i in range(27):  # all asked at the same moment as the first one's listing began
        assert finder.find(uid=f"u{i}", pod=_created_at(time.time()), pod_dir=tmp_path / f"p{i}", fresh=True) is None
    assert slurm.squeues == 1
    now[0] += 1.0
    finder.find(uid="later", pod=_created_at(time.time()), pod_dir=tmp_path / "later", fresh=True)
    assert slurm.squeues == 2


def test_a_failed_fresh_listing_never_passes_the_old_one_for_new(tmp_path, monkeypatch) -> None:
    """A fresh lookup whose squeue failed leaves the listing as old as it was: the next fresh lookup asks
    again instead of reading one taken before its pod's sbatch returned (found in review)."""
    import hpkctl.provider.adopt as adopt
    from hpkctl.jobs import SlurmTimeout

    now = [100.0]
    monkeypatch.setattr(adopt, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time, strftime=time.strftime,
                                                       localtime=time.localtime))

    class _Flaky(_Counting):
        fail = False

        def user_jobs(self) -> list[UserJob]:
            self.squeues += 1
            if self.fail:
                raise SlurmTimeout("squeue timed out")
            return [UserJob(job_id="55_1", state="PENDING", comment="hpk-uids=u0,u1")] if self.squeues > 1 else []

    slurm = _Flaky({})
    finder = JobFinder(slurm)  # type: ignore[arg-type]
    assert finder.find(uid="u1", pod=_created_at(time.time()), pod_dir=tmp_path / "a", fresh=True) is None
    now[0] += 1.0
    slurm.fail = True
    with pytest.raises(SlurmTimeout):
        finder.find(uid="u1", pod=_created_at(time.time()), pod_dir=tmp_path / "a", fresh=True)
    slurm.fail = False
    found = finder.find(uid="u1", pod=_created_at(time.time()), pod_dir=tmp_path / "a", fresh=True)
    assert found is not None and found.job_id == "55_1" and slurm.squeues == 3


def test_fresh_sacct_lookups_share_a_listing_begun_after_they_asked(tmp_path, monkeypatch) -> None:
    import hpkctl.provider.adopt as adopt

    now = [100.0]
    monkeypatch.setattr(adopt, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time, strftime=time.strftime,
                                                       localtime=time.localtime))
    slurm = _Counting({})
    finder = JobFinder(slurm, started=time.time() + 3600)  # type: ignore[arg-type]  (pods older than the kubelet)
    for i in range(5):
        finder.find(uid=f"u{i}", pod=_created_at(time.time() - 60), pod_dir=tmp_path / f"p{i}", fresh=True)
    assert len(slurm.saccts) == 1
    now[0] += 1.0
    finder.find(uid="later", pod=_created_at(time.time() - 60), pod_dir=tmp_path / "later", fresh=True)
    assert len(slurm.saccts) == 2

"""The status loop's budget: one readdir of the change log per round, a pod's files read only when it
left a marker (or Slurm's view of its job changed, or the audit saw its ``status/`` move), and one
``squeue`` per ``slurm_poll`` for every tracked pod. The job side (``hpk_changed`` in
sbatch/runtime.sh) is run in bash here; on the real Slurm in test_kubelet_changes_slurm.py."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs import JobInfo
from hpkctl.jobs import TERMINAL_STATES
from hpkctl.kubelet.pods import PodManager
from hpkctl.provider import jobstatus as jobstatus_mod
from hpkctl.provider.changes import ChangeLog
from hpkctl.provider.records import SUBMITTED, PodRecord
from hpkctl.pod import paths
from hpkctl.sites import load_site
from tests.support.kubelet_fakes import FakeKube, FakeSlurm, _pod, pod_manager, poll_and_work
from tests.support.ci import REPO

K = 50


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PodManager, FakeKube, FakeSlurm, list[float]]:
    """K running pods, adopted from records, each with a started container in its status files."""
    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)})})
    kube, slurm = FakeKube(), FakeSlurm()
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    m = pod_manager(tmp_path, kube, slurm, profile)
    m.provider.changes.ensure()
    pods = []
    for i in range(K):
        uid, job = f"u-{i}", str(100 + i)
        pod_dir = Path(paths.pod_dir_for(str(tmp_path), uid))
        (pod_dir / "status").mkdir(parents=True)
        (pod_dir / "status" / "job.started").write_text("2026-11-26T10:00:00Z\n")
        (pod_dir / "status" / "c.started").write_text("2026-11-26T10:00:01Z\n")
        slurm.jobs[job] = JobInfo(job_id=job, state="RUNNING", nodes="n1")
        m.provider.records.save(PodRecord(uid=uid, namespace="default", name=f"p{i}", pod_dir=str(pod_dir),
                                 state=SUBMITTED, job_id=job))
        pod = _pod(f"p{i}", uid)
        pod["metadata"]["annotations"] = {"hpk.io/slurm-job-id": job}
        pods.append(pod)
    m.load_records()
    m.on_sync(pods)
    for i in range(K):
        m.sync(f"u-{i}")
    return m, kube, slurm, now


def _write(m: PodManager, uid: str, name: str, value: str, *, marker: bool = True) -> None:
    """What the job's hpk_put does: the status file, then the marker."""
    pod_dir = m.provider._pod_dir(uid)
    assert m.table.get(uid) is not None and pod_dir is not None
    (pod_dir / "status" / name).write_text(value + "\n")
    if marker:
        (m.provider.changes.dir / uid).touch()


def test_a_round_reads_only_the_pods_that_left_a_marker(live: Any) -> None:
    m, kube, slurm, now = live
    assert poll_and_work(m) == K  # the first round: every pod once
    assert len(slurm.queries) == 1 and len(slurm.queries[0]) == K
    ops, patches = m.provider.changes.ops, len(kube.status_patches())
    now[0] += 0.5
    assert poll_and_work(m) == 0  # nothing changed: one readdir, nothing else
    assert m.provider.changes.ops - ops == 1
    _write(m, "u-7", "c.exitcode", "3")
    _write(m, "u-7", "pod.done", "3")
    _write(m, "u-9", "c.ready", "1")
    ops = m.provider.changes.ops
    now[0] += 0.5
    assert poll_and_work(m) == 2
    assert m.provider.changes.ops - ops == 1 + 2 * 2  # the readdir; per changed pod its marker taken, its status/ stat'ed
    assert sorted(p.name for p in m.provider.changes.dir.iterdir()) == []
    sent = kube.status_patches()[patches:]
    assert {p["metadata"]["uid"] for p in sent} == {"u-7", "u-9"}
    assert len(slurm.queries) == 1  # Slurm is not asked before slurm_poll has passed


def test_a_write_after_the_read_is_read_next_round(live: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The marker is taken before the files are read: a write during the read leaves a new marker."""
    m, kube, slurm, now = live
    poll_and_work(m)
    real = jobstatus_mod.read_pod_status

    def during_read(pod_dir: Path, *a: Any, **kw: Any) -> Any:
        st = real(pod_dir, *a, **kw)
        if pod_dir.name == "u-3" and not (pod_dir / "status" / "c.exitcode").exists():
            _write(m, "u-3", "c.exitcode", "0")  # the job writes right after this read
        return st

    monkeypatch.setattr(jobstatus_mod, "read_pod_status", during_read)
    _write(m, "u-3", "c.ready", "1")
    now[0] += 0.5
    assert poll_and_work(m) == 1
    now[0] += 0.5
    assert poll_and_work(m) == 1
    last = [p for p in kube.status_patches() if p["metadata"]["uid"] == "u-3"][-1]
    assert last["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_slurm_is_asked_once_per_slurm_poll_for_every_pod_stopping_ones_included(live: Any) -> None:
    m, kube, slurm, now = live
    every = m.profile.kubelet.slurm_poll
    assert every == 10.0  # the default budget
    poll_and_work(m)
    t = m.table.get("u-0")
    t.pod["metadata"]["deletionTimestamp"] = "2026-11-26T10:00:00Z"
    m.sync("u-0")  # the stop sequence uses the round's answer: RUNNING, so TERM to the batch shell
    assert slurm.cancelled == [("100", "TERM")] and m.provider.stop_queries == 0
    for _ in range(int(every / 0.5) - 1):
        now[0] += 0.5
        poll_and_work(m)
        m.sync("u-0")  # re-checks: pod.done not there yet; no squeue of its own
    assert len(slurm.queries) == 1 and m.provider.stop_queries == 0
    now[0] += 0.5
    poll_and_work(m)
    assert len(slurm.queries) == 2 and "100" in slurm.queries[1] and len(slurm.queries[1]) == K


def test_slurm_facts_change_the_status_without_a_marker(live: Any) -> None:
    """What only Slurm knows (the job killed: here OUT_OF_MEMORY) is read at the next Slurm round."""
    m, kube, slurm, now = live
    poll_and_work(m)
    slurm.jobs["105"] = JobInfo(job_id="105", state="OUT_OF_MEMORY", exit_code=0, signal=9)
    assert "OUT_OF_MEMORY" in TERMINAL_STATES
    now[0] += m.profile.kubelet.slurm_poll
    assert poll_and_work(m) == 1
    last = [p for p in kube.status_patches() if p["metadata"]["uid"] == "u-5"][-1]
    assert last["status"]["phase"] == "Failed"


def test_the_audit_finds_a_change_without_a_marker(live: Any) -> None:
    """A runtime without markers (a job of an older hpkctl) or a pod directory removed by hand:
    every ``status_audit`` each live pod's ``status/`` is stat'ed, and only moved ones are read."""
    m, kube, slurm, now = live
    poll_and_work(m)
    _write(m, "u-11", "c.exitcode", "1", marker=False)
    (m.provider._pod_dir("u-11") / "status" / "c.exitcode").rename(  # a rename, as the job writes
        m.provider._pod_dir("u-11") / "status" / "c.exitcode.x")
    (m.provider._pod_dir("u-11") / "status" / "c.exitcode.x").rename(
        m.provider._pod_dir("u-11") / "status" / "c.exitcode")
    now[0] += 0.5
    assert poll_and_work(m) == 0
    ops = m.provider.changes.ops
    now[0] = 1000.0 + m.profile.kubelet.status_audit
    assert poll_and_work(m) == 1
    assert m.provider.changes.ops - ops == 1 + K  # the readdir and one stat per live pod, this round only
    ops = m.provider.changes.ops
    now[0] += 0.5
    assert poll_and_work(m) == 0 and m.provider.changes.ops - ops == 1


def test_stale_markers_of_removed_pods_are_cleaned(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path)
    log.ensure()
    (tmp_path / "pods" / "kept").mkdir(parents=True)
    for uid in ("kept", "gone"):
        (log.dir / uid).touch()
    assert log.clean(tmp_path / "pods") == 1
    assert [p.name for p in log.dir.iterdir()] == ["kept"]
    assert log.take({"other"}) == set() and (log.dir / "kept").exists()  # not ours: left for its reader


def _runtime_marker_part() -> str:
    """The runtime's change-log lines and hpk_put, as the job runs them."""
    text = (REPO / "sbatch" / "runtime.sh").read_text()
    changed = re.search(r"^HPK_CHANGED=.*?^hpk_changed\(\) \{.*?^\}", text, re.S | re.M)
    put = re.search(r"^hpk_put\(\) \{.*?^\}", text, re.S | re.M)
    assert changed is not None and put is not None
    return changed.group(0) + "\n" + put.group(0) + "\n"


@pytest.mark.parametrize("with_log", [True, False])
def test_the_job_drops_its_marker_where_the_kubelet_reads(tmp_path: Path, with_log: bool) -> None:
    pod_dir = Path(paths.pod_dir_for(str(tmp_path), "uid-1"))
    (pod_dir / "status").mkdir(parents=True)
    log = ChangeLog(tmp_path)
    if with_log:
        log.ensure()
    script = ("set -euo pipefail\nHPK_POD_DIR=$1\nHPK_STATUS=$HPK_POD_DIR/status\n" + _runtime_marker_part()
              + "hpk_put job.started now\n")
    subprocess.run(["bash", "-c", script, "bash", str(pod_dir)], check=True, timeout=30)
    assert (pod_dir / "status" / "job.started").read_text() == "now\n"
    assert log.take({"uid-1"}) == ({"uid-1"} if with_log else set())
    assert not (tmp_path / "changes" / "uid-1").exists()

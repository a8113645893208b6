"""PodManager's decisions with fakes for the API server and Slurm (the real ones are in the
``*_slurm.py`` end-to-end tests): a bad pod becomes a status and an event, never a crash; restart
adoption by record; deletion of pods that vanished while nobody watched."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs import JobInfo, UserJob
from hpkctl.kubelet.pods import PodManager
from hpkctl.provider import jobpod as jobpod_mod
from hpkctl.provider.records import STOPPED, SUBMITTED, SUBMITTING, PodRecord
from hpkctl.sites import load_site
from tests.support.kubelet_fakes import FakeKube, FakeSlurm, _pod, pod_manager, poll_and_work


@pytest.fixture
def mgr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PodManager, FakeKube, FakeSlurm]:
    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)})})
    kube, slurm = FakeKube(), FakeSlurm()
    m = pod_manager(tmp_path, kube, slurm, profile)
    m.load_records()
    return m, kube, slurm


def test_an_unexpected_error_becomes_a_failed_status_and_an_event(mgr: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    m, kube, slurm = mgr

    def boom(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("surprise")

    monkeypatch.setattr(jobpod_mod, "render_pod", boom)
    m.on_sync([_pod()])
    m.sync("u-1")
    (patch,) = kube.status_patches()
    assert patch["metadata"] == {"uid": "u-1"}
    assert (patch["status"]["phase"], patch["status"]["reason"]) == ("Failed", "KubeletError")
    assert "surprise" in patch["status"]["message"]
    assert any(e["reason"] == "Failed" and e["type"] == "Warning" for e in kube.events())
    assert slurm.submitted == 0
    m.sync("u-1")  # final: nothing more happens
    assert len(kube.status_patches()) == 1


def test_a_translation_refusal_is_failed_with_its_reason(mgr: Any) -> None:
    m, kube, slurm = mgr
    pod = _pod()
    pod["spec"]["volumes"] = [{"name": "x", "nfs": {"server": "s", "path": "/p"}}]
    m.on_sync([pod])
    m.sync("u-1")
    (patch,) = kube.status_patches()
    assert patch["status"]["reason"] == "UnsupportedVolume"
    assert slurm.submitted == 0


def test_a_hostpath_outside_the_profiles_prefixes_is_failed_naming_the_field_and_the_fix(mgr: Any) -> None:
    m, kube, slurm = mgr
    pod = _pod()
    pod["spec"]["volumes"] = [{"name": "x", "hostPath": {"path": "/etc"}}]
    m.on_sync([pod])
    m.sync("u-1")
    (patch,) = kube.status_patches()
    assert patch["status"]["reason"] == "HostPathNotAllowed", patch
    assert "spec.volumes[0].hostPath.path" in patch["status"]["message"] and "hostpath_allow" in patch["status"]["message"]
    assert slurm.submitted == 0


def test_recorded_pod_is_adopted_not_resubmitted(mgr: Any, tmp_path: Path) -> None:
    m, kube, slurm = mgr
    m.provider.records.save(PodRecord(uid="u-1", namespace="default", name="p", pod_dir=str(tmp_path / "d"),
                             state=SUBMITTED, job_id="41"))
    m.load_records()
    pod = _pod()
    pod["metadata"]["annotations"] = {"hpk.io/slurm-job-id": "41"}
    m.on_sync([pod])
    m.sync("u-1")
    assert slurm.submitted == 0
    t = m.table.get("u-1")
    assert t is not None and t.job_id == "41"
    assert kube.status_patches() == []  # annotation already there: nothing to write


def test_records_without_api_pods_are_stopped_after_the_first_full_list(mgr: Any, tmp_path: Path) -> None:
    m, kube, slurm = mgr
    slurm.jobs["77"] = JobInfo(job_id="77", state="PENDING")
    m.provider.records.save(PodRecord(uid="gone", namespace="default", name="old", pod_dir=str(tmp_path / "g"),
                             state=SUBMITTED, job_id="77"))
    m.provider.records.save(PodRecord(uid="done", namespace="default", name="older", pod_dir=str(tmp_path / "h"),
                             state=STOPPED, job_id="76"))
    m.load_records()
    m.on_sync([])
    m.sync("gone")
    assert slurm.cancelled == [("77", None)]  # pending: cancelled at once, no stop sequence
    assert [c for c in kube.calls if c[0] == "DELETE"] == []  # the API object is gone already
    assert m.provider.records.load_all()["gone"].state == STOPPED
    assert m.table.get("gone") is None


def test_a_record_left_submitting_whose_pod_was_deleted_meanwhile_has_its_job_found_and_stopped(
        mgr: Any, tmp_path: Path) -> None:
    """The kubelet died between its intent and the job id (its sbatch ran), and the pod was deleted while
    it was away: its job is looked up by the pod's uid and cancelled, not left running unnamed."""
    m, kube, slurm = mgr
    m.provider.records.save(PodRecord(uid="gone", namespace="default", name="old", pod_dir=str(tmp_path / "g"),
                             state=SUBMITTING))
    slurm.listed = [UserJob("55", "PENDING", "hpk-uid=gone hpk-pod=default/old")]
    slurm.jobs["55"] = JobInfo(job_id="55", state="PENDING")
    m.load_records()
    m.on_sync([])
    m.sync("gone")
    assert slurm.cancelled == [("55", None)]  # pending: cancelled at once
    assert (m.provider.records.load_all()["gone"].state, m.provider.records.load_all()["gone"].job_id) == (STOPPED, "55")


def test_submitting_record_with_a_job_found_by_uid_is_adopted(mgr: Any, tmp_path: Path) -> None:
    m, kube, slurm = mgr
    m.provider.records.save(PodRecord(uid="u-1", namespace="default", name="p", pod_dir=str(tmp_path / "d"),
                             state=SUBMITTING))
    m.load_records()

    slurm.listed = [UserJob("54", "RUNNING", "hpk-uid=other hpk-pod=default/o"),
                    UserJob("55", "PENDING", "hpk-uid=u-1 hpk-pod=default/p")]
    m.on_sync([_pod()])
    m.sync("u-1")
    assert slurm.submitted == 0
    assert m.provider.records.load_all()["u-1"].job_id == "55"
    assert _annotated_by_status(m, kube) == "55"


def test_deleting_many_pods_costs_one_squeue_not_one_per_pod(mgr: Any, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``kubectl delete pods --all``: every pod's stop sequence needs its job's state; the first
    asks Slurm about all the pods being deleted at once, the others use that answer (fresh for
    ``slurm_poll``; the clock stands still here so a slow machine cannot split the round)."""
    m, kube, slurm = mgr
    monkeypatch.setattr(time, "monotonic", lambda: 1000.0)
    pods = []
    for i in range(40):
        uid, job = f"u-{i}", str(100 + i)
        slurm.jobs[job] = JobInfo(job_id=job, state="PENDING")
        m.provider.records.save(PodRecord(uid=uid, namespace="default", name=f"p{i}", pod_dir=str(tmp_path / uid),
                                 state=SUBMITTED, job_id=job))
        pod = _pod(f"p{i}", uid)
        pod["metadata"]["annotations"] = {"hpk.io/slurm-job-id": job}
        pod["metadata"]["deletionTimestamp"] = "2026-11-24T05:00:00Z"
        pods.append(pod)
    m.load_records()
    m.on_sync(pods)
    for i in range(40):
        m.sync(f"u-{i}")
    assert sorted(slurm.cancelled) == sorted((str(100 + i), None) for i in range(40))  # pending: scancel
    assert len(slurm.queries) == 1 and sorted(slurm.queries[0]) == sorted(slurm.jobs), slurm.queries
    assert m.provider.stop_queries == 1
    assert len([c for c in kube.calls if c[0] == "DELETE"]) == 40


def test_a_failing_stop_query_is_not_repeated_by_every_waiting_pod(mgr: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """slurmctld down while pods are deleted: the pods waiting for the shared squeue get its error
    instead of each running into the command timeout in turn; the next interval asks again."""
    from hpkctl.jobs import SlurmError

    m, kube, slurm = mgr
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])

    def down(ids: Any) -> Any:
        slurm.queries.append(list(ids))
        raise SlurmError("squeue: error: Unable to contact slurm controller (connect failure)")

    monkeypatch.setattr(slurm, "query", down)
    for job in ("1", "1", "1"):
        with pytest.raises(SlurmError):
            m.provider.jobs.job_now(job, lambda: [])
    assert len(slurm.queries) == 1
    now[0] += m.profile.kubelet.slurm_poll - 0.1
    with pytest.raises(SlurmError):
        m.provider.jobs.job_now("1", lambda: [])
    assert len(slurm.queries) == 1  # at most one squeue per slurm_poll
    now[0] += 0.1
    with pytest.raises(SlurmError):
        m.provider.jobs.job_now("1", lambda: [])
    assert len(slurm.queries) == 2


def _pending_pod(m: Any, slurm: FakeSlurm, tmp_path: Path, job_id: str, deadline: int | None) -> None:
    """A pod whose job Slurm keeps pending with PartitionTimeLimit, adopted from its record."""
    pod = _pod()
    if deadline:
        pod["spec"]["activeDeadlineSeconds"] = deadline
    pod["metadata"]["annotations"] = {"hpk.io/slurm-job-id": job_id}
    (tmp_path / "d").mkdir()
    m.provider.records.save(PodRecord(uid="u-1", namespace="default", name="p", pod_dir=str(tmp_path / "d"),
                                      state=SUBMITTED, job_id=job_id))
    slurm.jobs[job_id] = JobInfo(job_id=job_id, state="PENDING", reason="PartitionTimeLimit")
    m.load_records()
    m.on_sync([pod])
    m.sync("u-1")


def test_a_deadline_above_the_partition_limit_is_lowered_not_cancelled(mgr: Any, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm keeps the job pending with PartitionTimeLimit (the deadline plus the stop sequence's
    backstop is above MaxTime): its limit is lowered to the partition's MaxTime once, with an event
    saying how early Slurm may now stop it; given time to take effect; cancelled only if Slurm
    still keeps it after that."""
    m, kube, slurm = mgr
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    _pending_pod(m, slurm, tmp_path, "70", deadline=100)
    poll_and_work(m, now=now[0])
    assert slurm.shortened == [("70", 180)] and slurm.cancelled == []
    (ev,) = [e for e in kube.events() if e["reason"] == "TimeLimitLowered"]
    # 180 s limit, grace 30 + margin 10 and up to a minute of Slurm's own: TERM as early as 80 s
    assert "activeDeadlineSeconds 100 s" in ev["message"] and "lowered to 180 s" in ev["message"]
    assert "up to 20 s before the deadline" in ev["message"] and ev["type"] == "Warning"
    now[0] += 20
    poll_and_work(m, now=now[0])  # Slurm has not re-evaluated yet
    assert slurm.cancelled == [] and len(slurm.shortened) == 1
    now[0] += 20
    poll_and_work(m, now=now[0])
    assert slurm.cancelled == [("70", None)] and len(slurm.shortened) == 1
    (patch,) = [p for p in kube.status_patches() if p["status"].get("reason") == "SlurmNeverStarts"]
    assert "PartitionTimeLimit" in patch["status"]["message"]
    now[0] += 20
    poll_and_work(m, now=now[0])  # failed: never again
    assert slurm.cancelled == [("70", None)]


@pytest.mark.parametrize("deadline, max_time", [(None, 180), (600, 180)])
def test_a_partition_time_limit_without_room_is_never_starts(mgr: Any, tmp_path: Path, deadline: int | None,
                                                            max_time: int) -> None:
    """No deadline, or one the partition's MaxTime cannot hold even without the backstop: nothing
    to lower, the job never starts (and is cancelled at once)."""
    m, kube, slurm = mgr
    slurm.max_time["short"] = max_time
    _pending_pod(m, slurm, tmp_path, "71", deadline=deadline)
    poll_and_work(m)
    assert slurm.shortened == [] and slurm.cancelled == [("71", None)]


# ---------------------------------------------------------------- lost records (issue 20.5, 22.15)


def _job_trace(tmp_path: Path, where: str, slurm: FakeSlurm, uid: str = "u-1") -> None:
    """A job of pod ``uid`` that only ``where`` still knows."""
    comment = f"hpk-uid={uid} hpk-pod=default/p"
    if where == "pod directory":
        status = tmp_path / "pods" / uid / "status"
        status.mkdir(parents=True)
        (status / "job.id").write_text("77\n")
    elif where == "squeue":
        slurm.listed = [UserJob("77", "RUNNING", comment)]
    else:
        slurm.accounted = [UserJob("76", "COMPLETED", "hpk-uid=u-0 hpk-pod=default/q"),
                           UserJob("77", "COMPLETED", comment)]


@pytest.mark.parametrize("where", ["pod directory", "squeue", "sacct"])
@pytest.mark.parametrize("phase", ["Pending", "Running", "Succeeded"])
def test_a_pod_without_record_whose_job_left_a_trace_is_adopted_never_resubmitted(
        mgr: Any, tmp_path: Path, where: str, phase: str) -> None:
    """The kubelet's records are gone (a purged scratch, a crash between sbatch and the record's update
    that outlived MinJobAge): the job is found by the pod's uid and adopted; nothing is submitted."""
    m, kube, slurm = mgr
    _job_trace(tmp_path, where, slurm)
    pod = _pod()
    pod["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"  # older than this kubelet: sacct is asked
    pod["status"]["phase"] = phase
    m.on_sync([pod])
    m.sync("u-1")
    assert slurm.submitted == 0
    assert m.provider.records.load_all()["u-1"].job_id == "77"
    if phase == "Succeeded":  # terminal: no status patch follows, so the job id goes out on its own
        assert [p["metadata"].get("annotations") for p in kube.status_patches()] == [{"hpk.io/slurm-job-id": "77"}]
    else:
        assert _annotated_by_status(m, kube) == "77"


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_terminal_pod_is_never_submitted_again(mgr: Any, phase: str) -> None:
    m, kube, slurm = mgr
    pod = _pod()
    pod["status"] = {"phase": phase}
    m.on_sync([pod])
    m.sync("u-1")
    m.sync("u-1")
    assert slurm.submitted == 0
    assert not kube.status_patches(), "the API's final phase stands"
    assert m.provider.records.load_all()["u-1"].state == "failed"


def test_a_pod_that_ran_but_whose_job_left_no_trace_fails_instead_of_running_twice(mgr: Any) -> None:
    m, kube, slurm = mgr
    pod = _pod()
    pod["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "c", "state": {"running": {"startedAt": "2020-01-01T00:00:00Z"}}}]}
    m.on_sync([pod])
    m.sync("u-1")
    assert slurm.submitted == 0
    (patch,) = kube.status_patches()
    assert (patch["status"]["phase"], patch["status"]["reason"]) == ("Failed", "JobLost")


def test_new_pods_share_one_squeue_listing(mgr: Any) -> None:
    """A burst of new pods: one squeue listing answers for all of them (only an earlier kubelet's job
    can belong to a pod without a record), and sacct is not asked about pods created after the start."""
    m, kube, slurm = mgr
    slurm.accounted = [UserJob("9", "COMPLETED", "hpk-uid=u-2 hpk-pod=default/p2")]  # would be adopted if asked
    pods = [_pod(f"p{i}", f"u-{i}") for i in range(5)]
    for p in pods:
        p["metadata"]["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    m.on_sync(pods)
    for i in range(5):
        m.sync(f"u-{i}")
    assert (slurm.submitted, slurm.listings) == (5, 1)


def test_a_full_disk_between_sbatch_and_the_record_leaves_the_pod_followed_not_pending(
        mgr: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20.7: the state disk fills after sbatch, before the record's update: the pod is followed
    from memory (job id, annotation, status polls) instead of staying Pending for ever, with a
    warning event; nothing is submitted again."""
    import errno

    m, kube, slurm = mgr
    real_save = m.provider.records.save

    def save(rec: PodRecord) -> None:
        if rec.state == SUBMITTED:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(rec)

    monkeypatch.setattr(m.provider.records, "save", save)
    m.on_sync([_pod()])
    m.sync("u-1")
    m.sync("u-1")
    assert slurm.submitted == 1
    t = m.table.get("u-1")
    assert t is not None and t.job_id == "999"
    assert _annotated_by_status(m, kube) == "999"
    assert any(e["reason"] == "RecordNotWritten" for e in kube.events())
    assert m.provider.records.load_all()["u-1"].state == SUBMITTING  # on disk: found by uid after a restart


def _annotated_by_status(m: Any, kube: Any) -> str:
    """The job id annotation, which rides on the pod's first status patch after its submission or
    adoption (a status round, then its worker), never on a patch of its own on the submit path."""
    from tests.support.kubelet_fakes import poll_and_work

    alone = [p for p in kube.status_patches() if p["metadata"].get("annotations") and "status" not in p]
    assert not alone, f"the job id went out in a patch of its own: {alone}"
    poll_and_work(m)
    got = [p for p in kube.status_patches() if p["metadata"].get("annotations")]
    assert len(got) == 1 and "status" in got[0], got
    return str(got[0]["metadata"]["annotations"]["hpk.io/slurm-job-id"])


class _Watches:
    """ObjectWatches' interface, recording: every object is held (a ConfigMap with key k)."""

    def __init__(self) -> None:
        self.registered: dict[str, dict[str, Any]] = {}
        self.unregistered: list[str] = []
        self.reads: list[tuple[str, str, str]] = []

    def register(self, uid: str, pod: dict[str, Any]) -> None:
        self.registered[uid] = pod

    def unregister(self, uid: str) -> None:
        self.unregistered.append(uid)

    def get(self, plural: str, namespace: str, name: str) -> tuple[bool, dict[str, Any] | None]:
        self.reads.append((plural, namespace, name))
        return True, {"kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "from-the-watch"}}


def test_the_pods_objects_come_from_the_watches_and_their_references_go_with_the_pod(mgr: Any) -> None:
    """The PodManager registers a pod to start with the kubelet's object watches, renders it from them
    (no GET of its ConfigMap), keeps its references while it runs (the next pod naming the object finds
    the watch up: no LIST on its submit path) and drops them when the pod leaves the node."""
    m, kube, slurm = mgr
    m.watches = watches = _Watches()
    pod = _pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]
    m.on_sync([pod])
    assert list(watches.registered) == ["u-1"]
    m.sync("u-1")
    assert slurm.submitted == 1
    assert ("configmaps", "default", "cm") in watches.reads
    assert not [p for verb, p, _ in kube.calls if verb == "GET" and "/configmaps/" in p]
    assert watches.unregistered == []
    m.on_sync([])  # the pod is gone from the API: stopped, and its references with it
    m.sync("u-1")
    assert watches.unregistered == ["u-1"]


def test_a_pod_that_ends_drops_its_references_though_the_api_keeps_it(mgr: Any) -> None:
    """As the real kubelet unregisters a terminated pod: a kept Failed (or Succeeded) pod holds no
    watch, and none is listed again once the API server lets it go (the Node authorizer refuses)."""
    m, kube, slurm = mgr
    m.watches = watches = _Watches()
    pod = _pod()
    pod["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "c", "state": {"running": {"startedAt": "2020-01-01T00:00:00Z"}}}]}
    m.on_sync([pod])
    assert list(watches.registered) == ["u-1"]
    m.sync("u-1")  # it ran, and its job left no trace: Failed (JobLost), never run twice
    assert slurm.submitted == 0 and kube.status_patches()[-1]["status"]["phase"] == "Failed"
    assert watches.unregistered == ["u-1"]


def test_a_pods_references_go_before_its_final_delete_and_a_deleting_pod_registers_none(mgr: Any) -> None:
    """A watch of an object no pod on the node names any more is refused by the Node authorizer: the
    kubelet drops a pod's references when its stop sequence begins, before its own final ``DELETE``
    makes the pod leave the API server, and a pod being deleted registers none again."""
    m, kube, slurm = mgr
    m.watches = watches = _Watches()
    drops: list[int] = []
    watches.unregister = lambda uid: drops.append(len(kube.calls))  # type: ignore[method-assign]
    pod = _pod()
    m.on_sync([pod])
    assert list(watches.registered) == ["u-1"]
    watches.registered.clear()
    pod = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-11-24T05:00:00Z",
                               "deletionGracePeriodSeconds": 30, "resourceVersion": "6"}}
    m.on_event("MODIFIED", pod)
    assert watches.registered == {}
    m.sync("u-1")
    deletes = [i for i, (verb, path, _) in enumerate(kube.calls) if verb == "DELETE" and path.endswith("/pods/p")]
    assert deletes and drops and drops[0] <= deletes[0], (drops, kube.calls)
    assert slurm.submitted == 0


def test_a_pod_to_submit_is_urgent_in_the_work_queue_until_it_has_its_job(mgr: Any) -> None:
    """Its worker goes before other pods' status work (WorkQueue's urgent keys), until its sbatch."""
    m, kube, slurm = mgr
    m.on_sync([_pod()])
    assert m.queue.urgent is not None and m.queue.urgent("u-1")
    m.sync("u-1")
    assert slurm.submitted == 1 and not m.queue.urgent("u-1") and not m.queue.urgent("unknown")

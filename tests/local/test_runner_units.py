"""Runner behaviour that needs no real Slurm: Slurm faked with pytest-subprocess."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from hpkctl.jobs import InvalidPartition
from hpkctl.local.follow import follow_run
from hpkctl.provider.runrecords import RunRecord
from hpkctl.local.submit import submit_pod
from hpkctl.jobs import Slurm
from hpkctl.sites.schema import SiteProfile

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]}}


@pytest.fixture
def profile(tmp_path: Path) -> SiteProfile:
    return SiteProfile.model_validate({"name": "t", "slurm": {"bin_dir": "/fake/bin", "partition": "nope", "use_sacct": "no"},
                                       "pods": {"state_dir": str(tmp_path / "state")}})


def test_failed_submission_leaves_no_pod_directory(fp, profile: SiteProfile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fp.register(["/fake/bin/sbatch", fp.any()], returncode=1,
                stderr="sbatch: error: invalid partition specified: nope\n"
                       "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    with pytest.raises(InvalidPartition) as err:
        submit_pod(profile, str(manifest), out=io.StringIO())
    assert "partition" in err.value.hint
    assert not list((tmp_path / "state" / "pods").iterdir())
    assert not list((tmp_path / "state" / "runs").rglob("*.json")), "a record of a run that submitted nothing"


def _provider(profile: SiteProfile, rec: RunRecord) -> Any:
    """hpkctl run's provider (the real ``Slurm``: pytest-subprocess fakes its commands), knowing ``rec``."""
    from hpkctl.provider.pilotpod import run_provider

    provider = run_provider(Slurm(profile.slurm), profile, pilot=False)
    provider.know(rec)
    return provider


def test_following_survives_a_slurm_hiccup(fp, profile: SiteProfile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pod_dir = tmp_path / "pod"
    (pod_dir / "job").mkdir(parents=True)
    (pod_dir / "status").mkdir()
    (pod_dir / "logs").mkdir()
    (pod_dir / "job" / "pod.json").write_text(json.dumps(POD))
    rec = RunRecord(name="p", namespace="default", uid="u", job_id="42", pod_dir=str(pod_dir), site="t", submitted=0)
    fp.register(["/fake/bin/squeue", fp.any()], returncode=1,
                stderr="squeue: error: Unable to contact slurm controller (connect failure)\n")
    fp.register(["/fake/bin/squeue", fp.any()], stdout="42|COMPLETED|n1|2026-01-01T00:00:00|2026-01-01T00:00:01|None\n",
                occurrences=50)
    fp.register(["/fake/bin/scontrol", fp.any()], returncode=1,
                stderr="slurm_load_jobs error: Invalid job id specified\n", occurrences=50)
    ticks = iter(range(10_000))

    def sleep(_: float) -> None:  # the job "runs" while we sleep: its files appear
        (pod_dir / "status" / "c.exitcode").write_text("0\n")
        (pod_dir / "status" / "pod.done").write_text("0\n")

    out = io.StringIO()
    st = follow_run(_provider(profile, rec), rec, out=out, log_out=io.StringIO(),
                    clock=lambda: float(next(ticks) * 10), sleep=sleep)
    assert "cannot ask Slurm" in out.getvalue()
    assert st.phase == "Succeeded"


def test_deleting_an_array_waits_for_its_pods_sidecars_too(tmp_path: Path, profile: SiteProfile) -> None:
    """A workload's delete goes through the provider as a pod's does (issue 21.1): its running pods get
    the delete marker, then TERM to the batch shells alone; the array is cancelled only once their stop
    sequence is done or the grace period for the main containers and once more per native sidecar,
    plus the provider's margin, is over; pending elements go with the array."""
    from hpkctl.jobs import JobInfo
    from hpkctl.local.runs import stop_run
    from hpkctl.provider.jobpod import STOP_MARGIN
    from hpkctl.provider.workloads import Member, WorkloadFile, WorkloadStops, write_workload_dir
    from tests.support.kubelet_fakes import FakeSlurm

    spec = {"terminationGracePeriodSeconds": 7,
            "initContainers": [{"name": "side", "image": "x", "restartPolicy": "Always"}],
            "containers": [{"name": "c", "image": "x"}]}
    pods = []
    for i in range(2):
        (tmp_path / f"p{i}" / "job").mkdir(parents=True)
        (tmp_path / f"p{i}" / "status").mkdir()
        (tmp_path / f"p{i}" / "job" / "pod.json").write_text(json.dumps({"spec": spec}))
        pods.append(Member(name=f"j-{i}", uid=f"u{i}", dir=str(tmp_path / f"p{i}")))
    array = tmp_path / "array"
    write_workload_dir(array, "#!/bin/bash\n", WorkloadFile(kind="Job", name="j", namespace="default", count=2,
                                                            indexed=True, retries=True, pods=pods))
    slurm = FakeSlurm()
    slurm.jobs["42_0"] = JobInfo(job_id="42_0", state="RUNNING")
    slurm.jobs["42_1"] = JobInfo(job_id="42_1", state="PENDING")
    rec = RunRecord(name="j", namespace="default", uid="u", job_id="42", pod_dir=str(array), site="ci",
                    submitted=0.0, state="submitted", pid=0, kind="Job")
    stops = WorkloadStops(slurm, margin=STOP_MARGIN)  # type: ignore[arg-type]
    # Slurm says RUNNING before the element's script set its TERM trap (a TERM then would kill bash:
    # FAILED, not CANCELLED): no TERM until it wrote index.0.attempts, which follows its trap
    assert stops.step(rec, grace=None, now=100.0) == (False, True, False)
    assert (tmp_path / "p0" / "status" / "pod.deleting").is_file()  # the running pod: marked before its TERM
    assert not (tmp_path / "p1" / "status" / "pod.deleting").exists()  # the pending one never ran
    assert slurm.cancelled == []
    (array / "status" / "index.0.attempts").write_text("1\n")
    assert stops.step(rec, grace=None, now=100.5) == (False, False, False)
    assert slurm.cancelled == [("42_0", "TERM")]  # the running element alone (the array's id hangs on a pending one)
    assert stops.step(rec, grace=None, now=101.0) == (False, False, False)
    assert slurm.cancelled == [("42_0", "TERM")]  # once
    limit = 7 * 2 + STOP_MARGIN  # main containers, then the sidecar, each with the grace period
    assert stops.step(rec, grace=None, now=100.0 + limit - 0.1) == (False, False, False)
    assert stops.step(rec, grace=None, now=100.0 + limit) == (True, False, True)
    assert slurm.cancelled == [("42_0", "TERM"), ("42", None)]

    # hpkctl delete (stop_run): the same sequence through the provider, done as soon as pod.done is there
    class Stopping(FakeSlurm):
        def cancel(self, job_id: str, *, signal: str | None = None, batch_only: bool = False) -> None:
            super().cancel(job_id, signal=signal, batch_only=batch_only)
            if signal == "TERM":
                (tmp_path / "p0" / "status" / "pod.done").write_text("143\n")

    (array / "status" / "index.0.attempts").unlink()  # a new delete: its TERM waits for the marker again
    slurm = Stopping()
    (array / "status" / "index.0.attempts").write_text("1\n")
    slurm.jobs.update({"42_0": JobInfo(job_id="42_0", state="RUNNING"), "42_1": JobInfo(job_id="42_1", state="PENDING")})
    out = io.StringIO()
    assert stop_run(slurm, profile, rec, out=out)  # type: ignore[arg-type]
    assert slurm.cancelled == [("42_0", "TERM"), ("42", None)]
    assert "job default/j: stopping its running pods" in out.getvalue()
    assert "job default/j: cancelled Slurm job array 42" in out.getvalue()


def test_a_refused_time_limit_is_retried_with_the_deadline_itself(tmp_path: Path) -> None:
    """A site with EnforcePartLimits refuses the job's --time (the deadline plus the stop sequence's
    backstop) outright: one more sbatch with --time lowered to activeDeadlineSeconds; without a
    deadline the refusal stands."""
    from hpkctl.jobs import TimeLimitTooLong
    from hpkctl.provider.slurmjobs import submit_job

    class Slurm:
        def __init__(self, max_time: int | None = 180) -> None:
            self.calls: list[tuple[str, ...]] = []
            self.max_time = max_time
            self.asked: list[str] = []

        def partition_limit(self, partition: str) -> int | None:
            self.asked.append(partition)
            return self.max_time

        def submit(self, script: Path, *, workdir: Path, extra_args: tuple[str, ...] | list[str] = ()) -> str:
            self.calls.append(tuple(extra_args))
            if not extra_args:
                raise TimeLimitTooLong("sbatch: error: Batch job submission failed: Requested time limit is invalid "
                                       "(missing or exceeds some limit)")
            return "88"

    s = Slurm()
    got = submit_job(s, tmp_path / "job.sh", workdir=tmp_path, deadline=100, partition="short")  # type: ignore[arg-type]
    assert got == ("88", 180) and s.calls == [(), ("--time=00:03:00",)] and s.asked == ["short"]
    unknown = Slurm(max_time=None)  # sinfo does not say: the deadline itself
    assert submit_job(unknown, tmp_path / "job.sh", workdir=tmp_path, deadline=100, partition="")[1] == 100  # type: ignore[arg-type]
    for deadline, max_time in ((0, 180), (600, 180)):  # no deadline, or one the partition cannot hold
        with pytest.raises(TimeLimitTooLong):
            submit_job(Slurm(max_time), tmp_path / "job.sh", workdir=tmp_path, deadline=deadline,  # type: ignore[arg-type]
                       partition="short")


def test_following_asks_slurm_once_per_slurm_poll(fp, profile: SiteProfile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``hpkctl run`` follows its pod's files every 0.2 s and asks squeue at once (a job Slurm never
    starts is refused at once), then every slurm_poll (10 s): 7 calls in a minute, not one per tick;
    the running phase comes from the files (job.started) between two calls."""
    pod_dir = tmp_path / "pod"
    for d in ("job", "status", "logs"):
        (pod_dir / d).mkdir(parents=True)
    (pod_dir / "job" / "pod.json").write_text(json.dumps(POD))
    rec = RunRecord(name="p", namespace="default", uid="u", job_id="42", pod_dir=str(pod_dir), site="t", submitted=0)
    now = [0.0]
    asked: list[float] = []
    fp.register(["/fake/bin/squeue", fp.any()], stdout="42|PENDING|(null)|N/A|N/A|Priority\n", occurrences=100,
                callback=lambda _p: asked.append(now[0]))
    fp.register(["/fake/bin/scontrol", fp.any()], returncode=1,
                stderr="slurm_load_jobs error: Invalid job id specified\n", occurrences=100)

    def sleep(seconds: float) -> None:  # a minute of following; the job starts after 5 s and ends at 60 s
        now[0] += seconds
        if now[0] >= 5 and not (pod_dir / "status" / "job.started").exists():
            (pod_dir / "status" / "job.started").write_text("2026-11-26T10:00:00Z\n")
            (pod_dir / "status" / "c.started").write_text("2026-11-26T10:00:01Z\n")
            (pod_dir / "status" / "c.ready").write_text("1\n")
        if now[0] >= 60:
            (pod_dir / "status" / "c.exitcode").write_text("0\n")
            (pod_dir / "status" / "pod.done").write_text("0\n")

    out = io.StringIO()
    follow_run(_provider(profile, rec), rec, out=out, log_out=io.StringIO(), clock=lambda: now[0], sleep=sleep)
    following, settling = [t for t in asked if t < 60], [t for t in asked if t >= 60]
    assert following[0] == 0.0 and len(following) == 6, asked  # at once, then every 10 s (+ a 0.2 s tick)
    assert all(10 - 1e-6 <= b - a <= 10.4 for a, b in zip(following, following[1:])), asked
    # then, once, a few asks with back-off for the final state (this fake never gives one): 5 s at most
    assert 1 <= len(settling) <= 5 and settling[-1] - settling[0] <= 6, settling
    assert "Running" in out.getvalue()


def test_an_interrupted_or_deleted_run_is_deleted_through_the_provider(tmp_path: Path, profile: SiteProfile) -> None:
    """``hpkctl delete`` and an interrupted ``hpkctl run`` (Ctrl-C, SIGTERM, SIGHUP) end the pod as the
    kubelet deletes one: the delete marker first (so its status says hpkctl deleted it, not "cancelled from
    outside hpkctl"), SIGTERM to the batch shell alone, and scancel only once its stop sequence is done."""
    from hpkctl.jobs import JobInfo
    from hpkctl.local.runs import stop_run
    from tests.support.kubelet_fakes import FakeSlurm

    pod_dir = tmp_path / "pod"
    for d in ("job", "status", "logs"):
        (pod_dir / d).mkdir(parents=True)
    (pod_dir / "job" / "pod.json").write_text(json.dumps({**POD, "spec": {**POD["spec"],  # type: ignore[dict-item]
                                                                         "terminationGracePeriodSeconds": 1}}))
    (pod_dir / "status" / "job.started").write_text("2026-11-26T10:00:00Z\n")

    class Stopping(FakeSlurm):
        def cancel(self, job_id: str, *, signal: str | None = None, batch_only: bool = False) -> None:
            assert (pod_dir / "status" / "pod.deleting").is_file(), "signalled before the delete marker"
            super().cancel(job_id, signal=signal, batch_only=batch_only)
            if signal == "TERM":  # the batch shell runs the stop sequence
                (pod_dir / "status" / "pod.done").write_text("143\n")

    slurm = Stopping()
    slurm.jobs["42"] = JobInfo(job_id="42", state="RUNNING")
    rec = RunRecord(name="p", namespace="default", uid="u", job_id="42", pod_dir=str(pod_dir), site="t", submitted=0)
    out = io.StringIO()
    assert stop_run(slurm, profile, rec, out=out)  # type: ignore[arg-type]
    assert slurm.cancelled == [("42", "TERM"), ("42", None)]
    assert "pod default/p: stopping its containers (grace period 2s)" in out.getvalue()
    slurm.jobs["43"] = JobInfo(job_id="43", state="PENDING")
    pending = RunRecord(name="q", namespace="default", uid="v", job_id="43", pod_dir=str(pod_dir), site="t", submitted=0)
    assert stop_run(slurm, profile, pending, out=io.StringIO())  # type: ignore[arg-type]
    assert slurm.cancelled[-1] == ("43", None)  # a pending job has nothing to stop: cancelled at once


def test_logs_follow_of_a_pilot_run_asks_slurm_about_no_empty_job_id(fp, profile: SiteProfile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``hpkctl logs -f`` of a pod that ``hpkctl run --pilot`` started: its record names the allocation
    and no job id (the pod is a step). Following it reads the files and asks Slurm about no job: before,
    it ran ``squeue --jobs=`` with an empty id at the first Slurm poll, which hpkctl's query refused
    ("'' is not a Slurm job id") with a traceback. No Slurm command is registered here: any is a failure."""
    from hpkctl.local.follow import follow_logs

    pod_dir = tmp_path / "pod"
    for d in ("job", "status", "logs"):
        (pod_dir / d).mkdir(parents=True)
    (pod_dir / "job" / "pod.json").write_text(json.dumps(POD))
    (pod_dir / "status" / "job.started").write_text("2026-11-26T10:00:00Z\n")
    (pod_dir / "status" / "c.started").write_text("2026-11-26T10:00:01Z\n")
    (pod_dir / "logs" / "c.log").write_text("one\n")
    rec = RunRecord(name="p", namespace="default", uid="u", job_id="", pod_dir=str(pod_dir), site="t", submitted=0,
                    state="submitted", allocation="42")
    now = [0.0]

    def sleep(seconds: float) -> None:  # the container writes a line, and ends after 25 s (past two Slurm polls)
        now[0] += seconds
        if now[0] >= 25 and not (pod_dir / "status" / "c.exitcode").exists():
            with open(pod_dir / "logs" / "c.log", "a") as log:
                log.write("two\n")
            (pod_dir / "status" / "c.exitcode").write_text("0\n")
            (pod_dir / "status" / "pod.done").write_text("0\n")

    asked: list[list[str]] = []

    class Asked(Slurm):
        def query(self, job_ids):  # type: ignore[no-untyped-def]
            asked.append(list(job_ids))
            return super().query(job_ids)

    from hpkctl.provider.pilotpod import run_provider

    provider = run_provider(Asked(profile.slurm), profile, pilot=False)  # as cmd_logs makes it
    provider.know(rec)
    out = io.StringIO()
    follow_logs(provider, rec, "c", out=out, slurm_poll=10.0, sleep=sleep, clock=lambda: now[0])
    assert out.getvalue() == "one\ntwo\n"
    assert 25 <= now[0] < 26
    assert asked == [] and len(fp.calls) == 0, (asked, list(fp.calls))


def test_a_pilot_pod_whose_step_was_killed_is_failed_not_running_for_ever(fp, profile: SiteProfile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A pilot pod's step killed before its script's last word (``scancel --signal=KILL J.S``, its node
    lost): its files say Running for ever. ``hpkctl status`` and ``hpkctl logs -f`` look for the step
    among Slurm's running steps (one ``squeue --steps``) and fail the pod Cancelled, naming the step;
    a step Slurm still runs, or a pod that wrote ``pod.done``, is left to its files. Before, the pod
    stayed Running and ``logs -f`` never returned (seen on the real Slurm)."""
    from hpkctl.local.follow import follow_logs

    pod_dir = tmp_path / "pod"
    for d in ("job", "status", "logs"):
        (pod_dir / d).mkdir(parents=True)
    (pod_dir / "job" / "pod.json").write_text(json.dumps(POD))
    for name, text in (("job.started", "2026-11-26T10:00:00Z"), ("c.started", "2026-11-26T10:00:01Z"),
                       ("job.id", "42.3")):
        (pod_dir / "status" / name).write_text(text + "\n")
    rec = RunRecord(name="p", namespace="default", uid="u", job_id="", pod_dir=str(pod_dir), site="t", submitted=0,
                    state="submitted", allocation="42")
    steps = ["/fake/bin/squeue", fp.any()]
    fp.register(steps, stdout="42.3|vm|2026-11-26T10:00:00|p\n")  # still running
    provider = _provider(profile, rec)
    assert provider.pod_statuses([_ref(rec)])["u"].phase == "Running"
    assert provider.pod_statuses([_ref(rec)], fresh=False)["u"].phase == "Running"  # no query: files only
    assert fp.call_count(steps) == 1
    fp.register(steps, stdout="")  # gone
    st = provider.pod_statuses([_ref(rec)])["u"]
    assert (st.phase, st.reason) == ("Failed", "Cancelled") and "pilot step 42.3 ended" in st.message, st
    # its container is not left running (READY 1/1): terminated as the kubelet reports a container it
    # cannot find once the pod is terminal
    [c] = st.containers
    assert (c.state, c.reason, c.exit_code, c.ready) == ("terminated", "ContainerStatusUnknown", 137, False), c
    assert st.ready_count() == "0/1"
    fp.register(steps, stdout="", occurrences=5)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    follow_logs(provider, rec, "c", out=io.StringIO(), slurm_poll=10.0, sleep=sleep, clock=lambda: now[0])
    assert now[0] < 1  # the first Slurm poll found the step gone
    (pod_dir / "status" / "pod.done").write_text("0\n")
    (pod_dir / "status" / "c.exitcode").write_text("0\n")
    assert provider.pod_statuses([_ref(rec)])["u"].phase == "Succeeded"  # its files said it all: no query
    assert fp.call_count(steps) == 3


def _ref(rec: RunRecord) -> Any:
    from hpkctl.provider import PodRef

    return PodRef(rec.uid, rec.namespace, rec.name)

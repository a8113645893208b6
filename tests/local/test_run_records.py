"""Run records, namespaces, ``render --out``, signals and exit statuses, without Slurm (faked where needed).

The same behaviours are shown end to end on the real Slurm in tests/integration/test_run_lifecycle.py.
"""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import threading
from pathlib import Path

import pytest

from hpkctl.cli import main
from hpkctl.errors import HpkError, ManifestError
from hpkctl.jobs import JobInfo
from hpkctl.local.outdir import MARKER
from hpkctl.provider.runrecords import (SUBMITTING, RunExists, RunRecord, all_records, check_name, create_record, forget_run,
                                  load_record, record_path, save_record)
from hpkctl.local.runs import EXIT_CANNOT_INVOKE, EXIT_HPKCTL, EXIT_NO_CODE, EXIT_NOT_FOUND, exit_status
from hpkctl.provider.records import Records
from hpkctl.provider.runstatus import run_status
from hpkctl.local.signals import Interrupted, Interrupts
from hpkctl.local.submit import resolve_namespace, submit_pod
from hpkctl.provider.slurmjobs import never_starts
from hpkctl.pod.status import ContainerStatus, PodStatus
from hpkctl.sites.schema import SiteProfile

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]}}


@pytest.fixture
def profile(tmp_path: Path) -> SiteProfile:
    return SiteProfile.model_validate({"name": "t", "slurm": {"bin_dir": "/fake/bin", "use_sacct": "no"},
                                       "pods": {"state_dir": str(tmp_path / "state")}})


def rec(name: str = "p", namespace: str = "default", **kw: object) -> RunRecord:
    fields: dict[str, object] = {"uid": "u-1", "job_id": "42", "pod_dir": "/nonexistent/pod", "site": "t",
                                 "submitted": 0.0}
    fields.update(kw)
    return RunRecord(name=name, namespace=namespace, **fields)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- records


def test_record_is_created_exclusively_and_privately(profile: SiteProfile, tmp_path: Path) -> None:
    create_record(profile, rec())
    with pytest.raises(RunExists) as err:
        create_record(profile, rec(uid="u-2"))
    assert str(err.value).startswith("pod 'p' already exists in namespace default; delete it first")
    assert "--replace" in err.value.hint
    assert load_record(profile, "p").uid == "u-1"  # the first one stays
    state = tmp_path / "state"
    for d in (state, state / "runs", state / "runs" / "default", state / "pods"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    path = record_path(profile, "default", "p")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    save_record(profile, rec(job_id="43"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and load_record(profile, "p").job_id == "43"
    assert [p.name for p in path.parent.iterdir()] == ["p.json"]  # no temp files left


def test_an_existing_state_dir_is_made_private(profile: SiteProfile, tmp_path: Path) -> None:
    (tmp_path / "state" / "runs").mkdir(parents=True, mode=0o755)
    (tmp_path / "state").chmod(0o755)
    create_record(profile, rec())
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / "runs").stat().st_mode) == 0o700


def test_concurrent_creates_of_one_name_give_exactly_one_record(profile: SiteProfile) -> None:
    results: list[str] = []
    barrier = threading.Barrier(8)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            create_record(profile, rec(uid=f"u-{i}"))
            results.append("created")
        except RunExists:
            results.append("exists")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["created"] + ["exists"] * 7


@pytest.mark.parametrize(("name", "namespace"), [("../x", "default"), ("p", "../etc"), ("P", "default"),
                                                 ("p", "a/b"), ("", "default"), ("p/../../q", "default")])
def test_names_that_are_not_kubernetes_names_never_become_paths(profile: SiteProfile, name: str,
                                                                namespace: str) -> None:
    with pytest.raises(HpkError, match="invalid"):
        record_path(profile, namespace, name)


def test_records_by_namespace(profile: SiteProfile) -> None:
    create_record(profile, rec("a", "default"))
    create_record(profile, rec("a", "team"))
    create_record(profile, rec("b", "team"))
    assert [(r.namespace, r.name) for r in all_records(profile)] == [("default", "a"), ("team", "a"), ("team", "b")]
    assert [r.name for r in all_records(profile, "team")] == ["a", "b"]
    with pytest.raises(HpkError) as err:
        load_record(profile, "b")
    assert "not found in namespace default" in str(err.value) and "-n team" in err.value.hint


def test_forget_run_leaves_a_directory_outside_the_state_dir_alone(profile: SiteProfile, tmp_path: Path) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "f").write_text("x")
    r = rec(pod_dir=str(outside))
    create_record(profile, r)
    forget_run(profile, r)
    assert (outside / "f").exists() and not record_path(profile, "default", "p").exists()


# ---------------------------------------------------------------------------- namespaces


def test_namespace_from_manifest_option_or_default() -> None:
    assert resolve_namespace({"metadata": {}}, None, source="m") == "default"
    assert resolve_namespace({"metadata": {}}, "team", source="m") == "team"
    assert resolve_namespace({"metadata": {"namespace": "team"}}, None, source="m") == "team"
    assert resolve_namespace({"metadata": {"namespace": "team"}}, "team", source="m") == "team"
    with pytest.raises(ManifestError) as err:
        resolve_namespace({"metadata": {"namespace": "team"}}, "other", source="m")
    assert "does not match the namespace 'other'" in str(err.value) and "--namespace=team" in err.value.hint


def test_run_of_an_existing_name_is_refused_and_submits_nothing(fp, profile: SiteProfile,  # type: ignore[no-untyped-def]
                                                                 tmp_path: Path) -> None:
    fp.register(["/fake/bin/sbatch", fp.any()], stdout="101\n", occurrences=2)
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    r, _ = submit_pod(profile, str(manifest), out=io.StringIO())
    assert r.job_id == "101" and r.state == "submitted"
    with pytest.raises(RunExists, match="already exists in namespace default; delete it first"):
        submit_pod(profile, str(manifest), out=io.StringIO())
    assert fp.call_count(["/fake/bin/sbatch", fp.any()]) == 1  # the refused run never reached sbatch
    r2, _ = submit_pod(profile, str(manifest), namespace="team", out=io.StringIO())  # another namespace: fine
    assert r2.namespace == "team"


def test_a_record_deleted_during_submission_cancels_the_job(fp, profile: SiteProfile,  # type: ignore[no-untyped-def]
                                                           tmp_path: Path) -> None:
    def sbatch(process) -> None:  # type: ignore[no-untyped-def]
        record_path(profile, "default", "p").unlink()  # 'hpkctl delete' won the race
    fp.register(["/fake/bin/sbatch", fp.any()], stdout="77\n", callback=sbatch)
    fp.register(["/fake/bin/scancel", "77"])
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    with pytest.raises(HpkError, match="deleted while it was being submitted"):
        submit_pod(profile, str(manifest), out=io.StringIO())
    assert fp.call_count(["/fake/bin/scancel", "77"]) == 1


# ---------------------------------------------------------------------------- status of odd runs


def test_vanished_pod_directory_is_a_status_with_a_reason() -> None:
    job = JobInfo(job_id="42", state="RUNNING", nodes="n1")
    st = run_status(rec(), job)
    assert (st.phase, st.reason) == ("Unknown", "PodDirectoryMissing")
    assert "/nonexistent/pod" in st.message and "RUNNING" in st.message and "hpkctl delete p" in st.message


def test_a_record_stuck_in_submitting_is_a_status_with_a_reason() -> None:
    st = run_status(rec(job_id="", state=SUBMITTING, pid=os.getpid()), None)
    assert (st.phase, st.reason) == ("Pending", "Submitting")
    st = run_status(rec(job_id="", state=SUBMITTING, pid=2**22 + 12345), None)
    assert (st.phase, st.reason) == ("Unknown", "SubmissionUnknown") and "u-1" in st.message


@pytest.mark.parametrize(("reason", "never"), [
    ("PartitionConfig", True), ("PartitionNodeLimit", True), ("PartitionTimeLimit", True),
    ("BadConstraints", True), ("ReqNodeNotAvail, UnavailableNodes:", True),
    ("ReqNodeNotAvail, UnavailableNodes:n1", False), ("Resources", False), ("Priority", False), ("", False)])
def test_pending_reasons_that_never_clear(reason: str, never: bool) -> None:
    assert never_starts(JobInfo(job_id="1", state="PENDING", reason=reason)) is never
    assert not never_starts(JobInfo(job_id="1", state="RUNNING", reason=reason))


# ---------------------------------------------------------------------------- exit statuses


def status(phase: str, reason: str, code: int | None, containers: list[ContainerStatus] | None = None) -> PodStatus:
    return PodStatus(phase, reason, "", code, None, None, None, containers or [])


def test_exit_status_of_run(tmp_path: Path) -> None:
    r = rec(pod_dir=str(tmp_path))
    assert exit_status(r, status("Succeeded", "Completed", 0)) == 0
    assert exit_status(r, status("Failed", "Error", 3)) == 3
    assert exit_status(r, status("Failed", "ErrImagePull", 1)) == EXIT_HPKCTL
    assert exit_status(r, status("Failed", "HostPathCheckFailed", None)) == EXIT_HPKCTL
    assert exit_status(r, status("Failed", "Cancelled", None)) == EXIT_NO_CODE
    (tmp_path / "logs").mkdir()
    dead = [ContainerStatus(name="c", init=False, state="terminated", exit_code=255)]
    (tmp_path / "logs" / "c.log").write_text('FATAL:   "nope": executable file not found in $PATH\n')
    assert exit_status(r, status("Failed", "Error", 255, dead)) == EXIT_NOT_FOUND
    (tmp_path / "logs" / "c.log").write_text("FATAL:   exec /x failed: permission denied\n")
    assert exit_status(r, status("Failed", "Error", 255, dead)) == EXIT_CANNOT_INVOKE
    (tmp_path / "logs" / "c.log").write_text("the program said FATAL: executable file not found\nand went on\n")
    assert exit_status(r, status("Failed", "Error", 255, dead)) == 255


def test_usage_errors_exit_125(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        main(["run"])
    assert exc.value.code == 125
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 125
    with pytest.raises(SystemExit) as exc:
        main(["status", "--help"])
    assert exc.value.code == 0
    assert "--all-namespaces" in capsys.readouterr().out


# ---------------------------------------------------------------------------- signals


def test_first_signal_raises_later_ones_are_only_counted() -> None:
    interrupts = Interrupts().install()
    try:
        with pytest.raises(Interrupted) as exc:
            os.kill(os.getpid(), signal.SIGTERM)
        assert exc.value.signum == signal.SIGTERM and exc.value.exit_status == 143
        os.kill(os.getpid(), signal.SIGTERM)  # the second one (timeout's to the group): no exception
        os.kill(os.getpid(), signal.SIGHUP)
        assert interrupts.received == [signal.SIGTERM, signal.SIGTERM, signal.SIGHUP]
    finally:
        interrupts.restore()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_signals_in_a_deferred_block_are_raised_when_it_ends() -> None:
    interrupts = Interrupts().install()
    done = []
    try:
        with pytest.raises(Interrupted) as exc:
            with interrupts.deferred():
                os.kill(os.getpid(), signal.SIGHUP)
                os.kill(os.getpid(), signal.SIGINT)
                done.append("the block finished")
        assert done == ["the block finished"] and exc.value.signum == signal.SIGHUP
        assert exc.value.exit_status == 129
    finally:
        interrupts.restore()


# ---------------------------------------------------------------------------- render --out


def test_render_out_refuses_a_directory_it_did_not_write(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    (home / "status").mkdir()
    (home / "status" / "notes").write_text("mine")
    assert main(["render", "-f", str(manifest), "--site", "ci", "--out", str(home)]) == 125
    assert "not empty" in capsys.readouterr().err
    assert (home / "thesis.tex").read_text() == "years of work" and (home / "status" / "notes").exists()
    assert sorted(p.name for p in home.iterdir()) == ["status", "thesis.tex"]


def test_render_out_rewrites_its_own_pod_directory_but_not_a_job_s_traces(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    out = tmp_path / "out"
    assert main(["render", "-f", str(manifest), "--site", "ci", "--out", str(out)]) == 0
    marker = json.loads((out / MARKER).read_text())
    assert "job/job.sh" in marker["files"] and (out / "job" / "pod.json").is_file()
    assert main(["render", "-f", str(manifest), "--site", "ci", "--out", str(out)]) == 0  # again: fine
    (out / "logs" / "c.log").write_text("output of a job that ran here\n")
    assert main(["render", "-f", str(manifest), "--site", "ci", "--out", str(out)]) == 125
    assert "a job has run in this pod directory (logs/c.log)" in capsys.readouterr().err
    assert (out / "logs" / "c.log").exists()


def test_a_record_stuck_in_submitting_adopts_its_job_and_unrecorded_jobs_are_found(  # type: ignore[no-untyped-def]
        fp, profile: SiteProfile) -> None:
    from hpkctl.jobs import Slurm
    from hpkctl.provider.runstatus import unrecorded_jobs

    stuck = rec(job_id="", state=SUBMITTING, pid=2**22 + 12345, uid="u-stuck")
    create_record(profile, stuck)
    fp.register(["/fake/bin/squeue", "--noheader", "--me", fp.any()],
                stdout="51|RUNNING|hpk-uid=u-stuck hpk-pod=default/p\n"
                       "52|PENDING|hpk-uid=u-lost hpk-pod=team/lost my own words\n"
                       "53|COMPLETED|hpk-uid=u-old hpk-pod=team/old\n"
                       "54|RUNNING|not a pod of hpkctl\n"
                       "55|RUNNING|hpk-uid=u-kubelet hpk-pod=default/web-7d9f-x2b4q\n")
    kubelet = Records(Path(profile.pods.state_dir).expanduser() / "kubelet" / "hpk")
    kubelet.save(rec(uid="u-kubelet", name="web-7d9f-x2b4q"))  # a pod of the cluster's kubelet: not a lost run
    found = unrecorded_jobs(profile, Slurm(profile.slurm), all_records(profile))
    assert [(o.job.job_id, o.namespace, o.name, o.uid) for o in found] == [("52", "team", "lost", "u-lost")]
    assert found[0].status().reason == "RecordMissing"
    adopted = load_record(profile, "p")
    assert (adopted.job_id, adopted.state) == ("51", "submitted")


@pytest.mark.parametrize(("script", "timeout", "error"), [
    ("sleep 10", 0.5, "SlurmTimeout"),  # a slurmctld that does not answer: sbatch killed after its timeout
    ("exit 137", 30.0, "SubmitUnclear"),  # sbatch (its wrapper: 128 + 9) killed by a signal: its answer cut off
])
def test_an_sbatch_without_an_answer_keeps_the_record_for_status_and_delete(tmp_path: Path, script: str,
                                                                            timeout: float, error: str) -> None:
    """An sbatch that gave no answer may still have created the job: the run stays visible (its record and
    pod directory), instead of being removed under a job that may start."""
    import hpkctl.jobs

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "sbatch").chmod(0o755)
    profile = SiteProfile.model_validate({"name": "t", "slurm": {"bin_dir": str(bin_dir), "use_sacct": "no",
                                                                 "command_timeout": timeout},
                                          "pods": {"state_dir": str(tmp_path / "state")}})
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    with pytest.raises(getattr(hpkctl.jobs, error)) as err:
        submit_pod(profile, str(manifest), out=io.StringIO())
    assert "hpkctl status p -n default --site t" in err.value.hint
    kept = load_record(profile, "p")
    assert (kept.state, kept.job_id) == (SUBMITTING, "") and Path(kept.pod_dir, "job", "job.sh").is_file()


@pytest.mark.parametrize("command", [["status"], ["status", "p"], ["logs", "p"], ["delete", "p"]])
def test_a_namespace_that_is_a_path_is_refused(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 20.18: ``-n ../..`` names a directory of runs; it is refused before any path is built."""
    with pytest.raises(SystemExit) as e:
        main([*command, "-n", "../..", "--site", "ci"])
    assert e.value.code == 125
    assert "invalid namespace '../..': must be a DNS-1123 label" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "namespace"), [("p", "ns\n"), ("p\n", "default"), ("p", "\nns")])
def test_a_name_or_namespace_with_a_line_break_is_refused(name: str, namespace: str) -> None:
    """A name becomes a file name and a script word: ``$`` in a regex also matches before a final
    line break, so the rules are matched whole (found in review: ``-n $'ns\\n'`` reached the paths)."""
    with pytest.raises(HpkError, match="invalid (namespace|pod name)"):
        check_name(name, namespace=namespace)

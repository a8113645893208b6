"""Parsers against captured real Slurm 22.05 output (tests/jobs/fixtures, see its README)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hpkctl.jobs.info import JobInfo, base_state, is_job_id, parse_exit_code, parse_nodes, parse_reason, parse_time
from hpkctl.jobs.jobcomp import find_many_in_jobcomp
from hpkctl.jobs.parse import parse_jobcomp_line, parse_sacct, parse_sacct_comments, parse_scontrol, parse_squeue

FIXTURES = Path(__file__).parent / "fixtures"
USER = "hpk(1001)"  # the fixtures' user


def find_in_jobcomp(path: Path, job_id: str, **kw: int) -> JobInfo | None:
    """One id looked up on its own (the single-job case of ``final``)."""
    return find_many_in_jobcomp(path, [job_id], user=USER, **kw).get(job_id)


# ---------------------------------------------------------------------------- squeue


def test_squeue_every_state_of_the_hpk_cluster(fixture_text) -> None:
    jobs = parse_squeue(fixture_text("squeue_hpk.txt"))
    assert {j: i.state for j, i in jobs.items()} == {
        "7": "CANCELLED",
        "15": "CANCELLED",
        "19": "CANCELLED",
        "18": "CANCELLED",
        "1": "COMPLETED",
        "4": "COMPLETED",
        "5": "COMPLETED",
        "8": "COMPLETED",
        "12": "COMPLETED",
        "2": "FAILED",
        "3": "FAILED",
        "6": "FAILED",
        "13": "FAILED",
        "14": "FAILED",
        "17": "OUT_OF_MEMORY",
        "21": "PENDING",
        "20": "RUNNING",
        "16": "TIMEOUT",
    }
    assert all(i.source == "squeue" and i.exit_code is None and i.signal is None for i in jobs.values())


def test_squeue_pending_running_fields(fixture_text) -> None:
    jobs = parse_squeue(fixture_text("squeue_hpk.txt"))
    held, running = jobs["21"], jobs["20"]
    assert (held.reason, held.nodes, held.start_time, held.end_time) == ("JobHeldUser", "", None, None)
    assert running.reason == ""  # squeue prints "None"
    assert running.nodes == "vm"
    assert running.start_time is not None and running.start_time.tzinfo is not None
    assert running.end_time is None  # "NONE": no time limit
    assert jobs["17"].reason == "OutOfMemory"
    assert jobs["16"].reason == "TimeLimit"


def test_squeue_long_reason_and_expected_start(fixture_text) -> None:
    jobs = parse_squeue(fixture_text("squeue_cap.txt"))
    assert jobs["9"].reason == (
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    )
    assert jobs["8"].reason == "Resources"
    assert jobs["8"].start_time is not None  # pending: Slurm's expected start
    assert jobs["8"].end_time is None


def test_squeue_skips_garbage_lines() -> None:
    text = "\nnot a squeue line\n12|RUNNING|vm|N/A|N/A|None\n|||||\n"
    assert list(parse_squeue(text)) == ["12"]


# ---------------------------------------------------------------------------- scontrol


@pytest.mark.parametrize(
    ("name", "job_id", "state", "reason", "exit_code", "signal"),
    [
        ("completed", "12", "COMPLETED", "", 0, 0),
        ("failed_exit3", "13", "FAILED", "NonZeroExitCode", 3, 0),
        ("failed_sigkill", "14", "FAILED", "JobLaunchFailure", 0, 9),
        ("cancelled", "15", "CANCELLED", "", 0, 15),
        ("cancelled_pending", "19", "CANCELLED", "DependencyNeverSatisfied", 0, 0),
        ("timeout", "16", "TIMEOUT", "TimeLimit", 0, 15),  # SIGTERM at the limit
        ("out_of_memory", "17", "OUT_OF_MEMORY", "OutOfMemory", 0, 125),
        ("running", "20", "RUNNING", "", 0, 0),
        ("pending_held", "21", "PENDING", "JobHeldUser", 0, 0),
    ],
)
def test_scontrol_fixtures(fixture_text, name, job_id, state, reason, exit_code, signal) -> None:
    info = parse_scontrol(fixture_text(f"scontrol_{name}.txt"), job_id)
    assert info is not None
    assert (info.state, info.reason, info.exit_code, info.signal, info.source) == (
        state,
        reason,
        exit_code,
        signal,
        "scontrol",
    )


def test_scontrol_times_and_nodes(fixture_text) -> None:
    done = parse_scontrol(fixture_text("scontrol_completed.txt"), "12")
    assert done is not None and done.nodes == "vm"
    assert done.start_time == datetime(2026, 11, 22, 7, 33, 40).astimezone()
    held = parse_scontrol(fixture_text("scontrol_pending_held.txt"), "21")
    assert held is not None and (held.nodes, held.start_time, held.end_time) == ("", None, None)


def test_scontrol_other_job_id_is_not_taken(fixture_text) -> None:
    assert parse_scontrol(fixture_text("scontrol_completed.txt"), "1") is None
    assert parse_scontrol("", "12") is None


def test_scontrol_does_not_confuse_derived_exit_code() -> None:
    line = "JobId=5 JobName=x JobState=FAILED Reason=NonZeroExitCode DerivedExitCode=9:0 ExitCode=4:0 NodeList=n1"
    info = parse_scontrol(line, "5")
    assert info is not None and info.exit_code == 4


# ---------------------------------------------------------------------------- sacct


def test_sacct_fixture(fixture_text) -> None:
    text = fixture_text("sacct_cap.txt")
    failed = parse_sacct(text, "5")
    assert failed is not None and (failed.state, failed.exit_code, failed.signal, failed.nodes) == ("FAILED", 7, 0, "c1")
    never_ran = parse_sacct(text, "1")
    assert never_ran is not None and (never_ran.state, never_ran.nodes) == ("FAILED", "")
    pending = parse_sacct(text, "8")
    assert pending is not None and (pending.state, pending.start_time, pending.end_time) == ("PENDING", None, None)
    assert parse_sacct(text, "99") is None


def test_sacct_cancelled_by_uid(fixture_text) -> None:
    text = fixture_text("sacct_cancelled_by.txt")
    running = parse_sacct(text, "7")
    assert running is not None and running.state == "CANCELLED" and running.source == "sacct"
    pending = parse_sacct(text, "10")
    assert pending is not None and pending.start_time is None and pending.end_time is not None


# ---------------------------------------------------------------------------- jobcomp


def test_sacct_comments_give_each_array_element_that_never_ran_its_own_line() -> None:
    """sacct (22.05, seen on the local Slurm) prints elements cancelled while pending as one line, ``A_[0-2]``:
    a restarted kubelet looking for a batched pod by uid must find its element there (review of stop 32)."""
    text = ("2979_[0-2,5]|CANCELLED by 1001|hpk-uids=u0,u1,u2,u3,u4,u5\n"
            "2979_3|COMPLETED|hpk-uids=u0,u1,u2,u3,u4,u5\n"
            "2980|RUNNING|hpk-uid=x hpk-pod=default/x\n"
            "2981_[1-2%1]|CANCELLED|hpk-uid=w hpk-pod=default/job\n"  # a workload's throttled array
            "2982_[x]|PENDING|not an element list\n")
    got = [(j.job_id, j.state) for j in parse_sacct_comments(text)]
    assert got == [("2979_0", "CANCELLED"), ("2979_1", "CANCELLED"), ("2979_2", "CANCELLED"), ("2979_5", "CANCELLED"),
                   ("2979_3", "COMPLETED"), ("2980", "RUNNING"), ("2981_1", "CANCELLED"), ("2981_2", "CANCELLED")]


def test_jobcomp_every_real_line_parses(fixture_text) -> None:
    lines = [ln for ln in fixture_text("jobcomp.log").splitlines() if ln]
    infos = [parse_jobcomp_line(ln) for ln in lines]
    assert all(i is not None for i in infos)
    by_id = {i.job_id: i for i in infos if i}
    assert (by_id["13"].state, by_id["13"].exit_code) == ("FAILED", 3)
    assert (by_id["14"].state, by_id["14"].signal) == ("FAILED", 9)
    assert (by_id["16"].state, by_id["17"].state, by_id["17"].signal) == ("TIMEOUT", "OUT_OF_MEMORY", 125)
    assert (by_id["15"].state, by_id["15"].nodes) == ("CANCELLED", "vm")
    assert (by_id["19"].nodes, by_id["19"].source) == ("", "jobcomp")  # cancelled while pending: (null)


def test_jobcomp_free_text_fields() -> None:
    # Synthetic: a job name and a work dir with spaces and look-alike fields.
    line = (
        "JobId=77 UserId=u(1) GroupId=g(1) Name=my job ExitCode=1:0 JobState=FAILED Partition=p "
        "TimeLimit=5 StartTime=2026-01-01T00:00:00 EndTime=2026-01-01T00:01:00 NodeList=n[1-2] NodeCnt=2 "
        "ProcCnt=2 WorkDir=/tmp/a b ExitCode=9:9 ReservationName= Tres=cpu=2 Account= QOS= WcKey= "
        "Cluster=c SubmitTime=2026-01-01T00:00:00 EligibleTime=2026-01-01T00:00:00 DerivedExitCode=0:0 ExitCode=2:0 "
    )
    info = parse_jobcomp_line(line)
    assert info is not None
    assert (info.job_id, info.state, info.exit_code, info.signal, info.nodes) == ("77", "FAILED", 2, 0, "n[1-2]")


def test_jobcomp_cut_line_is_skipped() -> None:
    assert parse_jobcomp_line("JobId=5 UserId=u(1) GroupId=g(1) Name=x JobState=COMPLE") is None


@pytest.mark.parametrize("block", [37, 200, 511, 4096, 1 << 16])
def test_find_in_jobcomp_matches_a_full_scan(block: int) -> None:
    path = FIXTURES / "jobcomp.log"
    expected = {}
    for ln in path.read_text().splitlines():
        info = parse_jobcomp_line(ln)
        if info:
            expected[info.job_id] = info  # later lines win
    for job_id, info in expected.items():
        assert find_in_jobcomp(path, job_id, block=block) == info
    assert find_in_jobcomp(path, "4242", block=block) is None


def test_find_in_jobcomp_newest_line_wins(tmp_path: Path, fixture_text) -> None:
    real = fixture_text("jobcomp.log")
    old_12 = next(ln for ln in real.splitlines() if ln.startswith("JobId=12 "))
    reused = old_12.replace("JobState=COMPLETED", "JobState=FAILED").replace(" ExitCode=0:0 ", " ExitCode=1:0 ")
    f = tmp_path / "jobcomp.log"
    f.write_text(real + reused + "\n" + "JobId=12 UserId=half-written")
    info = find_in_jobcomp(f, "12", block=100)
    assert info is not None and (info.state, info.exit_code) == ("FAILED", 1)


def test_find_in_jobcomp_limits(tmp_path: Path, fixture_text) -> None:
    assert find_in_jobcomp(tmp_path / "missing.log", "1") is None
    f = tmp_path / "jobcomp.log"
    f.write_text(fixture_text("jobcomp.log"))
    first_id = f.read_text().split()[0].split("=")[1]
    assert find_in_jobcomp(f, first_id) is not None
    assert find_in_jobcomp(f, first_id, max_bytes=1000) is None  # only the tail is read
    unreadable = tmp_path / "x"
    unreadable.mkdir()
    assert find_in_jobcomp(unreadable, "1") is None


# ---------------------------------------------------------------------------- values


def test_parse_time_is_local_and_aware(monkeypatch: pytest.MonkeyPatch) -> None:
    if not Path("/usr/share/zoneinfo/Europe/Berlin").exists():
        pytest.skip("no tzdata")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        t = parse_time("2026-11-22T07:33:40")
        assert t is not None and t.utcoffset() == timedelta(hours=1)
        assert t.astimezone(timezone.utc) == datetime(2026, 11, 22, 6, 33, 40, tzinfo=timezone.utc)
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize("value", ["N/A", "NONE", "None", "Unknown", "unknown", "", "(null)", "0", "garbage"])
def test_parse_time_not_a_time(value: str) -> None:
    assert parse_time(value) is None


def test_small_value_helpers() -> None:
    assert base_state("CANCELLED by 1001") == "CANCELLED"
    assert base_state("COMPLETED+") == "COMPLETED"
    assert base_state("") == ""
    assert parse_exit_code("3:0") == (3, 0)
    assert parse_exit_code("0:9") == (0, 9)
    assert parse_exit_code("x") == (None, None)
    assert parse_reason("None") == "" and parse_reason("Resources") == "Resources"
    assert parse_nodes("None assigned") == "" and parse_nodes("(null)") == "" and parse_nodes("n[1-3]") == "n[1-3]"
    assert is_job_id("12") and is_job_id("12_3")
    assert not any(is_job_id(x) for x in ("", "12,13", "1234x", "-1", "12 "))


@pytest.mark.parametrize("block", [37, 4096])
def test_find_many_in_jobcomp_agrees_with_single_lookups(block: int) -> None:
    path = FIXTURES / "jobcomp.log"
    ids = [ln.split()[0][6:] for ln in path.read_text().splitlines() if ln.startswith("JobId=")]
    many = find_many_in_jobcomp(path, ids + ["4242"], user=USER, block=block)
    assert "4242" not in many
    assert many == {j: find_in_jobcomp(path, j) for j in set(ids)}


# ---------------------------------------------------------------------------- forged jobcomp lines (issue 20.4)


def _record(job_id: str, *, user: str = USER, name: str = "pod", state: str = "COMPLETED", exit: str = "0:0",
            workdir: str = "/tmp/w") -> str:
    return (f"JobId={job_id} UserId={user} GroupId={user} Name={name} JobState={state} Partition=debug "
            "TimeLimit=UNLIMITED StartTime=2026-01-01T00:00:00 EndTime=2026-01-01T00:01:00 NodeList=vm NodeCnt=1 "
            f"ProcCnt=1 WorkDir={workdir} ReservationName= Tres=cpu=1 Account= QOS= WcKey= Cluster=c "
            f"SubmitTime=2026-01-01T00:00:00 EligibleTime=2026-01-01T00:00:00 DerivedExitCode=0:0 ExitCode={exit} ")


def test_a_record_forged_through_a_job_name_with_a_line_break_is_not_believed(tmp_path: Path) -> None:
    """Another user's job name holds a line break and a record of our job 12 (OUT_OF_MEMORY): Slurm
    writes it after our real record. The forged line follows the cut fragment of her own record,
    so it is not taken; our own record is."""
    forged_name = "x\n" + _record("12", state="OUT_OF_MEMORY", exit="0:125").rsplit(" JobState=", 1)[0]
    f = tmp_path / "jobcomp.log"
    f.write_text(_record("11") + "\n" + _record("12") + "\n"
                 + _record("13", user="eve(1002)", name=forged_name) + "\n")
    info = find_many_in_jobcomp(f, ["12"], user=USER).get("12")
    assert info is not None and (info.state, info.exit_code) == ("COMPLETED", 0)


def test_only_our_users_records_count(tmp_path: Path) -> None:
    f = tmp_path / "jobcomp.log"
    f.write_text(_record("11") + "\n" + _record("12", user="eve(1002)", state="FAILED", exit="1:0") + "\n")
    assert find_many_in_jobcomp(f, ["12"], user=USER) == {}
    assert find_many_in_jobcomp(f, ["12"], user="eve(1002)")["12"].state == "FAILED"


@pytest.mark.parametrize("line", [
    _record("12") + "JobState=OUT_OF_MEMORY ",  # a field after ExitCode
    _record("12").replace(" Partition=debug", ""),  # a field missing
    _record("12").replace("UserId=hpk(1001)", "UserId=hpk"),  # no uid
    "garbage " + _record("12"),  # not at the start
])
def test_jobcomp_lines_are_read_field_exactly(line: str) -> None:
    assert parse_jobcomp_line(line) is None


def test_free_text_with_fields_of_its_own_still_parses() -> None:
    info = parse_jobcomp_line(_record("12", name="a JobState=FAILED b", workdir="/x ReservationName=y z"))
    assert info is not None and info.state == "COMPLETED"


def test_scontrol_names_an_array_element_by_its_array_and_index(fixture_text) -> None:
    """An element A_i shows its own JobId (here the array's, which element 1 kept) with ArrayJobId=A
    ArrayTaskId=i: asked as A_i (a batch of pods' element), that line answers, and no other index's."""
    text = fixture_text("scontrol_array_element_failed.txt")
    info = parse_scontrol(text, "134890_1")
    assert info is not None and (info.job_id, info.state, info.exit_code) == ("134890_1", "FAILED", 1)
    assert parse_scontrol(text, "134890_0") is None

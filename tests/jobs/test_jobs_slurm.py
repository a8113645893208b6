"""``Slurm`` with faked commands (pytest-subprocess) replaying captured real output.

Commands are registered with ``fp.program(...)`` because plumbum runs them by absolute path
(``/fake/slurm/bin/sbatch`` from the profile's bin_dir).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpkctl.jobs import (
    InvalidAccount,
    InvalidPartition,
    InvalidQos,
    ResourcesUnavailable,
    Slurm,
    SlurmError,
    SlurmUnavailable,
    SubmitError,
    SubmitUnclear,
    TimeLimitTooLong,
)
from hpkctl.jobs import slurm as slurm_module
from hpkctl.jobs.parse import SACCT_FORMAT, SQUEUE_FORMAT, USER_JOBS_FORMAT
from hpkctl.jobs.submit import SUBMIT_ERRORS
from hpkctl.jobs import final as final_module


@pytest.fixture(autouse=True)
def _fixture_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobcomp fixture's records are user hpk's; only the caller's own records count."""
    monkeypatch.setattr(final_module, "current_user", lambda: "hpk(1001)")

FIXTURES = Path(__file__).parent / "fixtures"


def errtext(name: str) -> str:
    return (FIXTURES / "errors" / name).read_text()


def cmd(fp, name: str):  # noqa: ANN001, ANN201 - pytest-subprocess matcher
    return [fp.program(name), fp.any()]


# ---------------------------------------------------------------------------- sbatch


def test_submit_returns_the_job_id(fp, section, tmp_path: Path) -> None:
    rec = fp.register(cmd(fp, "sbatch"), stdout="4242\n")
    script = tmp_path / "job.sh"
    job_id = Slurm(section()).submit(script, extra_args=["--partition=debug", "--time=5"], workdir=tmp_path)
    assert job_id == "4242"
    assert rec.calls[0].args == [
        "/fake/slurm/bin/sbatch",
        "--parsable",
        "--partition=debug",
        "--time=5",
        f"--chdir={tmp_path}",
        str(script),
    ]


def test_submit_drops_the_cluster_name(fp, section, tmp_path: Path) -> None:
    fp.register(cmd(fp, "sbatch"), stdout="77;hpk\n")
    assert Slurm(section()).submit(tmp_path / "job.sh") == "77"


def test_submit_script_path_is_made_absolute(fp, section, tmp_path: Path, monkeypatch) -> None:
    rec = fp.register(cmd(fp, "sbatch"), stdout="5\n")
    monkeypatch.chdir(tmp_path)
    Slurm(section()).submit(Path("job.sh"))
    assert rec.calls[0].args[-1] == str(tmp_path / "job.sh")


def test_submit_without_job_id_is_an_error(fp, section, tmp_path: Path) -> None:
    fp.register(cmd(fp, "sbatch"), stdout="Submitted to the wrapper queue\n")
    with pytest.raises(SlurmError, match="printed no job id"):
        Slurm(section()).submit(tmp_path / "job.sh")


@pytest.mark.parametrize(
    ("fixture", "cls", "reason", "slurm_text", "hint_names"),
    [
        (
            "sbatch_invalid_partition.txt",
            InvalidPartition,
            "InvalidPartition",
            "Invalid partition name specified",
            ["slurm.partition", "--partition in the job's sbatch options"],
        ),
        (
            "sbatch_invalid_account.txt",
            InvalidAccount,
            "InvalidAccount",
            "Invalid account or account/partition combination specified",
            ["slurm.account"],
        ),
        (
            "sbatch_no_association.txt",
            InvalidAccount,
            "InvalidAccount",
            "Invalid account or account/partition combination specified",
            ["slurm.account", "sacctmgr"],
        ),
        ("sbatch_invalid_qos.txt", InvalidQos, "InvalidQos", "Invalid qos specification", ["slurm.qos"]),
        (
            "sbatch_time_limit.txt",
            TimeLimitTooLong,
            "TimeLimitTooLong",
            "Requested time limit is invalid (missing or exceeds some limit)",
            ["--time in the job's sbatch options", "slurm.default_time", "slurm.max_time"],
        ),
        (
            "sbatch_memory.txt",
            ResourcesUnavailable,
            "ResourcesUnavailable",
            "Requested node configuration is not available",
            ["memory", "sbatch options", "slurm.partition"],
        ),
        (
            "sbatch_too_many_cpus.txt",
            ResourcesUnavailable,
            "ResourcesUnavailable",
            "More processors requested than permitted",
            ["CPUs", "sbatch options"],
        ),
        ("sbatch_no_script.txt", SubmitError, "SubmitFailed", "Unable to open file /nonexistent.sh", ["sbatch"]),
    ],
)
def test_submit_errors_are_typed(fp, section, tmp_path, fixture, cls, reason, slurm_text, hint_names) -> None:
    fp.register(cmd(fp, "sbatch"), stderr=errtext(fixture), returncode=1)
    with pytest.raises(cls) as exc:
        Slurm(section()).submit(tmp_path / "job.sh")
    err = exc.value
    assert type(err) is cls
    assert err.reason == reason
    assert slurm_text in err.message
    assert err.message.startswith("sbatch refused the job: ")
    assert "sbatch: error:" not in err.message
    for name in hint_names:
        assert name in err.hint
    assert err.returncode == 1 and err.stderr == errtext(fixture)
    assert "fix:" in str(err)


def test_submit_controller_down_is_unavailable_not_a_submit_error(fp, section, tmp_path) -> None:
    fp.register(cmd(fp, "sbatch"), stderr=errtext("sbatch_controller_down.txt"), returncode=1)
    with pytest.raises(SlurmUnavailable) as exc:
        Slurm(section()).submit(tmp_path / "job.sh")
    assert not isinstance(exc.value, SubmitError)
    assert "Unable to contact slurm controller (connect failure)" in exc.value.message
    assert "scontrol ping" in exc.value.hint


@pytest.mark.parametrize(("stderr", "returncode"), [
    ("sbatch: error: Batch job submission failed: Connection reset by peer\n", 1),  # slurmctld went mid-request
    ("sbatch: error: slurm_receive_msg: Broken pipe\n", 1),
    ("", -9),  # killed by a signal (the OOM killer): whether the job was made is unknown
    ("", 137),  # a site's wrapper whose sbatch was killed (a shell reports 128 + the signal)
])
def test_an_sbatch_without_a_clear_answer_is_unavailable_not_refused(fp, section, tmp_path, stderr, returncode) -> None:
    """Refused means Slurm made no job, so a caller may submit again; an answer cut off means it may have
    made one, and the caller must look for it instead (a job array's pods went again: review of stop 32)."""
    fp.register(cmd(fp, "sbatch"), stderr=stderr, returncode=returncode)
    with pytest.raises(SubmitUnclear) as exc:
        Slurm(section()).submit(tmp_path / "job.sh")
    assert isinstance(exc.value, SlurmUnavailable) and not isinstance(exc.value, SubmitError), exc.value
    assert "the job may exist" in exc.value.message


def test_a_controller_never_reached_made_no_job(fp, section, tmp_path) -> None:
    """Unable to contact the controller: no job can exist, so the caller need not look for one."""
    fp.register(cmd(fp, "sbatch"), stderr=errtext("sbatch_controller_down.txt"), returncode=1)
    with pytest.raises(SlurmUnavailable) as exc:
        Slurm(section()).submit(tmp_path / "job.sh")
    assert not isinstance(exc.value, SubmitUnclear)


def test_a_known_refusal_wins_over_connection_noise_beside_it(fp, section, tmp_path) -> None:
    text = ("sbatch: error: wrapper: Broken pipe\n"
            "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified\n")
    fp.register(cmd(fp, "sbatch"), stderr=text, returncode=1)
    with pytest.raises(InvalidAccount):
        Slurm(section()).submit(tmp_path / "job.sh")


def test_submit_policy_violation_keeps_a_specific_reason(fp, section, tmp_path) -> None:
    # Text from Slurm's slurm_errno.c (ESLURM_ACCOUNTING_POLICY).
    text = (
        "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
        "(job submit limit, user's size and/or time limits)\n"
    )
    fp.register(cmd(fp, "sbatch"), stderr=text, returncode=1)
    with pytest.raises(SubmitError) as exc:
        Slurm(section()).submit(tmp_path / "job.sh")
    assert exc.value.reason == "AccountingPolicy"


_POD_WORDS = re.compile(r"pod|annotation|manifest|container|activeDeadline|hpk\.io", re.I)


@pytest.mark.parametrize("fixture", ["sbatch_invalid_partition.txt", "sbatch_time_limit.txt", "sbatch_memory.txt",
                                     "sbatch_no_script.txt", "sbatch_invalid_account.txt"])
def test_submit_hints_know_jobs_only_and_callers_can_add_to_them(fp, section, tmp_path, fixture) -> None:
    fp.register(cmd(fp, "sbatch"), stderr=errtext(fixture), returncode=1)
    with pytest.raises(SubmitError) as exc:
        Slurm(section()).submit(tmp_path / "job.sh")
    assert not _POD_WORDS.search(exc.value.hint), exc.value.hint
    exc.value.hint += "; or change the pod's annotation"  # what hpkctl.local does with it
    assert str(exc.value).endswith("fix: " + exc.value.hint)


def test_submit_error_table_has_no_pod_words() -> None:
    for needle, cls, hint, _reason in SUBMIT_ERRORS:
        assert not _POD_WORDS.search(hint), (needle, cls, hint)
        assert needle == needle.lower()


# ---------------------------------------------------------------------------- squeue


def test_query_one_call_for_many_jobs(fp, section, fixture_text) -> None:
    rec = fp.register(cmd(fp, "squeue"), stdout=fixture_text("squeue_hpk.txt"))
    jobs = Slurm(section()).query(["20", "21", "12", "16", "4711"])
    assert sorted(jobs) == ["12", "16", "20", "21"]  # 4711 left squeue: absent, not an error
    assert (jobs["20"].state, jobs["21"].state, jobs["16"].state) == ("RUNNING", "PENDING", "TIMEOUT")
    assert rec.calls[0].args == [
        "/fake/slurm/bin/squeue",
        "--noheader",
        "--array",  # one line per array element, pending ones too
        "--all",
        "--states=all",
        "--jobs=20,21,12,16,4711",
        f"--format={SQUEUE_FORMAT}",
    ]
    assert SQUEUE_FORMAT == "%i|%T|%N|%S|%e|%r"


def test_query_chunks_long_lists(fp, section) -> None:
    rec = fp.register(cmd(fp, "squeue"), stdout="", occurrences=3)
    Slurm(section()).query([str(i) for i in range(1, 4801)] + ["5"])  # duplicates asked once
    lengths = [len(next(a for a in c.args if a.startswith("--jobs=")).removeprefix("--jobs=").split(","))
               for c in rec.calls]
    assert lengths == [2000, 2000, 800]


def test_query_nothing_known(fp, section) -> None:
    fp.register(cmd(fp, "squeue"), stderr=errtext("squeue_invalid_job_id.txt"), returncode=1)
    assert Slurm(section()).query(["99999"]) == {}


def test_query_empty_runs_nothing(fp, section) -> None:
    assert Slurm(section()).query([]) == {}
    assert len(fp.calls) == 0


def test_query_controller_down(fp, section) -> None:
    fp.register(cmd(fp, "squeue"), stderr=errtext("squeue_controller_down.txt"), returncode=1)
    with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller"):
        Slurm(section()).query(["1"])


def test_query_ignores_jobs_it_did_not_ask_for(fp, section) -> None:
    fp.register(cmd(fp, "squeue"), stdout="5|RUNNING|n1|N/A|N/A|None\n5_1|RUNNING|n1|N/A|N/A|None\n")
    assert list(Slurm(section()).query(["5"])) == ["5"]


@pytest.mark.parametrize("bad", ["1,2", "12x", "", "-1", "1 2"])
def test_job_ids_are_validated(section, bad) -> None:
    slurm = Slurm(section())
    with pytest.raises(ValueError, match="not a Slurm job id"):
        slurm.query([bad])
    with pytest.raises(ValueError):
        slurm.cancel(bad)
    with pytest.raises(ValueError):
        slurm.final(bad)


# ---------------------------------------------------------------------------- final


def test_final_from_scontrol_first(fp, section, fixture_text) -> None:
    rec = fp.register(cmd(fp, "scontrol"), stdout=fixture_text("scontrol_failed_exit3.txt"))
    info = Slurm(section(jobcomp_file=str(FIXTURES / "jobcomp.log"))).final("13")
    assert info is not None and (info.source, info.state, info.exit_code) == ("scontrol", "FAILED", 3)
    assert rec.calls[0].args == ["/fake/slurm/bin/scontrol", "--oneliner", "show", "job", "13"]
    assert fp.call_count([fp.program("sacct"), fp.any()]) == 0


def test_final_of_an_array_element_that_never_ran_is_unknown_not_an_error(fp, section, tmp_path) -> None:
    # an element cancelled while pending never gets a record: scontrol says so on stdout, exit 1
    fp.register(cmd(fp, "scontrol"), stdout=(FIXTURES / "scontrol_array_element_never_ran.txt").read_text(),
                returncode=1)
    fp.register(cmd(fp, "sacct"), stderr=errtext("sacct_disabled.txt"), returncode=1)
    (tmp_path / "jobcomp.log").write_text("")
    assert Slurm(section(jobcomp_file=str(tmp_path / "jobcomp.log"))).final("20_3") is None


def test_final_of_another_job_not_found_is_still_an_error(fp, section) -> None:
    fp.register(cmd(fp, "scontrol"), stdout="Job 20_3 not found\n", returncode=1)
    with pytest.raises(SlurmError):
        Slurm(section()).final("20_4")


def test_final_falls_back_to_jobcomp_and_remembers_no_accounting(fp, section) -> None:
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1, occurrences=2)
    sacct = fp.register(cmd(fp, "sacct"), stderr=errtext("sacct_disabled.txt"), returncode=1)
    slurm = Slurm(section(jobcomp_file=str(FIXTURES / "jobcomp.log")))
    assert slurm.accounting is None
    first = slurm.final("17")
    assert first is not None and (first.source, first.state, first.signal) == ("jobcomp", "OUT_OF_MEMORY", 125)
    assert slurm.accounting is False
    second = slurm.final("13")
    assert second is not None and second.exit_code == 3
    assert len(sacct.calls) == 1  # probed once
    assert sacct.calls[0].args[1:] == [
        "--noheader",
        "--parsable2",
        "--allocations",
        f"--format={SACCT_FORMAT}",
        "--jobs=17",
    ]


def test_final_from_sacct(fp, section, fixture_text) -> None:
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1)
    fp.register(cmd(fp, "sacct"), stdout=fixture_text("sacct_cancelled_by.txt"))
    slurm = Slurm(section())
    info = slurm.final("7")
    assert info is not None and (info.source, info.state) == ("sacct", "CANCELLED")
    assert slurm.accounting is True


def test_final_sacct_lagging_then_jobcomp(fp, section, fixture_text) -> None:
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1, occurrences=2)
    fp.register(cmd(fp, "sacct"), stdout=fixture_text("sacct_lagging.txt"), occurrences=2)
    lagging = Slurm(section()).final("7")
    assert lagging is not None and (lagging.source, lagging.state) == ("sacct", "RUNNING")
    # The jobcomp fixture holds a record of a job 7 (CANCELLED): a final record beats sacct's stale RUNNING.
    from_file = Slurm(section(jobcomp_file=str(FIXTURES / "jobcomp.log"))).final("7")
    assert from_file is not None and (from_file.source, from_file.state) == ("jobcomp", "CANCELLED")


def test_final_sacct_database_down_is_not_remembered(fp, section) -> None:
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1)
    fp.register(cmd(fp, "sacct"), stderr=errtext("sacct_dbd_down.txt"), returncode=1)
    slurm = Slurm(section(jobcomp_file=str(FIXTURES / "jobcomp.log")))
    info = slurm.final("12")
    assert info is not None and info.source == "jobcomp"
    assert slurm.accounting is None  # try sacct again next time


def test_final_use_sacct_no(fp, section) -> None:
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1)
    slurm = Slurm(section(use_sacct="no"))
    assert slurm.final("12") is None
    assert slurm.accounting is False
    assert fp.call_count([fp.program("sacct"), fp.any()]) == 0


def test_final_use_sacct_yes_requires_accounting(fp, section) -> None:
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1)
    fp.register(cmd(fp, "sacct"), stderr=errtext("sacct_disabled.txt"), returncode=1)
    with pytest.raises(SlurmUnavailable, match="Slurm accounting storage is disabled") as exc:
        Slurm(section(use_sacct="yes")).final("12")
    assert "slurm.use_sacct" in exc.value.hint


def test_final_nobody_knows(fp, section) -> None:
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1)
    fp.register(cmd(fp, "sacct"), stdout="")
    assert Slurm(section(jobcomp_file=str(FIXTURES / "jobcomp.log"))).final("4711") is None


def test_final_controller_down(fp, section) -> None:
    fp.register(cmd(fp, "scontrol"), stderr=errtext("squeue_controller_down.txt"), returncode=1)
    with pytest.raises(SlurmUnavailable):
        Slurm(section()).final("12")


def test_probe_accounting(fp, section, fixture_text) -> None:
    fp.register(cmd(fp, "sacct"), stdout="")
    slurm = Slurm(section())
    assert slurm.probe_accounting() is True
    assert slurm.probe_accounting() is True
    assert fp.call_count([fp.program("sacct"), fp.any()]) == 1


# ---------------------------------------------------------------------------- scancel


def test_cancel(fp, section) -> None:
    rec = fp.register(cmd(fp, "scancel"))
    Slurm(section()).cancel("12")
    assert rec.calls[0].args == ["/fake/slurm/bin/scancel", "12"]


def test_cancel_with_signal_reaches_the_batch_script(fp, section) -> None:
    rec = fp.register(cmd(fp, "scancel"))
    Slurm(section()).cancel("12", signal="USR1")
    assert rec.calls[0].args == ["/fake/slurm/bin/scancel", "--signal=USR1", "--full", "12"]


def test_cancel_with_a_signal_for_the_batch_shell_only(fp, section) -> None:
    rec = fp.register(cmd(fp, "scancel"))
    Slurm(section()).cancel("12", signal="TERM", batch_only=True)
    assert rec.calls[0].args == ["/fake/slurm/bin/scancel", "--signal=TERM", "--batch", "12"]
    with pytest.raises(ValueError, match="needs a signal"):
        Slurm(section()).cancel("12", batch_only=True)


def test_settings_are_scontrol_show_config(fp, section) -> None:
    text = ("Configuration data as of 2026-11-24T06:00:00\nAccountingStorageType   = (null)\n"
            "KillWait                = 30 sec\nProctrackType           = proctrack/cgroup\n"
            "SLURM_VERSION           = 22.05.8\n\nCgroup Support Configuration:\nAllowedRAMSpace = 100.0%\n")
    rec = fp.register(cmd(fp, "scontrol"), stdout=text)
    got = Slurm(section()).settings()
    assert rec.calls[0].args == ["/fake/slurm/bin/scontrol", "show", "config"]
    assert (got["ProctrackType"], got["KillWait"], got["SLURM_VERSION"]) == ("proctrack/cgroup", "30 sec", "22.05.8")
    assert "Configuration data as of 2026-11-24T06:00:00" not in got


def test_partition_limit_and_a_jobs_partition(fp, section) -> None:
    rec = fp.register(cmd(fp, "sinfo"), stdout="short|3:00\n")
    assert Slurm(section()).partition_limit("short") == 180
    assert rec.calls[0].args == ["/fake/slurm/bin/sinfo", "--noheader", "--format=%P|%l", "--partition=short"]
    fp.register(cmd(fp, "sinfo"), stdout="debug*|infinite\nlong|1-00:00:00\n")
    assert Slurm(section()).partition_limit("") is None  # the default partition has no limit
    fp.register(cmd(fp, "sinfo"), stdout="debug*|infinite\nlong|1-00:00:00\n")
    assert Slurm(section()).partition_limit("long") == 86400
    fp.register(cmd(fp, "sinfo"), stdout="")
    assert Slurm(section()).partition_limit("gone") is None
    rec = fp.register(cmd(fp, "squeue"), stdout="short\n")
    assert Slurm(section()).job_partition("42") == "short"
    assert rec.calls[0].args == ["/fake/slurm/bin/squeue", "--noheader", "--jobs=42", "--format=%P"]


def test_shorten_lowers_the_time_limit_in_whole_minutes(fp, section) -> None:
    rec = fp.register(cmd(fp, "scontrol"))
    Slurm(section()).shorten("12", 100)
    assert rec.calls[0].args == ["/fake/slurm/bin/scontrol", "update", "JobId=12", "TimeLimit=00:02:00"]
    fp.register(cmd(fp, "scontrol"), stderr="scontrol: error: Access/permission denied for job 12\n", returncode=1)
    with pytest.raises(SlurmError, match="permission denied"):
        Slurm(section()).shorten("12", 100)
    with pytest.raises(ValueError):
        Slurm(section()).shorten("12; true", 100)


@pytest.mark.parametrize("bad", ["USR1; rm -rf /", "-9", "", "term"])
def test_cancel_rejects_odd_signals(section, bad) -> None:
    with pytest.raises(ValueError, match="signal"):
        Slurm(section()).cancel("12", signal=bad)


def test_cancel_finished_job_is_fine(fp, section) -> None:
    fp.register(cmd(fp, "scancel"), stderr=errtext("scancel_signal_finished.txt"), returncode=1)
    Slurm(section()).cancel("21", signal="TERM")
    fp.register(
        cmd(fp, "scancel"),
        stderr="scancel: error: Kill job error on job id 5: Job/step already completing or completed\n",
        returncode=1,
    )
    Slurm(section()).cancel("5")


def test_cancel_someone_elses_job(fp, section) -> None:
    fp.register(cmd(fp, "scancel"), stderr=errtext("scancel_permission_denied.txt"), returncode=210)
    with pytest.raises(SlurmError, match="Access/permission denied") as exc:
        Slurm(section()).cancel("20")
    assert not isinstance(exc.value, SlurmUnavailable)
    assert "owner" in exc.value.hint


def test_cancel_controller_down(fp, section) -> None:
    fp.register(cmd(fp, "scancel"), stderr=errtext("scancel_controller_down.txt"), returncode=8)
    with pytest.raises(SlurmUnavailable):
        Slurm(section()).cancel("6")


# ---------------------------------------------------------------------------- wait_for


def squeue_line(job_id: str, state: str, reason: str = "None") -> str:
    return f"{job_id}|{state}|n1|2026-11-22T07:33:40|NONE|{reason}\n"


def test_wait_for_polls_with_backoff_and_resolves_exit_codes(fp, section, fixture_text) -> None:
    fp.register(cmd(fp, "squeue"), stdout=squeue_line("13", "PENDING", "Resources") + squeue_line("21", "PENDING"))
    fp.register(cmd(fp, "squeue"), stdout=squeue_line("13", "RUNNING") + squeue_line("21", "PENDING"))
    fp.register(cmd(fp, "squeue"), stdout=squeue_line("13", "FAILED") + squeue_line("21", "RUNNING"))
    fp.register(cmd(fp, "scontrol"), stdout=fixture_text("scontrol_failed_exit3.txt"))
    fp.register(cmd(fp, "squeue"), stdout="")  # 21 left squeue
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1)
    fp.register(cmd(fp, "sacct"), stderr=errtext("sacct_disabled.txt"), returncode=1)
    slept: list[float] = []
    result = Slurm(section()).wait_for(["13", "21"], backoff=(0.5, 1, 2), sleep=slept.append)
    assert slept == [0.5, 1, 2]
    assert result["13"] is not None and (result["13"].exit_code, result["13"].source) == (3, "scontrol")
    assert result["21"] is None  # vanished without a record


def test_wait_for_custom_condition(fp, section) -> None:
    fp.register(cmd(fp, "squeue"), stdout=squeue_line("5", "PENDING"))
    fp.register(cmd(fp, "squeue"), stdout=squeue_line("5", "RUNNING"))
    slept: list[float] = []
    snap = Slurm(section()).wait_for(
        ["5"], until=lambda s: s["5"] is not None and s["5"].state == "RUNNING", sleep=slept.append
    )
    assert snap["5"] is not None and snap["5"].state == "RUNNING"
    assert slept == [0.5]


def test_wait_for_goes_through_the_one_polling_helper(fp, section, monkeypatch) -> None:
    fp.register(cmd(fp, "squeue"), stdout=squeue_line("5", "RUNNING"))
    calls: list[dict[str, object]] = []
    real = slurm_module.poll

    def spy(step, **kw):  # noqa: ANN001, ANN003, ANN202
        calls.append(kw)
        return real(step, **kw)

    monkeypatch.setattr(slurm_module, "poll", spy)
    Slurm(section()).wait_for(["5"], until=lambda s: True, backoff=(1, 2), timeout=30)
    assert len(calls) == 1 and calls[0]["every"] == (1, 2) and calls[0]["timeout"] == 30


def test_wait_for_needs_a_backoff(section) -> None:
    with pytest.raises(ValueError, match="at least one interval"):
        Slurm(section()).wait_for(["5"], backoff=())


def test_wait_for_timeout(fp, section) -> None:
    fp.register(cmd(fp, "squeue"), stdout=squeue_line("5", "PENDING"), occurrences=10)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(TimeoutError, match="still running: 5"):
        Slurm(section()).wait_for(["5"], timeout=10, sleep=sleep, clock=lambda: now[0])
    assert now[0] >= 10


def test_wait_for_keeps_polling_a_job_sacct_reports_stale(fp, section, fixture_text) -> None:
    fp.register(cmd(fp, "squeue"), stdout="", occurrences=2)
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1, occurrences=2)
    fp.register(cmd(fp, "sacct"), stdout=fixture_text("sacct_lagging.txt"))
    fp.register(cmd(fp, "sacct"), stdout=fixture_text("sacct_cancelled_by.txt"))
    slept: list[float] = []
    result = Slurm(section()).wait_for(["7"], sleep=slept.append)
    assert result["7"] is not None and result["7"].state == "CANCELLED"
    assert slept == [0.5]


def test_finals_for_a_burst_reads_the_jobcomp_file_once_and_calls_no_slurm(fp, section) -> None:
    import re as _re

    ids = sorted({m for m in _re.findall(r"^JobId=(\d+) ", (FIXTURES / "jobcomp.log").read_text(), _re.M)})
    slurm = Slurm(section(jobcomp_file=str(FIXTURES / "jobcomp.log"), use_sacct="no"))
    got = slurm.finals(ids)
    assert set(got) == set(ids) and all(i is not None and i.source == "jobcomp" for i in got.values())
    assert len(fp.calls) == 0  # no Slurm command at all


def test_finals_asks_sacct_once_for_the_rest(fp, section, fixture_text) -> None:
    rec = fp.register(cmd(fp, "sacct"), stdout=fixture_text("sacct_cancelled_by.txt"), occurrences=2)
    fp.register(cmd(fp, "scontrol"), stderr=errtext("scontrol_invalid_job_id.txt"), returncode=1, occurrences=10)
    slurm = Slurm(section())
    got = slurm.finals(["7", "8", "9"])
    assert got["7"] is not None and got["7"].state == "CANCELLED"
    assert fp.call_count([fp.program("sacct"), fp.any()]) == 1  # one call for all three, probing included
    assert rec.calls[0].args[-1] == "--jobs=7,8,9"
    assert got["8"] is None and fp.call_count([fp.program("scontrol"), fp.any()]) == 2  # unknown: scontrol only


def test_user_jobs_one_call_with_comments(fp, section) -> None:
    out = ("12|RUNNING|hpk-uid=u1 hpk-pod=default/a my|own comment\n"
           "13|PENDING|(null)\n"
           "14_2|COMPLETED|hpk-uid=u2 hpk-pod=team/b\n"
           "a line break in a changed comment\n")
    rec = fp.register(cmd(fp, "squeue"), stdout=out)
    jobs = Slurm(section()).user_jobs()
    assert [(j.job_id, j.state, j.comment) for j in jobs] == [
        ("12", "RUNNING", "hpk-uid=u1 hpk-pod=default/a my|own comment"), ("13", "PENDING", ""),
        ("14_2", "COMPLETED", "hpk-uid=u2 hpk-pod=team/b")]
    assert rec.calls[0].args == ["/fake/slurm/bin/squeue", "--noheader", "--me", "--all", "--states=all", "--array",
                                 f"--format={USER_JOBS_FORMAT}"]


def test_user_jobs_failure_is_typed(fp, section) -> None:
    fp.register(cmd(fp, "squeue"), stderr="squeue: error: Unable to contact slurm controller (connect failure)\n",
                returncode=1)
    with pytest.raises(SlurmUnavailable):
        Slurm(section()).user_jobs()


def test_accounted_jobs_lists_this_users_jobs_with_comments_since_a_time(fp, section) -> None:
    """Issue 22.15: a job slurmctld forgot (MinJobAge) is found by its pod uid in sacct, where
    accounting runs; where it is off, no call is repeated and nothing is found."""
    rec = fp.register(cmd(fp, "sacct"), stdout="40|COMPLETED|hpk-uid=u1 hpk-pod=default/a\n"
                                                "41|FAILED|\n42|CANCELLED by 1001|hpk-uid=u2 hpk-pod=x/b my|words\n")
    jobs = Slurm(section()).accounted_jobs(since="2026-11-26T10:00:00")
    assert [(j.job_id, j.state, j.comment) for j in jobs] == [
        ("40", "COMPLETED", "hpk-uid=u1 hpk-pod=default/a"), ("41", "FAILED", ""),
        ("42", "CANCELLED", "hpk-uid=u2 hpk-pod=x/b my|words")]
    assert rec.calls[0].args[1:] == ["--noheader", "--parsable2", "--allocations", "--starttime=2026-11-26T10:00:00",
                                     "--format=JobID,State,Comment"]
    fp.register(cmd(fp, "sacct"), stderr=errtext("sacct_disabled.txt"), returncode=1)
    off = Slurm(section())
    assert off.accounted_jobs(since="2026-11-26T10:00:00") == [] and off.accounting is False
    assert off.accounted_jobs(since="2026-11-26T10:00:00") == []  # learned once: no second call
    assert fp.call_count([fp.program("sacct"), fp.any()]) == 2

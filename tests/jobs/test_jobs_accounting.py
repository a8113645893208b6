"""``Slurm.ask_accounting`` (hpkctl/jobs/accounting.py) with faked sacct replaying captured real output,
and ``hpkctl doctor``'s accounting check on it (hpkctl/controlplane/doctor.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpkctl.controlplane.doctor import INFO, OK, WARN, check_accounting
from hpkctl.jobs import Slurm
from hpkctl.jobs.parse import SACCT_COMMENT_FORMAT, USER_JOBS_FORMAT
from hpkctl.sites.schema import SiteProfile

FIXTURES = Path(__file__).parent / "fixtures"
NOW = 1_795_000_000.0  # 2026-11-18


def cmd(fp, name: str):  # noqa: ANN001, ANN201 - pytest-subprocess matcher
    return [fp.program(name), fp.any()]


def profile(**slurm: str) -> SiteProfile:
    return SiteProfile.model_validate({"name": "t", "slurm": {"bin_dir": "/fake/slurm/bin", **slurm}})


def test_ask_accounting_lists_the_users_jobs_with_their_comments(fp, section) -> None:
    rec = fp.register(cmd(fp, "sacct"), stdout=(FIXTURES / "sacct_comments_acct.txt").read_text())
    answer = Slurm(section(use_sacct="no")).ask_accounting(since="2026-11-20T00:00:00")  # asked all the same
    assert (answer.enabled, answer.error) == (True, "")
    assert [j.job_id for j in answer.jobs] == ["1", "2", "3", "4", "5", "6", "7"]
    assert answer.jobs[1].state == "CANCELLED"
    assert answer.jobs[1].comment.startswith("hpk-pilot kubelet=run state=")
    assert answer.jobs[2].comment.startswith("hpk-uid=930d2d44-")
    assert rec.calls[0].args[1:] == ["--noheader", "--parsable2", "--allocations", "--starttime=2026-11-20T00:00:00",
                                     f"--format={SACCT_COMMENT_FORMAT}"]


@pytest.mark.parametrize("stderr, enabled", [("sacct_disabled.txt", False), ("sacct_dbd_down.txt", True)])
def test_ask_accounting_says_why_sacct_gave_no_list(fp, section, stderr: str, enabled: bool) -> None:
    text = (FIXTURES / "errors" / stderr).read_text()
    fp.register(cmd(fp, "sacct"), stderr=text, returncode=1)
    answer = Slurm(section()).ask_accounting(since="2026-11-20T00:00:00")
    assert (answer.enabled, answer.jobs) == (enabled, ())
    assert answer.error and answer.error in text.replace("sacct: error: ", "").replace("\n", "; ")


def test_doctor_reports_working_accounting_and_stored_comments(fp) -> None:
    fp.register(cmd(fp, "sacct"), stdout=(FIXTURES / "sacct_comments_acct.txt").read_text())
    fp.register(cmd(fp, "scontrol"), stdout="AccountingStoreFlags    = job_comment\nProctrackType = proctrack/cgroup\n")
    p = profile(use_sacct="no")
    c = check_accounting(p, Slurm(p.slurm), now=NOW)
    assert c.result == OK, c
    assert c.detail.startswith("sacct answers: 7 of your jobs since 2026-11-11, the newest 7 (COMPLETED); "
                               "job comments are stored"), c.detail
    assert 'slurm.use_sacct = "no"' in c.detail


def test_doctor_reports_no_accounting_as_information(fp) -> None:
    fp.register(cmd(fp, "sacct"), stderr=(FIXTURES / "errors" / "sacct_disabled.txt").read_text(), returncode=1)
    p = profile()
    c = check_accounting(p, Slurm(p.slurm), now=NOW)
    assert c.result == INFO and "Slurm accounting storage is disabled" in c.detail, c
    assert "slurm.jobcomp_file is not set" in c.detail


def test_doctor_warns_when_slurmdbd_does_not_answer(fp) -> None:
    fp.register(cmd(fp, "sacct"), stderr=(FIXTURES / "errors" / "sacct_dbd_down.txt").read_text(), returncode=1)
    p = profile()
    c = check_accounting(p, Slurm(p.slurm), now=NOW)
    assert c.result == WARN and "Connection refused" in c.detail and "slurmdbd" in c.fix, c


def test_doctor_compares_an_empty_answer_with_what_slurmctld_knows(fp) -> None:
    fp.register(cmd(fp, "sacct"), stdout="", occurrences=2)
    squeue = fp.register(cmd(fp, "squeue"), stdout="41|PENDING|x\n40|COMPLETED|hpk-uid=u\n")
    p = profile()
    lagging = check_accounting(p, Slurm(p.slurm), now=NOW)
    assert lagging.result == INFO and "slurmctld knows job 40 (COMPLETED)" in lagging.detail, lagging
    assert f"--format={USER_JOBS_FORMAT}" in squeue.calls[0].args
    fp.register(cmd(fp, "squeue"), stdout="")
    idle = check_accounting(p, Slurm(p.slurm), now=NOW)
    assert idle.result == INFO and "you ran no job since 2026-11-11" in idle.detail, idle

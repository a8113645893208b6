"""Parsers for the text Slurm prints, one per source, all returning ``JobInfo``.

Only text formats are parsed: ``squeue --json`` on 22.05 ignores ``--jobs`` and its schema changed
in 23.11 and 24.05, so the explicit ``--format``/``--parsable2`` outputs are the stable interface.
Every parser tolerates lines it does not understand (they are skipped, never fatal): one odd line
must not stop the status of every other job. The fixtures in ``tests/jobs/fixtures`` are real
output of Slurm 22.05.
"""

from __future__ import annotations

import re

from hpkctl.jobs.info import (
    JobInfo,
    UserJob,
    base_state,
    is_job_id,
    parse_exit_code,
    parse_nodes,
    parse_reason,
    parse_time,
)

# squeue: job id, state (%T: long form), nodes, start, end, reason. Reason goes last: it is the only
# free-text field, so even if a future Slurm put a '|' in one, split(maxsplit=5) keeps it whole.
# No job name, work dir or comment: those are user text and could contain the separator.
SQUEUE_FORMAT = "%i|%T|%N|%S|%e|%r"
_SQUEUE_FIELDS = SQUEUE_FORMAT.count("|") + 1

# squeue of the user's own jobs: job id, state, comment. The comment is free text (it may hold '|'),
# so it goes last and split(maxsplit=2) keeps it whole.
USER_JOBS_FORMAT = "%i|%T|%k"

# sacct --parsable2: '|' separated, no trailing separator; NodeList last for the same reason.
SACCT_FORMAT = "JobID,State,ExitCode,Start,End,NodeList"
_SACCT_FIELDS = SACCT_FORMAT.count(",") + 1
# sacct of the user's jobs with their comments (free text: last, and split at most twice)
SACCT_COMMENT_FORMAT = "JobID,State,Comment"

# jobcomp/filetxt (src/plugins/jobcomp/filetxt/jobcomp_filetxt.c), one line per finished job:
#   JobId=12 UserId=hpk(1001) GroupId=... Name=<job name> JobState=COMPLETED Partition=debug
#   TimeLimit=UNLIMITED StartTime=... EndTime=... NodeList=vm NodeCnt=1 ProcCnt=1 WorkDir=<dir> ...
#   DerivedExitCode=0:0 ExitCode=0:0
# The file is world-readable and Name and WorkDir are free text, which another user may fill with a
# line break and a forged record of our job (issue 20.4). So a line is read field-exactly: every
# field Slurm writes, in Slurm's order, the user as ``name(uid)``, nothing before or after; only
# Name and WorkDir may hold spaces; fields a newer Slurm adds (ArrayJobId/ArrayTaskId, HetJob...)
# go between EligibleTime and DerivedExitCode, and ExitCode is last.
_JOBCOMP = re.compile(
    r"^JobId=(?P<id>\d+) UserId=(?P<user>[^\s()]+\(\d+\)) GroupId=[^\s()]+\(\d+\) Name=.*? "
    r"JobState=(?P<state>[A-Z_]+) Partition=\S* TimeLimit=\S* "
    r"StartTime=(?P<start>\S*) EndTime=(?P<end>\S*) NodeList=(?P<nodes>\S*) NodeCnt=\d+ ProcCnt=\d+ WorkDir=.*? "
    r"ReservationName=\S* Tres=\S* Account=\S* QOS=\S* WcKey=\S* Cluster=\S* SubmitTime=\S* EligibleTime=\S*"
    r"(?P<extra>(?: [A-Za-z]+=\S*)*?) DerivedExitCode=\d+:\d+ ExitCode=(?P<exit>\d+:\d+) ?$"
)
_JOBCOMP_ARRAY = re.compile(r"(?:^| )ArrayJobId=(\d+) ArrayTaskId=(\d+)(?: |$)")


def parse_squeue(text: str) -> dict[str, JobInfo]:
    """Parse ``squeue --noheader --format=SQUEUE_FORMAT`` output into ``{job_id: JobInfo}``."""
    jobs: dict[str, JobInfo] = {}
    for line in text.splitlines():
        parts = line.split("|", _SQUEUE_FIELDS - 1)
        if len(parts) != _SQUEUE_FIELDS or not parts[0].strip():
            continue
        job_id, state, nodes, start, end, reason = (p.strip() for p in parts)
        jobs[job_id] = JobInfo(
            job_id=job_id,
            state=base_state(state),
            reason=parse_reason(reason),
            nodes=parse_nodes(nodes),
            start_time=parse_time(start),
            end_time=parse_time(end),
            source="squeue",
        )
    return jobs


def parse_user_jobs(text: str) -> list[UserJob]:
    """Parse ``squeue --noheader --format=USER_JOBS_FORMAT`` output, in squeue's order. A line
    that does not start with a job id (a comment someone changed to hold a line break) is skipped."""
    jobs: list[UserJob] = []
    for line in text.splitlines():
        parts = line.split("|", 2)
        if len(parts) != 3 or not is_job_id(parts[0].strip()):
            continue
        comment = parts[2].rstrip()
        jobs.append(UserJob(job_id=parts[0].strip(), state=base_state(parts[1]),
                            comment="" if comment == "(null)" else comment))
    return jobs


def _field(line: str, key: str) -> str | None:
    """The first ``key=value`` of a ``scontrol -o`` line (value up to the next space)."""
    m = re.search(rf"(?:^|\s){re.escape(key)}=(\S*)", line)
    return m.group(1) if m else None


def parse_scontrol(text: str, job_id: str) -> JobInfo | None:
    """Parse ``scontrol show job -o ID``: one line per job (array jobs give several).

    Fields are taken at their first occurrence: the only free text before them is the job name,
    which hpkctl sets itself; ``Command=``/``WorkDir=`` come after every field read here.
    """
    array, _, index = job_id.partition("_")
    for line in text.splitlines():
        if _field(line, "JobId") != job_id and not (
                index and _field(line, "ArrayJobId") == array and _field(line, "ArrayTaskId") == index):
            continue  # an element A_i: scontrol prints its own JobId=N and ArrayJobId=A ArrayTaskId=i
        state = _field(line, "JobState")
        if not state:
            return None
        rc, sig = parse_exit_code(_field(line, "ExitCode") or "")
        return JobInfo(
            job_id=job_id,
            state=base_state(state),
            reason=parse_reason(_field(line, "Reason") or ""),
            exit_code=rc,
            signal=sig,
            nodes=parse_nodes(_field(line, "NodeList") or ""),
            start_time=parse_time(_field(line, "StartTime") or ""),
            end_time=parse_time(_field(line, "EndTime") or ""),
            source="scontrol",
        )
    return None


#: sacct's one line for array elements that never ran (cancelled while pending): ``A_[0-2,5]``, with
#: ``%N`` for a throttled one (a workload's array)
_SACCT_RANGE = re.compile(r"^(\d+)_\[([\d,\-]+)(?:%\d+)?\]$")


def parse_sacct_comments(text: str) -> list[UserJob]:
    """Parse ``sacct --noheader --parsable2 --format=SACCT_COMMENT_FORMAT``: the same lines as
    squeue's ``USER_JOBS_FORMAT`` (id, state, comment), so the same parser reads them. Elements of an
    array that never ran are one line there (``A_[0-2,5]``, no ``sacct --array`` in Slurm 22.05): each
    becomes its own ``A_i`` (a batch of pods names a pod per element: hpkctl.pod.flags.pod_of_job)."""
    lines = []
    for line in text.splitlines():
        first, sep, rest = line.partition("|")
        m = _SACCT_RANGE.match(first.strip())
        if not (m and sep):
            lines.append(line)
            continue
        for part in m.group(2).split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit() and (not hi or hi.isdigit()) and int(hi or lo) - int(lo) < 10000:
                lines += [f"{m.group(1)}_{i}|{rest}" for i in range(int(lo), int(hi or lo) + 1)]
    return parse_user_jobs("\n".join(lines))


def parse_sacct(text: str, job_id: str) -> JobInfo | None:
    """Parse ``sacct --noheader --parsable2 --allocations --format=SACCT_FORMAT``; the line of ``job_id``.

    sacct spells a cancellation ``CANCELLED by 1001``; ``base_state`` drops the uid.
    """
    for line in text.splitlines():
        parts = line.split("|", _SACCT_FIELDS - 1)
        if len(parts) != _SACCT_FIELDS or parts[0].strip() != job_id:
            continue
        _, state, exit_code, start, end, nodes = parts
        rc, sig = parse_exit_code(exit_code)
        return JobInfo(
            job_id=job_id,
            state=base_state(state),
            exit_code=rc,
            signal=sig,
            nodes=parse_nodes(nodes),
            start_time=parse_time(start),
            end_time=parse_time(end),
            source="sacct",
        )
    return None


def jobcomp_array_id(line: str) -> str | None:
    """``A_T`` for the line of an array element (``... ArrayJobId=A ArrayTaskId=T ...``), else None.

    Slurm logs an element under its own numeric JobId (the last element even reuses the array's
    id), so elements are found by these two fields, read where Slurm writes them (after the
    free-text fields, see ``_JOBCOMP``)."""
    m = _JOBCOMP.match(line)
    found = _JOBCOMP_ARRAY.search(m.group("extra")) if m else None
    return f"{found.group(1)}_{found.group(2)}" if found else None


def jobcomp_user(line: str) -> str | None:
    """The ``UserId`` field (``name(uid)``) of a well-formed jobcomp line, else ``None``."""
    m = _JOBCOMP.match(line)
    return m.group("user") if m else None


def parse_jobcomp_line(line: str) -> JobInfo | None:
    """Parse one jobcomp/filetxt line field-exactly; ``None`` for a line that is not one whole
    record (cut short, or a fragment of a record whose free text held a line break)."""
    m = _JOBCOMP.match(line)
    if not m:
        return None
    rc, sig = parse_exit_code(m.group("exit"))
    return JobInfo(
        job_id=jobcomp_array_id(line) or m.group("id"),
        state=base_state(m.group("state")),
        exit_code=rc,
        signal=sig,
        nodes=parse_nodes(m.group("nodes")),
        start_time=parse_time(m.group("start")),
        end_time=parse_time(m.group("end")),
        source="jobcomp",
    )

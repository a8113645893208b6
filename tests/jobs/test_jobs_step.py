"""hpkctl/jobs/step.py without Slurm: srun's own lines taken out of stderr, the srun command line,
and a step's pipes and terminal with a stand-in ``srun`` (a bash script in ``slurm.bin_dir``).
The real srun is exercised in tests/integration/test_kubelet_exec_slurm.py."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import signal
import struct
import termios
import textwrap
from pathlib import Path

import pytest

from hpkctl.jobs import Slurm, SlurmUnavailable
from hpkctl.jobs.step import StderrFilter, Step, step_argv
from hpkctl.sites.schema import SlurmSection

SUMMARY = b"srun: error: vm: task 0: Exited with exit code 3\n"


def test_ordinary_stderr_passes_at_once_even_without_a_newline() -> None:
    f = StderrFilter()
    assert f.feed(b"warn") == b"warn"  # not a possible srun line: no waiting for its end
    assert f.feed(b"ing\nsrun: error: vm: task 0: Exited") == b"ing\n"  # held: may be srun's summary
    assert f.feed(b" with exit code 3\r\n") == b""
    assert f.summary and f.own == ["srun: error: vm: task 0: Exited with exit code 3"]


def test_only_srun_s_step_lines_are_taken_out() -> None:
    f = StderrFilter()
    data = (b"sr\nsrun: this is the program talking\n" + SUMMARY
            + b"slurmstepd-vm: error: *** STEP 6389.1 ON vm CANCELLED AT 2026-11-24T02:24:25 ***\n"
            + b"srun: error: Unable to create step for job 9: Invalid job id specified\nsru")
    assert f.feed(data) == (b"sr\nsrun: this is the program talking\n"
                            b"srun: error: Unable to create step for job 9: Invalid job id specified\n")
    assert f.flush() == b"sru"  # the stream ended inside a line that never became one of srun's
    assert f.own[0] == "srun: this is the program talking" and f.summary


def test_the_srun_command_line() -> None:
    argv = step_argv("/usr/bin/srun", job_id="12", pod_dir=Path("/s/pods/u"), container="main",
                     command=["sh", "-c", "echo hi"], tty=True, immediate=30)
    assert argv == ["/usr/bin/srun", "--jobid=12", "--overlap", "--nodes=1", "--ntasks=1", "--unbuffered", "-v",
                    "--immediate=30", "--chdir=/s/pods/u", "--pty", "/bin/bash", "/s/pods/u/job/job.sh", "exec",
                    "main", "--tty", "--", "sh", "-c", "echo hi"]  # -v: srun says when the task started
    argv = step_argv("/usr/bin/srun", job_id="12", pod_dir=Path("/s/pods/u"), container="main", command=["true"],
                     tty=False, immediate=30)
    assert "--quiet" in argv and "-v" not in argv and "--pty" not in argv


FAKE_SRUN = textwrap.dedent("""\
    #!/bin/bash
    # stand-in srun: prints its words and whether it has a terminal, echoes stdin, exits 3 as srun does
    printf '%s\\n' "$*" >"$HPK_FAKE_SRUN_ARGS"
    printf '%s\\n' "${SLURM_JOB_ID:-unset}" >"$HPK_FAKE_SRUN_ARGS.job"
    trap 'stty size' WINCH
    if [ -t 0 ]; then echo "tty yes"; read -r line; echo "read $line"; else echo "tty no"; cat; fi
    echo "to stderr" >&2
    echo "srun: error: vm: task 0: Exited with exit code 3" >&2
    exit 3
""")


def _slurm(tmp_path: Path) -> Slurm:
    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HPK_FAKE_SRUN_ARGS": str(tmp_path / "args"), "SLURM_JOB_ID": "leaked"}
    return Slurm(SlurmSection(bin_dir=str(srun.parent), command_timeout=7.5), env=env)


async def _drain(step: Step) -> tuple[bytes, bytes, int]:
    out, err = b"", b""
    while data := await step.read_stdout():
        out += data
    while data := await step.read_stderr():
        err += data
    return out, err, await step.wait()


def test_a_step_with_pipes_gets_stdin_and_gives_the_exit_code(tmp_path: Path) -> None:
    slurm = _slurm(tmp_path)

    async def run() -> tuple[bytes, bytes, int, list[str], str | None]:
        step = await slurm.exec_step("12", pod_dir=tmp_path, container="c", command=["cat"], stdin=True)
        await step.write_stdin(b"hello\n")
        step.close_stdin()
        out, err, code = await _drain(step)
        step.close()
        return out, err, code, step.srun_messages, step.start_failure(code)

    out, err, code, messages, failure = asyncio.run(run())
    assert (out, err, code) == (b"tty no\nhello\n", b"to stderr\n", 3)
    assert messages == ["srun: error: vm: task 0: Exited with exit code 3"] and failure is None
    assert (tmp_path / "args").read_text().split()[:2] == ["--jobid=12", "--overlap"]
    assert "--immediate=8" in (tmp_path / "args").read_text()  # command_timeout, rounded up
    assert (tmp_path / "args.job").read_text() == "unset\n"  # the caller's Slurm variables never reach srun


def test_a_step_with_a_terminal_gets_its_size(tmp_path: Path) -> None:
    slurm = _slurm(tmp_path)

    async def run() -> tuple[bytes, int]:
        step = await slurm.exec_step("12", pod_dir=tmp_path, container="c", command=["sh"], tty=True)
        out = await step.read_stdout()
        while b"tty yes" not in out:
            out += await step.read_stdout()
        step.resize(100, 30)  # srun's WINCH trap is set before it says "tty yes": no wait needed
        await step.write_stdin(b"abc\r")
        while data := await step.read_stdout():
            out += data
        code = await step.wait()
        step.close()
        return out, code

    out, code = asyncio.run(run())
    assert code == 3
    assert b"30 100" in out and b"read abc" in out


def test_no_srun_is_slurm_unavailable(tmp_path: Path) -> None:
    slurm = Slurm(SlurmSection(bin_dir=str(tmp_path)), env={"PATH": "/usr/bin:/bin"})
    with pytest.raises(SlurmUnavailable, match="cannot run") as e:
        asyncio.run(slurm.exec_step("12", pod_dir=tmp_path, container="c", command=["true"]))
    assert "slurm.bin_dir" in e.value.hint


class _Process:
    """What Step uses of srun's process: its signals are recorded, its stderr is fed by the test."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.pid = 0
        self.stderr = asyncio.StreamReader()
        self.signals: list[int] = []

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)


STARTED = b"srun: launch/slurm: _task_start: Node vm, 1 tasks started\n"  # srun 22.05 -v


def _terminal_step(proc: _Process, reader: asyncio.StreamReader) -> tuple[Step, int]:
    master, slave = pty.openpty()
    os.close(slave)
    return Step(proc, ["srun"], stdout=reader, master=master), master  # type: ignore[arg-type]


def test_srun_hears_of_a_size_only_once_its_terminal_link_is_up_then_at_once() -> None:
    """A SIGWINCH while srun's pty thread waits for slurmstepd's link ends that thread (22.05's accept()
    is interrupted: "pty: accept failure"), and the task never gets a size; so srun is told of a size
    set before the link once srun says the task started, and of later ones at once."""
    async def run() -> tuple[list[int], list[int], list[int]]:
        proc, reader = _Process(), asyncio.StreamReader()
        s, master = _terminal_step(proc, reader)
        try:
            s.resize(91, 27)
            s.resize(92, 28)
            before = list(proc.signals)
            proc.stderr.feed_data(b"srun: launching StepId=9.1 on host vm, 1 tasks: 0\n" + STARTED)
            assert await s.read_stderr() == b"srun: launching StepId=9.1 on host vm, 1 tasks: 0\n" + STARTED
            at_start = list(proc.signals)
            s.resize(100, 30)
            reader.feed_data(b"output")
            assert await s.read_stdout() == b"output"  # the link was up already: no second one
            assert struct.unpack("HHHH", fcntl.ioctl(master, termios.TIOCGWINSZ, bytes(8)))[:2] == (30, 100)
            return before, at_start, proc.signals[len(at_start):]
        finally:
            os.close(master)

    before, at_start, after = asyncio.run(run())
    assert before == []  # the link is not up: no SIGWINCH (it would end srun's pty thread)
    assert at_start == [signal.SIGWINCH]  # once for both sizes: srun reads the pty's current one
    assert after == [signal.SIGWINCH]  # the link is up: at once


def test_a_size_set_before_the_step_runs_is_passed_on_at_its_first_output() -> None:
    """The task's first output also says the link is up (slurmstepd links the terminal before it starts
    the task), for an srun that says nothing of the start."""
    async def run() -> tuple[list[int], list[int]]:
        proc, reader = _Process(), asyncio.StreamReader()
        s, master = _terminal_step(proc, reader)
        try:
            s.resize(91, 27)
            before = list(proc.signals)
            reader.feed_data(b"go\r\n")
            assert await s.read_stdout() == b"go\r\n"
            reader.feed_data(b"more")
            assert await s.read_stdout() == b"more"
            return before, proc.signals
        finally:
            os.close(master)

    assert asyncio.run(run()) == ([], [signal.SIGWINCH])

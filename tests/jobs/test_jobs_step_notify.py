"""A pod's step started with ``notify`` (hpkctl/jobs/steps.py): its task's output comes back on a pipe,
one call of ``changed`` per read, and the pipe never loses its last reader when the caller goes (srun
kills its step on SIGPIPE: a kubelet's restart must not). A fake srun in ``bin_dir`` stands for the
real one; the real one is in tests/kubelet/test_kubelet_pilot_slurm.py."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from hpkctl.sites.schema import SlurmSection
from hpkctl.jobs.command import Commands
from hpkctl.jobs.steps import StepProcess, start_step

# the fake srun: says what it got, waits for the test's go (a file), then writes three lines as the
# pod's script would after its status changes; `|| exit 7`: a write with no reader left fails
SRUN = """#!/bin/sh
printf '%s\\n' "$HPK_NOTIFY" "$@" >"$DIR/args"
i=0
while [ ! -e "$DIR/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
for n in 1 2 3; do echo || exit 7; done
"""


def _start(tmp_path: Path, section: Callable[..., SlurmSection]) -> StepProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN)
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    commands = Commands(section(bin_dir=str(bin_dir)), env={"PATH": "/usr/bin:/bin", "DIR": str(tmp_path)})
    return start_step(commands, "12", ["/bin/true"], name="p", node="vm", cpus=1, memory_mb=64,
                      output=tmp_path / "slurm.out", workdir=tmp_path, srun_log=tmp_path / "srun.log", notify=True)


def test_each_line_of_the_step_is_a_change_and_only_its_stderr_goes_to_the_file(
        tmp_path: Path, section: Callable[..., SlurmSection]) -> None:
    step = _start(tmp_path, section)
    (tmp_path / "go").touch()
    seen: list[int] = []
    assert step.wait_changes(lambda: seen.append(1)) == 0
    assert 1 <= len(seen) <= 3  # a read may carry several lines
    args = (tmp_path / "args").read_text().splitlines()
    assert args[0] == "1"  # HPK_NOTIFY: the pod's script writes its lines
    assert f"--error={tmp_path / 'slurm.out'}" in args and not any(a.startswith("--output=") for a in args)


def test_the_step_keeps_writing_when_its_reader_is_gone(tmp_path: Path, section: Callable[..., SlurmSection]) -> None:
    step = _start(tmp_path, section)
    os.close(step._notes)  # type: ignore[arg-type]  # the kubelet ended (a restart)
    step._notes = None
    (tmp_path / "go").touch()
    assert step.wait() == 0  # no EPIPE, no SIGPIPE: srun holds the pipe's read end itself


def test_without_notify_the_output_goes_to_the_file(tmp_path: Path, section: Callable[..., SlurmSection]) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN)
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    (tmp_path / "go").touch()
    commands = Commands(section(bin_dir=str(bin_dir)), env={"PATH": "/usr/bin:/bin", "DIR": str(tmp_path)})
    step = start_step(commands, "12", ["/bin/true"], name="p", node="vm", cpus=1, memory_mb=64,
                      output=tmp_path / "slurm.out", workdir=tmp_path, srun_log=tmp_path / "srun.log")
    assert step.wait_changes(lambda: None) == 0
    args = (tmp_path / "args").read_text().splitlines()
    assert args[0] == "" and f"--output={tmp_path / 'slurm.out'}" in args

"""A command in a running job's allocation, as a new step: ``srun --overlap --jobid`` (the kubelet's exec).

The kubelet enters a running pod by starting a step of the pod's own job, which runs
``bash POD_DIR/job/job.sh exec CONTAINER [--tty] -- WORD...`` (``sbatch/runtime.sh``, "exec") on the
pod's node, in the job's cgroup. What was measured with Slurm 22.05 (tests/integration/
test_kubelet_exec_slurm.py proves it on every run):

* ``--overlap`` is what lets the step start while the pod's own steps hold every CPU and all the
  job's memory; without it srun waits ("Requested nodes are busy"). ``--immediate`` bounds that
  wait anyway, so a step that cannot be created fails instead of hanging the caller.
* Only the job's owner may add a step (root gets "Access/permission denied"): the kubelet runs as
  the user whose jobs the pods are.
* srun exits with the task's exit code (128+N when signal N killed it), and after a non-zero one
  prints ``srun: error: NODE: task 0: Exited with exit code N`` on *its* stderr, mixed with the
  task's, even with ``--quiet``. Those lines (and slurmstepd's ``*** STEP ... CANCELLED ***``) are
  taken out of the stderr stream here, at line starts only, so the container's stderr arrives
  unchanged and without delay (only a line that begins like one of them waits for its end).
* ``--pty`` works only when srun's own stdin is a terminal ("Not using a pseudo-terminal,
  disregarding --pty option" otherwise): for a TTY the step gets a pty pair here; srun sets it raw,
  passes the size it has at its start to the task's terminal, and later sizes when it gets SIGWINCH.
  But srun's pty thread waits in ``accept()`` for slurmstepd's window link (made before the task
  starts), with a SIGWINCH handler installed without ``SA_RESTART``: a SIGWINCH in that wait ends
  the thread ("srun: error: pty: accept failure: Interrupted system call", srun_pty.c of 22.05), and
  no size reaches the task for the rest of the step. So srun is told only once the link is up: srun
  says ``Node N, 1 tasks started`` (with ``-v``, which a TTY step gets instead of ``--quiet``: its
  stderr is srun's alone) or the task's first output comes; a size set before that is passed on then.
* SIGTERM to srun cancels the step (its tasks are killed).
* srun starts the task in srun's working directory; it is set to the pod directory (which exists
  on the node) so slurmstepd has nothing to complain about.
* ``--nodes=1 --ntasks=1`` places the step on the allocation's first node, where the batch script
  (and so the pod part and its containers) runs; a pilot pod's step may run on any node of its
  allocation, so its exec names that node (``--nodelist``, Slurm's node of its step).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import math
import os
import pty
import re
import signal
import struct
import termios
from collections.abc import Sequence
from pathlib import Path

from hpkctl.jobs.command import Commands
from hpkctl.jobs.errors import SlurmUnavailable

# Lines srun (and slurmstepd) write about the step itself into the stderr the task's stderr shares.
_OWN_LINE = re.compile(
    rb"srun: (?:error: \S+: tasks? [0-9,\-\[\]]+: .*|Force Terminated .*|forcing job termination"
    rb"|Job step aborted.*|got SIGCONT|Step created for .*|.*Received task exit notification.*)"
    rb"|slurmstepd(?:-\S+)?: error: \*\*\* STEP \S+ ON \S+ CANCELLED AT .*\*\*\*")
# A task summary: the step ran, and its exit code is the task's.
_SUMMARY = re.compile(rb"srun: error: \S+: tasks? [0-9,\-\[\]]+: ")
# srun -v: the node's slurmstepd started the task, so it linked srun's terminal before (22.05 prints
# "srun: launch/slurm: _task_start: Node vm, 1 tasks started")
_STARTED = re.compile(rb"srun: (?:.*: )?Node \S+, [0-9]+ tasks? started")
_PREFIXES = (b"srun: ", b"slurmstepd")
CHUNK = 65536


class StderrFilter:
    """Takes srun's and slurmstepd's own lines out of a byte stream that also carries the task's
    stderr. Only bytes at a line start that could still become such a line are held back."""

    def __init__(self) -> None:
        self._held = b""
        self._at_line_start = True
        self.own: list[str] = []  # srun's lines about the step, in order (taken out of the stream)
        self.summary = False  # srun printed a task summary: the task ran
        self.started = False  # srun said the task started (-v)

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        data = self._held + data
        self._held = b""
        while data:
            if not self._at_line_start:
                nl = data.find(b"\n")
                if nl < 0:
                    out += data
                    break
                out += data[:nl + 1]
                data = data[nl + 1:]
                self._at_line_start = True
                continue
            if not any(p.startswith(data[:len(p)]) for p in _PREFIXES):
                self._at_line_start = False  # an ordinary line: passes at once
                continue
            nl = data.find(b"\n")
            if nl < 0:
                self._held = data  # may still become one of srun's lines
                break
            line, data = data[:nl + 1], data[nl + 1:]
            if not self._take(line):
                out += line
        return bytes(out)

    def flush(self) -> bytes:
        """At the end of the stream: what was held back."""
        rest, self._held = self._held, b""
        return rest if not self._take(rest) else b""

    def _take(self, line: bytes) -> bool:
        text = line.rstrip(b"\r\n")
        if text.startswith(b"srun: "):
            self.own.append(text.decode("utf-8", "replace"))
        if _SUMMARY.match(text):
            self.summary = True
        if _STARTED.fullmatch(text):
            self.started = True
        return _OWN_LINE.fullmatch(text) is not None


class Step:
    """A running ``srun`` step: the task's output, its input, its exit code.

    Without a TTY, ``stdout``/``stderr`` are pipes (stderr filtered of srun's own lines); with one,
    ``stdout`` is the terminal (stdout and stderr of the task together) and ``read_stderr`` carries
    only what srun says about the step.
    """

    def __init__(self, process: asyncio.subprocess.Process, argv: list[str], *, stdout: asyncio.StreamReader,
                 stdin: asyncio.StreamWriter | None = None, terminal: asyncio.WriteTransport | None = None,
                 master: int | None = None) -> None:
        self.process = process
        self.argv = argv
        self._stdout = stdout
        self._stdin = stdin  # a pipe (no TTY)
        self._terminal = terminal  # the pty master, for writing (TTY)
        self._master = master
        self._filter = StderrFilter()
        self._stderr_done = False
        self._resized = False  # a size was set while srun's terminal link was not up: tell srun once it is
        self._linked = False  # srun's terminal link is up: a SIGWINCH is safe (see the module docstring)

    @property
    def tty(self) -> bool:
        return self._master is not None

    @property
    def pid(self) -> int:
        return self.process.pid

    async def read_stdout(self) -> bytes:
        """The next output, ``b""`` at the end (for a TTY: once every holder of the terminal is gone)."""
        try:
            data = await self._stdout.read(CHUNK)
        except OSError as e:
            if e.errno == errno.EIO:  # a pty master reads EIO when the last slave fd closed
                return b""
            raise
        if data:
            self._link_up()  # the task runs, so slurmstepd linked srun's terminal before it started it
        return data

    async def read_stderr(self) -> bytes:
        """The task's next stderr, srun's own lines taken out; ``b""`` at the end."""
        stream = self.process.stderr
        while stream is not None and not self._stderr_done:
            data = await stream.read(CHUNK)
            if not data:
                self._stderr_done = True
                return self._filter.flush()
            out = self._filter.feed(data)
            if self._filter.started:
                self._link_up()
            if out:
                return out
        return b""

    async def write_stdin(self, data: bytes) -> None:
        if self._terminal is not None:
            if not self._terminal.is_closing():
                self._terminal.write(data)  # keystrokes and pastes: buffered by the transport
            return
        if self._stdin is None or self._stdin.is_closing():
            return
        self._stdin.write(data)
        try:
            await self._stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the task ended or closed its input: what it did not read is dropped

    def close_stdin(self) -> None:
        """End of input: the task reads EOF (for a TTY: the terminal's EOF character, ^D)."""
        if self._terminal is not None:
            if not self._terminal.is_closing():
                self._terminal.write(b"\x04")
        elif self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()

    def resize(self, width: int, height: int) -> None:
        """New terminal size: set on the pty; srun is told (SIGWINCH) to pass it on to the task now if
        its terminal link is up, else once it is (a SIGWINCH before would end srun's pty thread)."""
        if self._master is None or width <= 0 or height <= 0:
            return
        fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
        if self._linked:
            self._winch()
        else:
            self._resized = True

    def _link_up(self) -> None:
        """srun's terminal link is up: pass on a size that came before (srun reads the pty's current one)."""
        if not self._linked:
            self._linked = True
            if self._resized:
                self._winch()

    def _winch(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGWINCH)

    async def wait(self) -> int:
        """srun's exit status: the task's exit code (128+N for signal N), or srun's own failure."""
        rc = await self.process.wait()
        return 128 - rc if rc < 0 else rc

    @property
    def srun_messages(self) -> list[str]:
        """What srun said about the step (read all of stderr first)."""
        return list(self._filter.own)

    def start_failure(self, exit_code: int) -> str | None:
        """srun's error when the step never ran its task (e.g. "Unable to create step for job 12:
        Job/step already completing or completed"), else ``None``: ``exit_code`` is the task's."""
        if exit_code == 0 or self._filter.summary:
            return None
        errors = [m.removeprefix("srun: ").removeprefix("error: ") for m in self._filter.own if "error" in m]
        return "; ".join(errors) or None

    def terminate(self) -> None:
        """Cancel the step (SIGTERM to srun, which has Slurm kill the task)."""
        if self.process.returncode is None:
            self.process.terminate()

    def close(self) -> None:
        """Release the terminal and input (after ``wait``)."""
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()
        if self._terminal is not None:
            self._terminal.close()
        if self._master is not None:
            os.close(self._master)
            self._master = None


def step_argv(srun: str, *, job_id: str, pod_dir: Path, container: str, command: Sequence[str], tty: bool,
              immediate: int, node: str = "") -> list[str]:
    """The srun command line of one exec; ``node``: where the pod runs (a pilot pod's step may be on any
    node of its allocation), else the allocation's first node."""
    where = [f"--nodelist={node}"] if node else []
    return [srun, f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", *where, "--unbuffered",
            "-v" if tty else "--quiet", f"--immediate={immediate}", f"--chdir={pod_dir}", *(["--pty"] if tty else []),
            "/bin/bash", str(pod_dir / "job" / "job.sh"), "exec", container, *(["--tty"] if tty else []),
            "--", *command]


async def start_step(commands: Commands, *, job_id: str, pod_dir: Path, container: str, command: Sequence[str],
                     tty: bool = False, stdin: bool = False, node: str = "") -> Step:
    """Start ``command`` in ``container`` of the pod whose job is ``job_id``, as a new step.

    ``stdin``: the task reads what ``Step.write_stdin`` gives it (else it reads EOF). ``tty``: the
    task gets a terminal (and stdin, as a terminal needs one). Raises ``SlurmUnavailable`` when
    srun cannot be run at all; Slurm's refusals come back as srun's exit status and messages
    (``Step.start_failure``).
    """
    if not job_id or not command:
        raise ValueError("a job id and a command are needed")
    srun = commands.executable("srun")
    immediate = max(1, math.ceil(commands.config.command_timeout))
    argv = step_argv(srun, job_id=job_id, pod_dir=pod_dir, container=container, command=command, tty=tty,
                     immediate=immediate, node=node)
    loop = asyncio.get_running_loop()
    master = slave = None
    try:
        if tty:
            master, slave = pty.openpty()
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=slave, stdout=slave, stderr=asyncio.subprocess.PIPE, env=commands.env(),
                start_new_session=True)
            os.close(slave)
            slave = None
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                         os.fdopen(os.dup(master), "rb", buffering=0))
            terminal, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(os.dup(master), "wb", buffering=0))
            return Step(process, argv, stdout=reader, terminal=terminal, master=master)
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=commands.env(),
            start_new_session=True)
        assert process.stdout is not None
        return Step(process, argv, stdout=process.stdout, stdin=process.stdin)
    except OSError as e:
        for fd in (master, slave):
            if fd is not None:
                os.close(fd)
        raise SlurmUnavailable(f"cannot run {srun}: {e.strerror or e}",
                               hint="set slurm.bin_dir in the profile to the directory that holds srun "
                               "(or leave it empty to use PATH)", command=argv) from e

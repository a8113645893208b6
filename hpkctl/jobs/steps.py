"""Job steps in a held allocation: start one (``srun --jobid J --exact``), list them all, cancel one.

Pilot mode's pods are steps (``hpkctl.pilot``). Measured on Slurm 22.05 (tests/jobs/
test_jobs_pilot_slurm.py proves each point on every run):

* ``srun --jobid=J --exact --ntasks=1 --cpus-per-task=C --mem=M`` gives the step exactly C CPUs
  (its own cpuset) and M of memory (its own memory cgroup, ``.../job_J/step_S``); steps that do not
  fit wait, so ``--immediate`` makes srun fail at once (``Requested nodes are busy``) instead: the
  allocator's books and Slurm's disagree, and the pod goes elsewhere.
* The step lives as long as its srun: SIGKILL to srun ends the step within seconds. So srun runs in
  a session of its own (a kubelet's restart or a Ctrl-C of ``hpkctl run`` does not reach it) and its
  own messages go to a file; the task's output goes to ``--output`` (opened on the node).
* ``scancel --signal=TERM J.S`` signals the step's task only (not its children), like
  ``scancel --batch`` for a batch script: the pod's stop sequence runs in its own order. Slurm
  sends no SIGKILL after it. ``scancel J.S`` kills the step.
* ``squeue --steps --me`` lists every running step of every job of the user in one call (steps that
  ended are gone from it); the step's resources are not among its fields (``scontrol show step``).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hpkctl.jobs.command import Commands, failure
from hpkctl.jobs.hostlist import expand_hostlist
from hpkctl.jobs.errors import SlurmUnavailable
from hpkctl.jobs.info import parse_nodes, parse_time
from hpkctl.jobs.query import check_id

STEPS_FORMAT = "%i|%N|%S|%j"  # the name last: free text
_STEP_ID = re.compile(r"^(\d+)\.(\d+)$")


@dataclass(frozen=True)
class StepInfo:
    """A running step: ``J.S``, its node(s), its start and its name (the pod's, in pilot mode)."""

    step_id: str
    job_id: str
    nodes: str
    start: datetime | None
    name: str


def is_step_id(value: str) -> bool:
    """True for ``J.S``, a numbered step (never ``batch`` or ``extern``): a pilot pod's job id."""
    return isinstance(value, str) and bool(_STEP_ID.match(value))


def check_step(step_id: str) -> str:
    """``step_id`` if it is ``J.S`` (a numbered step; never ``batch`` or ``extern``), else ValueError."""
    if not is_step_id(step_id):
        raise ValueError(f"{step_id!r} is not a Slurm step id (JOB.STEP, digits)")
    return step_id


def parse_steps(text: str) -> list[StepInfo]:
    """``squeue --steps --format=STEPS_FORMAT`` lines → numbered steps (``batch``/``extern`` left out)."""
    steps: list[StepInfo] = []
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4 or not (m := _STEP_ID.match(parts[0].strip())):
            continue
        steps.append(StepInfo(step_id=parts[0].strip(), job_id=m.group(1), nodes=parse_nodes(parts[1]),
                              start=parse_time(parts[2]), name=parts[3].rstrip("\n")))
    return steps


def list_steps(commands: Commands) -> list[StepInfo]:
    """Every running numbered step of the calling user's jobs: one ``squeue --steps --me``."""
    done = commands.run("squeue", ["--noheader", "--steps", "--me", f"--format={STEPS_FORMAT}"])
    if done.returncode != 0:
        raise failure(done)
    return parse_steps(done.stdout)


@dataclass(frozen=True)
class StepShare:
    """A running numbered step with what it holds: its node(s) (``n1,n2``), CPUs, memory (MB) and GPUs on
    each, and its name."""

    step_id: str
    job_id: str
    node: str
    cpus: int
    memory_mb: int
    gpus: int
    name: str


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def _tres_mb(value: str) -> int:
    unit = value[-1:].upper()
    if unit in _MEM_UNITS:
        return max(1, int(float(value[:-1]) * _MEM_UNITS[unit]))
    return int(float(value or 0))


def parse_step_shares(text: str) -> list[StepShare]:
    """``scontrol show step -o`` lines → numbered steps with their resources (``TRES=cpu=2,mem=300M,
    node=1,gres/gpu=1``); ``batch``/``extern`` are left out. A step on several nodes (an MPI pod's
    ranks) is one share per node, ``node`` the nodes comma-separated and the figures each node's (Slurm
    gives the totals: an even split)."""
    out: list[StepShare] = []
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        m = _STEP_ID.match(fields.get("StepId", ""))
        if not m or fields.get("State", "RUNNING") != "RUNNING":
            continue
        nodes = expand_hostlist(fields.get("NodeList", "")) or [""]
        n = len(nodes)
        tres = dict(t.split("=", 1) for t in fields.get("TRES", "").split(",") if "=" in t)
        gpus = sum(int(v) for k, v in tres.items() if k.startswith("gres/gpu") and ":" not in k and v.isdigit())
        cpus = int(tres.get("cpu") or fields.get("CPUs") or 0)
        out.append(StepShare(step_id=m.group(0), job_id=m.group(1), node=",".join(nodes), cpus=math.ceil(cpus / n),
                             memory_mb=math.ceil(_tres_mb(tres.get("mem", "0")) / n), gpus=math.ceil(gpus / n),
                             name=fields.get("Name", "")))
    return out


def step_shares(commands: Commands) -> list[StepShare]:
    """Every running numbered step Slurm shows this user, with its resources: one ``scontrol show step
    -o`` (squeue has no per-step memory)."""
    done = commands.run("scontrol", ["show", "step", "-o"])
    if done.returncode != 0:
        if "no job steps" in (done.stdout + done.stderr).lower():
            return []
        raise failure(done)
    return parse_step_shares(done.stdout)


class StepProcess:
    """The ``srun`` of a step started by :func:`start_step`: the step runs while it runs."""

    def __init__(self, proc: subprocess.Popen[bytes], argv: list[str], notes: int | None = None) -> None:
        self._proc = proc
        self.argv = argv
        self._notes = notes  # the read end of srun's output, when started with ``notify``

    def wait_changes(self, changed: Callable[[], None]) -> int:
        """Wait for the step to end, calling ``changed`` whenever its task wrote a line (started with
        ``notify``: a pod's script writes one after each status change); srun's exit status."""
        notes, self._notes = self._notes, None
        if notes is not None:
            try:
                while os.read(notes, 4096):
                    changed()
            finally:
                os.close(notes)
        return self._proc.wait()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> int | None:
        """srun's exit status once it ended (the task's exit code, or 1 when no step was made), else None."""
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL srun (its step ends with it); reaped by the next :meth:`poll`."""
        self._proc.kill()


def step_args(job_id: str, *, name: str, node: str, cpus: int, memory_mb: int, gpus: int = 0,
              gres_name: str = "gpu", output: Path, workdir: Path, immediate: int, overlap: bool = False,
              notify: bool = False) -> list[str]:
    """srun's options for one resource-bounded task on ``node`` of allocation ``job_id``; ``overlap``:
    Slurm counts none of its resources against other steps (``--overlap``: an MPI pod's script, whose
    ranks are a step of their own that holds the pod's room); ``notify``: the task's stdout comes back
    through srun (only its stderr goes to ``output``)."""
    check_id(job_id)
    if cpus < 1 or memory_mb < 1:
        raise ValueError("a step needs at least one CPU and some memory (else it takes the whole allocation's)")
    args = [f"--jobid={job_id}", f"--job-name={name}", "--exact", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={cpus}", f"--mem={memory_mb}M", f"--immediate={immediate}", "--quiet",
            *([] if notify else [f"--output={output}"]), f"--error={output}", f"--chdir={workdir}", "--input=none"]
    if node:
        args.append(f"--nodelist={node}")
    if overlap:
        args.append("--overlap")
    if gpus > 0:
        args.append(f"--gres={gres_name}:{gpus}")
    return args


def start_step(commands: Commands, job_id: str, argv: Sequence[str], *, name: str, node: str, cpus: int,
               memory_mb: int, gpus: int = 0, gres_name: str = "gpu", output: Path, workdir: Path,
               srun_log: Path, overlap: bool = False, notify: bool = False) -> StepProcess:
    """Start ``argv`` as a step of ``job_id`` and return at once (srun keeps running, in its own
    session, as long as the step does; its own messages are appended to ``srun_log``).

    ``notify``: the task's stdout comes back on a pipe (``HPK_NOTIFY=1`` in its environment tells a
    pod's script to write a line there after each status change, :meth:`StepProcess.wait_changes`).
    srun holds the pipe's read end too: srun kills its step on SIGPIPE (srun_job.c, _handle_pipe), so
    the pipe must never lose its last reader when this process ends (a kubelet's restart); a pipe
    nobody reads fills only after 64 KiB of lines, tens of thousands of status changes."""
    if not argv:
        raise ValueError("a step needs a command")
    srun = commands.executable("srun")
    immediate = max(1, math.ceil(commands.config.command_timeout))
    args = [*step_args(job_id, name=name, node=node, cpus=cpus, memory_mb=memory_mb, gpus=gpus,
                       gres_name=gres_name, output=output, workdir=workdir, immediate=immediate,
                       overlap=overlap, notify=notify), *argv]
    fd = os.open(srun_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    notes, out = os.pipe() if notify else (None, fd)
    env = {**commands.env(), "HPK_NOTIFY": "1"} if notify else commands.env()
    try:
        proc = subprocess.Popen([srun, *args], env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=fd, pass_fds=() if notes is None else (notes,))
    except OSError as e:
        if notes is not None:
            os.close(notes)
        raise SlurmUnavailable(f"cannot run {srun}: {e.strerror or e}",
                               hint="set slurm.bin_dir in the profile to the directory that holds srun "
                               "(or leave it empty to use PATH)", command=[srun, *args]) from e
    finally:
        os.close(fd)
        if notes is not None:
            os.close(out)
    return StepProcess(proc, [srun, *args], notes)

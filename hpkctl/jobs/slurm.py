"""``Slurm``: every Slurm command hpkctl runs, for one site profile, behind one object.

The work is split by responsibility; this class only ties it to one profile:

* :mod:`~hpkctl.jobs.command`: finding and running a command with a scrubbed, per-call environment
  and a timeout (no process-wide state, so any number of threads may share one ``Slurm``).
* :mod:`~hpkctl.jobs.submit`: ``sbatch`` and the table of its refusals (typed ``SubmitError``).
* :mod:`~hpkctl.jobs.query`: ``squeue`` for any number of jobs, one call per 2,000 ids.
* :mod:`~hpkctl.jobs.final`: final states from ``scontrol``, ``sacct`` and the jobcomp file.
* :mod:`~hpkctl.jobs.cancel`: ``scancel``.
* :mod:`~hpkctl.jobs.step`: ``srun --overlap --jobid``, a command in a running job (the kubelet's exec).
* :mod:`~hpkctl.jobs.poll`: the one polling loop, used by ``wait_for``.
* :mod:`~hpkctl.jobs.alloc` and :mod:`~hpkctl.jobs.steps`: pilot mode's held allocations and the
  pods' steps in them (``srun --jobid J --exact``, ``squeue --steps``, ``scancel J.S``); ``alloc`` is
  imported by the methods that use it, so a job-per-pod ``hpkctl run`` does not load it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpkctl.jobs import steps
from hpkctl.jobs.accounting import AccountingAnswer, ask_accounting
from hpkctl.jobs.cancel import scancel, shorten
from hpkctl.jobs.command import Commands
from hpkctl.jobs.config import job_partition, partition_limit, show_config
from hpkctl.jobs.final import FinalStates
from hpkctl.jobs.info import JobInfo, UserJob
from hpkctl.jobs.nodes import NodeInfo, sinfo_nodes
from hpkctl.jobs.poll import DEFAULT_BACKOFF, poll
from hpkctl.jobs.query import allocation_id, squeue, unique_ids, user_jobs
from hpkctl.jobs.states import TERMINAL_STATES
from hpkctl.jobs.steps import StepInfo, StepProcess, StepShare
from hpkctl.jobs.submit import sbatch, sbatch_test_only
from hpkctl.sites.schema import SlurmSection

if TYPE_CHECKING:  # asyncio and the pty machinery only when a step is started (exec, attach)
    from hpkctl.jobs.alloc import AllocationInfo
    from hpkctl.jobs.step import Step

Snapshot = Mapping[str, JobInfo | None]


def _ended(info: JobInfo | None) -> bool:
    """Finished in Slurm's eyes, or unknown to it."""
    return info is None or info.state in TERMINAL_STATES


def _all_finished(snapshot: Snapshot) -> bool:
    return all(_ended(info) for info in snapshot.values())


class Slurm:
    """Runs Slurm's commands for one site profile. Thread-safe.

    ``env`` is the environment commands start from (default: this process's, read at each call);
    it is always scrubbed of Slurm's option variables (``command.SCRUBBED_PREFIXES``).
    """

    def __init__(self, slurm: SlurmSection, *, env: Mapping[str, str] | None = None) -> None:
        self.config = slurm
        self._commands = Commands(slurm, env=env)
        self._finals = FinalStates(self._commands)

    def executable(self, name: str) -> str:
        """Absolute path of Slurm command ``name``: from ``slurm.bin_dir``, else looked up on PATH now."""
        return self._commands.executable(name)

    def submit(self, script: Path, *, extra_args: Sequence[str] = (), workdir: Path | None = None) -> str:
        """Submit ``script`` with ``sbatch --parsable [extra_args] [--chdir=workdir] script``; the job id.

        ``--parsable`` prints ``jobid`` or ``jobid;cluster``; the cluster part is dropped (hpkctl
        talks to one cluster per profile). A refusal raises a ``SubmitError`` subclass whose message
        keeps Slurm's text and whose hint names the profile key or sbatch option to change.
        On ``SlurmTimeout`` the job may still have been created: look before resubmitting.
        """
        return sbatch(self._commands, script, extra_args=extra_args, workdir=workdir)

    def test_submit(self, script: Path, *, extra_args: Sequence[str] = ()) -> str:
        """``sbatch --test-only``: whether Slurm would take ``script`` and when it would start it
        (Slurm's one line); nothing is queued. Refusals raise as for :meth:`submit`."""
        return sbatch_test_only(self._commands, script, extra_args=extra_args)

    def query(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        """Current state of ``job_ids`` from slurmctld: one ``squeue`` call per 2,000 ids (``QUERY_CHUNK``).

        Runs ``squeue --noheader --all --states=all --jobs=ID,ID,... --format=SQUEUE_FORMAT``:
        ``--states=all`` keeps finished jobs visible until ``MinJobAge``; ``--all`` includes
        hidden partitions. Jobs Slurm no longer knows are simply absent from the result (use
        ``final`` for them); squeue's "Invalid job id specified" (every id unknown) gives ``{}``.
        squeue never reports exit codes: ``exit_code`` is ``None`` here.
        """
        return squeue(self._commands, job_ids)

    def nodes(self, *, partition: str = "") -> list[NodeInfo]:
        """The nodes of ``partition`` (default: every partition) with CPUs, memory, GPUs and state,
        from one ``sinfo --Node`` call."""
        return sinfo_nodes(self._commands, partition=partition)

    def user_jobs(self) -> list[UserJob]:
        """Every job of the calling user slurmctld knows (pending, running, and finished ones until
        ``MinJobAge``), with its comment, from one call:
        ``squeue --noheader --me --all --states=all --format=USER_JOBS_FORMAT``.

        For finding jobs by their comment when nothing else points to them (hpkctl's pod jobs
        carry ``hpk-uid=<pod uid>`` as the first word, see ``hpkctl.pod.flags.uid_from_comment``).
        """
        return user_jobs(self._commands)

    def accounted_jobs(self, *, since: str) -> list[UserJob]:
        """This user's jobs slurmdbd recorded since ``since``, with their comments (``[]`` where
        accounting is off): the jobs ``user_jobs`` no longer lists (see ``FinalStates.accounted_jobs``)."""
        return self._finals.accounted_jobs(since=since)

    def ask_accounting(self, *, since: str) -> AccountingAnswer:
        """Whether sacct answers here, with this user's jobs since ``since``, whatever ``use_sacct`` says
        (``hpkctl doctor``; see :mod:`hpkctl.jobs.accounting`)."""
        return ask_accounting(self._commands, since=since)

    def final(self, job_id: str) -> JobInfo | None:
        """State and exit code of a job that finished (or left squeue); ``None`` if nobody knows it.

        ``scontrol``, then ``sacct``, then the jobcomp file (see :mod:`hpkctl.jobs.final`).
        """
        return self._finals.final(job_id)

    def finals(self, job_ids: Iterable[str]) -> dict[str, JobInfo | None]:
        """``final`` for many jobs: one jobcomp scan, one ``sacct`` per 2,000 ids, ``scontrol`` for the rest."""
        return self._finals.finals(job_ids)

    @property
    def accounting(self) -> bool | None:
        """Whether sacct works here: ``None`` until the first sacct call (or ``probe_accounting``)."""
        return self._finals.accounting

    def probe_accounting(self) -> bool:
        """Ask sacct once (about job 1) whether accounting works, and remember the answer."""
        return self._finals.probe_accounting()

    def cancel(self, job_id: str, *, signal: str | None = None, batch_only: bool = False) -> None:
        """Cancel the job, or with ``signal`` (``TERM``, ``USR1``, ``15``...) only signal it.

        A signal goes to the batch script and its children too (``--full``): the script supervises
        the job's work and must see it. With ``batch_only`` it goes to the batch shell alone
        (``--batch``), which then stops its work in its own order. Cancelling a job that already
        finished, or that Slurm forgot, is not an error; a permission problem is.
        """
        scancel(self._commands, job_id, signal=signal, batch_only=batch_only)

    def settings(self) -> dict[str, str]:
        """The cluster's settings (``scontrol show config``): ``ProctrackType``, ``KillWait``..."""
        return show_config(self._commands)

    def partition_limit(self, partition: str) -> int | None:
        """The partition's MaxTime in seconds (``""``: the default partition); None: unlimited."""
        return partition_limit(self._commands, partition)

    def job_partition(self, job_id: str) -> str:
        """The partition the job is queued in; "" once Slurm forgot the job."""
        return job_partition(self._commands, job_id)

    def shorten(self, job_id: str, seconds: int) -> None:
        """Lower the job's time limit to ``seconds`` (whole minutes, rounded up): a pending job whose
        limit is above its partition's MaxTime can then start. Only lowering is allowed to users."""
        shorten(self._commands, job_id, seconds)

    def hold(self, script: Path, *, args: Sequence[str], script_args: Sequence[str] = ()) -> str:
        """Submit a pilot allocation's holder ``script`` with sbatch options ``args`` (made by
        :func:`hpkctl.jobs.alloc.hold_args`); the job id. Refusals raise as for :meth:`submit`."""
        from hpkctl.jobs import alloc

        return alloc.hold(self._commands, script, args=args, script_args=script_args)

    def allocation(self, job_id: str) -> AllocationInfo | None:
        """A held allocation's state, end and each node's CPUs/memory/GPUs (``scontrol show job -d``);
        ``None`` once Slurm forgot it."""
        from hpkctl.jobs import alloc

        return alloc.allocation(self._commands, job_id)

    def steps(self) -> list[StepInfo]:
        """Every running numbered step of this user's jobs, from one ``squeue --steps --me``."""
        return steps.list_steps(self._commands)

    def step_node(self, step_id: str) -> str:
        """The node a running step ``J.S`` is on, as Slurm names it (``squeue --steps``); "" when it is
        not running (a pilot pod's exec goes to that node of its allocation)."""
        return next((s.nodes for s in self.steps() if s.step_id == step_id), "")

    def step_shares(self) -> list[StepShare]:
        """Every running numbered step with its node, CPUs, memory and GPUs (``scontrol show step -o``)."""
        return steps.step_shares(self._commands)

    def start_step(self, job_id: str, argv: Sequence[str], *, name: str, node: str, cpus: int, memory_mb: int,
                   gpus: int = 0, gres_name: str = "gpu", output: Path, workdir: Path,
                   srun_log: Path, overlap: bool = False, notify: bool = False) -> StepProcess:
        """Start ``argv`` as a resource-bounded step of allocation ``job_id`` on ``node`` and return at
        once (see :mod:`hpkctl.jobs.steps`): the step runs as long as the returned srun does; ``notify``:
        its task's output lines come back to :meth:`StepProcess.wait_changes`."""
        return steps.start_step(self._commands, job_id, argv, name=name, node=node, cpus=cpus,
                                memory_mb=memory_mb, gpus=gpus, gres_name=gres_name, output=output, workdir=workdir,
                                srun_log=srun_log, overlap=overlap, notify=notify)

    def cancel_step(self, step_id: str, *, signal: str | None = None) -> None:
        """``scancel [--signal=SIG] J.S``: only the step's task gets the signal; without one the step is
        killed. A step that already ended is not an error (the one ``scancel`` of :meth:`cancel`)."""
        steps.check_step(step_id)
        scancel(self._commands, step_id, signal=signal)

    async def exec_step(self, job_id: str, *, pod_dir: Path, container: str, command: Sequence[str],
                        tty: bool = False, stdin: bool = False, node: str = "") -> Step:
        """Start ``command`` in ``container`` of the running pod of job ``job_id`` (pod directory
        ``pod_dir``) as a new step of that job: ``srun --overlap --jobid=ID ... /bin/bash
        POD_DIR/job/job.sh exec CONTAINER [--tty] -- COMMAND...`` (see :mod:`hpkctl.jobs.step`).

        Returns once srun runs; the caller streams its output, feeds its input and awaits
        ``Step.wait()`` for the exit code. Only the job's owner can do this. ``SlurmUnavailable``
        when srun cannot be started at all. ``node``: the node the pod runs on (else the first)."""
        from hpkctl.jobs.step import start_step

        if "_" in job_id:  # a batch's element A_i: its own id (squeue, off the event loop)
            import asyncio  # not at the top: `hpkctl run --detach` never imports it (tests/misc/test_cli_imports.py)

            job_id = await asyncio.to_thread(allocation_id, self._commands, job_id)
        return await start_step(self._commands, job_id=job_id, pod_dir=pod_dir, container=container,
                                command=command, tty=tty, stdin=stdin, node=node)

    def wait_for(
        self,
        job_ids: Iterable[str],
        *,
        until: Callable[[Snapshot], bool] = _all_finished,
        backoff: Sequence[float] = DEFAULT_BACKOFF,
        timeout: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> dict[str, JobInfo | None]:
        """Poll ``job_ids`` until ``until(snapshot)`` holds (default: all finished); the last snapshot.

        Each round is one ``query`` for the jobs not yet finished; a job that is finished in
        squeue or gone from it is resolved once with ``final`` (for its exit code) and then
        not asked about again. ``None`` in the snapshot means Slurm has no record of that job.
        Rounds are ``backoff`` seconds apart, the last value repeating (``hpkctl.jobs.poll``);
        ``sleep`` and ``clock`` are parameters so tests need not wait. Raises ``TimeoutError``
        when ``timeout`` seconds pass first.
        """
        ids = unique_ids(job_ids)
        done: dict[str, JobInfo | None] = {}

        def step() -> dict[str, JobInfo | None] | None:
            live = [j for j in ids if j not in done]
            current: dict[str, JobInfo | None] = dict(self.query(live)) if live else {}
            ended = [j for j in live if _ended(current.get(j))]
            finals = self.finals(ended) if ended else {}
            for j in ended:
                info = finals.get(j) or current.get(j)
                if _ended(info):
                    done[j] = info
                else:
                    current[j] = info
            snapshot = {j: done[j] if j in done else current.get(j) for j in ids}
            return snapshot if until(snapshot) else None

        try:
            return poll(step, every=backoff, timeout=timeout, what="Slurm jobs", sleep=sleep, clock=clock)
        except TimeoutError as e:
            waiting = ", ".join(j for j in ids if j not in done) or "none"
            raise TimeoutError(f"Slurm jobs not done after {timeout:g} s (still running: {waiting})") from e

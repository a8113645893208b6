"""The seam between the front ends (the kubelet, ``hpkctl run``, ``hpkctl stop --all``) and the way a
pod runs on Slurm: what a *pod provider* promises, in the shape of virtual-kubelet's
``PodLifecycleHandler`` + ``PodNotifier`` and interLink's plugin API (create, delete, status, logs,
exec), with the Slurm-specific needs made explicit (adoption, one query for many pods, a stop
sequence that must not hold a worker).

Why a seam: the pod-as-a-job lifecycle (an intent record before ``sbatch``, the uid in the job comment,
adoption of a job found by that uid, mark-deleting + ``scancel --signal=TERM --batch`` + grace +
``scancel``, status from one ``squeue`` plus the status files) was written three times. It now lives
behind this Protocol, once per way of running a pod: :mod:`hpkctl.provider.jobpod` (a Slurm job per
pod) is the first; pods as job steps in held allocations (pilot mode) are the second. Nothing outside
a provider knows its record format, its pod directory's status files or its Slurm commands.

Threads (the kubelet's; ``hpkctl run`` and ``stop`` call everything from their one thread):

- ``create``, ``delete``, ``give_up``: a reconcile worker, at most one per uid at a time, several
  uids at once: an implementation is thread-safe across uids and need not be for one uid.
- ``statuses``, ``refresh_tokens``, ``clean``: the status loop (one thread); ``pod_statuses`` and
  ``unstartable``: a one-thread front end (``hpkctl status/logs``, following a run).
- ``log_file``, ``container_run``, ``log_complete``: the HTTPS server, *off* its event loop (they read
  files); ``exec``: a coroutine on the server's event loop.
- ``leftovers``, ``start``: once, before any of the above.

Nothing here blocks for long: a pull, a grace period or an ``sbatch`` timeout is an answer that says
when to ask again (``Created.retry_after``, ``Deletion.recheck_after``), never a wait. Every operation
may raise :class:`hpkctl.jobs.SlurmError` (Slurm cannot be asked now: retry later) or ``OSError`` (its
state directory cannot be written: retry later); a pod that can never run is a
:class:`hpkctl.errors.PodError` with a Kubernetes reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hpkctl.errors import PodError
from hpkctl.pod.objects import ObjectSource

if TYPE_CHECKING:  # a workload's status: hpkctl run's job arrays (the module imports the records)
    from hpkctl.pod.status import PodStatus  # (and these two only in annotations: `hpkctl run` needs neither)
    from hpkctl.provider.tokens import TokenSource
    from hpkctl.provider.workloads import ArrayStatus


@dataclass(frozen=True)
class PodRef:
    """Which pod: always by uid (a pod deleted and created again under its name is another pod); the
    namespace and name are for messages, logs and the records."""

    uid: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodRef:
        meta = pod.get("metadata") or {}
        return cls(uid=str(meta.get("uid") or ""), namespace=str(meta.get("namespace") or "default"),
                   name=str(meta.get("name") or ""))


@dataclass(frozen=True)
class Note:
    """Something a provider did or saw that the pod's events should say (the kubelet posts it as an
    event, ``hpkctl run`` prints it as a warning): e.g. ``TimeLimitLowered``."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class PodInputs:
    """What ``create`` needs besides the pod: its ConfigMaps and Secrets (the API server's, or a
    manifest's), the Services for its environment variables, and how to say that a parked pod (its
    images being pulled) may be created now (``ready(uid)``: the kubelet re-queues the pod)."""

    objects: ObjectSource | None = None
    services: Sequence[Mapping[str, Any]] = ()
    ready: Callable[[str], None] | None = None  # called from a pull thread when a parked pod can go on


class ImagePullFailed(PodError):
    """``create`` could not pull the pod's images (reason ``ErrImagePull``, ...): the caller shows the
    pod waiting with that reason (``ImagePullBackOff`` from the second failure on) and tries again after
    a back-off; the next ``create`` pulls again."""


class Outcome(str, Enum):
    SUBMITTED = "submitted"  # a new job (``job_id``)
    ADOPTED = "adopted"  # a job a previous process submitted for this uid (``job_id``, ``where``)
    PULLING = "pulling"  # parked while its images are pulled; ``inputs.ready(uid)`` says when to go on
    RAN_BEFORE = "ran-before"  # terminal in the API and no job left: never run again, nothing to report
    RETRY = "retry"  # cut short (``sbatch`` timed out: a job may exist): call ``create`` again after ``retry_after``


@dataclass(frozen=True)
class Created:
    """``create``'s answer. With ``ADOPTED`` and ``final`` the API's terminal phase stands: the job is
    only remembered (a delete cancels it if it still runs), its status is not reported again."""

    outcome: Outcome
    job_id: str = ""
    where: str = ""  # ADOPTED: where the job was found, for the log
    final: bool = False
    retry_after: float = 0.0
    images: tuple[str, ...] = ()  # PULLING: what is being pulled
    notes: tuple[Note, ...] = ()
    warnings: tuple[str, ...] = ()  # the translation's warnings, for the log
    tokens_later: bool = False  # SUBMITTED without its projected tokens: the caller writes them (refresh_tokens)


@dataclass(frozen=True)
class Deletion:
    """``delete``'s answer: ``done`` (the pod's job has ended or was cancelled; its record says
    stopped), else ask again after ``recheck_after`` seconds. ``killing``: this call began stopping a
    job that still ran (the kubelet posts ``Killing`` once); ``final``: the containers' last states,
    read as the pod went (``None`` when there is nothing to read: ``report=False``, no job)."""

    done: bool
    job_id: str = ""
    recheck_after: float = 0.0
    killing: bool = False
    cancelled: bool = False
    final: StatusReport | None = None


@dataclass(frozen=True)
class Watched:
    """A pod the caller wants the status of: its ref, its current object (the containers to report
    come from its spec) and the job ``create`` answered (``""``: none); pods being deleted are followed
    (their job is part of the query) but not reported."""

    ref: PodRef
    pod: Mapping[str, Any]
    job_id: str
    reread: bool = False  # the caller could not deliver this pod's last report: read and report it again


@dataclass(frozen=True)
class ProbeKill:
    """A probe stopped run ``run`` (0-based restart count) of ``container``: ``text`` is the probe's
    own line ("Liveness probe failed: ..."). Reported as long as its file is there: the caller dedupes
    by (container, run)."""

    container: str
    run: int
    text: str


@dataclass(frozen=True)
class Failure:
    """The pod failed for a reason found while watching it (e.g. ``SlurmNeverStarts``, its job was
    cancelled by the provider): the caller fails it as it fails a pod that cannot run."""

    reason: str
    message: str


@dataclass(frozen=True)
class StatusReport:
    """One pod's status, reported only when it may have changed since the last report.

    ``status`` is the pod's status (Kubernetes' terms); with ``keep_containers`` it carries no
    containers and the last reported ones stand (the pod directory vanished). ``final``: the pod will
    not change again (its job ended and its status is terminal): stop asking."""

    uid: str
    status: PodStatus | None = None
    keep_containers: bool = False
    final: bool = False
    failure: Failure | None = None
    notes: tuple[Note, ...] = ()
    probe_kills: tuple[ProbeKill, ...] = ()


@dataclass(frozen=True)
class Leftover:
    """A pod a previous process of this front end (a kubelet before its restart) left a record of."""

    ref: PodRef
    job_id: str
    state: str  # "submitting" | "submitted" | "failed" | "stopped"
    stopped_at: float = 0.0
    #: the pod as it was submitted (reads it: call only for a pod the API no longer has; a stand-in
    #: with its name and no spec when nothing was kept)
    saved: Callable[[], Mapping[str, Any]] = field(default=lambda: {}, compare=False)

    @property
    def live(self) -> bool:
        """A job may run for it (submitted, or being submitted when the process stopped)."""
        return self.state in ("submitting", "submitted")


@dataclass(frozen=True)
class ContainerRun:
    """Where a container is, for ``logs``/``exec``/``attach``: ``running`` now, or ``exit_code`` (text)
    once it terminated, else waiting."""

    running: bool
    exit_code: str | None = None


@runtime_checkable
class ExecSession(Protocol):
    """A command started in a running container (``kubectl exec``): its streams, its end. The job
    provider's is :class:`hpkctl.jobs.Step` (an ``srun --overlap`` step)."""

    async def read_stdout(self) -> bytes: ...

    async def read_stderr(self) -> bytes: ...

    async def write_stdin(self, data: bytes) -> None: ...

    def close_stdin(self) -> None: ...

    def resize(self, width: int, height: int) -> None: ...

    def terminate(self) -> None: ...

    async def wait(self) -> int: ...

    def start_failure(self, exit_code: int) -> str | None: ...

    def close(self) -> None: ...


class PodProvider(Protocol):
    """How pods run. See the module docstring for threads and errors; each method says what it
    promises. A second implementation plugs into the kubelet without touching it
    (``tests/provider/test_fake_provider.py`` runs the kubelet's ``PodManager`` on a fake one)."""

    @property
    def slurm_calls(self) -> int:
        """Slurm queries of the status rounds so far (bench/: Slurm commands per poll)."""

    @property
    def stop_queries(self) -> int:
        """Slurm queries of stop sequences so far (bench/: deleting many pods)."""

    def start(self) -> None:
        """Before the first ``create``: make the state the provider writes (directories, the change log)."""

    def leftovers(self) -> list[Leftover]:
        """Every pod a previous process left a record of (any state), read once at start."""

    def create(self, pod: Mapping[str, Any], inputs: PodInputs) -> Created:
        """Make the pod run, exactly once per uid, even across crashes: its intent is recorded before
        anything outside the process exists; a job a previous process (or a cut-short call) made for
        the uid is adopted, never duplicated; a pod terminal in the API, or that ran but whose job left
        no trace, is never run again (``PodError`` ``JobLost`` for the latter). Raises ``PodError``
        when the pod cannot run (reason ``CreateContainerConfigError``: retry after a back-off;
        ``ErrImagePull``: its images could not be pulled; ``SlurmRejected``; the translator's reasons).
        Synchronous, on the uid's worker; never waits for a pull (``PULLING``) or a Slurm timeout
        (``RETRY``)."""

    def give_up(self, ref: PodRef) -> None:
        """Remember that the pod will never run here (it failed before a job existed), so that a
        restart does not submit it: idempotent."""

    def delete(self, ref: PodRef, *, grace: float | None, pod: Mapping[str, Any], report: bool = True) -> Deletion:
        """One step of the pod's stop sequence, never blocking for its grace: the first call marks the
        pod as deleted (so its status says it was deleted, not killed by its time limit) and sends its
        job's batch shell TERM (which runs preStop, SIGTERM, the grace period, SIGKILL); later calls
        check whether the pod finished; once it did, or ``grace`` (seconds; ``None``: the pod's own
        terminationGracePeriodSeconds) plus a margin is up, the job is cancelled and the record says
        stopped (``done``). A pending job is cancelled at once. ``report``: read the containers' last
        states into ``Deletion.final``. Call again after ``recheck_after`` until ``done``."""

    def statuses(self, pods: Sequence[Watched], *, now: float | None = None) -> list[StatusReport]:
        """The status of every pod in ``pods`` that may have changed since its last report, from one
        Slurm query for all of them (at most every ``[kubelet] slurm_poll``) and the status files of
        those the change log or Slurm says changed. A pod whose job can never start is cancelled and
        reported with a ``failure``. Synchronous, on the status loop."""

    def pod_statuses(self, refs: Sequence[PodRef], *, fresh: bool = True,
                     now: float | None = None) -> dict[str, PodStatus | ArrayStatus]:
        """virtual-kubelet's ``GetPodStatus`` for many pods at once, for the one-thread front ends
        (``hpkctl status``, following a run, ``hpkctl logs -f``): each pod's status now, read from its
        files, with ONE Slurm query for all their jobs (one ``squeue``; sacct/scontrol only for jobs
        that left the queue), never one per pod; a workload run as a job array (``hpkctl run`` of a
        Job...) answers its ``ArrayStatus``; a pilot pod whose files say it runs is also looked for among
        Slurm's running steps (one ``squeue --steps`` for all, only when ``fresh``): a step killed before its
        script's last word fails the pod, as a vanished job does. ``fresh=False``: Slurm's last answer while it is at most
        ``slurm_poll`` old (``now``: the caller's clock), so a caller reading the files every tick asks
        Slurm at that pace. A pod with no record here is a ``KeyError``; one odd record shows its own
        problem as its status, never hides the others."""

    def unstartable(self, ref: PodRef, pod: Mapping[str, Any], *, now: float | None = None) -> Note | Failure | None:
        """For the one-thread front ends, what ``statuses`` does on the status loop for a pod whose job
        Slurm keeps pending for ever (from the last ``pod_statuses``): a time limit above the partition's
        is lowered to it once (a ``TimeLimitLowered`` note), and a job that never starts is a
        ``SlurmNeverStarts`` failure, which the caller ends with ``delete``; ``None``: nothing to do."""

    def refresh_tokens(self, ref: PodRef, pod: Mapping[str, Any], objects: TokenSource) -> None:
        """Write the pod's projected service-account tokens again (they expire)."""

    def clean(self, keep: float) -> int:
        """Remove what pods stopped more than ``keep`` seconds ago left (records, directories); how many."""

    def log_file(self, uid: str, container: str, *, previous: bool = False) -> Path | None:
        """The container's log (of the run before its last restart with ``previous``); ``None`` before
        the container has one. Reads files: call off an event loop."""

    def container_run(self, uid: str, container: str) -> ContainerRun:
        """Whether the container runs now, or how it ended. Reads files: call off an event loop."""

    def log_complete(self, uid: str, container: str, *, policy: str) -> bool:
        """Whether the container's log is complete (it ended and will not run again under ``policy``)."""

    def exec(self, uid: str, container: str, command: Sequence[str], *, tty: bool,
             stdin: bool) -> Awaitable[ExecSession]:
        """Start ``command`` in the running ``container`` (``kubectl exec``; ``attach`` follows
        ``log_file``). A coroutine for the server's event loop; ``HpkError`` when it cannot start."""


__all__ = ["ContainerRun", "Created", "Deletion", "ExecSession", "Failure", "ImagePullFailed", "Leftover", "Note",
           "Outcome",
           "PodInputs", "PodProvider", "PodRef", "ProbeKill", "StatusReport", "Watched"]

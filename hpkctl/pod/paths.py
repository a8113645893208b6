"""The pod directory: every path in it, and the status-file protocol, named once.

``<state_dir>/pods/<uid>/`` belongs to one pod. Before submission hpkctl writes ``job/`` and ``env/``,
``volumes/`` for volumes of files, and makes ``logs/`` empty (Slurm opens ``logs/slurm.out`` before
the script runs); the job makes ``status/``, ``run/``, ``etc/`` and ``tmp/`` and writes the
containers' logs into ``logs/`` (``hpkctl.pod.poddir`` says who makes what, and why). Status files
are text, one value and a trailing newline, written as temp file + ``mv`` so readers never see half
a value (DEVELOPERS.md lists what each one means). The job (``sbatch/runtime.sh``, and the job
script's own refusals in ``sbatch/pod.sh.j2``) writes them under the same names;
tests/pod/test_status_protocol.py checks that writer and reader agree.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

#: The pod directory's parts an earlier job wrote into (``logs/`` too, though hpkctl makes it): a
#: resubmitted pod's are moved aside (write_pod_dir), so a new job never inherits another's verdict.
JOB_DIRS = ("status", "logs", "run")

# Pod-level status files (status/NAME).
JOB_STARTED = "job.started"  # RFC 3339 time the batch script started
JOB_NODE = "job.node"  # hostname -s of the batch host
JOB_ID = "job.id"  # $SLURM_JOB_ID
POD_IP = "pod.ip"
HOST_IP = "host.ip"
POD_TERMINATING = "pod.terminating"  # the job got SIGTERM (cancel, time limit)
POD_DELETING = "pod.deleting"  # written by hpkctl before it signals a delete (else TERM = the time limit)
POD_FAILED = "pod.failed"  # first line a CamelCase reason, the rest a message
POD_DONE = "pod.done"  # the pod's exit code; the job exits with it
POD_COMPLETING = "pod.completing"  # the main containers have ended: only sidecars are left to stop
DEADLINE_START = "deadline.start"  # epoch seconds the activeDeadlineSeconds timer counts from
#: where Slurm writes its own notices for an element of a job array of pods (time limit, cancel, a
#: script that could not start), beside the pods' directories: ``.slurm/ARRAY_I.out`` (the pod's own
#: output: its logs/)
NOTICES_DIR = ".slurm"

# Per-container status files (status/<container>.SUFFIX).
STARTED = "started"
FINISHED = "finished"
EXITCODE = "exitcode"
RESTARTS = "restarts"
LAST_EXITCODE = "last-exitcode"
LAST_FINISHED = "last-finished"
READY = "ready"  # 1/0: the container passes its readiness probe (1 without one, once postStart returned)
POST_START = "poststart"  # the postStart hook is running: the container is not Running yet
MESSAGE = "message"  # the terminated state's message, bytes as written (no newline added)
HOOK_FAILED = "hook-failed"  # FailedPostStartHook or FailedPreStopHook, then the message
LAST_MESSAGE = "last-message"
LAST_HOOK_FAILED = "last-hook-failed"
REASON = "reason"  # the terminated state's reason when the job knows it (OOMKilled: the OOM killer struck)
LAST_REASON = "last-reason"
BACKOFF = "backoff"  # seconds of the restart back-off under way: the container is waiting (CrashLoopBackOff)

STARTED_PROBE = "started-probe"  # time the startup probe passed (written at once without one; probes only)
PROBE_KILL = "probe-kill"  # "Liveness probe failed: ..." when a probe stopped the container
LAST_PROBE_KILL = "last-probe-kill"


#: Secret values the script refers to as ``"${HPK_SECRETS[i]}"`` (``$(VAR)`` of a Secret-backed
#: variable in command/args/workingDir): NUL-separated, 0600, loaded by the job; never in job.sh.
SECRETS_FILE = "env/secrets"


#: The hpkctl runtime (``sbatch/runtime.sh``) that job scripts source, one file per version and
#: content under the profile's state directory (``hpkctl.pod.runtimefile`` installs it; never deleted).
RUNTIME_DIR = "runtime"


def runtime_path(state_dir: str, version: str, sha256: str) -> str:
    """``<state_dir>/runtime/hpk-runtime-<version>-<sha12>.sh``: the name changes with the content."""
    return posixpath.join(state_dir, RUNTIME_DIR, f"hpk-runtime-{version}-{sha256[:12]}.sh")


def inside(root: Path, path: Path) -> bool:
    """Whether ``path``, with ``..`` and every existing symlink resolved, lies in ``root`` (or is it)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root + os.sep)


def pod_dir_for(state_dir: str, uid: str) -> str:
    """Where the pod with ``uid`` lives under a profile's (expanded) ``state_dir``."""
    return posixpath.join(state_dir, "pods", uid)


#: The change log under a profile's ``state_dir``: after every status write the job (``hpk_changed``
#: in sbatch/runtime.sh) creates ``changes/<uid>``, named after its pod directory
#: (``<state_dir>/pods/<uid>``). The kubelet creates the directory, lists it once per status round
#: and removes each marker before it reads that pod's files, so a write after the read leaves a new
#: marker for the next round. One readdir of a small directory instead of a stat per live pod: on
#: GPFS/Lustre the cost follows the pods that changed, and it works across nodes, where inotify does not.
CHANGES_DIR = "changes"


def changes_dir_for(state_dir: str) -> str:
    """The change-log directory under a profile's (expanded) ``state_dir``."""
    return posixpath.join(state_dir, CHANGES_DIR)


@dataclass(frozen=True)
class PodDir:
    """Paths inside one pod directory. Relative names (``rel_*``) are what the job script uses
    after ``cd "$HPK_POD_DIR"``; ``Path`` properties are for readers on the submit host."""

    root: Path

    # -- relative names, also used by the renderer
    JOB_SCRIPT = "job/job.sh"
    POD_JSON = "job/pod.json"

    # -- absolute paths for readers
    @property
    def status_dir(self) -> Path:
        return self.root / "status"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def pod_json(self) -> Path:
        return self.root / self.POD_JSON

    @property
    def job_script(self) -> Path:
        return self.root / self.JOB_SCRIPT

    def log(self, container: str, *, previous: bool = False) -> Path:
        return self.logs_dir / (f"{container}.previous.log" if previous else f"{container}.log")

    def status_file(self, name: str) -> Path:
        return self.status_dir / name

    def container_file(self, container: str, suffix: str) -> Path:
        return self.status_dir / f"{container}.{suffix}"

    def read(self, name: str) -> str | None:
        """One pod-level status value, ``None`` when not (yet) written."""
        return _read(self.status_file(name))

    def read_container(self, container: str, suffix: str) -> str | None:
        return _read(self.container_file(container, suffix))

    def read_message(self, container: str, suffix: str = MESSAGE) -> str | None:
        """A termination message as written (trailing newlines kept; invalid UTF-8 replaced)."""
        try:
            return self.container_file(container, suffix).read_bytes().decode("utf-8", "replace")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, name: str) -> bool:
        return self.status_file(name).exists()


@dataclass(frozen=True)
class ListedPodDir(PodDir):
    """A pod directory whose ``status/`` was listed once (:meth:`of`): a status name not in the listing
    reads as not written, with no ``open``. A status read asks for ~20 names per container, most of
    them not written (all of them before the job starts, when ``status/`` does not exist yet): each a
    failed lookup, a metadata round trip on GPFS/Lustre. The reads are of the moment of the listing;
    a file written after it is read at the next round (its change marker follows it)."""

    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, root: Path) -> ListedPodDir:
        try:
            return cls(root, frozenset(os.listdir(root / "status")))
        except (FileNotFoundError, NotADirectoryError):
            return cls(root)

    def read(self, name: str) -> str | None:
        return super().read(name) if name in self.names else None

    def read_container(self, container: str, suffix: str) -> str | None:
        return super().read_container(container, suffix) if f"{container}.{suffix}" in self.names else None

    def read_message(self, container: str, suffix: str = MESSAGE) -> str | None:
        return super().read_message(container, suffix) if f"{container}.{suffix}" in self.names else None

    def exists(self, name: str) -> bool:
        return name in self.names


def _read(path: Path) -> str | None:
    try:
        return path.read_text().rstrip("\n")
    except (FileNotFoundError, NotADirectoryError):
        return None


def read_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None

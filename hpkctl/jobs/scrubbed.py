"""The one place a short Slurm command's process starts: exactly the call's environment, a session of its own.

``subprocess.Popen`` with ``env=`` gives the child that mapping and nothing else, so a
``SLURM_JOB_ID`` leaked into this process never reaches sbatch, and nothing process-wide changes
(any number of threads may run commands at once, each with its own environment). The child starts
in a new session, so :func:`hpkctl.jobs.command._kill_group` can kill everything a site's wrapper
script around sbatch started.

This was plumbum's ``LocalCommand`` on a machine whose own environment was empty and frozen (plumbum
merges its import-time copy of ``os.environ`` into every ``env=``). It started the same process
(``Popen(argv, executable=exe, stdin/stdout/stderr=PIPE, cwd=os.getcwd(), env=env,
start_new_session=True)``), but importing plumbum costs ``hpkctl run`` ~0.04-0.07 s before its
sbatch (it brings urllib, ssl, http.client and email, and runs ``uname -p`` for ``platform``), which
is a fifth of the budget issue 23.2 gives ``hpkctl run`` over a bare sbatch.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import IO, Protocol, cast


class Proc(Protocol):
    """What is used of the process started (a ``subprocess.Popen``; fakes in tests provide the same)."""

    pid: int
    returncode: int | None
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    def communicate(self, input: bytes | None = None, timeout: float | None = None) -> tuple[bytes, bytes]: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...


def popen(exe: str, args: Sequence[str], *, env: dict[str, str]) -> Proc:
    """Start ``exe args...`` with exactly ``env``, in a new session (so its whole group can be killed)."""
    return cast(Proc, subprocess.Popen([exe, *args], executable=exe, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, env=dict(env), start_new_session=True))

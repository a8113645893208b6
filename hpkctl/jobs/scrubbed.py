"""plumbum without its process-wide environment: the machine every Slurm command runs on.

plumbum's ``LocalMachine._popen`` merges ``local.env`` (a copy of ``os.environ`` taken when plumbum
is imported) into whatever ``env=`` a command is given, so ``env=`` alone can add variables but never
remove one: a ``SLURM_JOB_ID`` leaked into this process would reach sbatch. Commands here run on
``SCRUBBED``, a ``LocalMachine`` whose own environment is empty and frozen, so the call's ``env=`` is
exactly what the process gets, and nothing process-wide changes (any number of threads may run
commands at once, each with its own environment).

Imported by :meth:`hpkctl.jobs.command.Commands.run` when it first runs a command, not with
``hpkctl.jobs``: plumbum brings platform, subprocess and its paths, which a command that runs no
Slurm command (``--help``, ``render``) need not pay (issue 23.2); and urllib.request (http.client,
email, ssl) is loaded only if something reads it (:func:`_urllib_request_on_first_use`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import platform
import sys
import threading
import types
import urllib
from collections.abc import Iterator, Sequence
from typing import IO, Any, NoReturn, Protocol, cast


class _OnFirstUse(types.ModuleType):
    """Stands in ``sys.modules`` (and as its package's attribute) for a module until one of its names
    is read: then the real module is imported, once whichever threads read at the same time, and its
    names copied here for whoever holds this one."""

    _lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        with _OnFirstUse._lock:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)  # sets the package's attribute to the real one
            if real is not self:
                self.__dict__.update(real.__dict__)
        return getattr(real, name)


def _urllib_request_on_first_use() -> None:
    """Import ``urllib.request`` when one of its names is first read, not when plumbum imports it.

    plumbum imports it for ``LocalPath.as_uri`` alone, which hpkctl never calls; loading it brings
    http.client, email and ssl: ~0.13 G of the ~0.69 G instructions `hpkctl run --detach` executed
    (callgrind, issue 23.2). A process that has imported it already (the kubelet: the kubernetes
    client did) keeps it; one that imports it later (``from urllib.request import ...``) gets the real
    module then, whichever thread reads it first (the import lock serialises the import itself).
    """
    if "urllib.request" in sys.modules:
        return
    spec = importlib.util.find_spec("urllib.request")
    if spec is None:
        return
    stub = _OnFirstUse("urllib.request")
    stub.__spec__ = spec
    sys.modules["urllib.request"] = stub
    setattr(urllib, "request", stub)  # noqa: B010 (`import urllib.request; urllib.request.X` finds it)


@contextlib.contextmanager
def _no_uname_p() -> Iterator[None]:
    """While plumbum is imported, ``platform.uname()`` has a blank processor, not the output of the
    ``uname -p`` process Python starts to learn it the first time anything reads the whole tuple.

    plumbum's ``LocalMachine`` class body reads ``platform.uname()[0]`` (the system's name, which
    ``os.uname()`` gave without a process); indexing the tuple computes every field, and the
    processor's is a fork and exec of ``uname``: ~6 ms of ``hpkctl run --detach`` (issue 23.2). The
    blank is taken back afterwards, so whatever asks ``platform.processor()`` later still gets
    ``uname -p``'s answer. Nothing changes where ``uname_result`` keeps the field elsewhere.

    Not thread-safe, and need not be: another thread asking for the processor during the import
    would get the blank, and nothing in hpkctl or what it imports asks (plumbum reads the system's
    name only; the import happens once, at a process's first Slurm command)."""
    fields: dict[str, Any] = getattr(platform.uname(), "__dict__", {"processor": None})
    filled = "processor" not in fields
    if filled:
        fields["processor"] = ""  # where functools.cached_property keeps the computed value
    try:
        yield
    finally:
        if filled:
            fields.pop("processor", None)


_urllib_request_on_first_use()

with _no_uname_p():
    from plumbum.machines.env import BaseEnv  # noqa: E402 (after the lines above)
    from plumbum.machines.local import LocalCommand, LocalEnv, LocalMachine  # noqa: E402
    from plumbum.path.local import LocalPath  # noqa: E402


class Proc(Protocol):
    """What is used of the process plumbum starts (a ``subprocess.Popen`` behind plumbum's wrapper)."""

    pid: int
    returncode: int | None
    custom_encoding: str | None
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    def communicate(self, input: bytes | None = None, timeout: float | None = None) -> tuple[bytes, bytes]: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...


class _EmptyEnv(LocalEnv):
    """An environment with no variables that refuses every change (so it stays empty for all threads)."""

    __slots__ = ()

    def __init__(self) -> None:
        BaseEnv.__init__(self, LocalPath, os.path.pathsep, _curr={})

    def getdict(self) -> dict[str, str]:
        return {}  # BaseEnv.getdict would write PATH="" into the shared mapping

    def _frozen(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise TypeError("the scrubbed machine's environment is empty and read-only; pass env= per call")

    __setitem__ = __delitem__ = pop = clear = update = __call__ = _frozen


class _ScrubbedMachine(LocalMachine):
    """``LocalMachine`` whose base environment is empty: a command gets exactly its call's ``env=``."""

    __slots__ = ()
    env = _EmptyEnv()


SCRUBBED = _ScrubbedMachine()


class _ScrubbedCommand(LocalCommand):
    """``LocalCommand`` that starts its process on ``SCRUBBED`` instead of the global ``local``."""

    __slots__ = ()

    @property
    def machine(self) -> LocalMachine:
        return SCRUBBED


def popen(exe: str, args: Sequence[str], *, env: dict[str, str]) -> Proc:
    """Start ``exe args...`` with exactly ``env``, in a new session (so its whole group can be killed)."""
    return cast(Proc, _ScrubbedCommand(exe).popen(list(args), env=env, new_session=True))

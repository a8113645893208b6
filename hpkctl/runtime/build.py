"""``apptainer build`` of hpkctl's own images (``hpkctl build``), and the hpkctl wheel they contain.

The build's output is streamed as it comes (downloads and the image packing take minutes); when it
fails, :func:`diagnose` reads the output for the step that failed (the ``hpk-build-step:`` lines the
definitions print, and Apptainer's own phases) and for the usual causes on HPC sites, and the error
says what the site must allow: unprivileged (``--fakeroot``) builds, HTTPS from the build node,
disk space.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol, TextIO, cast

from plumbum import local
from plumbum.commands.processes import CommandNotFound

from hpkctl.errors import HpkError

#: What a build needs from the site, said after every failure (the specific cause comes first).
SITE_NEEDS = (
    "unprivileged builds: `apptainer build --fakeroot` needs unprivileged user namespaces and an entry for you in "
    "/etc/subuid and /etc/subgid (or Apptainer's fakeroot fallback); where that is not allowed, build as root or on "
    "another machine and copy the image, or set [apptainer] build_flags",
    "network on the build node: HTTPS to the base image's registry (Docker Hub), deb.debian.org / "
    "dl-cdn.alpinelinux.org, dl.k8s.io, github.com and pypi.org / files.pythonhosted.org (JSC: build on a login node; "
    "compute nodes are offline)",
    "disk space: a few GB in $APPTAINER_TMPDIR (default /tmp) and $APPTAINER_CACHEDIR (default ~/.apptainer/cache) "
    "and room for the image (~0.5 GB) in [apptainer] image_cache",
)

# (cause, needles): the first cause one of whose needles is in the output (INFO lines aside) is named.
_CAUSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a download was refused: its checksum is not the pinned one (a corrupt download, or the release file changed "
     "upstream); do not work around this: re-run, and if it persists compare with the project's published checksums",
     ("is not the pinned one", "does not list the pinned checksum", "computed checksum did not match",
      "do not match the hashes", "no pinned")),
    ("the disk is full (or a quota is exceeded)",
     ("no space left on device", "disk quota exceeded", "quota exceeded")),
    ("the build node cannot reach the network",
     ("could not resolve", "temporary failure resolving", "name resolution", "no such host", "dial tcp",
      "connection refused", "connection timed out", "i/o timeout", "network is unreachable",
      "tls handshake timeout", "failed to connect", "cannot download", "unable to connect", "failed to fetch",
      "connection reset")),
    ("fakeroot / unprivileged user namespaces are not available to you on this machine",
     ("could not use fakeroot", "fakeroot command not found", "no mapping entry found", "user namespaces are not",
      "user namespace not", "failed to create user namespace", "newuidmap", "newgidmap", "setgroups",
      "requires root privileges", "must be root")),
    ("permission denied: check that you may write [apptainer] image_cache and $APPTAINER_TMPDIR",
     ("permission denied",)),
)

# what apt, apk, pip, curl and the checksum tools print when they fail
_TOOL_ERROR = re.compile(r"^(ERROR\b|E: |error: |curl: \(\d+\)|sha\d+sum: |.*: FAILED$)")
STEP_MARK = "hpk-build-step: "
ERROR_MARK = "hpk-build-error: "


@dataclass(frozen=True)
class Failure:
    step: str  # which step failed, in words
    cause: str  # the likely cause, or ""
    detail: str  # the definition's own error line, or Apptainer's FATAL line, or ""


def diagnose(lines: Sequence[str]) -> Failure:
    """Which step of the build failed and why, from its output (the whole of it, or its tail)."""
    step, phase, detail, fatal, tool = "", "start", "", "", ""
    for line in lines:
        text = line.strip()
        if "Starting build" in text:
            phase = "bootstrap"
        elif "Running post scriptlet" in text:
            phase = "post"
        elif "Creating SIF file" in text:
            phase = "pack"
        if text.startswith(STEP_MARK):
            step = text[len(STEP_MARK):]
        if text.startswith(ERROR_MARK):
            detail = text[len(ERROR_MARK):]
        elif text.startswith("FATAL:") and not fatal:
            fatal = text.removeprefix("FATAL:").strip()
        elif _TOOL_ERROR.match(text):
            tool = text
    # the definition's own words first, then what the failing tool said, then Apptainer's summary
    detail = detail or tool or fatal
    where = {
        "start": "starting the build (before the base image was fetched)",
        "bootstrap": "fetching and unpacking the base image",
        "post": f"%post, step '{step}'" if step else "%post",
        "pack": "packing the image into a SIF file (mksquashfs)",
    }[phase]
    haystack = "\n".join(line for line in lines if not line.lstrip().startswith("INFO:")).lower()
    cause = next((text for text, needles in _CAUSES if any(n in haystack for n in needles)), "")
    return Failure(step=where, cause=cause, detail=detail)


def partial_path(sif: str) -> str:
    """Where ``apptainer build`` writes before the image is renamed into place (builds are serialised
    by :func:`image_lock`, so one name per image suffices)."""
    return f"{sif}.partial"


def build_command(apptainer: str, flags: Sequence[str], dest: str, definition: str) -> list[str]:
    """``apptainer build FLAGS DEST DEFINITION``."""
    return [apptainer, "build", *flags, dest, definition]


def wheel_command(python: str, source: str, outdir: str) -> list[str]:
    """Build hpkctl's wheel from a source checkout with what the venv has (no downloads)."""
    return [python, "-m", "build", "--wheel", "--no-isolation", "--outdir", outdir, source]


class _Proc(Protocol):
    """What is used of the process plumbum starts (a ``subprocess.Popen`` behind its wrapper)."""

    pid: int
    stdout: IO[bytes] | None

    def wait(self, timeout: float | None = None) -> int: ...


@contextlib.contextmanager
def image_lock(sif: str) -> Iterator[None]:
    """One build of an image at a time (``<sif>.lock``); pulls of pods do the same per image."""
    os.makedirs(os.path.dirname(sif) or ".", exist_ok=True)
    with open(f"{sif}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"hpkctl build: waiting for another build of {sif} to finish ({sif}.lock)", file=sys.stderr,
                  flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _stream(cmd: Sequence[str], *, out: TextIO, timeout: float, env: Mapping[str, str] | None,
            cwd: str | None, keep: int = 400) -> tuple[int, list[str], bool]:
    """Run ``cmd`` with stdout+stderr streamed line by line to ``out``. Returns (exit code, the last
    ``keep`` lines plus every step/error marker, timed out?). Ctrl-C stops the whole process group."""
    tail: collections.deque[str] = collections.deque(maxlen=keep)
    marks: list[str] = []
    try:
        proc = cast(_Proc, local[cmd[0]].popen(list(cmd[1:]), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, env=dict(os.environ if env is None else env),
                                               cwd=cwd, new_session=True))
    except (OSError, CommandNotFound) as exc:
        raise HpkError(f"cannot run {cmd[0]}: {getattr(exc, 'strerror', None) or 'not found'}",
                       hint="set [apptainer] binary in the site profile to Apptainer's path "
                            "(e.g. after 'module load apptainer')") from exc

    def stop() -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=10)
                return
            except subprocess.TimeoutExpired:
                continue

    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        stop()

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGTERM/SIGHUP (a batch system, a closed terminal) stop the build like Ctrl-C: the build runs in
    # its own session, so nothing else would reach it
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            print(line, file=out, flush=True)
            tail.append(line)
            if line.startswith((STEP_MARK, ERROR_MARK, "FATAL:")) or any(
                    p in line for p in ("Starting build", "Running post scriptlet", "Creating SIF file")):
                marks.append(line)
        rc = proc.wait()
    except BaseException:
        stop()
        raise
    finally:
        timer.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    lines = marks + [line for line in tail if line not in marks]
    # markers first keeps the phases in order for diagnose(); the tail carries the causes
    return rc, lines, timed_out.is_set()


def build_wheel(*, python: str, source: str, outdir: str, out: TextIO, timeout: float = 600.0) -> str:
    """Build hpkctl's wheel from the checkout ``source`` into ``outdir``; returns the wheel's path."""
    os.makedirs(outdir, exist_ok=True)
    for old in Path(outdir).glob("hpkctl-*.whl"):
        old.unlink()
    rc, lines, timed_out = _stream(wheel_command(python, source, outdir), out=out, timeout=timeout, env=None, cwd=source)
    wheels = sorted(Path(outdir).glob("hpkctl-*.whl"))
    if rc != 0 or timed_out or len(wheels) != 1:
        tail = "\n".join(lines[-15:])
        raise HpkError(f"building hpkctl's wheel failed{' (timed out)' if timed_out else ''}:\n{tail}",
                       hint="run it by hand: " + " ".join(wheel_command(python, source, outdir)) +
                            "; or pass --wheel with the wheel hpkctl was installed from")
    return str(wheels[0])


def apptainer_build(*, apptainer: str, flags: Sequence[str], sif: str, definition: str, image: str, out: TextIO,
                    cwd: str, timeout: float, env: Mapping[str, str] | None = None) -> None:
    """Build ``definition`` into ``sif`` (via a temporary name: no reader ever sees half an image).
    Raises :class:`HpkError` naming the failed step, the likely cause and what the site must allow."""
    tmp = partial_path(sif)
    Path(tmp).unlink(missing_ok=True)
    start = time.monotonic()
    try:
        rc, lines, timed_out = _stream(build_command(apptainer, flags, tmp, definition), out=out, timeout=timeout,
                                       env=env, cwd=cwd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if rc == 0 and not timed_out and os.path.isfile(tmp):
        os.replace(tmp, sif)
        return
    Path(tmp).unlink(missing_ok=True)
    failure = diagnose(lines)
    what = (f"timed out after {time.monotonic() - start:.0f} s" if timed_out else
            f"exit code {rc}" if rc != 0 else f"exit code 0 but no image at {tmp}")
    message = f"building the {image} image failed ({what}) while {failure.step}"
    if failure.detail:
        message += f": {failure.detail}"
    if failure.cause:
        message += f"\n  likely cause: {failure.cause}"
    needs = "\n".join(f"    - {n}" for n in SITE_NEEDS)
    raise HpkError(message, hint=f"the build's output is above; the build directory {cwd} is kept. "
                                 f"The site must allow:\n{needs}")


def python_executable() -> str:
    return sys.executable


__all__ = ["Failure", "SITE_NEEDS", "apptainer_build", "build_command", "build_wheel", "diagnose", "image_lock",
           "partial_path", "python_executable", "wheel_command"]

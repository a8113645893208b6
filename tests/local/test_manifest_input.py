"""Manifest input is bounded (issue 20.16): ``-f /dev/zero`` or an endless stdin to render, run and
pull ends in a clear error, not a MemoryError traceback after reading without end."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

import pytest

from hpkctl.cli import main
from hpkctl.local import manifest


@pytest.mark.parametrize("argv", [["render", "-f", "/dev/zero", "--site", "ci"],
                                  ["run", "-f", "/dev/zero", "--site", "ci"],
                                  ["pull", "-f", "/dev/zero", "--site", "ci"]])
def test_an_endless_file_is_refused_with_a_clear_error(argv: list[str], capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest, "MAX_MANIFEST", 1024 * 1024)  # the same code path, a smaller bound
    assert main(argv) == 125
    err = capsys.readouterr().err
    assert "/dev/zero: larger than 1 MiB, which no manifest is" in err and "Traceback" not in err


def test_an_endless_stdin_is_refused(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            b[:] = b"a" * len(b)
            return len(b)

    monkeypatch.setattr(manifest, "MAX_MANIFEST", 1024 * 1024)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Endless())))
    assert main(["render", "-f", "-", "--site", "ci"]) == 125
    assert "-: larger than 1 MiB" in capsys.readouterr().err


def test_the_real_bound_as_a_process_reading_a_pipe_that_never_ends() -> None:
    """The CLI as a user runs it: ``yes | hpkctl render -f -`` ends by itself, with the message."""
    feeder = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        done = subprocess.run([sys.executable, "-m", "hpkctl", "render", "-f", "-", "--site", "ci"],
                              stdin=feeder.stdout, capture_output=True, text=True, timeout=120, check=False)
    finally:
        feeder.kill()
        feeder.wait()
    assert done.returncode == 125 and "larger than 32 MiB" in done.stderr, done.stderr[-2000:]

"""tests/support/shellcheck.py: a pass is remembered for exactly those bytes and arguments, a failure never."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import shellcheck as sc


class _Cache:
    """pytest's cache, as far as the helper uses it (``mkdir``), in the test's own directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mkdir(self, name: str) -> Path:
        (self.root / name).mkdir(parents=True, exist_ok=True)
        return self.root / name


class _Config:
    def __init__(self, root: Path) -> None:
        self.cache = _Cache(root)


def test_a_pass_is_remembered_for_the_same_bytes_and_arguments_only(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(argv: list[str], **kw: Any) -> Any:
        runs.append(argv)
        return real_run(argv, **kw)

    monkeypatch.setattr(sc.subprocess, "run", counting_run)
    config: Any = _Config(tmp_path / "cache")
    script = tmp_path / "s.sh"
    script.write_text('#!/bin/bash\necho "$1" $2\n')
    assert sc.shellcheck(script, "-S", "warning", config=config).returncode == 0
    assert sc.shellcheck(script, "-S", "warning", config=config).returncode == 0
    assert len(runs) == 1, "the same bytes and arguments pass from the record"
    # other arguments are another check: the unquoted $2 is SC2086, severity info
    for _ in range(2):
        r = sc.shellcheck(script, "-S", "info", config=config)
        assert r.returncode == 1 and "SC2086" in r.stdout
    assert len(runs) == 3, "a failure is never remembered"
    script.write_text('#!/bin/bash\necho "$1" "$2"\n')
    assert sc.shellcheck(script, "-S", "warning", config=config).returncode == 0
    assert len(runs) == 4, "other bytes are checked again"
    assert len(list((tmp_path / "cache" / "shellcheck-passed").iterdir())) == 2


def test_without_a_cache_every_check_runs(tmp_path: Path) -> None:
    class NoCache:
        pass

    script = tmp_path / "s.sh"
    script.write_text("#!/bin/bash\necho $1\n")
    r = sc.shellcheck(script, "-S", "info", config=NoCache())  # type: ignore[arg-type]
    assert r.returncode == 1 and "SC2086" in r.stdout

"""hpkctl.files.write_atomic: whole files, the asked mode whatever the umask, no temporary left
behind, and the old content kept when the write fails."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpkctl.files import write_atomic


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=4096), mode=st.sampled_from([0o600, 0o644, 0o640, 0o755, 0o400]),
       sync=st.booleans())
def test_content_and_mode_are_the_asked_ones(tmp_path_factory: pytest.TempPathFactory, data: bytes, mode: int,
                                             sync: bool) -> None:
    d = tmp_path_factory.mktemp("w")
    path = d / "f"
    path.write_bytes(b"old content")
    old = os.umask(0o077)
    try:
        write_atomic(path, data, mode=mode, sync=sync, sync_dir=sync)
    finally:
        os.umask(old)
    assert path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert [p.name for p in d.iterdir()] == ["f"]  # no temporary file left


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "record.json"
    path.write_bytes(b"old")

    def full(*a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        write_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"precious")
    link = tmp_path / "pod-file"
    link.symlink_to(elsewhere)
    write_atomic(link, b"pod data", sync=False)
    assert elsewhere.read_bytes() == b"precious"
    assert not link.is_symlink() and link.read_bytes() == b"pod data"

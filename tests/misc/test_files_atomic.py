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


def test_private_dirs_makes_every_new_directory_0700(tmp_path: Path) -> None:
    """Issue 20.18: a kubelet started by hand left ~/.hpk at 0755 (os.makedirs gives the umask's mode
    to the directories above the last)."""
    from hpkctl.files import private_dirs

    (tmp_path / "kept").mkdir(mode=0o755)
    os.chmod(tmp_path / "kept", 0o755)
    private_dirs(tmp_path / "kept" / "home" / ".hpk" / "kubelet")
    assert [oct((tmp_path / "kept" / p).stat().st_mode & 0o777) for p in ("", "home", "home/.hpk",
                                                                          "home/.hpk/kubelet")] == \
        ["0o755", "0o700", "0o700", "0o700"]


def test_an_exclusive_lock_refuses_a_second_holder_and_names_the_first(tmp_path: Path) -> None:
    """Issue 20.14/20.17: a second kubelet or hpkctl start is refused with the holder's pid; the
    lock ends with its holder."""
    import subprocess
    import sys

    from hpkctl.files import ExclusiveLock, LockHeld

    path = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, pathlib; from hpkctl.files import ExclusiveLock; "
                               f"ExclusiveLock(pathlib.Path({str(path)!r})).acquire(); print('held', flush=True); "
                               "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(LockHeld) as e:
            ExclusiveLock(path).acquire()
        assert e.value.holder == str(holder.pid)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    with ExclusiveLock(path) as lock:
        assert lock.locked and path.read_text() == f"{os.getpid()}\n"

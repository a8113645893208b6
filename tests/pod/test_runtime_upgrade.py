"""A job that waits in the queue while hpkctl is upgraded still runs the runtime it was written for:
the new version installs its own file beside the old one, and nothing removes the old one."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod import render, render_pod, runtimefile, write_pod_dir
from hpkctl.pod.runtimefile import Runtime, current_runtime
from tests.support.pods import pod_doc, records, stub_environment

SPEC = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox:1.36", "command": ["true"]}]}


def _upgrade(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    """hpkctl 9.9.9, whose runtime differs by one line."""
    old = current_runtime()
    data = old.data + b"# hpkctl 9.9.9\n"
    new = Runtime(data=data, sha256=hashlib.sha256(data).hexdigest(), version="9.9.9")
    monkeypatch.setattr(runtimefile, "current_runtime", lambda: new)
    monkeypatch.setattr(render, "current_runtime", lambda: new)
    return new


def test_a_queued_job_runs_the_runtime_it_names_after_an_upgrade(stub_env: dict[str, Any],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    profile = stub_env["profile"]
    queued = render_pod(pod_doc(SPEC), profile)
    root = write_pod_dir(queued)
    old_file = Path(queued.runtime)
    old_data = old_file.read_bytes()
    assert old_data == current_runtime().data

    new = _upgrade(monkeypatch)
    later = render_pod(pod_doc(SPEC, name="later", uid="00000000-0000-0000-0000-000000000009"), profile)
    write_pod_dir(later)
    new_file = Path(later.runtime)
    assert new_file != old_file and new_file.read_bytes() == new.data and "9.9.9" in new_file.name
    assert old_file.read_bytes() == old_data  # kept, unchanged
    assert sorted(p.name for p in old_file.parent.iterdir()) == sorted([old_file.name, new_file.name])

    # the queued job starts now: it checks and sources its own version
    record = stub_env["tmp"] / "record.jsonl"
    r = subprocess.run(["bash", str(root / "job" / "job.sh")], env=stub_environment(stub_env, record),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert (root / "status" / "pod.done").read_text() == "0\n" and not (root / "status" / "pod.failed").exists()
    assert len(records(record)) == 1


# -- many pods, one runtime file: read and hashed once per process, repaired whenever it changed ---------


def _counting_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times install_runtime hashes a file (one entry per sha256 of the file's content)."""
    calls: list[int] = []
    real = hashlib.sha256

    def counted(data: bytes = b"") -> Any:
        calls.append(len(data))
        return real(data)

    monkeypatch.setattr(runtimefile.hashlib, "sha256", counted)
    return calls


def test_a_checked_runtime_file_is_not_read_again_while_it_is_unchanged(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runtime" / "hpk-runtime.sh"
    runtimefile.install_runtime(path)  # missing: written
    calls = _counting_hashes(monkeypatch)
    for _ in range(5):
        runtimefile.install_runtime(path)
    assert path.read_bytes() == current_runtime().data
    assert len(calls) == 1  # read and checked once, then trusted by its stat


@pytest.mark.parametrize("damage", ["purged", "rewritten in place, size and mtime kept", "replaced by rename"])
def test_a_runtime_file_changed_after_its_check_is_repaired(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             damage: str) -> None:
    path = tmp_path / "runtime" / "hpk-runtime.sh"
    runtimefile.install_runtime(path)
    runtimefile.install_runtime(path)  # checked: now trusted while unchanged
    good = current_runtime().data
    st = path.stat()
    evil = good.replace(b"hpk_put pod.done 1", b"rm -rf \"$HOME\"").ljust(len(good), b" ")[:len(good)]
    assert evil != good and len(evil) == len(good)
    if damage == "purged":  # e.g. a scratch file system's purge
        path.unlink()
    elif damage.startswith("rewritten"):
        with open(path, "r+b") as fh:
            fh.write(evil)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime back as it was: ctime still moved
    else:
        other = path.with_name("other")
        other.write_bytes(evil)
        os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
        other.replace(path)
    calls = _counting_hashes(monkeypatch)
    runtimefile.install_runtime(path)
    assert path.read_bytes() == good
    assert len(calls) == (0 if damage == "purged" else 1)  # read again (a purged file is simply written)

"""A job that waits in the queue while hpkctl is upgraded still runs the runtime it was written for:
the new version installs its own file beside the old one, and nothing removes the old one."""

from __future__ import annotations

import hashlib
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

"""Pilot mode's announcements (sbatch/runtime.sh hpk_changed): with HPK_NOTIFY=1 (the kubelet's srun
passes the step's stdout back to it) the script writes a line on its stdout after each status change
and nothing else there (its own output goes to stderr, the step's log); the containers, hooks and
probes do not get that descriptor. Without it, the script's stdout is as before. The real srun:
tests/kubelet/test_kubelet_pilot_slurm.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod import render_pod, write_pod_dir
from tests.support.pods import pod_doc, stub_environment

SPEC = {"restartPolicy": "Never",
        "containers": [{"name": "app", "image": "busybox:1.36", "command": ["true"],
                        "lifecycle": {"postStart": {"exec": {"command": ["true"]}}}}]}
# every apptainer the job starts (the container, its hook) lists its open descriptors first
LISTS_FDS = 'ls /proc/self/fd >"$HPK_STUB_RECORD.fds.$$"\nexec "$0.real" "$@"\n'


def _run(stub: dict[str, Any], **extra: str) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    app = Path(stub["apptainer"])
    if not app.with_name("apptainer.real").exists():
        app.rename(app.with_name("apptainer.real"))
        app.write_text("#!/bin/sh\n" + LISTS_FDS)
        app.chmod(0o755)
    rendered = render_pod(pod_doc(SPEC), stub["profile"])
    root = write_pod_dir(rendered)
    env = stub_environment(stub, stub["tmp"] / "record.jsonl", **extra)
    r = subprocess.run(["bash", str(root / "job" / "job.sh")], env=env, capture_output=True, timeout=120, check=False)
    return r, root


@pytest.mark.parametrize("notify", [True, False])
def test_a_line_per_status_change_and_nothing_else_on_stdout(stub_env: dict[str, Any], notify: bool) -> None:
    r, root = _run(stub_env, **({"HPK_NOTIFY": "1"} if notify else {}))
    assert r.returncode == 0, r.stderr
    assert (root / "status" / "pod.done").read_text() == "0\n"
    if not notify:
        assert r.stdout == b""
        return
    # one line per hpk_changed: the job's facts, app.started, ready, finished, exitcode, completing, done...
    assert r.stdout and set(r.stdout) == {ord("\n")} and r.stdout.count(b"\n") >= 6, r.stdout
    lists = [f.read_text() for f in stub_env["tmp"].glob("record.jsonl.fds.*")]
    assert len(lists) >= 2  # the container and its postStart hook
    assert not any(re.search(r"^7$", fds, re.M) for fds in lists), lists  # fd 7 is the kubelet's alone

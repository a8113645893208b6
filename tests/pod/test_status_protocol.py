"""The status files the job writes (sbatch/runtime.sh) are exactly those hpkctl.pod.paths names;
the runtime file the job script sources is where paths.runtime_path puts it, and the script's own
refusals (a missing or altered runtime) are read back by hpkctl.pod.status as the job wrote them."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from hpkctl.pod import paths, render_pod, write_pod_dir
from hpkctl.pod.runtimefile import current_runtime
from hpkctl.pod.status import read_pod_status
from tests.support.ci import REPO
from tests.support.pods import pod_doc, records, stub_environment

RUNTIME = (REPO / "sbatch" / "runtime.sh").read_text()
POD_LEVEL = {paths.JOB_STARTED, paths.JOB_NODE, paths.JOB_ID, paths.POD_IP, paths.HOST_IP,
             paths.POD_TERMINATING, paths.POD_FAILED, paths.POD_DONE, paths.POD_COMPLETING}
PER_CONTAINER = {paths.STARTED, paths.FINISHED, paths.EXITCODE, paths.RESTARTS, paths.READY, paths.POST_START,
                 paths.HOOK_FAILED, paths.STARTED_PROBE, paths.PROBE_KILL, paths.REASON, paths.BACKOFF}
WRITTEN_RAW = {paths.MESSAGE}  # bytes as written: tail into a temp file + mv
MOVED = {paths.LAST_EXITCODE, paths.LAST_FINISHED, paths.LAST_MESSAGE, paths.LAST_HOOK_FAILED, paths.LAST_REASON}


def test_the_job_writes_exactly_the_named_pod_level_files() -> None:
    written = set(re.findall(r'hpk_put(?:_now)? ([a-z]+\.[a-z]+)\b', RUNTIME))
    # hpk_puts NAME VALUE...: several files in one write (continued lines joined)
    for call in re.findall(r'^\s*hpk_puts (.*)$', RUNTIME.replace("\\\n", " "), re.M):
        written |= set(re.findall(r'(?:^|\s)([a-z]+\.[a-z]+) "', call))
    assert written == POD_LEVEL


def test_the_job_writes_exactly_the_named_container_files() -> None:
    written = set(re.findall(r'hpk_put(?:_now)? "\$name\.([a-z-]+)"', RUNTIME))
    # several at once: hpk_puts NAME VALUE..., and the container's start (`up`) and end (`ended`) staged for it
    written |= {f for line in RUNTIME.splitlines() if re.search(r"^\s*hpk_puts |\b(ended|up)\+?=\(", line)
                for f in re.findall(r'"\$name\.([a-z-]+)"', line)}
    raw = set(re.findall(r'mv -f "\$tmp" "\$HPK_STATUS/\$name\.([a-z-]+)"', RUNTIME))
    # before a restart the current run's files become last-*: `for f in ...; do ... mv ... last-$f`
    loop = re.search(r'for f in ([a-z -]+); do\n.*?"\$HPK_STATUS/\$name\.last-\$f"', RUNTIME, re.S)
    assert loop is not None
    moved = {f"last-{name}" for name in loop.group(1).split()}
    assert written == PER_CONTAINER
    assert raw == WRITTEN_RAW
    assert moved == MOVED | {paths.LAST_PROBE_KILL}


def test_delete_marker_is_read_by_the_job_under_its_name() -> None:
    # written by hpkctl (local.runs.mark_deleting), read by hpk_terminate: TERM without it = time limit
    assert f'"$HPK_STATUS/{paths.POD_DELETING}"' in RUNTIME
    assert "DeadlineExceeded" in RUNTIME


# -- the runtime as a file, and the job script's own refusals (sbatch/pod.sh.j2) --------------------

SPEC = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox:1.36", "command": ["true"]}]}


def test_the_script_names_the_runtime_where_paths_puts_it_and_the_pod_dir_write_installs_it(stub_env) -> None:  # type: ignore[no-untyped-def]
    profile = stub_env["profile"]
    rendered = render_pod(pod_doc(SPEC), profile)
    runtime = current_runtime()
    where = paths.runtime_path(profile.pods.state_dir, runtime.version, runtime.sha256)
    assert where == f"{profile.pods.state_dir}/{paths.RUNTIME_DIR}/hpk-runtime-{runtime.version}-{runtime.sha256[:12]}.sh"
    assert rendered.runtime == where and f"HPK_RUNTIME={where}\n" in rendered.script
    assert runtime.data == (REPO / "sbatch" / "runtime.sh").read_bytes()
    assert runtime.sha256 == hashlib.sha256(runtime.data).hexdigest() and runtime.sha256 in rendered.script
    assert not Path(where).exists()
    write_pod_dir(rendered)
    assert Path(where).read_bytes() == runtime.data
    before = Path(where).stat()
    write_pod_dir(render_pod(pod_doc(SPEC, name="q", uid="00000000-0000-0000-0000-000000000002"), profile))
    assert Path(where).stat().st_ino == before.st_ino  # one file for many pods: not written again


@pytest.mark.parametrize("damage", ["missing", "altered"])
def test_a_missing_or_altered_runtime_fails_the_pod_at_once_and_hpkctl_reads_why(stub_env, damage: str) -> None:  # type: ignore[no-untyped-def]
    rendered = render_pod(pod_doc(SPEC), stub_env["profile"])
    root = write_pod_dir(rendered)
    runtime = Path(rendered.runtime)
    if damage == "missing":
        runtime.unlink()
    else:
        runtime.write_bytes(runtime.read_bytes().replace(b"hpk_put pod.done 1", b"rm -rf \"$HOME\""))
    record = stub_env["tmp"] / "record.jsonl"
    env = stub_environment(stub_env, record)
    r = subprocess.run(["bash", str(root / paths.PodDir.JOB_SCRIPT), "exec", "app", "--", "true"], env=env,
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 125 and not (root / "status" / paths.POD_FAILED).exists()  # exec leaves the pod alone
    r = subprocess.run(["bash", str(root / paths.PodDir.JOB_SCRIPT)], env=env, capture_output=True, text=True,
                       timeout=30, check=False)
    assert r.returncode == 1
    assert not (root / "status" / paths.JOB_STARTED).exists() and records(record) == []  # nothing ran
    # the reader's side: what hpkctl makes of the files the job wrote
    status = read_pod_status(root, [("app", False)], None, job_known=False)
    assert (status.phase, status.exit_code) == ("Failed", 1)
    assert status.reason == {"missing": "RuntimeMissing", "altered": "RuntimeAltered"}[damage]
    assert str(runtime) in status.message
    if damage == "altered":
        assert "not the file hpkctl" in status.message and runtime.read_bytes() != current_runtime().data
        write_pod_dir(rendered)  # submitting again repairs it
        assert runtime.read_bytes() == current_runtime().data

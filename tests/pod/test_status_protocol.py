"""The status files the job writes (sbatch/runtime.sh) are exactly those hpkctl.pod.paths names."""

from __future__ import annotations

import re

from hpkctl.pod import paths
from tests.support.ci import REPO

RUNTIME = (REPO / "sbatch" / "runtime.sh").read_text()
POD_LEVEL = {paths.JOB_STARTED, paths.JOB_NODE, paths.JOB_ID, paths.POD_IP, paths.HOST_IP,
             paths.POD_TERMINATING, paths.POD_FAILED, paths.POD_DONE, paths.POD_COMPLETING}
PER_CONTAINER = {paths.STARTED, paths.FINISHED, paths.EXITCODE, paths.RESTARTS, paths.READY, paths.POST_START,
                 paths.HOOK_FAILED, paths.STARTED_PROBE, paths.PROBE_KILL, paths.REASON, paths.BACKOFF}
WRITTEN_RAW = {paths.MESSAGE}  # bytes as written: tail into a temp file + mv
MOVED = {paths.LAST_EXITCODE, paths.LAST_FINISHED, paths.LAST_MESSAGE, paths.LAST_HOOK_FAILED, paths.LAST_REASON}


def test_the_job_writes_exactly_the_named_pod_level_files() -> None:
    written = set(re.findall(r'hpk_put ([a-z]+\.[a-z]+) ', RUNTIME))
    assert written == POD_LEVEL


def test_the_job_writes_exactly_the_named_container_files() -> None:
    written = set(re.findall(r'hpk_put "\$name\.([a-z-]+)" ', RUNTIME))
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

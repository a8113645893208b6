"""The status files the job writes (sbatch/runtime.sh) are exactly those hpkctl.pod.paths names."""

from __future__ import annotations

import re

from hpkctl.pod import paths
from tests.support.ci import REPO

RUNTIME = (REPO / "sbatch" / "runtime.sh").read_text()
POD_LEVEL = {paths.JOB_STARTED, paths.JOB_NODE, paths.JOB_ID, paths.POD_IP, paths.HOST_IP,
             paths.POD_TERMINATING, paths.POD_FAILED, paths.POD_DONE}
PER_CONTAINER = {paths.STARTED, paths.FINISHED, paths.EXITCODE, paths.RESTARTS}
MOVED = {paths.LAST_EXITCODE, paths.LAST_FINISHED}  # renamed from the current run's files by mv


def test_the_job_writes_exactly_the_named_pod_level_files() -> None:
    written = set(re.findall(r'hpk_put ([a-z]+\.[a-z]+) ', RUNTIME))
    assert written == POD_LEVEL


def test_the_job_writes_exactly_the_named_container_files() -> None:
    written = set(re.findall(r'hpk_put "\$name\.([a-z-]+)" ', RUNTIME))
    moved = set(re.findall(r'"\$HPK_STATUS/\$name\.([a-z-]+)"\n', RUNTIME))
    assert written == PER_CONTAINER
    assert moved == MOVED

"""The job side of the kubelet's change log on the real Slurm: a pod's job drops its marker
(``<state_dir>/changes/<uid>``) after its status writes, the last one after ``pod.done``, so a
kubelet listing that one directory learns of every change (tests/kubelet/test_kubelet_changes.py
has the kubelet's side)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hpkctl.pod import paths
from tests.support.ci import HPK_USER
from tests.support.hpk import Hpk, pod, unique

pytestmark = [pytest.mark.slurm, pytest.mark.standin]


def _profile(hpk: Hpk, *, with_log: bool) -> tuple[Path, Path]:
    state = hpk.workdir / f"state-{'log' if with_log else 'none'}"
    state.mkdir(mode=0o700)
    if with_log:
        (state / paths.CHANGES_DIR).mkdir(mode=0o700)  # what the kubelet does when it starts
    for d in (state, *state.iterdir()):
        if os.geteuid() == 0:
            shutil.chown(d, HPK_USER, HPK_USER)
    site = hpk.workdir / f"site-{state.name}.toml"
    site.write_text(f'extends = "ci"\n\n[pods]\nstate_dir = "{state}"\n')
    site.chmod(0o644)
    return state, site


@pytest.mark.parametrize("with_log", [True, False])
def test_the_job_marks_its_changes_where_the_kubelet_reads(hpk: Hpk, with_log: bool) -> None:
    state, site = _profile(hpk, with_log=with_log)
    name = unique("marker")
    r = hpk.run(pod(name, [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]), site=str(site))
    assert r.rc == 0, r.output
    runs = list((state / "pods").iterdir())
    assert len(runs) == 1, runs
    uid = runs[0].name
    marker = state / paths.CHANGES_DIR / uid
    if not with_log:
        assert not (state / paths.CHANGES_DIR).exists()  # hpkctl run alone: nothing written outside the pod
        return
    assert marker.is_file() and marker.stat().st_size == 0
    done = runs[0] / "status" / paths.POD_DONE
    assert marker.stat().st_mtime_ns >= done.stat().st_mtime_ns  # the last write came with a marker
    assert [p.name for p in (state / paths.CHANGES_DIR).iterdir()] == [uid]  # nothing but the marker

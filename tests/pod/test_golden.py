"""Golden scripts: the rendered sbatch script of representative pods, reviewed as .sh files.

Update after an intended change with ``pytest tests/pod/test_golden.py --snapshot-update`` and
review the diff like code: the scripts are the product.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from hpkctl.pod import render_pod
from hpkctl.local.manifest import load_manifest, select_pod, with_api_defaults
from hpkctl.pod.runtimefile import current_runtime
from hpkctl.provider.tokens import DeferTokens
from tests.support.ci import REPO
from tests.support.pods import PODS, load_pod, make_profile
from tests.support.shellcheck import shellcheck

CASES = sorted(p.name for p in PODS.glob("*.yaml"))
PROFILES = {
    "host": make_profile(),
    "cni": make_profile(apptainer={"network": "cni", "cni_network": "none", "parent_image": "docker://hpk-parent"},
                        pods={"dns_server": "10.96.0.10"}),
    # pilot mode: the script is a step of a held allocation; an MPI pod's ranks are a step of their own
    "pilot": make_profile(pilot={"enabled": True}),
}
PAIRS = [pytest.param(mode, case, id=f"{mode}-{case}") for case in CASES for mode in ("host", "cni")]
PAIRS += [pytest.param("pilot", "mpi.yaml", id="pilot-mpi.yaml")]
# the kubelet's job per pod: the projected token is written after sbatch and the job waits for it
PAIRS += [pytest.param("kubelet", "api-server-shape.yaml", id="kubelet-api-server-shape.yaml")]


class ShellSnapshot(SingleFileSnapshotExtension):
    file_extension = "sh"
    _write_mode = WriteMode.TEXT


@pytest.fixture
def snapshot_sh(snapshot):  # type: ignore[no-untyped-def]
    return snapshot.use_extension(ShellSnapshot)


def _render(case: str, mode: str) -> str:
    pod, manifest = load_pod(case)
    pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    objects = DeferTokens(manifest.objects) if mode == "kubelet" else manifest.objects
    rendered = render_pod(pod, PROFILES["host" if mode == "kubelet" else mode], objects=objects,
                          services=manifest.services)
    return rendered.script


RUNTIME = current_runtime()
SHA_MARK = "<sha256 of sbatch/runtime.sh>"


@pytest.mark.parametrize(("mode", "case"), PAIRS)
def test_golden_script(case: str, mode: str, snapshot_sh) -> None:  # type: ignore[no-untyped-def]
    # The script names the runtime (sbatch/runtime.sh, reviewed once) by its hash: the golden file
    # shows a mark instead, so an edit of the runtime changes no golden file.
    script = _render(case, mode)
    assert script.count(RUNTIME.sha256) == 1 and script.count(RUNTIME.sha256[:12]) == 2
    assert f"HPK_RUNTIME={RUNTIME.path('/hpk-state')}\n" in script
    assert script.replace(RUNTIME.sha256, SHA_MARK).replace(RUNTIME.sha256[:12], "SHA12") == snapshot_sh


SOURCE = '. "$HPK_RUNTIME"\n'

# shellcheck reads each script twice: as Slurm stores it (sourcing the runtime: cheap) and whole, the
# runtime in place of its `.` line, for what only the whole file shows: a variable or function the
# runtime uses that the pod part does not set (SC2154), calls with the wrong arguments (SC2119/SC2120).
# The whole file costs ~1.3 s of CPU (the runtime is 1,400 lines; shellcheck takes the same per file
# in one process), so the quick lane checks whole only the sample below and the full lane (ci/test)
# every script (the rest is marked `full`). The runtime's bytes are the same in every script: what a
# whole check can find in one script and not in another comes from the names its pod part assigns,
# reads, defines and calls, and the sample covers every such name of every golden pod part
# (test_the_whole_shellcheck_sample_covers_every_pod_part_name).
WHOLE_SAMPLE = ("cni-lifecycle.yaml", "cni-volumes-all.yaml", "cni-probes.yaml", "pilot-mpi.yaml",
                "cni-env-all.yaml", "kubelet-api-server-shape.yaml")
WHOLE = [pytest.param(*p.values, id=p.id, marks=() if p.id in WHOLE_SAMPLE else pytest.mark.full) for p in PAIRS]


def _shellcheck_stored_and_bash_n(text: str, script: Path, config: pytest.Config) -> None:
    script.write_text(text)
    r = shellcheck(script, "-S", "warning", config=config)
    assert r.returncode == 0, r.stdout
    assert text.count(SOURCE) == 1
    script.write_text(text.replace(SOURCE, RUNTIME.data.decode()))
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(("mode", "case"), PAIRS)
def test_rendered_script_passes_bash_n_and_shellcheck(case: str, mode: str, tmp_path: Path,
                                                     pytestconfig: pytest.Config) -> None:
    # as Slurm stores it (sourcing the runtime), then bash -n as bash runs it: the runtime where it is
    # sourced (a script that passed shellcheck before passes at once: tests/support/shellcheck.py)
    _shellcheck_stored_and_bash_n(_render(case, mode), tmp_path / "job.sh", pytestconfig)


@pytest.mark.parametrize(("mode", "case"), WHOLE)
def test_whole_script_passes_shellcheck(case: str, mode: str, tmp_path: Path, pytestconfig: pytest.Config) -> None:
    script = tmp_path / "job.sh"
    script.write_text(_render(case, mode).replace(SOURCE, RUNTIME.data.decode()))
    r = shellcheck(script, "-S", "warning", config=pytestconfig)
    assert r.returncode == 0, r.stdout


def pod_part_names(script: str) -> set[str]:
    """What the pod part of a job script (its stored form) assigns (``=X``), reads (``$X``), defines
    (``()f``) and calls (``!hpk_f``), container indexes as N (``hpk_init_N_exec``): comments left out."""
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assigned = re.findall(r"(?:^|[\s;(])(?:local\s+|export\s+|declare\s+-\w+\s+)?([A-Za-z_]\w*)(?:\[[^]]*\])?\+?=",
                          code, re.M)
    read = re.findall(r"\$\{?[#!]?([A-Za-z_]\w*)", code)
    defined = re.findall(r"^([A-Za-z_]\w*)\(\)", code, re.M)
    called = re.findall(r"\b(hpk_\w+)", code)
    index = functools.partial(re.sub, r"_\d+(?=_|$)", "_N")
    return ({f"={n}" for n in assigned} | {f"${n}" for n in read} | {f"(){index(n)}" for n in defined}
            | {f"!{index(n)}" for n in called})


def test_pod_part_names() -> None:
    script = ("x=1\nlocal a[0]=1; export B=$x\nhpk_init_0_exec() {\n  hpk_run \"${C:-}\" \"$HPK_X\"\n}\n"
              "# z=$Q\nhpk_main_12\n")
    assert pod_part_names(script) == {"=x", "=a", "=B", "$x", "$C", "$HPK_X", "()hpk_init_N_exec",
                                      "!hpk_init_N_exec", "!hpk_run", "!hpk_main_N"}


def test_the_whole_shellcheck_sample_covers_every_pod_part_name() -> None:
    names = {}
    for p in PAIRS:
        mode, case = p.values
        names[p.id] = pod_part_names(_render(str(case), str(mode)))
    sample = set().union(*(names[i] for i in WHOLE_SAMPLE))
    missing = {i: sorted(n - sample) for i, n in names.items() if n - sample}
    assert not missing, f"add to WHOLE_SAMPLE the golden case(s) whose pod part has these names: {missing}"


def test_the_stored_script_is_small(capsys) -> None:  # type: ignore[no-untyped-def]
    # What Slurm stores per job (StateSaveLocation, slurmdbd's job_script): the demo pod within
    # 8 KB, every golden pod within 16 KB; printed for the review.
    manifest = load_manifest(REPO / "ci" / "pods" / "demo.yaml")
    demo = with_api_defaults(select_pod(manifest))
    sizes = {f"demo.yaml ({mode})": len(render_pod(demo, PROFILES[mode], objects=manifest.objects).script.encode())
             for mode in PROFILES}
    sizes |= {f"{case} ({mode})": len(_render(case, mode).encode()) for case in CASES for mode in PROFILES}
    with capsys.disabled():
        print("\nstored job script sizes (bytes):")
        for name, size in sorted(sizes.items(), key=lambda kv: kv[1]):
            print(f"  {size:6d}  {name}")
    assert max(v for k, v in sizes.items() if k.startswith("demo.yaml")) <= 8 * 1024
    assert max(sizes.values()) <= 16 * 1024

"""Job scripts run on bash 4.2 and later (RHEL 7 has 4.2, RHEL 8 4.4): nothing a job runs uses a
construct that came later (the table in tests/support/bashcompat.py, each entry checked against
bash's CHANGES), and an older shell fails the pod at once (UnsupportedShell) instead of half-running it.

The script-behaviour tests can also run under a real bash 4.2: put one first on PATH (e.g.
``PATH=/opt/bash-4.2/bin:$PATH pytest tests/pod``); the scripts are started as ``bash job.sh``.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod import render_pod, write_pod_dir
from hpkctl.pod.objects import StaticObjects
from tests.support.bashcompat import CONSTRUCTS, UNGUARDED_ARRAY, scan
from tests.support.ci import REPO
from tests.support.pods import PODS, load_pod, make_profile, make_stub, pod_doc, records, stub_environment

PROFILES = {
    "host": make_profile(),
    "cni": make_profile(apptainer={"network": "cni", "cni_network": "none", "parent_image": "docker://hpk-parent"},
                        pods={"dns_server": "10.96.0.10"}),
}
# Everything a job runs: the templates and runtimes of pods, workloads and the cluster's own jobs.
SBATCH = sorted((REPO / "sbatch").iterdir())


def _render(case: str, mode: str) -> str:
    pod, manifest = load_pod(case)
    return render_pod(pod, PROFILES[mode], objects=manifest.objects, services=manifest.services).script


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.name)
def test_each_construct_of_the_table_is_found(construct: Any) -> None:
    found = scan(f"#!/bin/bash\nset -u\n{construct.example}\n")
    assert [(n, v, name) for n, v, name, _ in found] == [(3, construct.version, construct.name)]
    assert construct.version.split(".") > ["4", "2"]


@pytest.mark.parametrize("line", [
    'local -a probe=("${!ref}")', 'declare -F "${fn}_pre_stop" >/dev/null', '[ "${#loops[@]}" -eq 0 ]',
    'kill -TERM ${loops[@]+"${loops[@]}"} 2>/dev/null', 'label="${kind^} probe"', 'msg="${2,,}"',
    "printf '%(%s)T' -1", 'echo "${a[-1]}"', 'wait "$pid"', 'x=${y:-}  # EPOCHREALTIME is 5.0, said in a comment',
    '[[ -v HPK_IN_POD ]]', 'exec {fd}>"$file"', 'for ((i = 0; i < ${#HPK_INIT[@]}; i += 3)); do :; done',
    'read -r -d "" value', 'local -a loops=()', 'while IFS= read -r -d "" v; do a+=("$v"); done',
])
def test_what_bash_4_2_has_is_not_flagged(line: str) -> None:
    assert scan(line) == []


def test_an_unguarded_array_expansion_is_flagged_and_its_guard_is_not() -> None:
    assert [f[2] for f in scan('kill "${runners[@]}"\necho " ${fallback[*]} "\nx=("${a[@]:1}")')] == [UNGUARDED_ARRAY] * 3
    assert scan('kill ${runners[@]+"${runners[@]}"}\necho " ${fallback[*]+${fallback[*]}} "') == []


@pytest.mark.parametrize(("text", "anchor"), [("runtime", "hpk_stop_container()"), ("script", "hpk_host_setup()")])
def test_a_planted_epochrealtime_fails_the_scan(text: str, anchor: str) -> None:
    script = (REPO / "sbatch" / "runtime.sh").read_text() if text == "runtime" else _render("lifecycle.yaml", "host")
    assert scan(script) == []
    lines = script.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(anchor))
    planted = "\n".join([*lines[:at + 1], '  end=$((${EPOCHREALTIME//[!0-9]/} + 2000000))', *lines[at + 1:]])
    found = scan(planted)
    assert [(n, v, name) for n, v, name, _ in found] == [(at + 2, "5.0", "EPOCHSECONDS / EPOCHREALTIME")]


@pytest.mark.parametrize("case", sorted(p.name for p in PODS.glob("*.yaml")))
@pytest.mark.parametrize("mode", sorted(PROFILES))
def test_generated_scripts_use_nothing_newer_than_bash_4_2(case: str, mode: str) -> None:
    assert scan(_render(case, mode)) == []


@pytest.mark.parametrize("path", SBATCH, ids=lambda p: p.name)
def test_sbatch_files_use_nothing_newer_than_bash_4_2(path: Path) -> None:
    assert scan(path.read_text()) == []


def _with_minimum(script: str, version: int) -> str:
    """The script as a shell older than ``version`` (major*100+minor) would see it: bash's
    BASH_VERSINFO is read-only, so the test raises the bar instead of lowering the shell."""
    guard = "BASH_VERSINFO[1] < 402))"
    assert script.count(guard) == 1
    return script.replace(guard, f"BASH_VERSINFO[1] < {version}))")


def test_an_older_bash_fails_the_pod_at_once_naming_the_shell(stub_env: dict[str, Any]) -> None:
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox:1.36", "command": ["true"]}]}
    root = write_pod_dir(render_pod(pod_doc(spec), stub_env["profile"]))
    script = root / "job" / "job.sh"
    script.write_text(_with_minimum(script.read_text(), 9900))
    record = stub_env["tmp"] / "record.jsonl"
    r = subprocess.run(["bash", str(script)], env=stub_environment(stub_env, record), capture_output=True,
                       text=True, timeout=30, check=False)
    assert r.returncode == 1
    reason, message = (root / "status" / "pod.failed").read_text().split("\n", 1)
    assert reason == "UnsupportedShell"
    assert "need bash 4.2 or later" in message and "is bash " in message and "/bash on " in message
    assert (root / "status" / "pod.done").read_text() == "1\n"
    assert records(record) == [] and records(record, pulls=True) == []  # nothing ran
    assert not (root / "status" / "job.started").exists()
    # exec says so and leaves the pod alone
    (root / "status" / "pod.failed").unlink()
    r = subprocess.run(["bash", str(script), "exec", "app", "--", "true"], env=stub_environment(stub_env, record),
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 125 and "UnsupportedShell" in r.stderr
    assert not (root / "status" / "pod.failed").exists()


def test_the_stop_clock_counts_hundredths_without_epochrealtime(tmp_path: Path) -> None:
    # hpk_centis reads /proc/uptime; GNU date's %N is the fallback where /proc is unreadable
    runtime = (REPO / "sbatch" / "runtime.sh").read_text()
    start = runtime.index("hpk_centis() {")
    body = runtime[start:runtime.index("\n}\n", start) + 3]
    probe = body + 'hpk_centis; a=$HPK_CENTIS; sleep 0.3; hpk_centis; echo "$a $HPK_CENTIS"\n'
    for script in (probe, probe.replace("/proc/uptime", str(tmp_path / "no-such-file"))):  # then the fallback
        began = time.monotonic()
        r = subprocess.run(["bash", "-uc", script], capture_output=True, text=True, timeout=60, check=True)
        elapsed = time.monotonic() - began
        a, b = (int(x) for x in r.stdout.split())
        # sleep 0.3 took at least 0.25 s by this clock, in hundredths, and no more than the whole run took
        assert 25 <= b - a <= elapsed * 100 + 1, (a, b, elapsed)


BASH42 = Path("/opt/bash-4.2/bin/bash")  # a build of bash 4.2 (the docstring's way to run tests/pod under it)
needs_bash42 = pytest.mark.skipif(not BASH42.exists(), reason=f"no bash 4.2 build at {BASH42}")


@needs_bash42
def test_the_script_tests_run_under_the_bash_first_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the scripts' PATH starts with the stub's directory and /usr/bin: the bash on the tests' own PATH
    # must still be the one that runs them, or PATH=/opt/bash-4.2/bin:$PATH tests a newer bash
    monkeypatch.setenv("PATH", f"{BASH42.parent}:{os.environ['PATH']}")
    stub = make_stub(tmp_path)
    r = subprocess.run(["bash", "-c", 'echo "$BASH_VERSION"'], env=stub_environment(stub, tmp_path / "record"),
                       capture_output=True, text=True, timeout=30, check=True)
    assert r.stdout.startswith("4.2."), r.stdout


@needs_bash42
def test_a_pod_with_every_container_kind_runs_under_bash_4_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # set -u, empty arrays, the secrets read loop, subPath checks, sequential starts: under a real 4.2
    monkeypatch.setenv("PATH", f"{BASH42.parent}:{os.environ['PATH']}")
    stub = make_stub(tmp_path)
    mount = [{"name": "scratch", "mountPath": "/m", "subPath": "a/b"}]
    secret_env = [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    spec = {"restartPolicy": "Never", "volumes": [{"name": "scratch", "emptyDir": {}}],
            "initContainers": [{"name": "init", "image": "b:1", "command": ["i"], "volumeMounts": mount},
                               {"name": "side", "image": "b:1", "command": ["s"], "restartPolicy": "Always"}],
            "containers": [{"name": "one", "image": "b:1", "command": ["x"], "env": secret_env,
                            "lifecycle": {"postStart": {"exec": {"command": ["true"]}}}},
                           {"name": "two", "image": "b:1", "command": ["y"], "volumeMounts": mount}]}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"},
              "data": {"k": "czNjcjN0"}}
    root = write_pod_dir(render_pod(pod_doc(spec), stub["profile"], objects=StaticObjects.of([secret])))
    record = tmp_path / "record.jsonl"
    r = subprocess.run(["bash", str(root / "job" / "job.sh")], env=stub_environment(stub, record),
                       capture_output=True, text=True, timeout=60, check=False)
    assert "unbound variable" not in r.stderr and "bad substitution" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    assert (root / "status" / "pod.done").read_text() == "0\n"
    ran = [run["args"][-1] for run in records(record) if run["args"] != ["true"]]
    assert ran[0] == "i" and set(ran) == {"i", "s", "x", "y"}, ran  # the sidecar may start again meanwhile

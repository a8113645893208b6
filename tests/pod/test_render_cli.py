"""``hpkctl render``: the dry run a user (or dask-jobqueue fan) reads before submitting."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from hpkctl.cli import main


@pytest.fixture
def manifest(tmp_path: Path):  # type: ignore[no-untyped-def]
    def write(text: str) -> str:
        p = tmp_path / "m.yaml"
        p.write_text(text)
        return str(p)
    return write


JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  template:
    metadata: {annotations: {slurm-job.hpk.io/flags: "-N 1 --qos=long"}}
    spec:
      containers:
      - name: main
        image: busybox:1.36
        command: [sh, -c, "echo $(GREETING)"]
        env: [{name: GREETING, valueFrom: {configMapKeyRef: {name: absent, key: k}}}]
        volumeMounts: [{name: cfg, mountPath: /cfg}]
      volumes: [{name: cfg, configMap: {name: also-absent, items: [{key: a, path: a.txt}]}}]
"""


def test_render_job_template_dry_run_warns_and_shows_missing(manifest, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["render", "-f", manifest(JOB), "--site", "ci"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("#!/bin/bash\n#SBATCH --job-name=train\n")
    assert "#SBATCH --qos=long" in out and "#SBATCH --nodes=1" in out
    assert re.search(r"\bmain\W+Never\b", out)  # container main runs with restartPolicy Never
    assert 'configmap "absent" not found' in err and "dry run" in err
    assert "volumes/cfg/a.txt" in out and "MISSING: configMap default/also-absent" in out


def _workload(kind: str, restart_policy: str = "") -> str:
    policy = f"\n      restartPolicy: {restart_policy}" if restart_policy else ""
    return f"""
apiVersion: {"batch/v1" if kind == "Job" else "apps/v1"}
kind: {kind}
metadata: {{name: w}}
spec:
  template:
    metadata: {{uid: 11111111-2222-3333-4444-555555555555}}
    spec:{policy}
      containers:
      - {{name: main, image: busybox, command: [sh, -c, "true"]}}
"""


def test_a_jobs_pod_defaults_to_restart_policy_never(manifest, capsys) -> None:  # type: ignore[no-untyped-def]
    """The API server requires Never/OnFailure for a Job's pods; a Deployment's pods keep Always."""
    def render(text: str) -> str:
        assert main(["render", "-f", manifest(text), "--site", "ci"]) == 0
        return capsys.readouterr().out  # type: ignore[no-any-return]

    default = render(_workload("Job"))
    assert re.search(r"\bmain\W+Never\b", default)
    assert default == render(_workload("Job", "Never"))  # exactly the script of an explicit Never
    on_failure = render(_workload("Job", "OnFailure"))  # a given policy is kept
    assert re.search(r"\bmain\W+OnFailure\b", on_failure) and not re.search(r"\bmain\W+Never\b", on_failure)
    deployment = render(_workload("Deployment"))
    assert re.search(r"\bmain\W+Always\b", deployment) and not re.search(r"\bmain\W+Never\b", deployment)


def test_render_out_writes_the_pod_directory(manifest, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    pod = """
apiVersion: v1
kind: Secret
metadata: {name: s}
stringData: {password: hunter2}
---
apiVersion: v1
kind: Pod
metadata: {name: p, uid: 12345678-aaaa-bbbb-cccc-1234567890ab}
spec:
  containers:
  - {name: c, image: busybox, env: [{name: PW, valueFrom: {secretKeyRef: {name: s, key: password}}}]}
"""
    out_dir = tmp_path / "poddir"
    assert main(["render", "-f", manifest(pod), "--site", "ci", "--out", str(out_dir)]) == 0
    script, _ = capsys.readouterr()
    assert (out_dir / "job" / "job.sh").read_text() in script
    env = out_dir / "env" / "c.env"
    assert "PW=hunter2\n" in env.read_text()
    assert stat.S_IMODE(env.stat().st_mode) == 0o600  # secrets: owner only
    assert "hunter2" not in script  # never in the script Slurm keeps
    assert json.loads((out_dir / "job" / "pod.json").read_text())["metadata"]["name"] == "p"


@pytest.mark.parametrize("text, message", [
    ("kind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c}]}\n", "spec.containers[0].image: required"),
    ("kind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n  - {name: c, image: b, command: sh -c x}\n",
     "spec.containers[0].command: 'sh -c x': must be a list of strings"),
    ("kind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: b, env: [{name: A, value: 1}]}]\n",
     "spec.containers[0].env[0].value: 1: must be a string"),
    ("kind: Pod\nmetadata: {name: x}\nspec: {containers: [\n", "not valid YAML"),
    ("kind: Service\nmetadata: {name: x}\n", "no Pod, Job, Deployment"),
])
def test_bad_manifests_name_file_and_field(manifest, capsys, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = manifest(text)
    assert main(["render", "-f", path, "--site", "ci"]) == 125
    err = capsys.readouterr().err
    assert message in err and path in err


def test_pod_level_problem_is_reported_with_reason(manifest, capsys) -> None:  # type: ignore[no-untyped-def]
    text = ("kind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: b, volumeMounts: "
            "[{name: v, mountPath: /v}]}]\n  volumes: [{name: v, nfs: {server: s, path: /}}]\n")
    assert main(["render", "-f", manifest(text), "--site", "ci"]) == 125  # hpkctl's own error: the pod cannot run as written
    err = capsys.readouterr().err
    assert "UnsupportedVolume" in err and "spec.volumes[0]" in err and "fix:" in err


def test_creating_a_pod_ignores_system_fields_from_a_file() -> None:
    from hpkctl.local.manifest import with_api_defaults

    got = {"metadata": {"name": "p", "uid": "fixed", "resourceVersion": "9"}, "spec": {}, "status": {"phase": "Failed"}}
    created = with_api_defaults(got, create=True)
    assert created["metadata"]["uid"] != "fixed" and "resourceVersion" not in created["metadata"]
    assert "status" not in created
    assert with_api_defaults(got)["metadata"]["uid"] == "fixed"  # a dry run keeps it: stable output


def test_writing_a_pod_directory_again_clears_the_old_verdict(tmp_path: Path) -> None:
    from hpkctl.pod import render_pod, write_pod_dir
    from tests.support.pods import make_profile, pod_doc

    rendered = render_pod(pod_doc({"containers": [{"name": "c", "image": "b:1"}]}), make_profile(tmp_path))
    root = write_pod_dir(rendered)
    (root / "status").mkdir()  # the job makes it (write_pod_dir leaves status/ to the job)
    (root / "status" / "pod.done").write_text("1\n")
    (root / "logs" / "c.log").write_text("old\n")
    write_pod_dir(rendered)
    assert not (root / "status" / "pod.done").exists() and not (root / "logs" / "c.log").exists()


def test_render_for_another_site_works_without_its_environment(manifest, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for var in ("PROJECT", "SCRATCH"):
        monkeypatch.delenv(var, raising=False)
    pod = "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: busybox}]}\n"
    assert main(["render", "-f", manifest(pod), "--site", "jsc"]) == 0
    out, err = capsys.readouterr()
    assert "$PROJECT is not set" in err and "requires a Slurm account" in err
    assert "#SBATCH --partition=batch" in out and "#SBATCH --exclusive" in out


def test_render_names_the_runtime_and_render_runtime_prints_it(manifest, capsys) -> None:  # type: ignore[no-untyped-def]
    from hpkctl.pod.runtimefile import current_runtime
    from hpkctl.sites import load_site

    where = current_runtime().path(os.path.expanduser(load_site("ci").pods.state_dir))
    assert main(["render", "-f", manifest(JOB), "--site", "ci"]) == 0
    out, _ = capsys.readouterr()
    assert f"HPK_RUNTIME={where}\n" in out and f"sources the hpkctl runtime {where} " in out
    assert main(["render", "--runtime", "--site", "ci"]) == 0
    out, err = capsys.readouterr()
    assert out == current_runtime().data.decode() and where in err and current_runtime().sha256 in err
    assert main(["render", "--site", "ci"]) != 0
    assert "render needs -f MANIFEST (or --runtime)" in capsys.readouterr().err


def _count_validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources of every validate_pod call from now on (its cross-field step runs once per call)."""
    import hpkctl.pod.validation as validation

    seen: list[str] = []
    cross = validation._cross_field

    def counted(model, raw, *, prefix):  # type: ignore[no-untyped-def]
        seen.append(str((raw.get("metadata") or {}).get("name")))
        return cross(model, raw, prefix=prefix)
    monkeypatch.setattr(validation, "_cross_field", counted)
    return seen


def test_render_validates_the_pod_once(manifest, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 23.2: select_pod validates the file's pod (naming the file); rendering it does not again."""
    seen = _count_validations(monkeypatch)
    pod = "kind: Pod\nmetadata: {name: once}\nspec: {containers: [{name: c, image: busybox}]}\n"
    assert main(["render", "-f", manifest(pod), "--site", "ci"]) == 0
    assert seen == ["once"], capsys.readouterr().err


def test_a_pod_not_validated_before_is_validated_by_render_pod(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The kubelet's pods come from the API server: render_pod validates them, and a bad one is a PodError
    with a reason (its status), not a crash."""
    from hpkctl.errors import PodError
    from hpkctl.pod import render_pod
    from tests.support.pods import make_profile, pod_doc

    seen = _count_validations(monkeypatch)
    profile = make_profile(tmp_path)
    render_pod(pod_doc({"containers": [{"name": "c", "image": "b:1"}]}), profile)
    assert len(seen) == 1
    with pytest.raises(PodError) as err:
        render_pod(pod_doc({"containers": [{"name": "c", "image": "b:1", "ports": [{"containerPort": 0}]}]}), profile)
    assert err.value.reason == "InvalidPod" and "spec.containers[0].ports[0].containerPort" in str(err.value)

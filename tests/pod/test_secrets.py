"""Secret values never reach job.sh (Slurm keeps job scripts): `$(VAR)` of a Secret-backed variable
in command, args or workingDir is resolved by the job from the 0600 file env/secrets, and the
container still gets the value byte for byte."""

from __future__ import annotations

import base64
import stat
import subprocess
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpkctl.pod import render_pod, write_pod_dir
from hpkctl.pod.objects import StaticObjects
from tests.support.pods import make_stub, pod_doc, records, stub_environment

MARK = "S3cr3t-"


def _secret(values: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "default"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}}


def _spec(env_from: bool) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": "app", "image": "b:1",
        "command": ["tool", "--password=$(PASSWORD)", "$(TOKEN)"],
        "args": ["$(PASSWORD)$(TOKEN)", "plain", "$(MISSING)"],
        "workingDir": "/w/$(TOKEN)",
        "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "MIX", "value": "$(MY_IP)/$(PASSWORD)"},
                {"name": "COPY", "value": "copy:$(PASSWORD)"}],
    }
    if env_from:
        c["envFrom"] = [{"secretRef": {"name": "db"}}]
    else:
        c["env"].append({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "TOKEN"}}})
    return {"restartPolicy": "Never", "containers": [c]}


def _run(tmp: Path, password: str, token: str, *, env_from: bool) -> tuple[str, Path, dict[str, Any]]:
    stub = make_stub(tmp)
    rendered = render_pod(pod_doc(_spec(env_from)), stub["profile"],
                          objects=StaticObjects.of([_secret({"password": password, "TOKEN": token})]))
    root = write_pod_dir(rendered)
    record = tmp / "record.jsonl"
    r = subprocess.run(["bash", str(root / "job" / "job.sh")], env=stub_environment(stub, record),
                       capture_output=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr.decode()
    [rec] = records(record)
    return rendered.script, root, rec


def _files_readable_by_others(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH)]


def _check(tmp: Path, password: str, token: str, *, env_from: bool) -> None:
    script, root, rec = _run(tmp, password, token, env_from=env_from)
    for value in (password, token):
        assert value not in script
    assert rec["args"] == ["tool", f"--password={password}", token, password + token, "plain", "$(MISSING)"]
    flags = rec["flags"]
    assert flags[flags.index("--pwd") + 1] == f"/w/{token}"
    pod_ip = (root / "status" / "pod.ip").read_text().strip()
    assert rec["env"]["MIX"] == f"{pod_ip}/{password}"
    assert rec["env"]["COPY"] == f"copy:{password}"
    secrets = root / "env" / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert sorted(secrets.read_bytes().split(b"\0")[:-1]) == sorted([password.encode(), token.encode()])
    for path in _files_readable_by_others(root):
        data = path.read_bytes()
        assert password.encode() not in data and token.encode() not in data, path


def test_secret_values_reach_the_container_but_not_the_script(tmp_path: Path) -> None:
    _check(tmp_path, MARK + "p@ss 'w0rd' $(rm -rf /) `id` \"x\"\nline2", MARK + "tök\tén", env_from=False)


def test_env_from_secret_variables_are_hidden_too(tmp_path: Path) -> None:
    _check(tmp_path, MARK + "a", MARK + "b$HOME", env_from=True)


def test_a_pod_without_secret_references_has_no_secrets_file(tmp_path: Path) -> None:
    stub = make_stub(tmp_path)
    spec = {"containers": [{"name": "app", "image": "b:1", "command": ["x", "$(A)"],
                            "env": [{"name": "A", "value": "not secret"}]}]}
    rendered = render_pod(pod_doc(spec), stub["profile"])
    assert "env/secrets" not in rendered.files
    assert "'not secret'" in rendered.script


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=0, max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(password=_TEXT, token=_TEXT)
def test_any_secret_text_is_hidden_and_exact(tmp_path_factory: Any, password: str, token: str) -> None:
    tmp = tmp_path_factory.mktemp("s")
    _check(tmp, MARK + password, MARK + "t" + token, env_from=False)

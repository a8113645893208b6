"""A manifest that starts with ``{`` is read as JSON, as kubectl's YAML-or-JSON decoder reads it: one
object or several one after another; anything else, or text that is not JSON after all (YAML's flow
style ``{a: 1}``, a broken file), is read by the YAML parser as before, whose errors name line and
column. A JSON manifest never imports the YAML parser (issue 23.2: hpkctl run's imports)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpkctl.errors import ManifestError
from hpkctl.local.manifest import load_manifest
from tests.support.ci import REPO


def pod(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}


def test_a_json_stream_of_objects_is_read_whole(tmp_path: Path) -> None:
    f = tmp_path / "m.json"
    f.write_text("\n " + json.dumps(pod("a"), indent=2) + json.dumps(pod("b")) + "\r\n\t" + json.dumps(pod("c")) + "\n")
    assert [p["metadata"]["name"] for _, p in load_manifest(f).pods] == ["a", "b", "c"]


def test_json_and_yaml_read_the_same_objects(tmp_path: Path) -> None:
    doc = pod("same")
    doc["metadata"] = {"name": "same", "labels": {"on": "yes", "t": "\u00e9\t\"q\""}, "annotations": {"n": "1"}}
    (tmp_path / "m.json").write_text(json.dumps(doc))
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(doc, default_flow_style=False))
    assert not (tmp_path / "m.yaml").read_text().startswith("{")
    assert load_manifest(tmp_path / "m.json").pods == load_manifest(tmp_path / "m.yaml").pods


@pytest.mark.parametrize("text", ['{apiVersion: v1, kind: Pod, metadata: {name: flow}, spec: {containers: '
                                  '[{name: c, image: busybox}]}}',
                                  '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "flow"}, "spec": '
                                  '{"containers": [{"name": "c", "image": "busybox"}]}}\n---\n'])
def test_yaml_that_starts_like_json_is_still_read(tmp_path: Path, text: str) -> None:
    (tmp_path / "m.yaml").write_text(text)
    assert [p["metadata"]["name"] for _, p in load_manifest(tmp_path / "m.yaml").pods] == ["flow"]


def test_a_broken_json_file_names_its_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text('{"kind": "Pod",\n  "metadata": {"name": "x"}\n  "spec": {}}\n')
    with pytest.raises(ManifestError, match=r"m\.json:3:3: not valid YAML"):
        load_manifest(tmp_path / "m.json")


def test_nan_is_not_json(tmp_path: Path) -> None:
    """Python's json takes NaN; JSON has none, so the text goes to the YAML parser (a string there)."""
    doc = json.dumps(pod("n")).replace('"true"', "NaN")
    (tmp_path / "m.json").write_text(doc)
    [(_, p)] = load_manifest(tmp_path / "m.json").pods
    assert p["spec"]["containers"][0]["command"] == ["NaN"]


def test_a_json_manifest_does_not_import_yaml(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text(json.dumps(pod("j")))
    (tmp_path / "m.yaml").write_text("kind: Pod\nmetadata: {name: y}\nspec: {containers: [{name: c, image: b}]}\n")
    code = ("import sys; from hpkctl.local.manifest import load_manifest; load_manifest(sys.argv[1]); "
            "print('yaml' in sys.modules)")
    seen = [subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], capture_output=True, text=True,
                           timeout=120, env={"PYTHONPATH": str(REPO)}).stdout.strip() for name in ("m.json", "m.yaml")]
    assert seen == ["False", "True"]

"""write_pod_dir never writes outside the pod directory: hostile relative names and symlinks left
in the directory (by an earlier job) are refused before anything is created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpkctl.errors import PodError
from hpkctl.pod import render_pod, write_pod_dir
from hpkctl.pod.paths import inside
from tests.support.pods import make_profile, pod_doc

SPEC = {"containers": [{"name": "app", "image": "b:1", "command": ["x"]}]}


def _rendered(tmp: Path):  # type: ignore[no-untyped-def]
    return render_pod(pod_doc(SPEC), make_profile(tmp))


@pytest.mark.parametrize("rel", ["../escape", "env/../../escape", "volumes/../../../escape", "/abs/escape"])
def test_a_hostile_relative_name_is_refused(tmp_path: Path, rel: str) -> None:
    rendered = _rendered(tmp_path)
    rendered.files[rel] = (b"x", 0o600)
    with pytest.raises(PodError, match="outside the pod directory"):
        write_pod_dir(rendered)
    assert not list(tmp_path.rglob("escape"))
    assert not Path("/abs/escape").exists()


def test_a_symlink_left_in_the_pod_directory_is_not_followed(tmp_path: Path) -> None:
    rendered = _rendered(tmp_path)
    root = Path(rendered.plan.pod_dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "volumes").mkdir(parents=True)
    os.symlink(outside, root / "volumes" / "cfg")
    rendered.files["volumes/cfg/key"] = (b"value", 0o644)
    with pytest.raises(PodError, match="outside the pod directory"):
        write_pod_dir(rendered)
    assert list(outside.iterdir()) == []


def test_a_symlink_at_the_file_itself_is_not_followed(tmp_path: Path) -> None:
    rendered = _rendered(tmp_path)
    root = Path(rendered.plan.pod_dir)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (root / "env").mkdir(parents=True)
    os.symlink(victim, root / "env" / "app.env")
    with pytest.raises(PodError, match="outside the pod directory"):
        write_pod_dir(rendered)
    assert victim.read_text() == "keep"


def test_inside() -> None:
    assert inside(Path("/a/b"), Path("/a/b/c/../d"))
    assert inside(Path("/a/b"), Path("/a/b"))
    assert not inside(Path("/a/b"), Path("/a/b/../bc"))
    assert not inside(Path("/a/b"), Path("/a/bc"))


def test_pod_json_does_not_follow_a_symlink(tmp_path: Path) -> None:
    rendered = _rendered(tmp_path)
    root = Path(rendered.plan.pod_dir)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (root / "job").mkdir(parents=True)
    os.symlink(victim, root / "job" / "pod.json")
    with pytest.raises(PodError, match="outside the pod directory"):
        write_pod_dir(rendered, pod_json=b"{}")
    assert victim.read_text() == "keep"

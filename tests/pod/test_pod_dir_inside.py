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


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_mode & 0o7777 for p in root.rglob("*")}


def test_modes_and_no_temporary_file_left(tmp_path: Path) -> None:
    rendered = _rendered(tmp_path)
    root = write_pod_dir(rendered, pod_json=b"{}")
    modes = _tree(root)
    assert root.stat().st_mode & 0o777 == 0o700
    assert modes["job/job.sh"] == 0o700
    assert modes["env/app.env"] == modes["job/pod.json"] == 0o600
    assert {"job", "env", "logs", "status", "volumes"} <= set(modes)
    assert not [name for name in modes if ".hpk-tmp-" in name]
    assert (root / "job" / "pod.json").read_bytes() == b"{}"


def test_a_resubmitted_pod_loses_what_its_earlier_job_wrote(tmp_path: Path) -> None:
    rendered = _rendered(tmp_path)
    root = write_pod_dir(rendered, pod_json=b"{}")
    for sub in ("status", "logs", "run/deep"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "left").write_text("earlier job")
    (root / "env" / "app.env").write_text("stale")
    first = _tree(root)
    write_pod_dir(rendered, pod_json=b"{}")
    again = _tree(root)
    assert not (root / "run").exists()
    assert not [name for name in again if name.endswith("left")]
    assert again == {k: v for k, v in first.items() if not k.endswith("left") and not k.startswith("run")}
    assert (root / "env" / "app.env").read_bytes() == rendered.files["env/app.env"][0]


def test_a_symlink_in_place_of_a_job_directory_is_removed_not_followed(tmp_path: Path) -> None:
    rendered = _rendered(tmp_path)
    root = write_pod_dir(rendered)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    for sub in ("status", "run"):
        if (root / sub).exists():
            (root / sub).rmdir()
        os.symlink(outside, root / sub)
    write_pod_dir(rendered)
    assert (outside / "keep").read_text() == "keep"
    assert not (root / "run").exists() and not (root / "status").is_symlink() and (root / "status").is_dir()


def test_a_file_in_place_of_a_job_directory_is_removed(tmp_path: Path) -> None:
    rendered = _rendered(tmp_path)
    root = write_pod_dir(rendered)
    (root / "logs").rmdir()
    (root / "logs").write_text("not a directory")
    write_pod_dir(rendered)
    assert (root / "logs").is_dir() and list((root / "logs").iterdir()) == []


def test_a_symlinked_directory_inside_the_pod_directory_is_refused(tmp_path: Path) -> None:
    """Stricter than resolving the link and checking where it ends: no link in the pod directory is
    followed at all, wherever it points (one open per existing directory, no realpath per file)."""
    rendered = _rendered(tmp_path)
    root = Path(rendered.plan.pod_dir)
    (root / "elsewhere").mkdir(parents=True)
    os.symlink("elsewhere", root / "env")
    with pytest.raises(PodError, match="outside the pod directory"):
        write_pod_dir(rendered)
    assert list((root / "elsewhere").iterdir()) == []


def test_a_volume_of_files_gets_its_empty_directory(tmp_path: Path) -> None:
    spec = {"containers": [{"name": "app", "image": "b:1", "command": ["x"],
                            "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
            "volumes": [{"name": "cfg", "configMap": {"name": "absent", "optional": True}}]}
    rendered = render_pod(pod_doc(spec), make_profile(tmp_path))
    root = write_pod_dir(rendered)
    (path,) = [p for kind, p, _ in rendered.plan.volumes.sources.values() if kind == "configMap"]
    assert Path(path).is_dir() and Path(path).is_relative_to(root)
    assert list(Path(path).iterdir()) == []

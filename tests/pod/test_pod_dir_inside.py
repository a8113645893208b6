"""write_pod_dir never writes outside the pod directory: hostile relative names and symlinks left
in the directory (by an earlier job) are refused before anything is created."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hpkctl.errors import PodError
from hpkctl.pod import poddir, render_pod, write_pod_dir
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
    assert {"job", "env", "logs"} <= set(modes)
    assert "status" not in modes and "volumes" not in modes  # the job's, and no volume: not made
    assert not [name for name in modes if ".hpk-tmp-" in name]
    assert (root / "job" / "pod.json").read_bytes() == b"{}"


def _earlier_job(root: Path, text: str) -> None:
    for sub in ("status", "logs", "run/deep"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "left").write_text(text)


def _aside(root: Path) -> list[tuple[str, str]]:
    """What was moved aside: (path below its ``.hpk-old-*`` directory, content) of each file."""
    return sorted((str(p.relative_to(root)).split("/", 1)[1], p.read_text())
                  for p in root.glob(".hpk-old-*/**/*") if p.is_file())


def test_a_resubmitted_pod_loses_what_its_earlier_job_wrote(tmp_path: Path) -> None:
    """The earlier job's status/, logs/ and run/ are renamed aside (not emptied on the submit path);
    the next resubmission removes them, so only one earlier job's files are ever kept."""
    rendered = _rendered(tmp_path)
    root = write_pod_dir(rendered, pod_json=b"{}")
    _earlier_job(root, "first job")
    (root / "env" / "app.env").write_text("stale")
    first = _tree(root)
    write_pod_dir(rendered, pod_json=b"{}")
    again = {k: v for k, v in _tree(root).items() if not k.startswith(".hpk-old-")}
    assert not (root / "run").exists() and not (root / "status").exists()  # the new job makes status/
    assert list((root / "logs").iterdir()) == []
    assert again == {k: v for k, v in first.items() if not k.endswith("left") and not k.startswith(("run", "status"))}
    assert (root / "env" / "app.env").read_bytes() == rendered.files["env/app.env"][0]
    assert _aside(root) == [("deep/left", "first job"), ("left", "first job"), ("left", "first job")]
    _earlier_job(root, "second job")
    write_pod_dir(rendered, pod_json=b"{}")
    assert _aside(root) == [("deep/left", "second job"), ("left", "second job"), ("left", "second job")]  # not the first's
    assert len(list(root.glob(".hpk-old-*"))) == 3


def test_an_empty_logs_directory_is_not_kept_aside(tmp_path: Path) -> None:
    """A create that failed before sbatch left logs/ empty: the next one leaves nothing aside."""
    rendered = _rendered(tmp_path)
    root = write_pod_dir(rendered, pod_json=b"{}")
    write_pod_dir(rendered, pod_json=b"{}")
    assert (root / "logs").is_dir() and not list(root.glob(".hpk-old-*"))


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
    assert not (root / "run").exists() and not (root / "status").is_symlink() and not (root / "status").exists()


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


def _swap_for_a_link_after_listing(monkeypatch: pytest.MonkeyPatch, root: Path, name: str, target: Path) -> None:
    """What a step of an earlier job still running does between the pod directory's listing and the
    removal of its job directories: ``name`` becomes a symlink out of the pod directory."""
    real = poddir._listing

    def listing(fd: int) -> dict[str, str]:
        got = real(fd)
        if os.path.samestat(os.fstat(fd), root.stat()) and (root / name).is_dir():
            (root / name).rename(root / f"{name}.moved")
            os.symlink(target, root / name)
        return got

    monkeypatch.setattr(poddir, "_listing", listing)


def test_a_job_directory_swapped_for_a_symlink_during_its_removal_is_not_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = _rendered(tmp_path)
    root = write_pod_dir(rendered)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (root / "logs" / "slurm.out").write_text("earlier job")  # kept aside (not empty)
    _swap_for_a_link_after_listing(monkeypatch, root, "logs", outside)
    write_pod_dir(rendered)
    assert not (root / "logs").is_symlink() and (root / "logs").is_dir()
    assert list((root / "logs").iterdir()) == []
    assert [p.name for p in outside.iterdir()] == ["keep"]
    (aside,) = [p for p in root.iterdir() if p.name.startswith(".hpk-old-")]
    assert aside.is_symlink()  # the link itself was moved aside, nothing through it
    monkeypatch.undo()
    write_pod_dir(rendered)  # the next resubmission removes it, unlinked, not followed
    assert not [p for p in root.iterdir() if p.name.startswith(".hpk-old-")]
    assert [p.name for p in outside.iterdir()] == ["keep"]


def test_a_job_directory_made_again_during_its_removal_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = _rendered(tmp_path)
    root = write_pod_dir(rendered)
    (root / "logs" / "slurm.out").write_text("earlier job")
    real = getattr(poddir, "_remove_job_dirs", None)

    def remove(tree: Any) -> None:
        assert real is not None
        real(tree)
        (root / "logs").mkdir(exist_ok=True)  # a step of the earlier job opening logs/ again

    monkeypatch.setattr(poddir, "_remove_job_dirs", remove, raising=False)
    with pytest.raises(PodError, match="logs .* was made again") as err:
        write_pod_dir(rendered)
    assert "scancel" in err.value.hint


def test_directories_it_creates_are_private_whatever_the_umask(tmp_path: Path) -> None:
    rendered = _rendered(tmp_path)
    rendered.files["volumes/cfg/key"] = (b"value", 0o644)
    old = os.umask(0o022)
    try:
        root = write_pod_dir(rendered)
    finally:
        os.umask(old)
    dirs = {name: mode for name, mode in _tree(root).items() if (root / name).is_dir()}
    assert {"job", "env", "logs", "volumes", "volumes/cfg"} <= set(dirs)
    assert set(dirs.values()) == {0o700}


@pytest.mark.parametrize(("rel", "match", "fix"), [
    ("env/app.env", "a directory is in its place", "remove the directory"),
    ("env/" + "k" * 300, "too long", "shorten"),
    ("volumes/" + "d" * 300 + "/key", "too long", "shorten"),
])
def test_what_retrying_cannot_fix_is_a_pod_error_naming_the_file(
        tmp_path: Path, rel: str, match: str, fix: str) -> None:
    rendered = _rendered(tmp_path)
    root = Path(rendered.plan.pod_dir)
    if rel == "env/app.env":
        (root / rel / "inside").mkdir(parents=True)
    rendered.files[rel] = (b"x", 0o600)
    with pytest.raises(PodError, match=match) as err:
        write_pod_dir(rendered)
    assert err.value.reason == "CreateContainerConfigError"
    assert rel[:20] in str(err.value) and fix in err.value.hint

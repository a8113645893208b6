"""The file-system namespace operations a pod costs on the kubelet's submit path (each a metadata
round trip on GPFS/Lustre, ~0.5 ms of system CPU on this VM's ext4): ``write_pod_dir`` of a new pod and
the first write of its projected token after sbatch, counted by wrapping ``os``'s calls (no strace), so
a change that adds one fails here. Also what the cheap path gives up nothing for: a new directory
left half-written (a crash, a full disk) is rewritten by the next create as a resubmission, and a
renewal replaces a token atomically, under a reader of the old one."""

from __future__ import annotations

import collections
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod import RenderedPod, StaticObjects, poddir, render_pod, write_pod_dir
from hpkctl.provider.tokens import ONE_WRITE, DeferTokens, write_token
from tests.support.pods import load_pod, make_profile, pod_doc

SPEC = {"containers": [{"name": "app", "image": "b:1", "command": ["x"]}]}
#: What os offers for names: every call that creates, opens, renames, looks up, changes or lists one.
_NAMESPACE = ("mkdir", "open", "rename", "replace", "stat", "lstat", "chmod", "fchmod", "unlink", "rmdir",
              "scandir", "listdir", "link", "symlink", "access", "utime")


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], Any]], collections.Counter[str]]]:
    """``counted(fn)``: the namespace calls ``fn()`` made through ``os``, by name."""
    def run(fn: Callable[[], Any]) -> collections.Counter[str]:
        counts: collections.Counter[str] = collections.Counter()
        with monkeypatch.context() as m:
            for name in _NAMESPACE:
                real = getattr(os, name)

                def wrapper(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                    counts[_name] += 1
                    return _real(*a, **kw)

                m.setattr(os, name, wrapper)
            fn()
        return counts

    yield run


def _fresh(tmp: Path, n: int, spec: dict[str, Any] = SPEC, objects: Any = None) -> list[RenderedPod]:
    """``n`` pods rendered for new directories, the runtime file installed and verified first (by two
    earlier pods), as in a running kubelet."""
    profile = make_profile(tmp)
    pods = [render_pod(pod_doc(spec, name=f"p{i}", uid=f"u-{i}"), profile, objects=objects) for i in range(n + 2)]
    for r in pods[:2]:
        write_pod_dir(r, pod_json=b"{}")
    return pods[2:]


def test_a_new_one_container_pod_costs_eight_namespace_calls(tmp_path: Path, counted: Any) -> None:
    """root, job, env, logs: a mkdir each; job.sh, pod.json, app.env: an open each, created in place;
    the runtime file: one stat. No rename, no temporary file, no fchmod, no open of a directory.
    Fewer is welcome (lower the numbers); more fails."""
    (rendered,) = _fresh(tmp_path, 1)
    counts = counted(lambda: write_pod_dir(rendered, pod_json=b"{}"))
    assert dict(counts) == {"mkdir": 4, "open": 3, "stat": 1}
    root = Path(rendered.plan.pod_dir)
    assert sorted(p.name for p in root.iterdir()) == ["env", "job", "logs"]
    assert (root / "job" / "job.sh").read_bytes() == rendered.files["job/job.sh"][0]


def test_a_resubmission_moves_the_earlier_jobs_directories_aside_without_walking_them(
        tmp_path: Path, counted: Any) -> None:
    """status/, logs/ and run/ of an earlier job, with files in them: a rename each, no unlink, rmdir or
    listing of what they hold on the submit path (49 namespace calls of a one-container pod's
    resubmission were 24 of that walk); only the directories write_pod_dir writes into are listed."""
    (rendered,) = _fresh(tmp_path, 1)
    root = Path(rendered.plan.pod_dir)
    write_pod_dir(rendered, pod_json=b"{}")
    for sub in ("status", "logs", "run/deep"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "left").write_text("earlier job")
    counts = counted(lambda: write_pod_dir(rendered, pod_json=b"{}"))
    assert counts["scandir"] == 3  # the pod directory, job/ and env/
    assert counts["rename"] == 3 + 3  # the job directories aside, the three files over their names
    assert counts["unlink"] == 0 and counts["rmdir"] == 1  # logs/ tried, as an empty one goes at once
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".hpk-old-")) == ["env", "job", "logs"]


def test_the_volumes_pod_costs_a_mkdir_per_directory_and_an_open_per_file(tmp_path: Path, counted: Any) -> None:
    pod, manifest = load_pod("volumes-all.yaml")
    profile = make_profile(tmp_path)
    first, rendered = (render_pod(dict(pod, metadata=dict(pod["metadata"], uid=u)), profile, objects=manifest.objects)
                       for u in ("u-a", "u-b"))
    write_pod_dir(first, pod_json=b"{}")
    counts = counted(lambda: write_pod_dir(rendered, pod_json=b"{}"))
    root = Path(rendered.plan.pod_dir)
    made = list(root.rglob("*"))
    assert counts["mkdir"] == 1 + sum(p.is_dir() for p in made)  # the pod directory and each under it
    assert counts["open"] == len(rendered.files) + 1 == sum(p.is_file() for p in made)  # + pod.json
    assert set(counts) <= {"mkdir", "open", "stat", "fchmod"} and counts["stat"] == 1
    assert counts["fchmod"] == sum(poddir._narrowed(mode) for _, mode in rendered.files.values())


def test_a_new_directory_left_half_written_is_rewritten_by_the_next_create(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while the second file is written: the create fails (the kubelet tries again),
    the half-written file is gone; a file a killed process left half-written is replaced whole."""
    (rendered,) = _fresh(tmp_path, 1)
    root = Path(rendered.plan.pod_dir)
    real_write, writes = os.write, []

    def full_disk(fd: int, data: Any) -> int:
        writes.append(fd)
        if len(writes) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    with monkeypatch.context() as m:
        m.setattr(os, "write", full_disk)
        with pytest.raises(OSError, match="No space"):
            write_pod_dir(rendered, pod_json=b'{"pod": 1}')
    left = {str(p.relative_to(root)) for p in root.rglob("*")}
    assert left == {"job", "env", "logs", "job/job.sh"}  # the file the write failed in was removed
    (root / "job" / "job.sh").write_bytes(rendered.files["job/job.sh"][0][:10])  # as a killed process leaves it
    write_pod_dir(rendered, pod_json=b'{"pod": 1}')
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert files == {**{k: v for k, (v, _) in rendered.files.items()}, "job/pod.json": b'{"pod": 1}'}
    modes = {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}
    assert modes == {"job": 0o700, "env": 0o700, "logs": 0o700, "job/job.sh": 0o700, "job/pod.json": 0o600,
                     "env/app.env": 0o600}


def test_a_token_in_a_subdirectory_of_its_volume_gets_that_directory(tmp_path: Path) -> None:
    """A projected token written after sbatch (``DeferTokens``) at ``path: sub/token``: the directory
    it goes into is there before the job waits for it."""
    spec = {"containers": [{"name": "app", "image": "b:1", "command": ["x"],
                            "volumeMounts": [{"name": "tok", "mountPath": "/var/run/tok"}]}],
            "volumes": [{"name": "tok", "projected": {"sources": [
                {"serviceAccountToken": {"path": "sub/token", "expirationSeconds": 3600}}]}}]}
    (rendered,) = _fresh(tmp_path, 1, spec, DeferTokens(StaticObjects()))
    root = write_pod_dir(rendered, pod_json=b"{}")
    assert (root / "volumes" / "tok" / "sub").is_dir() and not (root / "volumes" / "tok" / "sub" / "token").exists()
    assert write_token(root / "volumes" / "tok" / "sub" / "token", b"t0k", 0o640)
    assert (root / "volumes" / "tok" / "sub" / "token").read_bytes() == b"t0k"


def test_a_tokens_first_write_is_one_open(tmp_path: Path, counted: Any) -> None:
    path = tmp_path / "token"
    counts = counted(lambda: write_token(path, b"t" * ONE_WRITE, 0o640))
    assert dict(counts) == ({"open": 1, "fchmod": 1} if poddir._narrowed(0o640) else {"open": 1})
    assert path.read_bytes() == b"t" * ONE_WRITE and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["token"]


def test_a_renewal_replaces_the_token_under_its_reader(tmp_path: Path) -> None:
    """A container reading the old token reads all of it; the new file keeps the old one's mode."""
    path = tmp_path / "token"
    assert write_token(path, b"old-token", 0o640)
    path.chmod(0o600)
    with open(path, "rb") as reader:
        assert write_token(path, b"new-token", 0o644)
        assert reader.read() == b"old-token"
    assert path.read_bytes() == b"new-token" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["token"]


def test_a_token_longer_than_one_write_is_never_seen_half_written(tmp_path: Path, counted: Any) -> None:
    path = tmp_path / "token"
    counts = counted(lambda: write_token(path, b"t" * (ONE_WRITE + 1), 0o640))
    assert counts["replace"] == 1  # written beside, renamed over
    assert path.read_bytes() == b"t" * (ONE_WRITE + 1) and stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_symlink_in_place_of_the_token_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    victim.chmod(0o666)
    (tmp_path / "vol").mkdir()
    os.symlink(victim, tmp_path / "vol" / "token")
    assert write_token(tmp_path / "vol" / "token", b"tok", 0o640)
    assert victim.read_text() == "keep"
    token = tmp_path / "vol" / "token"
    assert not token.is_symlink() and token.read_bytes() == b"tok" and stat.S_IMODE(token.stat().st_mode) == 0o640


def test_no_token_is_written_where_its_volume_is_gone(tmp_path: Path) -> None:
    assert not write_token(tmp_path / "gone" / "token", b"tok", 0o640)
    assert not (tmp_path / "gone").exists()

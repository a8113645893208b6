"""Unit tests of the Apptainer stand-in's pure parts (no store, bwrap or user needed)."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.standin import STANDIN_DIR


@pytest.mark.parametrize("ref, name", [
    ("busybox", "busybox"), ("docker.io/library/busybox:1.36", "busybox"),
    ("busybox@sha256:" + "a" * 64, "busybox"), ("debian:bookworm", "debian"), ("debian:12", "debian"),
    ("localhost:5000/team/debian:12@sha256:" + "b" * 64, "debian"), ("ghcr.io/x/hpk-parent", "hpk-parent"),
])
def test_ref_resolution(module, ref: str, name: str) -> None:  # type: ignore[no-untyped-def]
    # the store entry is the last path component without tag or digest
    assert module.ref_name(ref) == name


def test_build_images_passes_shellcheck() -> None:
    r = subprocess.run(["shellcheck", "-S", "warning", str(STANDIN_DIR / "build-images")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout




@pytest.mark.parametrize("values, binds", [
    (["/a"], [("/a", "/a", False)]),
    (["/a:/b"], [("/a", "/b", False)]),
    (["/a:/b:ro"], [("/a", "/b", True)]),
    (["/a:/b:rw,/c"], [("/a", "/b", False), ("/c", "/c", False)]),
    (["/a:/b:ro,rw"], [("/a", "/b", True)]),
    (["/a\\,x:/b"], [("/a,x", "/b", False)]),
    (["/a\\:x:/b"], [("/a:x", "/b", False)]),
])
def test_bind_spec_parsing(module, values: list[str], binds: list[tuple[str, str, bool]]) -> None:  # type: ignore[no-untyped-def]
    # docs bind_paths_and_mounts.rst:107-118; escapes as in src pkg/runtime/engine/apptainer/config/bind.go
    assert module.parse_binds(values) == binds


def test_env_file_parser(module) -> None:  # type: ignore[no-untyped-def]
    text = "A='x'\\''y' B=\"$H \\$ \\\\\" C=$H${H}#c # comment\n# comment\nexport D=1;E=2\nexport H\n"
    assert module.evaluate_env_file(text, {"H": "h"}) == [
        ("A", "x'y"), ("B", "h $ \\"), ("C", "hh#c"), ("D", "1"), ("E", "2"), ("H", "h")]
    for bad in ("X=$(id)", "id", "X=`id`", "X=1 > f", "a | b", "X=${H:-d}"):
        with pytest.raises(module.EnvFileError):
            module.evaluate_env_file(bad, {})


@pytest.mark.parametrize("value", ["home,cwd,tmp", "a,,b", ",", "a b, c", " x", "x,", 'a,"b,c"', '"q""x",y',
                                   "a\r", "tmp"])
def test_split_slice_is_one_csv_record(module, value: str) -> None:  # type: ignore[no-untyped-def]
    # pflag's StringSlice reads its value as one CSV record: the split without csv (no quote, no line
    # break) gives the same fields as csv, and the rest still goes through csv
    import csv
    try:
        want: object = next(csv.reader([value]))
    except csv.Error as e:
        want = type(e)
    try:
        got: object = module.flags.split_slice(value)
    except csv.Error as e:
        got = type(e)
    assert got == want
    assert module.flags.split_slice("") == []

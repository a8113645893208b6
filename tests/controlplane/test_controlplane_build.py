"""``hpkctl build``: the rendered image definitions, their downloads and checksums, the reuse
decision, the dry run, and builds that succeed or fail (with a fake ``apptainer`` on the profile,
and once with the Apptainer stand-in, which has no ``build``).

Golden definitions live in ``__snapshots__/test_controlplane_build/``; update them after an intended
change with ``pytest tests/controlplane/test_controlplane_build.py --snapshot-update`` and review
the diff like code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from hpkctl import __version__
from hpkctl.cli import main
from hpkctl.controlplane import image as cpimage
from hpkctl.controlplane import versions
from hpkctl.controlplane.image import plan_build, render_definition, reuse_decision
from hpkctl.errors import HpkError
from hpkctl.runtime.build import diagnose
from tests.support.ci import REPO
from tests.support.pods import make_profile

ARCHES = sorted(versions.ARCHES.values())
CONTEXT = "/hpk-build"
RECIPE = "0" * 64
DIGEST = "d" * 64  # stands for hpkctl's own files in recipe hashes (the real one changes with every commit)
FAKE_SUM = "ab" * 32


class DefSnapshot(SingleFileSnapshotExtension):
    file_extension = "def"
    _write_mode = WriteMode.TEXT


class TextSnapshot(SingleFileSnapshotExtension):
    file_extension = "txt"
    _write_mode = WriteMode.TEXT


@pytest.fixture
def snapshot_def(snapshot):  # type: ignore[no-untyped-def]
    return snapshot.use_extension(DefSnapshot)


@pytest.fixture
def snapshot_txt(snapshot):  # type: ignore[no-untyped-def]
    return snapshot.use_extension(TextSnapshot)


def pinned_artifacts() -> tuple[versions.Artifact, ...]:
    """The real table with a (fake) checksum wherever none is pinned: a definition that would build."""
    return tuple(a if all(a.checksum(x) for x in ARCHES) else
                 dataclasses.replace(a, checksums={x: FAKE_SUM for x in ARCHES}) for a in versions.ARTIFACTS)


@pytest.fixture
def all_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "ARTIFACTS", pinned_artifacts())


# ---------------------------------------------------------------------------------------------
# The definitions: golden files, shell syntax, and every download checked


@pytest.mark.parametrize("arch", ARCHES)
def test_golden_controlplane_definition(arch: str, snapshot_def) -> None:  # type: ignore[no-untyped-def]
    assert render_definition("controlplane", arch=arch, context=CONTEXT, recipe_hash=RECIPE) == snapshot_def


def test_golden_parent_definition(snapshot_def) -> None:  # type: ignore[no-untyped-def]
    assert render_definition("parent", arch="amd64", context=CONTEXT, recipe_hash=RECIPE) == snapshot_def


def sections(definition: str) -> dict[str, list[str]]:
    """Header lines under "", then each %section's lines."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for line in definition.splitlines():
        m = re.match(r"^%(\w+)\s*$", line)
        if m:
            current = m.group(1)
            out[current] = []
        else:
            out[current].append(line)
    return out


def shell_functions(post: list[str]) -> dict[str, list[str]]:
    """name → body lines of the ``name() { ... }`` functions defined in %post."""
    funcs: dict[str, list[str]] = {}
    name = None
    for line in post:
        m = re.match(r"^\s*(\w+)\(\)\s*\{(.*)$", line)
        if m and name is None:
            name = m.group(1)
            funcs[name] = []
            rest = m.group(2).strip()
            if rest.endswith("}"):  # one-line function
                funcs[name].append(rest[:-1])
                name = None
            continue
        if name is not None:
            if line.strip() == "}":
                name = None
            else:
                funcs[name].append(line)
    return funcs


def logical_lines(lines: list[str]) -> list[str]:
    """Lines with backslash continuations joined."""
    out: list[str] = []
    buf = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
        else:
            out.append(buf + line)
            buf = ""
    return out


def check_downloads(definition: str, arch: str, artifacts: tuple[versions.Artifact, ...]) -> None:
    """Every download of %post is an hpk_fetch with the pinned checksum (or an hpk_cross_check of a
    pinned one), curl runs only inside hpk_curl, pip only from hashes or local files."""
    post = sections(definition)["post"]
    funcs = shell_functions(post)
    assert set(funcs) >= {"hpk_step", "hpk_fail", "hpk_curl", "hpk_fetch", "hpk_cross_check"}
    # hpk_fetch verifies before anything else can use the file, and refuses an empty checksum
    fetch = "\n".join(funcs["hpk_fetch"])
    assert '[ -n "$4" ] || hpk_fail' in fetch
    assert fetch.index("hpk_curl") < fetch.index('"${3}sum" --check --strict')
    in_funcs = {id(x) for body in funcs.values() for x in body}
    top = [line for line in post if id(line) not in in_funcs]
    fetched: dict[str, tuple[str, str, str]] = {}
    cross: dict[str, tuple[str, str]] = {}
    refused: list[str] = []
    for line in logical_lines(top):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        words = shlex.split(text)
        assert not re.search(r"\b(curl|wget|fetch|aria2c|git)\b", words[0]), f"download outside hpk_fetch: {text}"
        if words[0] == "hpk_fetch":
            name, url, algo, digest, dest = words[1:]
            assert url.startswith("https://") and dest == f"/tmp/hpk-dl/{url.rsplit('/', 1)[1]}"
            assert re.fullmatch(r"[0-9a-f]{%d}" % {"sha256": 64, "sha512": 128}[algo], digest), text
            fetched[name] = (url, algo, digest)
        elif words[0] == "hpk_cross_check":
            name, url, digest, file = words[1:]
            assert url.startswith("https://")
            cross[name] = (digest, file)
        elif words[0] == "hpk_fail":
            refused.append(words[1])
        else:
            assert "://" not in text, f"a URL outside hpk_fetch: {text}"
            if re.search(r"\bpip\b.*\binstall\b", text):
                assert "--require-hashes" in words or "--no-index" in words, text
                assert "--no-deps" in words, text
    # curl only in hpk_curl (which hpk_fetch and hpk_cross_check call)
    for name, body in funcs.items():
        if name != "hpk_curl":
            assert not any(re.search(r"\bcurl\b", x) for x in body), f"curl in {name}"
    for a in artifacts:
        digest = a.checksum(arch)
        if digest:
            assert fetched[a.name] == (a.file_url(arch), a.algorithm, digest)
            if a.cross_check:
                assert cross[a.name] == (digest, a.file_name(arch))
        else:
            assert a.name not in fetched
            assert any(r.startswith(f"{a.name} {a.version}: no pinned") for r in refused)
    assert set(fetched) == {a.name for a in artifacts if a.checksum(arch)}


@pytest.mark.parametrize("arch", ARCHES)
def test_every_download_has_its_pinned_checksum(arch: str) -> None:
    check_downloads(render_definition("controlplane", arch=arch, context=CONTEXT, recipe_hash=RECIPE), arch,
                    versions.ARTIFACTS)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_download_has_its_pinned_checksum_when_all_are_pinned(arch: str, all_pinned: None) -> None:
    definition = render_definition("controlplane", arch=arch, context=CONTEXT, recipe_hash=RECIPE)
    check_downloads(definition, arch, versions.ARTIFACTS)
    assert "no pinned" not in definition.split("%post", 1)[1].replace('no pinned $3 checksum', "")


def test_parent_definition_downloads_nothing_but_signed_packages() -> None:
    post = sections(render_definition("parent", arch="amd64", context=CONTEXT, recipe_hash=RECIPE))["post"]
    commands = [x.strip() for x in logical_lines(post) if x.strip() and not x.strip().startswith("#")]
    assert not any(re.search(r"\b(curl|wget|pip)\b", c.split()[0]) for c in commands)
    assert any(c.startswith("apk add --no-cache") and "apptainer" in c.split() for c in commands)


def _post_script(definition: str) -> str:
    return "\n".join(sections(definition)["post"]) + "\n"


@pytest.mark.parametrize("image", ["controlplane", "parent"])
def test_post_section_is_valid_posix_shell(image: str, tmp_path: Path) -> None:
    # Apptainer runs %post with /bin/sh (dash on Debian, busybox ash on Alpine): POSIX sh only
    script = tmp_path / "post.sh"
    script.write_text(_post_script(render_definition(image, arch="amd64", context=CONTEXT, recipe_hash=RECIPE)))
    r = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    r = subprocess.run([shellcheck, "-s", "sh", "-S", "warning", str(script)], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout


def test_fetch_refuses_a_wrong_checksum_and_an_empty_one(tmp_path: Path) -> None:
    # hpk_fetch/hpk_cross_check as rendered, with hpk_curl replaced by a local copy (no network here)
    post = sections(render_definition("controlplane", arch="amd64", context=CONTEXT, recipe_hash=RECIPE))["post"]
    funcs = shell_functions(post)
    body = "\n".join(f"{n}() {{\n" + "\n".join(funcs[n]) + "\n}" for n in
                     ("hpk_step", "hpk_fail", "hpk_fetch", "hpk_cross_check"))
    src = tmp_path / "release.tar.gz"
    src.write_bytes(b"release bytes")
    good = subprocess.run(["sha256sum", str(src)], capture_output=True, text=True, check=True).stdout.split()[0]
    (tmp_path / "SUMS").write_text(f"{good}  release.tar.gz\n")
    script = tmp_path / "t.sh"
    script.write_text("set -eu\nmkdir -p \"$T/hpk-dl\"\n"
                      'hpk_curl() { cp "$T/$(basename "$1")" "$2"; }\n' + body.replace("/tmp/hpk-dl", '"$T"/hpk-dl')
                      + '\n"$@"\n')

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", str(script), *args], capture_output=True, text=True, check=False,
                              env={**os.environ, "T": str(tmp_path)})

    dest = str(tmp_path / "out.tar.gz")
    ok = run("hpk_fetch", "x", "https://example.org/release.tar.gz", "sha256", good, dest)
    assert ok.returncode == 0, ok.stderr
    assert "hpk-build-step: verify x" in ok.stdout
    bad = run("hpk_fetch", "x", "https://example.org/release.tar.gz", "sha256", "0" * 64, dest)
    assert bad.returncode != 0 and "is not the pinned one; the file is refused" in bad.stderr
    empty = run("hpk_fetch", "x", "https://example.org/release.tar.gz", "sha256", "", dest)
    assert empty.returncode != 0 and "no pinned sha256 checksum" in empty.stderr
    assert run("hpk_cross_check", "x", "https://example.org/SUMS", good, "release.tar.gz").returncode == 0
    cc = run("hpk_cross_check", "x", "https://example.org/SUMS", "1" * 64, "release.tar.gz")
    assert cc.returncode != 0 and "does not list the pinned checksum" in cc.stderr
    assert run("hpk_cross_check", "x", "https://example.org/SUMS", good, "other.tar.gz").returncode != 0
    # CoreDNS's per-asset file (sha256sum's output for that one file); a bare digest names no file
    (tmp_path / "release.tar.gz.sha256").write_text(f"{good}  release.tar.gz\n")
    assert run("hpk_cross_check", "x", "https://example.org/release.tar.gz.sha256", good,
               "release.tar.gz").returncode == 0
    (tmp_path / "bare.sha256").write_text(f"{good}\n")
    assert run("hpk_cross_check", "x", "https://example.org/bare.sha256", good, "release.tar.gz").returncode != 0


# ---------------------------------------------------------------------------------------------
# The pins themselves


def test_versions_table() -> None:
    major, minor = (int(x) for x in versions.KUBERNETES.lstrip("v").split(".")[:2])
    assert (major, minor) >= (1, 36), "the API server must pass exec WebSockets through (1.36+)"
    names = [a.name for a in versions.ARTIFACTS]
    assert names == ["kubernetes", "etcd", "coredns"]
    binaries = {dest for a in versions.ARTIFACTS for dest in a.members.values()}
    assert {"kube-apiserver", "kube-controller-manager", "etcd", "coredns"} <= binaries
    for a in versions.ARTIFACTS:
        for arch in ARCHES:
            a.checksum(arch)  # well-formed where pinned
            assert a.file_url(arch).startswith("https://") and a.version in a.file_url(arch)
    kube = versions.ARTIFACTS[0]
    # the two halves of each SHA-512 (split for line length) form the values of the CHANGELOG
    assert kube.checksum("amd64").startswith("1c64da92575451c2") and kube.checksum("amd64").endswith("3a172a6a25")
    assert kube.checksum("arm64").startswith("7f95e451baedd936") and kube.checksum("arm64").endswith("78108dcf8")
    assert versions.missing_checksums("amd64") == []
    assert [m.split(":")[0] for m in versions.missing_checksums("arm64")] == ["coredns 1.14.2"]
    coredns = versions.ARTIFACTS[2]
    assert coredns.cross_check.format(arch="amd64") == f"{coredns.file_url('amd64')}.sha256"


def test_python_lock_pins_every_package_with_hashes() -> None:
    text = (REPO / "apptainer" / "defs" / "controlplane-requirements.txt").read_text()
    entries = re.findall(r"^([a-z0-9-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", text, re.M)
    names = {n for n, _, _ in entries}
    assert {"kubernetes", "pydantic", "pydantic-core", "cryptography", "aiohttp", "jinja2", "plumbum"} <= names
    requirement_lines = [x for x in text.splitlines() if x and not x.startswith(("#", " "))]
    assert len(requirement_lines) == len(entries), "every requirement is pinned with at least one hash"


# ---------------------------------------------------------------------------------------------
# The plan and the reuse decision


def _plan(tmp_path: Path, digest: str = DIGEST, **apptainer: Any) -> cpimage.BuildPlan:
    profile = make_profile(tmp_path, apptainer=apptainer)
    return plan_build(profile, "controlplane", arch="amd64", hpkctl_digest=digest)


def test_recipe_hash_ignores_the_build_directory_and_follows_the_contents(tmp_path: Path) -> None:
    a = _plan(tmp_path / "a")
    b = _plan(tmp_path / "b")
    assert a.context != b.context and a.recipe_hash == b.recipe_hash
    assert f"hpk.recipe {a.recipe_hash}" in a.definition
    assert _plan(tmp_path / "a", digest="e" * 64).recipe_hash != a.recipe_hash  # hpkctl changed
    assert plan_build(make_profile(tmp_path), "controlplane", arch="arm64",
                      hpkctl_digest=DIGEST).recipe_hash != a.recipe_hash


def test_recipe_hash_follows_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _plan(tmp_path).recipe_hash
    monkeypatch.setattr(versions, "ARTIFACTS", pinned_artifacts())
    assert _plan(tmp_path).recipe_hash != before


def _built(plan: cpimage.BuildPlan) -> None:
    Path(plan.sif).parent.mkdir(parents=True, exist_ok=True)
    Path(plan.sif).write_bytes(b"image")
    Path(plan.record_path).write_text(cpimage.build_record(plan, built="2026-01-01T00:00:00Z"))


def test_reuse_decision(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    first = reuse_decision(plan)
    assert first.build and "no image at" in first.reason
    _built(plan)
    same = reuse_decision(plan)
    assert not same.build and plan.recipe_hash[:12] in same.reason
    assert reuse_decision(plan, force=True) == cpimage.Decision(True, "--force")
    changed = reuse_decision(_plan(tmp_path, digest="e" * 64))
    assert changed.build and "was built from recipe" in changed.reason
    st = os.stat(plan.sif)
    os.utime(plan.sif, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    touched = reuse_decision(plan)
    assert touched.build and "changed after hpkctl build wrote it" in touched.reason
    Path(plan.record_path).write_text("{not json")
    assert "no readable build record" in reuse_decision(plan).reason


def test_parent_image_goes_where_the_jobs_look_for_it(tmp_path: Path) -> None:
    from hpkctl.pod.images import parse_image
    from hpkctl.pod.translate import image_sif

    profile = make_profile(tmp_path, apptainer={"network": "cni", "parent_image": "localhost/hpk-parent:1"})
    plan = plan_build(profile, "parent", arch="amd64", hpkctl_digest=DIGEST)
    assert plan.sif == image_sif(profile, parse_image("localhost/hpk-parent:1"))
    assert plan.copies == {} and plan.refusals == []
    with pytest.raises(HpkError, match="names no \\[apptainer\\] parent_image"):
        plan_build(make_profile(tmp_path), "parent", arch="amd64", hpkctl_digest=DIGEST)


# ---------------------------------------------------------------------------------------------
# Failures: which step, and what the site must allow

APPTAINER_START = ["INFO:    User not listed in /etc/subuid, trying root-mapped namespace",
                   "INFO:    The %post section will be run under the fakeroot command", "INFO:    Starting build...",
                   "Getting image source signatures", "Copying blob 1f3e46996e29 done"]


@pytest.mark.parametrize("lines,step,cause,detail", [
    (["FATAL:   could not use fakeroot: no mapping entry found in /etc/subuid for hpk"],
     "starting the build", "fakeroot / unprivileged user namespaces", "could not use fakeroot"),
    (APPTAINER_START[:3] + ["FATAL:   While performing build: conveyor failed to get: Get \"https://index.docker.io/"
                            "v2/\": dial tcp: lookup index.docker.io: no such host"],
     "fetching and unpacking the base image", "cannot reach the network", "conveyor failed"),
    (APPTAINER_START + ["INFO:    Running post scriptlet", "+ hpk_step apt packages", "hpk-build-step: apt packages",
                        "hpk-build-step: download etcd", "curl: (6) Could not resolve host: github.com",
                        "hpk-build-error: etcd: cannot download https://github.com/x (the build node needs HTTPS "
                        "access to it)", "FATAL:   While performing build: while running engine: exit status 1"],
     "%post, step 'download etcd'", "cannot reach the network", "etcd: cannot download"),
    (APPTAINER_START + ["INFO:    Running post scriptlet", "hpk-build-step: verify kubernetes",
                        "/tmp/hpk-dl/kubernetes-server-linux-amd64.tar.gz: FAILED",
                        "sha512sum: WARNING: 1 computed checksum did NOT match",
                        "hpk-build-error: kubernetes: sha512 of https://dl.k8s.io/x is not the pinned one; the file "
                        "is refused"],
     "%post, step 'verify kubernetes'", "checksum is not the pinned one", "kubernetes: sha512"),
    (APPTAINER_START + ["INFO:    Running post scriptlet", "hpk-build-step: check versions", "INFO:    Adding labels",
                        "INFO:    Creating SIF file...",
                        "FATAL:   While performing build: while creating squashfs: write /tmp/build-temp/squashfs: "
                        "no space left on device"],
     "packing the image into a SIF file", "the disk is full", "while creating squashfs"),
    (APPTAINER_START + ["INFO:    Running post scriptlet", "hpk-build-step: check versions",
                        "hpk-build-error: coredns is not 1.14.2"],
     "%post, step 'check versions'", "", "coredns is not 1.14.2"),
    (APPTAINER_START + ["INFO:    Running post scriptlet", "hpk-build-step: apk packages",
                        "ERROR: unable to select packages:", "  apptainer (no such package):",
                        "FATAL:   While performing build: while running engine: exit status 1"],
     "%post, step 'apk packages'", "", "ERROR: unable to select packages"),
])
def test_diagnose(lines: list[str], step: str, cause: str, detail: str) -> None:
    failure = diagnose(lines)
    assert failure.step.startswith(step)
    assert (cause in failure.cause) if cause else failure.cause == ""
    assert detail in failure.detail


# ---------------------------------------------------------------------------------------------
# The command: dry run, build, reuse, failures (a fake `apptainer` as the profile's binary)

FAKE_APPTAINER = r'''#!{python}
"""A fake `apptainer build` for the tests: checks its arguments and the definition's %files, then
prints what Apptainer prints and writes the image, or fails the way FAKE_MODE says."""
import json, os, sys, time

def say(text, err=False):
    print(text, file=sys.stderr if err else sys.stdout, flush=True)

args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
mode = os.environ.get("FAKE_MODE", "ok")
if args[:1] != ["build"] or len(args) < 3:
    say("Error for command: unknown command", True); sys.exit(1)
dest, definition = args[-2], args[-1]
if os.path.exists(dest):
    say("FATAL:   Build target '%s' already exists. Use --force if you want to overwrite it" % dest, True)
    sys.exit(255)
text = open(definition).read()
section = ""
for line in text.splitlines():
    if line.startswith("%"):
        section = line.strip()
    elif section == "%files" and line.strip():
        src = line.split()[0]
        if not os.path.isfile(src):
            say("FATAL:   While performing build: unable to copy %s: no such file" % src, True); sys.exit(255)
if mode == "fakeroot":
    say("FATAL:   could not use fakeroot: no mapping entry found in /etc/subuid for " + os.environ.get("USER", "u"), True)
    sys.exit(255)
say("INFO:    User not listed in /etc/subuid, trying root-mapped namespace")
say("INFO:    Starting build...")
say("Getting image source signatures")
say("INFO:    Running post scriptlet")
say("+ hpk_step 'apt packages'")
say("hpk-build-step: apt packages")
if mode == "network":
    say("hpk-build-step: download etcd")
    say("curl: (6) Could not resolve host: github.com", True)
    say("hpk-build-error: etcd: cannot download https://github.com/etcd-io/etcd/releases/download/v3.6.14/"
        "etcd-v3.6.14-linux-amd64.tar.gz (the build node needs HTTPS access to it)", True)
    say("FATAL:   While performing build: while running engine: exit status 1", True)
    open(dest, "w").write("half")  # a partial image must never become the image
    sys.exit(255)
if mode == "slow":
    open(dest, "w").write("half")
    with open(os.environ["FAKE_PID"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
say("hpk-build-step: check versions")
say("INFO:    Creating SIF file...")
with open(dest, "w") as out:
    out.write("fake SIF of " + definition)
say("INFO:    Build complete: " + dest)
'''


@pytest.fixture
def fake_apptainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "bin" / "apptainer"
    exe.parent.mkdir()
    exe.write_text(FAKE_APPTAINER.replace("{python}", sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "apptainer.log"))
    return exe


def site(tmp_path: Path, binary: Path | str, extra: str = "") -> str:
    path = tmp_path / "site.toml"
    path.write_text(f'extends = "ci"\n[apptainer]\nbinary = "{binary}"\nimage_cache = "{tmp_path / "images"}"\n'
                    + extra)
    return str(path)


def calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "apptainer.log"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def fake_wheel(tmp_path: Path) -> str:
    wheel = tmp_path / f"hpkctl-{__version__}-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    return str(wheel)


def normalise(text: str, tmp_path: Path) -> str:
    return (text.replace(str(tmp_path), "<TMP>").replace(str(REPO), "<REPO>")
            .replace(sys.executable, "<PYTHON>"))


def test_dry_run_prints_plan_commands_and_definition(tmp_path: Path, fake_apptainer: Path, capsys,  # type: ignore[no-untyped-def]
                                                     monkeypatch: pytest.MonkeyPatch, snapshot_txt) -> None:
    monkeypatch.setattr(cpimage, "source_digest", lambda: DIGEST)
    rc = main(["build", "--site", site(tmp_path, fake_apptainer), "--dry-run", "--arch", "arm64"])
    out, err = capsys.readouterr()
    assert rc == 125  # CoreDNS has no pinned arm64 checksum: a real build would be refused
    assert "refusing to build the controlplane image" in err and "coredns 1.14.2: no pinned sha256" in err
    assert calls(tmp_path) == [] and not (tmp_path / "images").exists()  # nothing ran, nothing written
    assert normalise(out, tmp_path) == snapshot_txt


def test_dry_run_with_every_checksum_pinned_exits_0(tmp_path: Path, fake_apptainer: Path, capsys,  # type: ignore[no-untyped-def]
                                                    all_pinned: None) -> None:
    rc = main(["build", "--site", site(tmp_path, fake_apptainer), "--dry-run", "--arch", "arm64"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "# decision: build: no image at" in out
    assert f"{fake_apptainer} build --fakeroot {tmp_path}/images/hpk-controlplane-arm64.sif.partial" in out
    assert "hpk_fetch kubernetes https://dl.k8s.io/v1.36.0/kubernetes-server-linux-arm64.tar.gz sha512 7f95" in out
    assert calls(tmp_path) == []


def test_dry_run_in_cni_mode_plans_the_parent_too(tmp_path: Path, fake_apptainer: Path, capsys,  # type: ignore[no-untyped-def]
                                                  all_pinned: None) -> None:
    extra = 'network = "cni"\nparent_image = "localhost/hpk-parent:1"\n'
    assert main(["build", "--site", site(tmp_path, fake_apptainer, extra), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "the controlplane image" in out and "the parent image" in out
    assert "From: alpine:3.23" in out and "localhost_hpk-parent_1-" in out


def test_build_then_reuse(tmp_path: Path, fake_apptainer: Path, capsys, all_pinned: None) -> None:  # type: ignore[no-untyped-def]
    # the real wheel build from this checkout, then the (fake) apptainer build
    profile = site(tmp_path, fake_apptainer)
    assert main(["build", "--site", profile]) == 0
    out = capsys.readouterr().out
    sif = tmp_path / "images" / "hpk-controlplane-amd64.sif"
    context = tmp_path / "images" / ".hpk-build" / "controlplane-amd64"
    (call,) = calls(tmp_path)
    assert call == ["build", "--fakeroot", f"{sif}.partial", f"{context}/controlplane.def"]
    assert sif.read_text() == f"fake SIF of {context}/controlplane.def"
    record = json.loads(Path(f"{sif}.build.json").read_text())
    assert record["recipe"] in out and record["size"] == sif.stat().st_size
    assert "INFO:    Creating SIF file..." in out  # the build's output is streamed
    assert not context.exists() and not Path(f"{sif}.partial").exists()
    # reused: same recipe, same file
    assert main(["build", "--site", profile]) == 0
    assert "up to date, nothing to do" in capsys.readouterr().out
    assert len(calls(tmp_path)) == 1
    # --force builds again
    assert main(["build", "--site", profile, "--force"]) == 0
    assert len(calls(tmp_path)) == 2


def test_wheel_ships_the_definitions(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path),
                        str(REPO)], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("hpkctl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("controlplane.def.j2", "parent.def.j2", "controlplane-requirements.txt"):
        assert f"hpkctl/_data/apptainer/defs/{name}" in names


def test_build_with_a_given_wheel(tmp_path: Path, fake_apptainer: Path, capsys, all_pinned: None) -> None:  # type: ignore[no-untyped-def]
    wheel = fake_wheel(tmp_path)
    assert main(["build", "--site", site(tmp_path, fake_apptainer), "--wheel", wheel]) == 0
    out = capsys.readouterr().out
    assert "building hpkctl's wheel" not in out
    (call,) = calls(tmp_path)
    definition = Path(call[-1])
    assert not definition.exists()  # build directory removed after success


def test_failing_build_names_the_step_and_what_the_site_must_allow(tmp_path: Path, fake_apptainer: Path,  # type: ignore[no-untyped-def]
                                                                   capsys, monkeypatch: pytest.MonkeyPatch,
                                                                   all_pinned: None) -> None:
    monkeypatch.setenv("FAKE_MODE", "network")
    rc = main(["build", "--site", site(tmp_path, fake_apptainer), "--wheel", fake_wheel(tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 125
    assert "Could not resolve host: github.com" in out  # streamed as it came
    assert ("building the controlplane image failed (exit code 255) while %post, step 'download etcd': etcd: "
            "cannot download https://github.com/etcd-io/etcd/releases/download/v3.6.14/") in err
    assert "likely cause: the build node cannot reach the network" in err
    for need in ("apptainer build --fakeroot", "/etc/subuid", "network on the build node", "disk space"):
        assert need in err
    sif = tmp_path / "images" / "hpk-controlplane-amd64.sif"
    assert not sif.exists() and not Path(f"{sif}.partial").exists()  # no half image anywhere
    context = tmp_path / "images" / ".hpk-build" / "controlplane-amd64"
    assert (context / "controlplane.def").exists() and f"build directory {context} is kept" in err


def test_fakeroot_refused(tmp_path: Path, fake_apptainer: Path, capsys, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                          all_pinned: None) -> None:
    monkeypatch.setenv("FAKE_MODE", "fakeroot")
    assert main(["build", "--site", site(tmp_path, fake_apptainer), "--wheel", fake_wheel(tmp_path)]) == 125
    err = capsys.readouterr().err
    assert "while starting the build (before the base image was fetched): could not use fakeroot" in err
    assert "likely cause: fakeroot / unprivileged user namespaces are not available" in err


def test_build_flags_from_the_profile(tmp_path: Path, fake_apptainer: Path, capsys, all_pinned: None) -> None:  # type: ignore[no-untyped-def]
    profile = site(tmp_path, fake_apptainer, 'build_flags = ["--fakeroot", "--fix-perms"]\n')
    assert main(["build", "--site", profile, "--wheel", fake_wheel(tmp_path)]) == 0
    assert calls(tmp_path)[0][:3] == ["build", "--fakeroot", "--fix-perms"]


def test_refusals(tmp_path: Path, fake_apptainer: Path, capsys,  # type: ignore[no-untyped-def]
                  monkeypatch: pytest.MonkeyPatch) -> None:
    profile = site(tmp_path, fake_apptainer)
    # a download without a pinned checksum: refused before anything runs
    monkeypatch.setattr(versions, "ARTIFACTS", tuple(dataclasses.replace(a, checksums={}) if a.name == "coredns"
                                                     else a for a in versions.ARTIFACTS))
    assert main(["build", "--site", profile, "--wheel", fake_wheel(tmp_path)]) == 125
    assert "refusing to build the controlplane image" in capsys.readouterr().err
    other = "arm64" if cpimage.host_arch() == "amd64" else "amd64"
    assert main(["build", "--site", profile, "--arch", other]) == 125
    assert "--arch is for --dry-run" in capsys.readouterr().err
    assert main(["build", "--site", profile, "parent"]) == 125
    assert "names no [apptainer] parent_image" in capsys.readouterr().err
    assert main(["build", "--site", profile, "nodes"]) == 125
    assert "unknown image 'nodes'" in capsys.readouterr().err
    assert main(["build", "--site", profile, "--wheel", str(tmp_path / "missing.whl")]) == 125
    assert calls(tmp_path) == []


def test_with_the_apptainer_standin(tmp_path: Path, capsys, all_pinned: None) -> None:  # type: ignore[no-untyped-def]
    # The stand-in (ci/standin/apptainer) implements no `build`: hpkctl must say so clearly, keep no
    # partial image, and name what a real site must allow.
    standin = REPO / "ci" / "standin" / "apptainer"
    assert main(["build", "--site", site(tmp_path, standin), "--wheel", fake_wheel(tmp_path)]) == 125
    err = capsys.readouterr().err
    assert ("while starting the build (before the base image was fetched): the stand-in does not implement "
            "'apptainer build'") in err
    sif = tmp_path / "images" / "hpk-controlplane-amd64.sif"
    assert not sif.exists() and not Path(f"{sif}.partial").exists()


def test_sigterm_stops_the_build_and_leaves_no_image(tmp_path: Path, fake_apptainer: Path) -> None:
    # hpkctl runs the build in its own session; SIGTERM to hpkctl (a batch system, `timeout`) must
    # still stop it, and leave no partial image. The parent image needs no checksums, no wheel.
    extra = 'network = "cni"\nparent_image = "localhost/hpk-parent:1"\n'
    pid_file = tmp_path / "fake.pid"
    env = {**os.environ, "FAKE_MODE": "slow", "FAKE_PID": str(pid_file)}
    proc = subprocess.Popen([sys.executable, "-m", "hpkctl", "build", "--site", site(tmp_path, fake_apptainer, extra),
                             "parent"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            if pid_file.exists() and pid_file.read_text():
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        fake_pid = int(pid_file.read_text())
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    def gone(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (FileNotFoundError, ProcessLookupError):
            return True

    for _ in range(200):  # killed with its process group (a zombie until its new parent reaps it)
        if gone(fake_pid):
            break
        time.sleep(0.05)
    assert gone(fake_pid)
    partial = list((tmp_path / "images").glob("*.partial")) + list((tmp_path / "images").glob("*.sif"))
    assert partial == []

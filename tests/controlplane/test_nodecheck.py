"""``hpkctl doctor --on-node``: the node-check job script (bash -n, shellcheck, what it reports when
run here with the Apptainer stand-in, and with a broken one), its parser, and the whole command on
the real Slurm as user hpk."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from hpkctl.controlplane.nodecheck import ALWAYS, parse_node_checks, render_node_check
from hpkctl.sites import load_site
from hpkctl.sites.schema import SiteProfile
from tests.support.hpk import STANDIN, Hpk, require_standin
from tests.support.slurm import SINGLE_CONF, require_cluster


def _profile(name: str, tmp_path: Path, **apptainer: object) -> SiteProfile:
    p = load_site(name)
    (tmp_path / "images").mkdir(exist_ok=True)
    (tmp_path / "state").mkdir(exist_ok=True)
    return p.model_copy(update={
        "apptainer": p.apptainer.model_copy(update={"image_cache": str(tmp_path / "images"), **apptainer}),
        "pods": p.pods.model_copy(update={"state_dir": str(tmp_path / "state")})})


@pytest.mark.parametrize("site", ["ci", "ci-cni", "ci-multi", "parallelcluster"])
def test_the_node_check_script_is_bash_n_and_shellcheck_clean(site: str, tmp_path: Path) -> None:
    script = tmp_path / "node-check.sh"
    script.write_text(render_node_check(_profile(site, tmp_path), site=site, out_dir=str(tmp_path),
                                        endpoints=[("apiserver", "10.0.0.1", 16443), ("coredns", "10.0.0.1", 10053)]))
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.fail("shellcheck is not installed (apt-get install shellcheck)")
    r = subprocess.run([exe, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout
    assert "#SBATCH --time=00:05:00" in script.read_text()


def _run_here(profile: SiteProfile, tmp_path: Path, *, path: str, endpoints: list[tuple[str, str, int]] = []) -> str:
    script = tmp_path / "node-check.sh"
    script.write_text(render_node_check(profile, site="ci", out_dir=str(tmp_path), endpoints=endpoints))
    bash = shutil.which("bash")
    assert bash is not None
    r = subprocess.run([bash, str(script)], capture_output=True, text=True, timeout=120, check=False,
                       env={"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"})
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.standin
def test_run_here_it_reports_every_check(tmp_path: Path) -> None:
    """Run outside Slurm with the stand-in: every check that is always made is reported, and a port
    nobody listens on fails with its fix."""
    require_standin()
    profile = _profile("ci", tmp_path)
    image = next(Path(os.path.expanduser("~hpk/.hpk/images")).glob("docker.io_library_busybox_1.36-*.sif"), None)
    if image is not None:
        shutil.copy(image, tmp_path / "images" / image.name)
    out = _run_here(profile, tmp_path, path=f"{STANDIN}:/usr/bin:/bin", endpoints=[("apiserver", "127.0.0.1", 9)])
    checks = {c.name: c for c in parse_node_checks(out)}
    assert set(ALWAYS) <= set(checks), out
    assert checks["bash"].result == "OK" and checks["tools"].result == "OK", out
    assert checks["apptainer"].result == "OK" and "standin" in checks["apptainer"].detail
    assert checks["port apiserver"].result == "FAIL" and "127.0.0.1:9" in checks["port apiserver"].detail
    assert checks["port apiserver"].fix
    if image is not None:
        assert checks["user namespaces"].result == "OK", out


def test_a_missing_apptainer_and_tools_fail_with_the_fix(tmp_path: Path) -> None:
    """PATH without the stand-in, and with only some tools: FAIL lines that name what is missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "hostname", "date", "sed", "cat", "tail", "id", "dirname", "grep", "timeout"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    out = _run_here(_profile("ci", tmp_path), tmp_path, path=str(bin_dir))
    checks = {c.name: c for c in parse_node_checks(out)}
    assert checks["apptainer"].result == "FAIL" and checks["apptainer"].fix, out
    assert checks["tools"].result == "FAIL" and "flock" in checks["tools"].detail and "sha256sum" in checks["tools"].detail
    assert checks["fakeroot"].result == "WARN" and "not tried" in checks["fakeroot"].detail  # not needed by ci
    assert set(ALWAYS) <= set(checks), out


def test_parse_ignores_anything_but_check_lines() -> None:
    text = "noise\nhpk-check\tbash\tOK\tbash 5\t\nhpk-check\tx\tMAYBE\ta\tb\nhpk-check\tfuse\tWARN\tno fuse\tfix it\n"
    assert [(c.name, c.result, c.fix) for c in parse_node_checks(text)] == [("bash", "OK", ""), ("fuse", "WARN", "fix it")]


@pytest.mark.slurm
@pytest.mark.standin
def test_doctor_on_node_on_the_real_slurm() -> None:
    """``hpkctl doctor --site ci --on-node`` as user hpk: the job runs on the partition's node and
    every node check is there; nothing fails on the machine ci/setup prepared."""
    require_cluster(SINGLE_CONF, 1)
    require_standin()
    work = Path(tempfile.mkdtemp(prefix="hpk-doctor-", dir="/tmp"))  # hpk's working directory
    try:
        work.chmod(0o777)
        r = Hpk(work).hpkctl("doctor", "--site", "ci", "--on-node", timeout=400)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = r.stdout.splitlines()
    assert any(line.startswith("OK    node job") and "COMPLETED" in line for line in lines), r.output
    for name in ALWAYS:
        assert any(f"node: {name} " in line for line in lines), (name, r.output)
    failed = [line for line in lines if line.startswith("FAIL") and "node:" in line]
    assert not failed, r.output

"""The wheel ships the data files: site-configs/*.toml and everything under sbatch/."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (REPO / "pyproject.toml").is_file(), reason="needs a source checkout")
def test_wheel_contains_data_files(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("hpkctl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    profiles = sorted((REPO / "site-configs").glob("*.toml"))
    assert {p.name for p in profiles} >= {"ci.toml", "jsc.toml", "parallelcluster.toml"}
    for p in profiles:
        assert f"hpkctl/_data/site-configs/{p.name}" in names, f"{p.name} missing from {wheel.name}"

    sbatch = [p for p in (REPO / "sbatch").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for p in sbatch:  # may be none yet; every file there must ship
        rel = p.relative_to(REPO / "sbatch").as_posix()
        assert f"hpkctl/_data/sbatch/{rel}" in names, f"sbatch/{rel} missing from {wheel.name}"

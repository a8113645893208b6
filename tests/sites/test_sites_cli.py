"""`hpkctl sites list` and `hpkctl sites show NAME [--toml]` through hpkctl.cli.main."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from hpkctl.cli import main
from hpkctl.resources import data_dir
from hpkctl.sites import load_site

BUILTIN = data_dir("site-configs")
NAMES = sorted(p.stem for p in BUILTIN.glob("*.toml") if not p.stem.startswith("_"))


def test_list(capsys: pytest.CaptureFixture[str], write) -> None:
    u = write("jsc", '[slurm]\naccount = "b"\n')
    assert main(["sites", "list"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert f"\n{name} " in "\n" + out
    assert str(BUILTIN / "ci.toml") in out or "built-in" in out
    assert "overridden by" in out and u.name in out
    assert "JUWELS" in out  # jsc's description
    assert "_defaults" not in out


def test_list_marks_invalid_profile(capsys: pytest.CaptureFixture[str], write) -> None:
    write("broken", '[slurm]\npartition = 1\n')
    assert main(["sites", "list"]) == 1
    assert "INVALID: site profile 'broken'" in capsys.readouterr().out


def test_show_annotates_origin_of_every_value(
    capsys: pytest.CaptureFixture[str], write, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PROJECT", raising=False)
    monkeypatch.setenv("SCRATCH", "/p/scratch/c")
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # user file shown with its full path, not ~/...
    u = write("jsc", '[slurm]\naccount = "budget1"\n')
    assert main(["sites", "show", "jsc"]) == 0
    out = capsys.readouterr().out
    # the first line of each key name ([controlplane] has a state_dir, bin_dir and address of its own too)
    lines = {ln.split("=")[0].strip(): ln for ln in reversed(out.splitlines()) if "=" in ln and not ln.startswith("#")}
    assert lines["account"].startswith('account = "budget1"')
    assert lines["account"].rstrip().endswith(f"# {u}")
    assert lines["partition"].rstrip().endswith("# built-in jsc.toml")
    assert lines["node_name"].rstrip().endswith("# schema default")
    assert "needs $PROJECT when used" in lines["image_cache"]  # works without $PROJECT
    assert "= /p/scratch/c/alice/hpk" in lines["state_dir"]
    assert str(BUILTIN / "jsc.toml") in out and str(u) in out  # header lists the files
    # the annotated output is itself valid TOML holding the same values
    data = tomllib.loads(out)
    assert data["slurm"]["account"] == "budget1" and data["apptainer"]["pull"] == "submit"


@pytest.mark.parametrize("name", NAMES)
def test_show_toml_round_trips(name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["sites", "show", name, "--toml"]) == 0
    out = capsys.readouterr().out
    assert "#" not in out.replace('"#', "")  # plain TOML, no comments
    f = tmp_path / f"{name}.toml"
    f.write_text(out)
    again = load_site(str(f), expand=False)
    assert again.model_dump() == load_site(name, expand=False).model_dump()


def test_show_errors_exit_2(capsys: pytest.CaptureFixture[str], write) -> None:
    assert main(["sites", "show", "nope"]) == 125  # hpkctl's own error (README: exit status)
    err = capsys.readouterr().err
    assert err.startswith("hpkctl: error: unknown site profile 'nope'") and "fix: available: " in err
    write("bad", '[apptainer]\npull = "always"\n')
    assert main(["sites", "show", "bad"]) == 125
    err = capsys.readouterr().err
    assert '[apptainer].pull: expected one of "job", "submit"; got "always"' in err
    assert 'fix: set pull = "job" or "submit" under [apptainer]' in err

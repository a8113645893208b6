"""The built-in profiles: each loads, validates and holds its site's key facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpkctl.errors import ProfileError
from hpkctl.resources import data_dir
from hpkctl.sites import SCHEMA_DEFAULT, explain_site, list_sites, load_site, require_submittable
from hpkctl.sites.describe import defaults_toml
from hpkctl.sites.schema import SiteProfile

BUILTIN = data_dir("site-configs")
NAMES = sorted(p.stem for p in BUILTIN.glob("*.toml") if not p.stem.startswith("_"))


@pytest.fixture(autouse=True)
def site_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("PROJECT", "/p/project/cjsc")
    monkeypatch.setenv("SCRATCH", "/p/scratch/cjsc")


def test_expected_profiles_exist() -> None:
    assert {"ci", "ci-multi", "ci-cni", "jsc", "parallelcluster"} <= set(NAMES)
    assert [s.name for s in list_sites()] == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_builtin_profile_loads(name: str) -> None:
    p = load_site(name)
    assert p.name == name
    assert p.site.description, "every built-in profile has a description for `sites list`"
    assert Path(p.pods.state_dir).is_absolute() and Path(p.apptainer.image_cache).is_absolute()
    # also without expansion (what `sites show` uses)
    assert load_site(name, expand=False).site.description == p.site.description


@pytest.mark.parametrize("name", NAMES)
def test_builtin_profile_site_specific_values_are_commented(name: str) -> None:
    """Every key a built-in file sets carries a comment saying why (on its line or the lines after)."""
    lines = (BUILTIN / f"{name}.toml").read_text().splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if s and not s.startswith(("#", "[")) and "=" in s and not s.startswith(("extends", "description")):
            assert "#" in line, f"{name}.toml line {i + 1} has no comment: {line}"


def test_ci_profiles() -> None:
    ci = load_site("ci")
    assert (ci.slurm.partition, ci.slurm.jobcomp_file) == ("debug", "/var/log/slurm/jobcomp.log")
    assert (ci.apptainer.binary, ci.apptainer.network, ci.apptainer.pull) == ("apptainer", "host", "job")
    assert ci.apptainer.image_cache == str(Path.home() / ".hpk" / "images")
    assert ci.slurm.default_time == "00:10:00"
    multi = load_site("ci-multi")
    assert multi.slurm.conf_file == "/etc/slurm-multi/slurm.conf"
    assert (multi.slurm.partition, multi.slurm.jobcomp_file) == ("multi", "/var/log/slurm-multi/jobcomp.log")
    assert multi.slurm.default_time == "00:10:00"  # from ci
    cni = load_site("ci-cni")
    assert (cni.apptainer.network, cni.apptainer.cni_network) == ("cni", "none")
    assert cni.apptainer.parent_image == "docker://hpk-parent"
    assert cni.slurm.partition == "debug"


def test_jsc_profile() -> None:
    jsc = load_site("jsc")
    s = jsc.slurm
    assert (s.partition, s.account_required, s.max_time, s.default_time, s.exclusive) == (
        "batch", True, "24:00:00", "01:00:00", True,
    )
    assert (jsc.apptainer.network, jsc.apptainer.pull, jsc.gpu.gres_name) == ("host", "submit", "gpu")
    assert jsc.apptainer.image_cache == "/p/project/cjsc/alice/hpk/images"
    assert jsc.pods.state_dir == "/p/scratch/cjsc/alice/hpk"


def test_jsc_without_project_shows_but_does_not_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROJECT")
    expl = explain_site("jsc")  # no expansion: works on any machine
    assert expl.profile.apptainer.image_cache == "$PROJECT/$USER/hpk/images"
    with pytest.raises(ProfileError) as e:
        load_site("jsc")
    msg = str(e.value)
    assert "$PROJECT" in msg and "[apptainer].image_cache" in msg and "jsc.toml" in msg
    assert "jutil env activate" in msg


def test_jsc_needs_an_account(user_dir: Path) -> None:
    with pytest.raises(ProfileError) as e:
        require_submittable(load_site("jsc"))
    assert "[slurm].account" in e.value.message
    assert str(user_dir / "jsc.toml") in e.value.hint or "~/" in e.value.hint
    (user_dir / "jsc.toml").write_text('[slurm]\naccount = "training2500"\n')
    require_submittable(load_site("jsc"))  # no error
    (user_dir / "jsc.toml").write_text('[slurm]\nextra_directives = ["--account=x"]\n')
    require_submittable(load_site("jsc"))


def test_parallelcluster_profile() -> None:
    pc = load_site("parallelcluster")
    assert (pc.slurm.partition, pc.slurm.account_required, pc.slurm.max_time, pc.slurm.exclusive) == (
        "queue1", False, "", False,
    )
    assert pc.apptainer.image_cache.startswith(str(Path.home()))
    require_submittable(pc)


def test_defaults_file_is_current_and_complete() -> None:
    text = (BUILTIN / "_defaults.toml").read_text()
    assert text == defaults_toml(), "site-configs/_defaults.toml is stale: regenerate it with " \
        "python -c 'from hpkctl.sites.describe import defaults_toml; print(defaults_toml(), end=\"\")' " \
        "> site-configs/_defaults.toml"
    expl = explain_site(str(BUILTIN / "_defaults.toml"))
    assert SCHEMA_DEFAULT not in expl.origins.values(), "every key is in the defaults file"
    assert expl.profile.model_dump(exclude={"name"}) == SiteProfile(name="x").model_dump(exclude={"name"})

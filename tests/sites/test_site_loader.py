"""Loading, merging, provenance, expansion and the wording of profile errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpkctl.errors import ProfileError
from hpkctl.resources import data_dir
from hpkctl.sites import SCHEMA_DEFAULT, explain_site, list_sites, load_site

BUILTIN = data_dir("site-configs")


def error_of(name_or_path: str, **kw) -> ProfileError:
    with pytest.raises(ProfileError) as e:
        load_site(name_or_path, **kw)
    return e.value


# ---------------------------------------------------------------------------------------------
# errors: file, key path, expected, given, fix


def test_unknown_key_suggests_the_close_one(write) -> None:
    f = write("mysite", '[slurm]\npartiton = "gpu"\n')
    e = error_of("mysite")
    assert str(f) in e.message
    assert "[slurm].partiton" in e.message and "unknown key" in e.message and '"gpu"' in e.message
    assert "remove the key; did you mean `partition`?" in e.hint


def test_unknown_key_in_wrong_table_says_where_it_belongs(write) -> None:
    write("mysite", 'partition = "gpu"\n[apptainer]\naccount = "x"\n')
    e = error_of("mysite")
    assert "2 problems" in e.message
    assert "partition: unknown key" in e.message and "move it under [slurm]" in e.message
    assert "[apptainer].account" in e.message and "belongs under [slurm]" in e.message


def test_unknown_table_suggests_section(write) -> None:
    write("mysite", '[slurmm]\npartition = "x"\n')
    e = error_of("mysite")
    assert "[slurmm]: unknown table" in e.message and "did you mean [slurm]?" in e.hint


def test_unknown_key_without_close_match_lists_allowed(write) -> None:
    write("mysite", "[pods]\nzzzzqqq = 1\n")
    e = error_of("mysite")
    assert "keys allowed in [pods]:" in e.hint and "state_dir" in e.hint


def test_wrong_type(write) -> None:
    f = write("mysite", "[slurm]\npartition = 5\nexclusive = \"yes\"\n")
    e = error_of("mysite")
    assert f"{f}: [slurm].partition: expected a string; got 5 (an integer)" in e.message
    assert 'quote it: partition = "5"' in e.message
    assert '[slurm].exclusive: expected true or false; got "yes" (a string)' in e.message
    assert "exclusive = true or exclusive = false (no quotes)" in e.message


def test_unquoted_time_is_explained(write) -> None:
    write("mysite", "[slurm]\ndefault_time = 00:30:00\n")
    e = error_of("mysite")
    assert "[slurm].default_time: expected a string" in e.message
    assert 'quote it: default_time = "00:30:00"' in e.hint


def test_wrong_list_item_type(write) -> None:
    write("mysite", '[apptainer]\nbinds = ["/a:/a", 3]\n')
    e = error_of("mysite")
    assert "[apptainer].binds[1]: expected a string; got 3" in e.message
    assert "every item of [apptainer].binds must be a quoted string" in e.hint


def test_bad_enum_lists_allowed_values(write) -> None:
    f = write("mysite", '[apptainer]\nnetwork = "bridge"\n')
    e = error_of("mysite")
    assert e.message == (
        f"site profile 'mysite': {f}: [apptainer].network: expected one of \"host\", \"cni\"; got \"bridge\""
    )
    assert e.hint == f'set network = "host" or "cni" under [apptainer] in {f}'


def test_bad_slurm_time(write) -> None:
    f = write("mysite", '[slurm]\nmax_time = "25h"\n')
    e = error_of("mysite")
    assert f"{f}: [slurm].max_time:" in e.message and "not a Slurm time" in e.message and '"25h"' in e.message
    assert '"01:30:00"' in e.hint and '"1-00:00:00"' in e.hint


def test_default_time_longer_than_max_time(write) -> None:
    write("mysite", '[slurm]\ndefault_time = "02:00:00"\nmax_time = "01:00:00"\n')
    e = error_of("mysite")
    assert "longer than max_time" in e.message and "raise max_time" in e.hint


def test_cni_needs_parent_image_names_the_file_that_set_network(write) -> None:
    f = write("mysite", 'extends = "ci"\n[apptainer]\nnetwork = "cni"\n')
    e = error_of("mysite")
    assert f"{f}: [apptainer]: network = 'cni' needs parent_image" in e.message
    assert "parent_image" in e.hint


def test_toml_syntax_error_names_file_line_column(write) -> None:
    f = write("mysite", '[slurm]\npartition = "debug"\naccount = budget\n')
    e = error_of("mysite")
    assert e.message.startswith(f"{f}:3:11: TOML syntax error at line 3, column 11")
    assert "account = budget" in e.message
    assert "strings need quotes" in e.hint


def test_unknown_site_lists_available() -> None:
    e = error_of("jsx")
    assert "unknown site profile 'jsx'" in e.message
    assert "did you mean 'jsc'?" in e.hint
    for name in ("ci", "ci-multi", "jsc", "parallelcluster"):
        assert name in e.hint


def test_name_key_is_rejected(write) -> None:
    write("mysite", 'name = "other"\n')
    assert "name is its file name" in error_of("mysite").message


def test_unset_variable_names_variable_and_key(write, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPK_TEST_NOPE", raising=False)
    f = write("mysite", '[pods]\nstate_dir = "/x/${HPK_TEST_NOPE}/hpk"\n')
    e = error_of("mysite")
    assert f"{f}: [pods].state_dir: environment variable $HPK_TEST_NOPE is not set" in e.message
    assert "set HPK_TEST_NOPE" in e.hint
    assert load_site("mysite", expand=False).pods.state_dir == "/x/${HPK_TEST_NOPE}/hpk"


def test_relative_path_after_expansion_is_an_error(write) -> None:
    write("mysite", '[apptainer]\nimage_cache = "images"\n')
    e = error_of("mysite")
    assert "[apptainer].image_cache: expected an absolute path" in e.message


# ---------------------------------------------------------------------------------------------
# expansion


def test_expansion(write, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    monkeypatch.setenv("WORK", "/work/x")
    write(
        "mysite",
        '[pods]\nstate_dir = "$WORK/${WORK}/a$$b"\n'
        '[apptainer]\nbinds = ["~/data:/data", "$WORK:/w:ro"]\nexec_flags = ["$WORK"]\n',
    )
    p = load_site("mysite")
    assert p.pods.state_dir == "/work/x//work/x/a$b"
    assert p.apptainer.binds == [f"{tmp_path}/h/data:/data", "/work/x:/w:ro"]
    assert p.apptainer.exec_flags == ["$WORK"]  # not a path key: left alone
    assert p.apptainer.image_cache == f"{tmp_path}/h/.hpk/images"  # schema default expanded too


# ---------------------------------------------------------------------------------------------
# merging and provenance


def test_user_file_overrides_builtin_key_by_key(write) -> None:
    f = write("jsc", '[slurm]\naccount = "budget1"\npartition = "develbooster"\n[apptainer]\nbinds = ["/p:/p"]\n')
    p = load_site("jsc", expand=False)
    assert (p.slurm.account, p.slurm.partition) == ("budget1", "develbooster")
    assert p.slurm.max_time == "24:00:00" and p.slurm.exclusive  # kept from the built-in
    assert p.apptainer.pull == "submit" and p.apptainer.binds == ["/p:/p"]
    expl = explain_site("jsc")
    assert expl.files == (BUILTIN / "jsc.toml", f)
    assert expl.origin("slurm.account") == str(f)
    assert expl.origin("slurm.partition") == str(f)
    assert expl.origin("slurm.max_time") == str(BUILTIN / "jsc.toml")
    assert expl.origin(("pods", "node_name")) == SCHEMA_DEFAULT
    # every leaf key has an origin
    assert len(expl.origins) == sum(len(m.model_fields) for m in (
        type(p.site), type(p.slurm), type(p.gpu), type(p.apptainer), type(p.pods), type(p.kubelet),
        type(p.controlplane), type(p.pilot)))


def test_lists_are_replaced_and_tables_merged(write) -> None:
    write("base", '[gpu]\nflags_per_gpu = ["--a", "--b"]\n[gpu.extended_resources]\n"amd.com/gpu" = "gpu"\n')
    f = write("child", 'extends = "base"\n[gpu]\nflags_per_gpu = ["--c"]\n[gpu.extended_resources]\n"x.io/fpga" = "fpga"\n')
    p = load_site("child")
    assert p.gpu.flags_per_gpu == ["--c"]
    assert p.gpu.extended_resources == {"amd.com/gpu": "gpu", "x.io/fpga": "fpga"}
    expl = explain_site("child")
    assert expl.origins[("gpu", "extended_resources", "x.io/fpga")] == str(f)
    assert expl.origins[("gpu", "extended_resources", "amd.com/gpu")].endswith("base.toml")


def test_user_override_of_a_base_reaches_profiles_extending_it(write) -> None:
    f = write("ci", '[slurm]\ndefault_time = "00:05:00"\n')
    p = load_site("ci-multi")
    assert (p.slurm.default_time, p.slurm.partition) == ("00:05:00", "multi")
    expl = explain_site("ci-multi")
    assert expl.files == (BUILTIN / "ci.toml", f, BUILTIN / "ci-multi.toml")
    assert expl.origin("slurm.default_time") == str(f)
    assert expl.origin("slurm.partition") == str(BUILTIN / "ci-multi.toml")


def test_user_site_extends_builtin(write) -> None:
    f = write("juwels-booster", 'extends = "jsc"\n[slurm]\npartition = "booster"\naccount = "b"\n')
    p = load_site("juwels-booster", expand=False)
    assert (p.name, p.slurm.partition, p.slurm.max_time) == ("juwels-booster", "booster", "24:00:00")
    assert explain_site("juwels-booster").origin("slurm.partition") == str(f)
    assert "juwels-booster" in [s.name for s in list_sites()]


def test_extends_cycle(write) -> None:
    write("a", 'extends = "b"\n')
    write("b", 'extends = "a"\n')
    assert "cycle: a -> b -> a" in error_of("a").message


def test_path_argument(tmp_path: Path) -> None:
    f = tmp_path / "site.toml"
    f.write_text('extends = "ci"\n[slurm]\npartition = "other"\n')
    p = load_site(str(f))
    assert (p.name, p.slurm.partition, p.slurm.jobcomp_file) == ("site", "other", "/var/log/slurm/jobcomp.log")
    assert "does not exist" in error_of(str(tmp_path / "nope.toml")).message


def test_list_sites_marks_invalid_and_user_files(write) -> None:
    write("broken", "[slurm\n")
    u = write("ci", '[slurm]\npartition = "x"\n')
    sites = {s.name: s for s in list_sites()}
    assert "TOML syntax error" in sites["broken"].error
    assert sites["ci"].files == (BUILTIN / "ci.toml", u) and not sites["ci"].error
    assert sites["ci-cni"].extends == "ci"

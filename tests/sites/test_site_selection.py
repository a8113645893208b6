"""Which profile is used without --site: --site → $HPK_SITE → config.toml → [site] hostnames → error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from hpkctl.cli import main
from hpkctl.errors import HpkError, ProfileError
from hpkctl.sites import load_site, select_site
from hpkctl.sites.selection import SiteChoice, config_file

JUWELS_LOGIN = "jwlogin04.juwels"  # what `hostname` prints on a JUWELS login node
ELSEWHERE = "laptop.example.org"


def hosts(*names: str) -> Callable[[], Sequence[str]]:
    return lambda: list(names)


def never() -> Sequence[str]:
    raise AssertionError("the host name must not be looked up when an earlier step decides")


@pytest.fixture
def choose(user_dir: Path, tmp_path: Path) -> Callable[..., SiteChoice]:
    """choose(option, env={...}, host=(names...), config='toml text')."""

    def _choose(
        option: str | None = None,
        *,
        env: dict[str, str] | None = None,
        host: Callable[[], Sequence[str]] = hosts(ELSEWHERE),
        config: str | None = None,
    ) -> SiteChoice:
        cfg = tmp_path / "config.toml"
        if config is not None:
            cfg.write_text(config)
        return select_site(option, environ=env or {}, host_names=host, config_path=cfg, user_dir=user_dir)

    return _choose


def test_option_wins_over_everything(choose) -> None:
    c = choose("ci-multi", env={"HPK_SITE": "ci-cni"}, config='site = "parallelcluster"\n', host=never)
    assert (c.name, c.source, c.reason) == ("ci-multi", "option", "--site ci-multi")


def test_environment_wins_over_config_and_hostname(choose) -> None:
    c = choose(env={"HPK_SITE": "ci-cni"}, config='site = "parallelcluster"\n', host=never)
    assert (c.name, c.source, c.reason) == ("ci-cni", "environment", "$HPK_SITE=ci-cni")


def test_empty_environment_variable_is_unset(choose) -> None:
    c = choose(env={"HPK_SITE": ""}, config='site = "ci"\n', host=never)
    assert (c.name, c.source) == ("ci", "config")


def test_config_wins_over_hostname(choose, tmp_path: Path) -> None:
    c = choose(config='site = "parallelcluster"\n', host=never)
    assert (c.name, c.source) == ("parallelcluster", "config")
    assert c.reason == f'site = "parallelcluster" in {tmp_path / "config.toml"}'


def test_config_without_site_falls_through(choose) -> None:
    c = choose(config="# nothing chosen yet\n", host=hosts(JUWELS_LOGIN))
    assert (c.name, c.source) == ("jsc", "hostname")


@pytest.mark.parametrize(
    "names",
    [
        ("jrlogin06.jureca", "jrlogin06"),
        ("jwlogin04.juwels",),
        ("JURECA01.fz-juelich.de",),  # host names are case-insensitive
        ("localhost", "juwels-booster.fz-juelich.de"),  # gethostname() matches though getfqdn() does not
    ],
)
def test_hostname_of_a_jsc_login_node_selects_jsc(choose, names: tuple[str, ...]) -> None:
    c = choose(host=hosts(*names))
    assert (c.name, c.source) == ("jsc", "hostname")
    assert "jsc.toml" in c.reason and "matches" in c.reason


def test_jsc_profile_declares_login_node_patterns() -> None:
    assert {"jrlogin*.jureca", "jwlogin*.juwels", "jureca*.fz-juelich.de", "jusuf*.fz-juelich.de"} <= set(
        load_site("jsc", expand=False).site.hostnames
    )


def test_hostnames_are_not_inherited_through_extends(choose, write) -> None:
    write("mine", 'extends = "jsc"\n[slurm]\naccount = "b1"\n')
    assert load_site("mine", expand=False).site.hostnames == []
    c = choose(host=hosts(JUWELS_LOGIN))
    assert c.name == "jsc"  # not an ambiguity between jsc and mine


def test_a_profile_extending_another_may_declare_its_own(choose, write) -> None:
    write("mine", 'extends = "jsc"\n[site]\nhostnames = ["jwlogin*.juwels"]\n')
    write("jsc", "[site]\nhostnames = []\n")  # the user's override switches the built-in's patterns off
    c = choose(host=hosts(JUWELS_LOGIN))
    assert c.name == "mine"


def test_two_matching_profiles_are_an_error_naming_both(choose, write) -> None:
    f = write("mine", '[site]\nhostnames = ["jwlogin0?.juwels"]\n')
    with pytest.raises(HpkError) as e:
        choose(host=hosts(JUWELS_LOGIN))
    msg = e.value.message
    assert "matches the [site] hostnames of 2 site profiles" in msg
    assert "jsc (jwlogin04.juwels matches \"jwlogin*.juwels\"" in msg
    assert f'mine (jwlogin04.juwels matches "jwlogin0?.juwels" in {f})' in msg
    assert "--site NAME" in e.value.hint and "hostnames = []" in e.value.hint


def test_nothing_selected_lists_profiles_and_the_ways_to_choose(choose, tmp_path: Path) -> None:
    with pytest.raises(HpkError) as e:
        choose(host=hosts(ELSEWHERE, "laptop"))
    err = e.value
    assert not isinstance(err, ProfileError)  # no profile is wrong; none is chosen
    assert err.message.startswith("no site profile selected:")
    assert "(laptop.example.org, laptop)" in err.message
    assert "choose one of: ci, ci-cni, ci-multi, jsc, parallelcluster" in err.hint
    assert "--site NAME" in err.hint
    assert "export HPK_SITE=NAME" in err.hint
    assert f'site = "NAME" in {tmp_path / "config.toml"}' in err.hint


def test_unreadable_profiles_are_named_when_nothing_matches(choose, write) -> None:
    write("broken", "[site\n")
    with pytest.raises(HpkError) as e:
        choose()
    assert "not checked, they do not load: broken" in e.value.message


def test_environment_naming_a_missing_profile(choose) -> None:
    with pytest.raises(ProfileError) as e:
        choose(env={"HPK_SITE": "jscc"}, host=never)
    assert e.value.message == "$HPK_SITE names site profile 'jscc', which does not exist"
    assert "unset HPK_SITE or set it to one of: ci, " in e.value.hint


def test_environment_may_name_a_file(choose, tmp_path: Path) -> None:
    f = tmp_path / "here.toml"
    f.write_text('extends = "ci"\n')
    assert choose(env={"HPK_SITE": str(f)}, host=never).name == str(f)


def test_config_naming_a_missing_profile(choose) -> None:
    with pytest.raises(ProfileError) as e:
        choose(config='site = "nope"\n', host=never)
    assert ": site names site profile 'nope', which does not exist" in e.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('sites = "jsc"\n', "sites: unknown key"),
        ("site = 3\n", 'site: expected the name of a site profile; got 3'),
        ("site = jsc\n", "TOML syntax error"),
    ],
)
def test_config_errors_name_the_file(choose, tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        choose(config=text, host=never)
    assert str(tmp_path / "config.toml") in e.value.message and expected in e.value.message


def test_config_file_location(tmp_path: Path) -> None:
    assert config_file({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "hpk" / "config.toml"
    assert config_file({"HOME": "/home/u"}) == Path("/home/u/.config/hpk/config.toml")
    assert config_file({"XDG_CONFIG_HOME": "relative", "HOME": "/home/u"}) == Path("/home/u/.config/hpk/config.toml")


def test_hostname_patterns_are_validated(write) -> None:
    write("mine", '[site]\nhostnames = ["login 1"]\n')
    with pytest.raises(ProfileError) as e:
        load_site("mine")
    assert "[site].hostnames" in e.value.message and "is not a hostname pattern" in e.value.message


# ---------------------------------------------------------------------------------------------
# through the command line


@pytest.fixture
def nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's real names must not decide these tests."""
    monkeypatch.delenv("HPK_SITE", raising=False)
    monkeypatch.setattr("hpkctl.cli.common.host_names", lambda: [ELSEWHERE])


@pytest.mark.usefixtures("nowhere")
def test_sites_show_without_name_says_why(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPK_SITE", "ci-multi")
    assert main(["sites", "show"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('# site profile "ci-multi"')
    assert "# Selected because: $HPK_SITE=ci-multi" in out


@pytest.mark.usefixtures("nowhere")
def test_sites_show_from_config(capsys: pytest.CaptureFixture[str], user_dir: Path) -> None:
    cfg = user_dir.parent / "config.toml"
    cfg.write_text('site = "parallelcluster"\n')
    assert main(["sites", "show"]) == 0
    assert f'# Selected because: site = "parallelcluster" in {cfg}' in capsys.readouterr().out


@pytest.mark.usefixtures("nowhere")
def test_sites_show_with_nothing_selected_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sites", "show"]) == 125
    err = capsys.readouterr().err
    assert err.startswith("hpkctl: error: no site profile selected:")
    assert "export HPK_SITE=NAME" in err


@pytest.mark.usefixtures("nowhere")
def test_sites_list_says_what_is_used_here(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["sites", "list"]) == 0
    assert "Used here without --site: none (no site profile selected:" in capsys.readouterr().out
    monkeypatch.setenv("HPK_SITE", "ci")
    assert main(["sites", "list"]) == 0
    assert "Used here without --site: ci ($HPK_SITE=ci)." in capsys.readouterr().out


@pytest.mark.usefixtures("nowhere")
@pytest.mark.parametrize(
    "argv",
    [["render", "-f", "pod.yaml"], ["run", "-f", "pod.yaml"], ["status"], ["logs", "p"], ["delete", "p"]],
)
def test_commands_have_no_default_site(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 125
    assert "hpkctl: error: no site profile selected:" in capsys.readouterr().err


@pytest.mark.usefixtures("nowhere")
def test_render_says_which_profile_it_chose(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, uid: 00000000-0000-0000-0000-000000000001}\n"
        "spec:\n  restartPolicy: Never\n  containers: [{name: c, image: busybox, command: ['true']}]\n"
    )
    monkeypatch.setenv("HPK_SITE", "ci")
    assert main(["render", "-f", str(pod)]) == 0
    assert "hpkctl: site profile ci ($HPK_SITE=ci)" in capsys.readouterr().err
    assert main(["render", "-f", str(pod), "--site", "ci"]) == 0
    assert "site profile" not in capsys.readouterr().err  # named explicitly: nothing to say

"""``hpkctl CMD ...`` builds only CMD's parser below the top level (issue 23.2: argparse builds a whole
parser per command); what each command accepts and prints is the same as with the whole parser."""

from __future__ import annotations

import argparse

import pytest

from hpkctl.cli import COMMANDS, MODULES, build_parser, main


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


FULL = commands(build_parser())


def test_there_are_commands() -> None:
    assert {"run", "render", "status", "delete", "sites", "kubelet", "controlplane"} <= set(FULL)


@pytest.mark.parametrize("name", sorted(FULL))
def test_a_command_alone_is_the_same_command(name: str) -> None:
    only = commands(build_parser(name))
    assert list(only) == [name]
    assert only[name].format_help() == FULL[name].format_help()
    assert only[name]._defaults == FULL[name]._defaults  # its func=cmd_...


def test_an_unknown_command_gets_the_whole_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(commands(build_parser("rn"))) == set(FULL)
    with pytest.raises(SystemExit) as exc:
        main(["rn"])
    assert exc.value.code == 125
    err = capsys.readouterr().err
    assert "invalid choice: 'rn'" in err and "'run'" in err and "'kubelet'" in err


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["-h", "run"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert capsys.readouterr().out == build_parser().format_help(), argv


def test_the_command_table_names_every_command_and_no_other() -> None:
    """``COMMANDS`` says which module to import for a command (the others are not imported)."""
    assert set(COMMANDS) == set(FULL)
    assert set(COMMANDS.values()) == set(MODULES)

"""DEVELOPERS.md's layer table is the import-linter ``layers`` contract, in words: the same packages,
top to bottom in the contract's order, and a package that the contract adds is added to the table
(and its row says what it owns) in the same change. Issue 21 asked for the two to match; nothing
checked it, and the table is the first thing a new engineer reads."""

from __future__ import annotations

import re
import tomllib

from tests.support.ci import REPO

_ROW = re.compile(r"^\| (`hpkctl\.[a-z_]+`(?:, `hpkctl\.[a-z_]+`)*) \|")


def contract_layers() -> list[str]:
    """The layers contract's packages, top to bottom (siblings in their written order)."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["id"] == "layers"]
    return [p.strip() for layer in layers for p in layer.split("|") if p.strip() != "__main__"]


def table_packages(text: str) -> list[str]:
    """The packages the layer table's rows name, top to bottom."""
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    return [name for line in section.splitlines() if (m := _ROW.match(line))
            for name in re.findall(r"`hpkctl\.([a-z_]+)`", m.group(1))]


def test_the_layer_table_names_the_contracts_packages_in_its_order() -> None:
    table, layers = table_packages((REPO / "DEVELOPERS.md").read_text()), contract_layers()
    assert table == layers, (f"DEVELOPERS.md's layer table lists {table}, pyproject.toml's layers contract "
                             f"{layers}: give each package of the contract one row (siblings may share one), in "
                             "the contract's order, and remove rows of packages that no longer exist")


def test_the_check_sees_a_missing_or_misplaced_row() -> None:
    rows = ("| package | owns | never does |\n|---|---|---|\n| `hpkctl.cli` | parsing | logic |\n"
            "| `hpkctl.jobs` | Slurm | pods |\n| `hpkctl.errors`, `hpkctl.files` | | |\n")
    assert table_packages(f"# D\n## Layers\n{rows}\n## Next\n| `hpkctl.kube` | x | y |\n") == \
        ["cli", "jobs", "errors", "files"]

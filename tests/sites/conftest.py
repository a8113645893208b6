"""Fixtures for the site profile tests: an isolated user config dir for every test."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$XDG_CONFIG_HOME/hpk/sites`` under tmp_path, so the real ~/.config never leaks in."""
    xdg = tmp_path / "xdg"
    d = xdg / "hpk" / "sites"
    d.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    return d


@pytest.fixture
def write(user_dir: Path):
    """write("name", "toml text") → the user profile file's path."""

    def _write(name: str, text: str) -> Path:
        p = user_dir / f"{name}.toml"
        p.write_text(text)
        return p

    return _write

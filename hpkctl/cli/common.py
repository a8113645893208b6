"""Arguments several command groups share."""

from __future__ import annotations

import argparse


def add_site(p: argparse.ArgumentParser) -> None:
    p.add_argument("--site", default="ci", help="site profile name (built-in or ~/.config/hpk/sites/NAME.toml)")

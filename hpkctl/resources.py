"""Where the shipped data files (sbatch templates, site profiles) are.

In a wheel they are inside the package (``hpkctl/_data``); in a source checkout they are at the
top of the repository. Both layouts are supported so tests run against the checkout directly.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the directory of shipped data ``name`` (``"sbatch"`` or ``"site-configs"``)."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"hpkctl data directory {name!r} not found next to {_PKG}; reinstall hpkctl")

"""What ``ci/setup`` provides to the tests, and what to do when it is not there.

With CI=true anything missing fails the test instead of skipping it: CI must never pass by
skipping what it is there to check.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HPK_USER = os.environ.get("HPK_USER", "hpk")


def missing(what: str, *, fix: str = "run ci/setup as root") -> None:
    """Skip, or fail under CI=true, because `what` is not available here."""
    msg = f"{what} ({fix})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {msg}", pytrace=False)
    pytest.skip(msg)

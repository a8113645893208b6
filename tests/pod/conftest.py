"""Fixtures for translator tests; the helpers (profile, pod documents, the recording ``apptainer``
stub) are in ``tests.support.pods``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.pods import make_stub


@pytest.fixture
def stub_env(tmp_path: Path) -> dict[str, Any]:
    return make_stub(tmp_path)

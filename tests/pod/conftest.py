"""Fixtures for translator tests; the helpers (profile, pod documents, the recording ``apptainer``
stub) are in ``tests.support.pods``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# PODS ... stub_environment: re-exported for test_golden.py and test_script_behaviour.py until they
# import from tests.support.pods like the other tests.
from tests.support.pods import (  # noqa: F401
    PODS,
    load_pod,
    make_profile,
    make_stub,
    pod_doc,
    records,
    stub_environment,
)


@pytest.fixture
def stub_env(tmp_path: Path) -> dict[str, Any]:
    return make_stub(tmp_path)

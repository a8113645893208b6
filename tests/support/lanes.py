"""The lanes a test runs in, by what it needs beyond Python: nothing (the default: the quick lane,
``ci/quick``), the real local Slurm (``@pytest.mark.slurm``) or a stand-in from ci/setup
(``@pytest.mark.standin``: the Apptainer stand-in, the Kubernetes API stand-in, kubectl/helm).

A lane is only as good as its markers, so the helpers that bring in Slurm or a stand-in call
:func:`need`, and a test that reaches them without the marker fails, naming the marker to add: an
unmarked test can never slip into the quick lane with a job or a server behind it. ``tests/conftest.py``
tells this module which test is running.

One more marker says nothing of needs: ``@pytest.mark.full`` keeps a test to the full lane (``ci/test``)
because it is costly and checks the tooling, or repeats what a quick sample already covers (the import
contracts' self-checks, the golden scripts shellchecked whole beyond a sample): ``ci/quick`` deselects it.
"""

from __future__ import annotations

import pytest

WHAT = {"slurm": "the real local Slurm", "standin": "a stand-in of ci/setup (Apptainer, the Kubernetes API, kubectl/helm)"}

#: The test being set up or run (set by tests/conftest.py before its fixtures).
current: pytest.Item | None = None


def need(marker: str) -> None:
    """Fail the running test unless it carries ``marker`` (outside a test, e.g. a script: nothing)."""
    item = current
    if item is not None and item.get_closest_marker(marker) is None:
        pytest.fail(f"{item.nodeid} uses {WHAT[marker]} but is not marked: add @pytest.mark.{marker} "
                    f"(or pytestmark = [pytest.mark.{marker}] in the module), so that the quick lane "
                    f"(-m 'not slurm and not standin') leaves it out", pytrace=False)

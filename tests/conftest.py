"""Shared test setup: counts the tests that ran against the real Slurm / stand-in.

CI's log ends with that count, so a green run visibly means the real-Slurm tests ran. Only tests
that carry the ``slurm``/``standin`` marker count (not every test that lives in a folder so named).
It also tells ``tests.support.lanes`` which test runs, so that a test using Slurm or a stand-in
without its marker fails.
"""

from __future__ import annotations

import pytest

from tests.support import lanes

_REAL: dict[str, int] = {"slurm": 0, "standin": 0}
_MARKED: dict[str, set[str]] = {"slurm": set(), "standin": set()}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in _MARKED:
            if item.get_closest_marker(marker) is not None:
                _MARKED[marker].add(item.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    lanes.current = item  # before the fixtures: they may call lanes.need


def pytest_runtest_teardown(item: pytest.Item) -> None:
    lanes.current = item  # module fixtures end in the teardown of the module's last test


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        for marker, ids in _MARKED.items():
            if report.nodeid in ids:
                _REAL[marker] += 1


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    terminalreporter.write_line(
        f"real components: {_REAL['slurm']} tests passed against the real local Slurm, "
        f"{_REAL['standin']} against the stand-ins (Apptainer, Kubernetes API)"
    )

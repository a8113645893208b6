"""Shared test setup: counts the tests that ran against the real Slurm / stand-in.

CI's log ends with that count, so a green run visibly means the real-Slurm tests ran.
"""

from __future__ import annotations

import pytest

_REAL: dict[str, int] = {"slurm": 0, "standin": 0}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        for marker in _REAL:
            if marker in report.keywords:
                _REAL[marker] += 1


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    terminalreporter.write_line(
        f"real components: {_REAL['slurm']} tests passed against the real local Slurm, "
        f"{_REAL['standin']} against the Apptainer stand-in"
    )

"""Shared test setup: counts the tests that ran against the real Slurm / stand-in.

CI's log ends with that count, so a green run visibly means the real-Slurm tests ran. Only tests
that carry the ``slurm``/``standin`` marker count (not every test that lives in a folder so named).
It also tells ``tests.support.lanes`` which test runs, so that a test using Slurm or a stand-in
without its marker fails.

Under pytest-xdist with ``--dist loadgroup`` (``ci/test``: three workers), the ``slurm`` tests run on
two lanes, each on a worker, a ``whole_node`` module with no other Slurm test beside it, and the rest
beside them (``tests.support.xdistgroups``).
"""

from __future__ import annotations

from typing import Any

import pytest

# plumbum asks `uname -p` (platform.uname) when it is first imported, and the product imports it at
# its first Slurm command (hpkctl.jobs.scrubbed), which in a test may run under pytest-subprocess's
# fake, where `uname` is not registered: import it once, for real, before any test.
import hpkctl.jobs.scrubbed  # noqa: F401  (isort: skip)
from tests.support import lanes, xdistgroups

_REAL: dict[str, int] = {"slurm": 0, "standin": 0}
#: a test's user property naming a marker it carries: its report counts (under xdist too)
_REAL_PROPERTY = "hpk-real-component"


def pytest_configure(config: pytest.Config) -> None:
    if xdistgroups.wanted(config):
        xdistgroups.make_file()


def pytest_unconfigure(config: pytest.Config) -> None:
    if xdistgroups.wanted(config):
        xdistgroups.remove_file()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return xdistgroups.scheduler(config, log) if xdistgroups.wanted(config) else None


#: The quick lane's longest tests (a cold mypy alone takes ~15 s of CPU): under ``--dist load`` (ci/quick)
#: they go first, so the workers share out the short ones after them and none ends the lane alone on
#: one of these. ci/test (``--dist loadgroup``) keeps the file order its lanes need.
FIRST = (
    "tests/test_architecture.py::test_mypy",
    "tests/pod/test_pod_model.py::test_arbitrary_pod_shapes_render_or_fail_with_hpk_error",
    "tests/pod/test_byte_exact.py::",
    "tests/pod/test_lifecycle.py::test_an_exec_hook_reaches_the_container_exactly",
    "tests/pod/test_secrets.py::test_any_secret_text_is_hidden_and_exact",
    "tests/pod/test_probes_script.py::test_exec_words_reach_the_command_byte_for_byte",
    "tests/test_architecture.py::test_a_hanging_test_fails_and_the_run_goes_on",
)


def _first(item: pytest.Item) -> int:
    return next((i for i, prefix in enumerate(FIRST) if item.nodeid.startswith(prefix)), len(FIRST))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("dist", "no") == "load":
        items.sort(key=_first)  # stable: the rest keeps its order
    for item in items:
        for marker in _REAL:
            if item.get_closest_marker(marker) is not None:
                item.user_properties.append((_REAL_PROPERTY, marker))  # reaches xdist's controller
    xdistgroups.write(items)


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outside pytest-timeout's timer: waiting for the node is no hang
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    xdistgroups.enter(item)  # a slurm module's share of the Slurm node, or all of it (whole_node)
    try:
        return (yield)
    finally:
        xdistgroups.leave(item, nextitem)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    lanes.current = item  # before the fixtures: they may call lanes.need


def pytest_runtest_teardown(item: pytest.Item) -> None:
    lanes.current = item  # module fixtures end in the teardown of the module's last test


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        for name, marker in report.user_properties:
            if name == _REAL_PROPERTY:
                _REAL[marker] += 1


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    terminalreporter.write_line(
        f"real components: {_REAL['slurm']} tests passed against the real local Slurm, "
        f"{_REAL['standin']} against the stand-ins (Apptainer, Kubernetes API)"
    )

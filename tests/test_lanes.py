"""The lanes hold: a test that uses Slurm or a stand-in without its marker fails where it does
(tests/support/lanes.py), so the quick lane (-m 'not slurm and not standin') never runs one."""

from __future__ import annotations

import pytest

from tests.support import lanes
from tests.support.hpk import require_standin
from tests.support.kubeapi import require_kubectl, require_modules
from tests.support.slurm import SINGLE_CONF, as_hpk, require_cluster


def test_the_running_test_is_known(request: pytest.FixtureRequest) -> None:
    assert lanes.current is request.node


@pytest.mark.parametrize("use, marker", [
    (lambda: require_cluster(SINGLE_CONF, 1), "slurm"),
    (lambda: as_hpk(["true"], slurm_conf=SINGLE_CONF), "slurm"),
    (require_standin, "standin"),
    (require_kubectl, "standin"),
    (require_modules, "standin"),
], ids=["require_cluster", "as_hpk", "require_standin", "require_kubectl", "require_modules"])
def test_an_unmarked_test_using_slurm_or_a_standin_fails(use, marker: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(pytest.fail.Exception, match=rf"is not marked: add @pytest\.mark\.{marker} "):
        use()


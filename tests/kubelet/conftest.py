"""Fixtures of the kubelet's end-to-end tests: a whole mini cloud per test module
(``tests.support.cluster``). With CI=true anything missing fails instead of skipping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import Cluster, make_root, remove_root
from tests.support.hpk import require_standin
from tests.support.slurm import SINGLE_CONF, require_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    require_cluster(SINGLE_CONF, 1)
    require_standin()
    root = make_root()
    c = Cluster(root)
    try:
        c.start()
        yield c
        c.assert_kubelet_never_refused()
    finally:
        c.stop()
        remove_root(root)

"""Fixtures of the kubelet's end-to-end tests: a whole mini cloud per test module
(``tests.support.cluster``). With CI=true anything missing fails instead of skipping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import Cluster, running_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from running_cluster()

"""Images pulled by the kubelet before submission (``[apptainer] pull = "submit"``, for sites whose
compute nodes are offline): once per image, off the pod-creation path, with back-off on errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import Cluster, running_cluster
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.standin]


@pytest.fixture(scope="module")
def offline() -> Iterator[Cluster]:
    yield from running_cluster(
        lambda root: f'\n[apptainer]\npull = "submit"\nimage_cache = "{root / "hpk-state" / "images"}"\n')


def _pod(name: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["echo", "ran"]}]}}


def test_pods_sharing_an_image_pull_it_once(offline: Cluster) -> None:
    for n in ("pull-a", "pull-b", "pull-c"):
        offline.create(_pod(n, "busybox"))
    for n in ("pull-a", "pull-b", "pull-c"):
        offline.wait_phase(n, "Succeeded")
    sifs = list((offline.root / "hpk-state" / "images").rglob("*.sif"))
    assert len(sifs) == 1, sifs
    pulling = [e for n in ("pull-a", "pull-b", "pull-c") for e in offline.events(n) if e["reason"] == "Pulling"]
    assert pulling, "at least the first pod says it waits for the pull"


def test_a_missing_image_backs_off_and_the_kubelet_goes_on(offline: Cluster) -> None:
    offline.create(_pod("no-image", "example.invalid/nothing:1"))

    def reason() -> str | None:
        p = offline.pod("no-image") or {}
        cs = (p.get("status", {}).get("containerStatuses") or [{}])[0]
        r = cs.get("state", {}).get("waiting", {}).get("reason")
        return r if r == "ImagePullBackOff" else None

    wait_for("ImagePullBackOff after a failed pull", reason, timeout=60)
    assert offline.phase("no-image") == "Pending"
    fails = [e for e in offline.events("no-image") if e["reason"] == "Failed"]
    assert fails and fails[0]["type"] == "Warning" and fails[0].get("count", 1) >= 1
    # where a compute node cannot reach the registry, the event names the way out
    assert "pull where it can, e.g. on a login node: hpkctl pull example.invalid/nothing:1 --site " \
        in fails[0]["message"], fails[0]
    assert not offline.job_id("no-image")
    offline.create(_pod("after-no-image", "busybox"))
    offline.wait_phase("after-no-image", "Succeeded")

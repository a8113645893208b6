"""A watch with bookmarks keeps delivering while events pile up (a bookmark falling due with events
queued once livelocked the stand-in's watch: wait_for(timeout=0) cancelled every get())."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kubeapi import KubeApi, start

pytestmark = pytest.mark.standin


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    api = start(Path(tmp_path_factory.mktemp("wb")) / "state", "--bookmark-interval", "0.02")
    yield api
    api.stop()


def test_every_event_of_a_burst_arrives_with_bookmarks_due(kube: KubeApi) -> None:
    _, listed = kube.get("/api/v1/namespaces/default/configmaps")
    rv = listed["metadata"]["resourceVersion"]
    names = [f"burst-{i}" for i in range(150)]
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:
        with kube.session.get(kube.url + "/api/v1/namespaces/default/configmaps",
                              params={"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                                      "timeoutSeconds": "30"}, stream=True, timeout=(5, 35)) as r:
            for line in r.iter_lines():
                ev = json.loads(line)
                if ev["type"] == "ADDED":
                    seen.add(ev["object"]["metadata"]["name"])
                    if len(seen) == len(names):
                        done.set()
                        return

    t = threading.Thread(target=watch, daemon=True)
    t.start()

    def create(chunk: list[str]) -> None:
        for n in chunk:
            code, body = kube.post("/api/v1/namespaces/default/configmaps",
                                   {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}})
            assert code == 201, body

    workers = [threading.Thread(target=create, args=(names[i::4],)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert done.wait(20), f"{len(seen)} of {len(names)} events arrived"

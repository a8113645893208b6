"""hpkctl/provider/pilotbook.py: the pilot provider's pods and its queue of pods waiting for room."""

from __future__ import annotations

from hpkctl.pilot.plan import Need
from hpkctl.provider.pilotbook import PilotBook


def test_the_waiting_pods_come_longest_waiting_first_and_leave_the_queue() -> None:
    book, woken = PilotBook(), []
    for uid in ("a", "b", "c", "d"):
        assert book.wait(uid, Need(uid, 1, 64), woken.append)
    assert not book.wait("b", Need("b", 2, 64), woken.append)  # asked again: its place in the queue stays
    assert [n.uid for n in book.waiting()] == ["a", "b", "c", "d"] and book.waiting()[1].cpus == 2
    book.stop_waiting("a")  # placed
    book.drop("c")  # deleted
    assert [(uid, need.cpus) for uid, need, _ in book.first_waiting(2)] == [("b", 2), ("d", 1)]
    assert [uid for uid, _, _ in book.first_waiting(1)] == ["b"]
    assert book.wait("a", Need("a", 1, 64), woken.append)  # waits again: last in the queue
    assert [n.uid for n in book.waiting()] == ["b", "d", "a"]
    assert "a" in book.pods and "c" not in book.pods


def test_pods_waiting_for_room_tick_when_they_begin_to_wait_not_at_every_retry(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # a backlog's waiting pods each retry create every WAIT_FOR_ROOM: a tick (O(waiting pods)) for every
    # retry was O(N^2) a second; a pod that begins to wait still ticks at once (it may need an allocation)
    import hpkctl.provider.pilotpod as pilotpod
    from hpkctl.jobs.alloc import NodeShare
    from hpkctl.pilot.plan import Held
    from hpkctl.provider.api import Outcome, PodInputs
    from hpkctl.provider.records import Records
    from hpkctl.sites import load_site
    from tests.support.kubelet_fakes import FakeSlurm

    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(tmp_path)}),
                                         "pilot": profile.pilot.model_copy(update={"cpus": 2, "max_allocations": 1})})
    provider = pilotpod.PilotPodProvider(slurm=FakeSlurm(), profile=profile,  # type: ignore[arg-type]
                                         records=Records(tmp_path / "kubelet"), node="n", state_dir=tmp_path)
    full = Held("41", "RUNNING", {"n1": NodeShare(2, 4000)}, pods={"x": ("n1", Need("x", 2, 100))})
    provider.pool._helds["41"] = full  # the one allocation there may be, full: every pod waits
    provider.pool.refresh = lambda **_: []  # type: ignore[method-assign]
    ticks: list[int] = []
    provider.pool.tick = lambda pending: ticks.append(len(pending))  # type: ignore[assignment,method-assign,misc,return-value]
    monkeypatch.setattr(pilotpod, "WAIT_FOR_ROOM", 3600.0)  # every retry below comes within it

    def pod(i: int) -> dict[str, object]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default", "uid": f"u{i}"},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["true"],
                                                                    "resources": {"requests": {"cpu": "1"}}}]}}

    for i in range(5):
        assert provider.create(pod(i), PodInputs()).outcome == Outcome.RETRY
    assert ticks == [1, 2, 3, 4, 5]  # each began to wait: a tick with every waiting pod, in waiting order
    for _ in range(3):
        for i in range(5):
            assert provider.create(pod(i), PodInputs()).outcome == Outcome.RETRY
    assert ticks == [1, 2, 3, 4, 5]  # retries within WAIT_FOR_ROOM of a tick: none
    monkeypatch.setattr(pilotpod, "WAIT_FOR_ROOM", 0.0)
    provider.create(pod(0), PodInputs())
    assert ticks[-1] == 5  # once a tick is older than WAIT_FOR_ROOM, a retry ticks for all of them

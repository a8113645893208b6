"""The provider seam: a second implementation (tests/support/fake_provider.py) has every operation
of :class:`hpkctl.provider.PodProvider` with its signature, and the blocking delete of the one-thread
front ends runs every pod's stop sequence with its own grace, together."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from hpkctl.provider import PodInputs, PodProvider, PodRef, delete_and_wait
from tests.support.fake_provider import FakeProvider


def _members(cls: Any) -> dict[str, Any]:
    return {n: v for n, v in vars(cls).items() if not n.startswith("_") and callable(v)}


def _params(fn: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", sorted(_members(PodProvider)))
def test_the_fake_provider_has_every_operation_with_its_signature(name: str) -> None:
    ours = getattr(FakeProvider, name, None)
    assert ours is not None, f"FakeProvider lacks PodProvider.{name}"
    assert _params(ours) == _params(getattr(PodProvider, name))
    assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(getattr(PodProvider, name)) or \
        name == "exec"  # the Protocol declares exec as returning an awaitable: a coroutine function is one


def test_the_protocol_names_the_operations_the_front_ends_need() -> None:
    # pod_statuses/unstartable: the one-thread front ends' (hpkctl status/logs, following a run; issue 21.1)
    assert set(_members(PodProvider)) == {"start", "leftovers", "create", "give_up", "delete", "statuses",
                                          "pod_statuses", "unstartable", "refresh_tokens", "clean", "log_file",
                                          "container_run", "log_complete", "exec"}


def _pod(uid: str, grace: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "default"}, "spec": spec}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_delete_and_wait_gives_each_pod_its_own_grace_and_stops_them_together() -> None:
    clock = FakeClock()
    provider = FakeProvider(clock=clock)
    pods = [_pod("a", grace=3), _pod("b", grace=5)]
    for p in pods:
        provider.create(p, PodInputs())
    answers = delete_and_wait(provider, [(PodRef.of(p), p) for p in pods], clock=clock, sleep=clock.sleep)
    assert {u: a.done for u, a in answers.items()} == {"a": True, "b": True}
    assert provider.pods["a"].grace == 3 and provider.pods["b"].grace == 5
    assert 5.0 <= clock.now < 6.0, clock.now  # the longest grace, not the sum (8 s)


def test_delete_and_wait_passes_an_overriding_grace() -> None:
    clock = FakeClock()
    provider = FakeProvider(clock=clock)
    pod = _pod("a", grace=30)
    provider.create(pod, PodInputs())
    delete_and_wait(provider, [(PodRef.of(pod), pod)], grace=1.0, clock=clock, sleep=clock.sleep)
    assert provider.pods["a"].grace == 1.0 and clock.now < 2.0


def test_delete_and_wait_gives_up_on_a_provider_that_never_finishes() -> None:
    clock = FakeClock()
    provider = FakeProvider(clock=clock)
    pod = _pod("a", grace=10_000)
    provider.create(pod, PodInputs())
    answers = delete_and_wait(provider, [(PodRef.of(pod), pod)], timeout=60, clock=clock, sleep=clock.sleep)
    assert not answers["a"].done and 60 <= clock.now < 62


# ---------------------------------------------------------------------------- the kubelet on a second provider


def test_the_kubelet_runs_pods_on_another_provider_unchanged(tmp_path: Any) -> None:
    """The kubelet's PodManager on the fake provider: create, the job id annotated, status patches from
    its reports, a delete that waits out the pod's grace (re-queued, never blocking) and the final API
    delete. Nothing of the job-per-pod provider is involved."""
    from hpkctl.kube.events import EventRecorder
    from hpkctl.kubelet.pods import PodManager
    from hpkctl.sites import load_site
    from tests.support.kubelet_fakes import FakeKube, poll_and_work

    clock = FakeClock()
    provider = FakeProvider(clock=clock)
    kube = FakeKube()
    m = PodManager(kube=kube, provider=provider, profile=load_site("ci"), node_name="hpk",  # type: ignore[arg-type]
                   recorder=EventRecorder(kube, component="kubelet"))  # type: ignore[arg-type]
    m.load_records()
    pod = _pod("u-1", grace=3)
    pod["status"] = {"phase": "Pending"}
    m.on_sync([pod])
    m.sync("u-1")
    job = provider.pods["u-1"].job_id
    assert provider.calls.count(("create", "u-1")) == 1
    assert not any(p["metadata"].get("annotations") for p in kube.status_patches())  # not on the submit path
    assert [e["message"] for e in kube.events() if e["reason"] == "Submitted"] == [f"Submitted as Slurm job {job}"]

    provider.set_phase("u-1", "Running")
    assert poll_and_work(m) == 1
    # the job id rides on the first status patch
    assert [p["metadata"].get("annotations") for p in kube.status_patches() if "status" in p][:1] == \
        [{"hpk.io/slurm-job-id": job}]
    assert kube.status_patches()[-1]["status"]["phase"] == "Running"
    assert poll_and_work(m) == 0  # nothing changed: nothing reported, nothing sent

    pod = dict(pod, metadata={**pod["metadata"], "deletionTimestamp": "2026-11-26T10:00:00Z",
                              "deletionGracePeriodSeconds": 3})
    m.on_event("MODIFIED", pod)
    m.sync("u-1")
    assert [e["reason"] for e in kube.events()].count("Killing") == 1
    assert m.table.get("u-1") is not None and not [c for c in kube.calls if c[0] == "DELETE"]
    while m.table.get("u-1") is not None and clock.now < 10:
        clock.sleep(0.5)
        m.sync("u-1")
    assert provider.pods["u-1"].grace == 3.0 and 3.0 <= clock.now < 4.0
    (delete,) = [c for c in kube.calls if c[0] == "DELETE"]
    assert delete[2]["preconditions"] == {"uid": "u-1"}
    assert [e["reason"] for e in kube.events()].count("Killing") == 1


def test_a_pod_the_other_provider_cannot_run_fails_with_its_reason(tmp_path: Any) -> None:
    from hpkctl.errors import PodError
    from hpkctl.kube.events import EventRecorder
    from hpkctl.kubelet.pods import PodManager
    from hpkctl.sites import load_site
    from tests.support.kubelet_fakes import FakeKube

    class Refusing(FakeProvider):
        def create(self, pod: Any, inputs: PodInputs) -> Any:
            raise PodError("NoAllocation", "no held allocation can take this pod", hint="start one")

    provider = Refusing()
    kube = FakeKube()
    m = PodManager(kube=kube, provider=provider, profile=load_site("ci"), node_name="hpk",  # type: ignore[arg-type]
                   recorder=EventRecorder(kube, component="kubelet"))  # type: ignore[arg-type]
    m.load_records()
    m.on_sync([_pod("u-9")])
    m.sync("u-9")
    (patch,) = kube.status_patches()
    assert (patch["status"]["phase"], patch["status"]["reason"]) == ("Failed", "NoAllocation")
    assert patch["status"]["message"] == "no held allocation can take this pod (fix: start one)"
    assert provider.given_up == {"u-9"}
    m.sync("u-9")
    assert len(kube.status_patches()) == 1

"""client-go's event correlation in hpkctl.kube.eventcache and the recorder that uses it, on a fake
clock and a fake API: 25 events per object in a burst, then one per 5 minutes; the 10th distinct
message of a reason within 10 minutes aggregated into one "(combined from similar events)" event;
repeats counted on the event posted first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from hpkctl.kube.eventcache import COMBINED, EventCorrelator, EventKey, TokenBucket
from hpkctl.kube.events import EventBroadcaster, EventRecorder
from tests.support.waiting import wait_for

Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeApi:
    """Records the Events posted and the count patches; the patch answers as the server would."""

    def __init__(self) -> None:
        self.posted: list[Obj] = []
        self.patched: list[tuple[str, Obj]] = []

    def post(self, path: str, body: Obj) -> Obj:
        self.posted.append(body)
        return body

    def patch(self, path: str, body: Obj) -> Obj:
        self.patched.append((path, body))
        return {"metadata": {"name": path.rsplit("/", 1)[-1]}, **body}


def pod(name: str = "p", uid: str = "u1") -> Obj:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": "default", "uid": uid}}


def recorder(clock: Clock) -> tuple[EventRecorder, FakeApi]:
    api = FakeApi()
    return EventRecorder(api, component="kubelet", host="hpk",  # type: ignore[arg-type]
                         correlator=EventCorrelator(clock=clock)), api


def test_token_bucket_starts_full_and_refills_at_its_rate() -> None:
    b = TokenBucket(burst=2, qps=0.5, tokens=2.0, at=0.0)
    assert [b.try_accept(0.0) for _ in range(3)] == [True, True, False]
    assert not b.try_accept(1.0)  # half a token
    assert b.try_accept(2.0)
    assert not b.try_accept(2.0)


def test_25_events_about_one_object_then_one_per_5_minutes() -> None:
    clock = Clock()
    rec, api = recorder(clock)
    for i in range(40):  # distinct reasons: no aggregation, no counting, only the spam filter
        rec.record(pod(), reason=f"R{i}", message="m")
    assert len(api.posted) == 25 and rec.dropped == 15
    clock.now += 299
    rec.record(pod(), reason="Late", message="m")
    assert len(api.posted) == 25  # not a whole token yet
    clock.now += 1
    rec.record(pod(), reason="Later", message="m")
    assert [e["reason"] for e in api.posted[-1:]] == ["Later"]
    # another object has its own budget
    rec.record(pod("q", "u2"), reason="R0", message="m")
    assert api.posted[-1]["involvedObject"]["name"] == "q"


def test_repeats_bump_the_count_of_the_first_event() -> None:
    clock = Clock()
    rec, api = recorder(clock)
    for _ in range(3):
        rec.record(pod(), reason="BackOff", message="Back-off restarting", type="Warning")
    assert len(api.posted) == 1
    name = api.posted[0]["metadata"]["name"]
    assert [(p.rsplit("/", 1)[-1], b["count"]) for p, b in api.patched] == [(name, 2), (name, 3)]


def test_ten_similar_events_in_ten_minutes_become_one_combined_event() -> None:
    clock = Clock()
    rec, api = recorder(clock)
    for i in range(9):
        rec.record(pod(), reason="FailedMount", message=f"volume {i}", type="Warning")
        clock.now += 30
    assert [e["message"] for e in api.posted] == [f"volume {i}" for i in range(9)]
    rec.record(pod(), reason="FailedMount", message="volume 9", type="Warning")
    rec.record(pod(), reason="FailedMount", message="volume 10", type="Warning")
    assert len(api.posted) == 10
    assert api.posted[-1]["message"] == COMBINED + "volume 9"
    assert api.patched[-1][1]["count"] == 2  # the 11th bumps the combined event
    # after 10 quiet minutes the group starts over
    clock.now += 601
    rec.record(pod(), reason="FailedMount", message="volume 11", type="Warning")
    assert api.posted[-1]["message"] == "volume 11"


def test_forget_drops_the_counts_of_a_deleted_object() -> None:
    c = EventCorrelator(clock=Clock())
    key = EventKey("kubelet", "hpk", "Pod", "default", "p", "u1", "v1", "Normal", "Started", "m")
    assert c.correlate(key).count == 1
    assert c.correlate(key).count == 2
    c.forget("u1")
    assert c.correlate(key).count == 1


class NoScan(OrderedDict[Any, Any]):
    """A cache that fails a test when something walks all of it."""

    def __iter__(self) -> Any:
        raise AssertionError("the whole event cache was scanned")


def test_forgetting_a_deleted_pod_looks_only_at_its_own_events() -> None:
    """A burst deletes hundreds of pods: forget() must not walk the 4,096 remembered events per pod."""
    rec, api = recorder(Clock())
    for i in range(50):
        rec.record(pod(f"p{i}", f"u{i}"), reason="Submitted", message="m")
        rec.record(pod(f"p{i}", f"u{i}"), reason="Submitted", message="m")  # a count bump: remembered too
    for lru in (rec._posted, rec.correlator._counts):
        lru._items = NoScan(lru._items)
    rec.forget("u7")
    rec.record(pod("p7", "u7"), reason="Submitted", message="m")
    rec.record(pod("p8", "u8"), reason="Submitted", message="m")
    assert api.posted[-1]["involvedObject"]["uid"] == "u7"  # forgotten: a new event, count 1
    assert api.posted[-1]["count"] == 1
    assert api.patched[-1][1]["count"] == 3  # u8 is remembered: its count goes on
    assert len(rec._posted._items) == len(rec.correlator._counts._items) == 50


def test_the_broadcaster_posts_off_the_callers_thread_and_forgets_in_order() -> None:
    clock = Clock()
    rec, api = recorder(clock)
    b = EventBroadcaster(rec)
    try:
        b.record(pod(), reason="Started", message="m")
        b.forget("u1")
        b.record(pod(), reason="Started", message="m")
        assert b.flush(10)
        assert len(api.posted) == 2 and not api.patched  # forgotten in between: posted anew
    finally:
        assert b.close(10)


class _HeldRecorder:
    """A recorder whose posts wait until released; what it was asked, in order."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []

    def record(self, obj: dict[str, Any], *, reason: str, message: str, **_: Any) -> None:
        assert self.release.wait(30), "never released"
        self.calls.append(message)

    def forget(self, uid: str) -> None:
        self.calls.append(f"forget {uid}")


def test_forget_never_waits_for_a_full_queue_and_still_comes_after_what_was_queued_before_it() -> None:
    """An API server that takes no events fills the broadcaster's queue: a pod's deletion (forget) must not
    stall behind it (it waited for a free slot), and its uid is forgotten only after the events that were
    queued before, so none of them brings the forgotten uid back."""
    rec = _HeldRecorder()
    b = EventBroadcaster(rec, size=2)  # type: ignore[arg-type]
    try:
        b.record(pod(), reason="Started", message="m0")
        wait_for("the first event taken off the queue", lambda: b._queue.empty(), timeout=10, every=0.01)
        b.record(pod(), reason="Started", message="m1")
        b.record(pod(), reason="Started", message="m2")  # the queue is full
        done = threading.Thread(target=b.forget, args=("u1",))
        done.start()
        done.join(10)
        assert not done.is_alive(), "forget waited for the full queue"
        assert rec.calls == []
        rec.release.set()
        wait_for("the uid forgotten", lambda: rec.calls[-1:] == ["forget u1"], timeout=10, every=0.01)
        assert rec.calls == ["m0", "m1", "m2", "forget u1"]
    finally:
        rec.release.set()
        assert b.close(10)

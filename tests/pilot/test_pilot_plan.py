"""hpkctl/pilot/plan.py: packing, time, scaling, renewal and release, on books made by hand."""

from __future__ import annotations

from hpkctl.jobs.alloc import NodeShare
from hpkctl.pilot.plan import Held, Need, Plan, Rules, Shape, place, plan, unfit

NOW = 1_000_000.0
RULES = Rules(Shape(nodes=0, per_node=NodeShare(4, 4096), seconds=3600), max_allocations=3, idle_release=300,
              renewal_margin=600)


def running(job: str, *, left: float = 3000, nodes: dict[str, NodeShare] | None = None, **pods: tuple[str, Need]) -> Held:
    return Held(job, "RUNNING", nodes or {"n1": NodeShare(4, 4096)}, NOW + left, dict(pods))


def need(uid: str, cpus: int = 1, mem: int = 512, runtime: int = 0) -> Need:
    return Need(uid, cpus, mem, 0, runtime)


def test_pods_pack_into_the_fullest_allocation_and_the_tightest_node() -> None:
    a = running("1", p1=("n1", need("p1", 2)))
    b = running("2")
    assert place([b, a], need("x"), NOW, RULES) == ("1", "n1")  # not the empty one: it can go idle
    wide = running("3", nodes={"n1": NodeShare(8, 8192), "n2": NodeShare(8, 8192)}, q=("n2", need("q", 6)))
    assert place([wide], need("x", 2), NOW, RULES) == ("3", "n2")  # the node with the least room that fits


def test_no_place_without_the_cpus_memory_or_gpus() -> None:
    full = running("1", p1=("n1", need("p1", 3)))
    assert place([full], need("x", 2), NOW, RULES) is None
    assert place([running("2")], need("x", 1, mem=5000), NOW, RULES) is None
    assert place([running("2")], Need("x", 1, 1, gpus=1), NOW, RULES) is None
    assert place([Held("4", "PENDING")], need("x"), NOW, RULES) is None  # not running yet


def test_never_where_the_allocation_ends_before_the_deadline_or_the_margin() -> None:
    short = running("1", left=500)
    assert place([short], need("x"), NOW, RULES) is None  # no deadline: the 600 s margin
    assert place([short], need("x", runtime=400), NOW, RULES) == ("1", "n1")  # deadline + grace fits
    assert place([running("2", left=1000)], need("x", runtime=1200), NOW, RULES) is None


def test_pending_pods_that_fit_nowhere_request_allocations_up_to_the_most() -> None:
    assert plan([], [need(f"p{i}", 2) for i in range(5)], NOW, RULES) == Plan(request=3)  # 2 per allocation, max 3
    # a requested (pending) allocation counts as room for what it will hold
    assert plan([Held("9", "PENDING")], [need("a", 2), need("b", 2)], NOW, RULES) == Plan(request=0)
    assert plan([running("1")], [need("a", 4), need("b", 1)], NOW, RULES) == Plan(request=1)


def test_a_pod_no_allocation_could_ever_hold_says_why_and_requests_nothing() -> None:
    assert "raise [pilot] time_limit" in unfit(need("x", runtime=4000), RULES)
    assert "bigger shape" in unfit(need("x", 8), RULES)
    assert plan([], [need("x", 8)], NOW, RULES) == Plan()


def test_a_successor_before_the_last_busy_allocation_stops_taking_pods() -> None:
    busy = running("1", left=1100, p=("n1", need("p")))  # less than 2 x 600 s left
    assert plan([busy], [], NOW, RULES) == Plan(request=1, successor=True)
    assert plan([busy, Held("2", "PENDING")], [], NOW, RULES) == Plan()  # already requested
    assert plan([running("1", left=1300, p=("n1", need("p")))], [], NOW, RULES) == Plan()


def test_idle_allocations_are_released_after_the_idle_time_or_at_once_when_too_short() -> None:
    idle = running("1")
    idle.idle_since = NOW - 301
    fresh = running("2")
    fresh.idle_since = NOW - 10
    ending = running("3", left=500)
    busy = running("4", left=500, p=("n1", need("p", runtime=100)))
    assert plan([idle, fresh, ending, busy], [], NOW, RULES).release == ("1", "3")


def test_a_pod_of_several_nodes_gets_as_many_nodes_each_with_its_room() -> None:
    """An MPI pod's ranks on 2 nodes: 2 distinct nodes of one allocation, each with the room free
    (the tightest ones), never one node twice; its books count it on both."""
    nodes = {"n1": NodeShare(8, 8192), "n2": NodeShare(8, 8192), "n3": NodeShare(8, 8192)}
    rules = Rules(Shape(nodes=3, per_node=NodeShare(8, 8192), seconds=3600), 3, 300, 600)
    busy = running("1", nodes=nodes, q=("n2", need("q", 6)))
    mpi = Need("m", 4, 1000, nodes=2)
    assert place([busy], mpi, NOW, rules) == ("1", "n1,n3")  # n2 has 2 CPUs left, not 4
    busy.pods["m"] = ("n1,n3", mpi)
    assert (busy.free("n1").cpus, busy.free("n2").cpus, busy.free("n3").cpus) == (4, 2, 4)
    assert place([busy], Need("m2", 4, 1000, nodes=3), NOW, rules) is None  # only 2 nodes have 4 free
    assert place([running("2")], mpi, NOW, RULES) is None  # a one-node allocation never holds it


def test_a_pod_of_more_nodes_than_the_shape_says_which_profile_field_to_change() -> None:
    why = unfit(Need("m", 1, 100, nodes=2), RULES)
    assert "need 2 nodes" in why and "[pilot] nodes = 2" in why and "without --pilot" in why
    rules = Rules(Shape(nodes=2, per_node=NodeShare(8, 8192), seconds=3600), 3, 300, 600)
    assert unfit(Need("m", 8, 100, nodes=2), rules) == ""
    assert plan([], [Need("m", 1, 100, nodes=2)], NOW, RULES) == Plan()  # requests nothing for it
    assert plan([], [Need("m", 1, 100, nodes=2)], NOW, rules).request == 1  # a 2-node allocation holds it


def test_a_backlog_is_planned_only_as_far_as_requests_can_follow(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # once the most allocations are held or requested, where the rest of a backlog would go changes
    # nothing: plan stops there (a waiting pod's tick was O(backlog) in placements, O(N^2) a second)
    import hpkctl.pilot.plan as plan_mod
    calls = []
    real = plan_mod.place

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_mod, "place", counted)
    backlog = [need(f"p{i}", 2) for i in range(5000)]
    assert plan([running("1", a=("n1", need("a", 4)))], backlog, NOW, RULES) == Plan(request=2)
    assert len(calls) <= 2 * 4  # the few pods that fill the two new allocations, not 5,000
    calls.clear()
    assert plan([running(str(i), a=("n1", need("a", 4))) for i in range(3)], backlog, NOW, RULES) == Plan()
    assert calls == []

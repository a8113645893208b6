"""The allocator's decisions, pure: where a pod's step goes, when to request an allocation, which to
release. No Slurm, no clock: the caller (:mod:`hpkctl.pilot.pool`) passes the books and ``now``.

* Packing: a pod goes to the node with the least room left that still holds its CPUs, memory and
  GPUs, in the allocation with the most pods (so others go idle and are released: allocation use is
  the goal, 80% or more of the CPU time held).
* Time: a pod is never placed in an allocation that ends before the pod could finish: its
  ``activeDeadlineSeconds`` plus its grace period, or without a deadline the renewal margin.
* Scaling: pending pods that fit nowhere are packed into the allocations already requested (pending
  in Slurm), then into new ones of the profile's shape, up to ``max_allocations``.
* Renewal: when no allocation would have ``2 x renewal_margin`` left and one still holds pods, a
  successor is requested, so new pods have somewhere to go before the old one stops taking them.
* Release: an allocation without pods is released after ``idle_release`` seconds, or at once when
  it ends too soon to take any pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hpkctl.jobs.alloc import NodeShare

RUNNING = "RUNNING"
WAITING = ("PENDING", "CONFIGURING", "REQUEUED")


@dataclass(frozen=True)
class Need:
    """One pod's step: whole CPUs, memory (MB), GPUs on each of its ``nodes`` nodes (an MPI pod's
    ranks may span several), and the seconds it must be able to run (``activeDeadlineSeconds`` +
    grace; 0: no deadline, the renewal margin applies)."""

    uid: str
    cpus: int
    memory_mb: int
    gpus: int = 0
    runtime: int = 0
    nodes: int = 1

    def share(self) -> NodeShare:
        return NodeShare(self.cpus, self.memory_mb, self.gpus)

    def room(self, cpus: str = "CPUs") -> str:
        """``2 CPUs, 300 MB`` (with GPUs, and ``on each of N nodes``): the room it needs, for messages."""
        return (f"{self.cpus} {cpus}, {self.memory_mb} MB" + (f", {self.gpus} GPU(s)" if self.gpus else "")
                + (f" on each of {self.nodes} nodes" if self.nodes > 1 else ""))


@dataclass(frozen=True)
class Shape:
    """What a new allocation will hold: ``nodes`` nodes of ``per_node`` each, for ``seconds``."""

    nodes: int
    per_node: NodeShare
    seconds: int


@dataclass(frozen=True)
class Rules:
    shape: Shape
    max_allocations: int
    idle_release: int
    renewal_margin: int


@dataclass
class Held:
    """An allocation on the books: Slurm's state and end, each node's share (empty until it runs),
    and the pods placed in it (uid → node, need; a pod on several nodes: ``n1,n2``, its need on each)."""

    job_id: str
    state: str
    nodes: dict[str, NodeShare] = field(default_factory=dict)
    end: float | None = None
    pods: dict[str, tuple[str, Need]] = field(default_factory=dict)
    idle_since: float | None = None

    def used(self, node: str) -> NodeShare:
        cpus = mem = gpus = 0
        for where, need in self.pods.values():
            if node in where.split(","):
                cpus, mem, gpus = cpus + need.cpus, mem + need.memory_mb, gpus + need.gpus
        return NodeShare(cpus, mem, gpus)

    def free(self, node: str) -> NodeShare:
        have, used = self.nodes[node], self.used(node)
        return NodeShare(have.cpus - used.cpus, have.memory_mb - used.memory_mb, have.gpus - used.gpus)

    def left(self, now: float) -> float:
        return float("inf") if self.end is None else self.end - now


@dataclass(frozen=True)
class Plan:
    """What to do now: how many allocations to request, which to release."""

    request: int = 0
    release: tuple[str, ...] = ()
    successor: bool = False  # one of the requests is a successor (renewal), not for pending pods


def _fits(free: NodeShare, need: Need) -> bool:
    return free.cpus >= need.cpus and free.memory_mb >= need.memory_mb and free.gpus >= need.gpus


def required(need: Need, rules: Rules) -> int:
    """Seconds the allocation must still have for ``need``."""
    return need.runtime or rules.renewal_margin


def unfit(need: Need, rules: Rules) -> str:
    """Why no allocation of the profile's shape could ever hold ``need`` ("" when one could)."""
    node, count = rules.shape.per_node, max(rules.shape.nodes, 1)
    if need.nodes > count:
        return (f"the pod's tasks need {need.nodes} nodes (--nodes/--ntasks in its slurm-job.hpk.io/flags "
                f"annotation); a pilot allocation spans {count}: set [pilot] nodes = {need.nodes} or more "
                "(whole nodes) in the site profile, or run the pod as a job of its own (without --pilot)")
    if not _fits(node, need):
        return (f"the pod needs {need.cpus} CPUs, {need.memory_mb} MB and {need.gpus} GPUs on one node; a pilot "
                f"allocation's node holds {node.cpus} CPUs, {node.memory_mb} MB and {node.gpus} GPUs: ask for less, "
                "or give [pilot] a bigger shape (nodes, or cpus/memory/gpus)")
    if required(need, rules) > rules.shape.seconds:
        return (f"the pod must be able to run {required(need, rules)} s (activeDeadlineSeconds + grace); a pilot "
                f"allocation lasts {rules.shape.seconds} s: raise [pilot] time_limit")
    return ""


def place(helds: Iterable[Held], need: Need, now: float, rules: Rules) -> tuple[str, str] | None:
    """(allocation, node) for ``need`` among the running allocations, or None; a need of several nodes
    gets as many, comma-separated (``n1,n2``: an srun ``--nodelist``)."""
    best: tuple[tuple[int, int, float], str, str] | None = None
    for held in helds:
        if held.state != RUNNING or held.left(now) < required(need, rules):
            continue
        # the tightest nodes that hold it (an MPI pod's ranks: its number of them, each with room)
        room = sorted((held.free(node).cpus - need.cpus, node) for node in held.nodes if _fits(held.free(node), need))
        if len(room) >= need.nodes:
            chosen = room[:need.nodes]
            # most pods first, then the tightest nodes, then the allocation that lasts longest
            key = (-len(held.pods), sum(left for left, _ in chosen), -held.left(now))
            if best is None or key < best[0]:
                best = (key, held.job_id, ",".join(sorted(node for _, node in chosen)))
    return (best[1], best[2]) if best else None


def _blank(job_id: str, rules: Rules, now: float) -> Held:
    nodes = {f"node{i}": rules.shape.per_node for i in range(max(rules.shape.nodes, 1))}
    return Held(job_id, RUNNING, nodes, now + rules.shape.seconds)


def plan(helds: Sequence[Held], pending: Sequence[Need], now: float, rules: Rules) -> Plan:
    """Requests and releases for the books ``helds`` and the pods ``pending`` (not placed yet)."""
    live = [h for h in helds if h.state == RUNNING or h.state in WAITING]
    # what the running allocations cannot take, packed into the requested ones, then into new ones
    sim = [Held(h.job_id, RUNNING, dict(h.nodes), h.end, dict(h.pods)) for h in live if h.state == RUNNING]
    sim += [_blank(h.job_id, rules, now) for h in live if h.state in WAITING]
    new = 0
    for need in pending:
        if len(live) + new >= rules.max_allocations:
            break  # no request can follow, and where the rest would go changes nothing: O(room), not O(pending)
        if unfit(need, rules):
            continue
        spot = place(sim, need, now, rules)
        if spot is None and len(live) + new < rules.max_allocations:
            new += 1
            sim.append(_blank(f"new{new}", rules, now))
            spot = place(sim[-1:], need, now, rules)
        if spot is not None:
            target = next(h for h in sim if h.job_id == spot[0])
            target.pods[need.uid] = (spot[1], need)
    successor = False
    if new == 0 and len(live) < rules.max_allocations and any(h.pods for h in live):
        lasting = [h for h in live if h.state in WAITING or h.left(now) >= 2 * rules.renewal_margin]
        successor = not lasting
    release = tuple(h.job_id for h in live if h.state == RUNNING and not h.pods and (
        h.left(now) < rules.renewal_margin
        or (h.idle_since is not None and now - h.idle_since >= rules.idle_release)))
    return Plan(request=new + int(successor), release=release, successor=successor)

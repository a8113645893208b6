"""The held allocations of one pilot-mode kubelet (or ``hpkctl run --pilot``), on the books and in Slurm.

The books are the allocations this owner holds (found again after a restart by their job comment,
``hpk-pilot kubelet=<owner> state=<its state directory's mark> node=<node>``) and the pods placed in
each. Decisions come from :mod:`hpkctl.pilot.plan`; this class only asks Slurm and acts: ``sbatch`` of the holder, ``scancel``
of an allocation to release, one ``scontrol show job -d`` per allocation until it runs (its nodes'
shares), one ``squeue`` for all of them per :meth:`refresh`. Thread-safe: one lock around the books.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hpkctl.jobs import JobInfo, Slurm, TERMINAL_STATES
from hpkctl.jobs.alloc import NodeShare, hold_args
from hpkctl.pilot.plan import RUNNING, WAITING, Held, Need, Plan, Rules, Shape, place, plan
from hpkctl.files import ExclusiveLock
from hpkctl.resources import data_dir
from hpkctl.sites.pilot import mem_mb
from hpkctl.sites.schema import SiteProfile

log = logging.getLogger(__name__)
COMMENT_PREFIX = "hpk-pilot"


def owner_comment(owner: str, node: str, state_dir: Path) -> str:
    """The job comment of this owner's allocations: words without spaces, the kubelet's (or ``run``'s)
    and the node's names and ``state=``, 12 hex digits of the sha256 of the owner's state directory.
    Two owners of one node name with state directories of their own (two clusters, two profiles) so
    never adopt, fill or release each other's allocations; runs that share a state directory share its
    allocations, with its placement lock and lease (:mod:`hpkctl.pilot.shared`)."""
    mark = hashlib.sha256(os.path.abspath(os.path.expanduser(state_dir)).encode()).hexdigest()[:12]
    return f"{COMMENT_PREFIX} kubelet={owner} state={mark} node={node}"


def comment_owner(comment: str) -> tuple[str, str]:
    """(owner, node) named by a pilot allocation's job comment; ("", "") for any other comment."""
    words = comment.split()
    if not words or words[0] != COMMENT_PREFIX:
        return "", ""
    named = dict(w.partition("=")[::2] for w in words[1:])
    return named.get("kubelet", ""), named.get("node", "")


def rules_for(profile: SiteProfile, *, node_share: NodeShare | None = None) -> Rules:
    """The allocator's rules from ``[pilot]``; ``node_share``: a whole node of the partition (for
    ``nodes`` > 0, from ``sinfo``)."""
    p = profile.pilot
    if p.nodes > 0:
        share = node_share or NodeShare(1, 1)
        shape = Shape(p.nodes, share, p.time_seconds)
    else:
        shape = Shape(0, NodeShare(p.cpus, mem_mb(p.memory), p.gpus), p.time_seconds)
    return Rules(shape, p.max_allocations, p.idle_release, p.renewal_margin)


@dataclass(frozen=True)
class Capacity:
    """What the node can offer: held now, plus what could still be requested."""

    held: NodeShare
    requestable: NodeShare


class Pool:
    def __init__(self, slurm: Slurm, profile: SiteProfile, *, owner: str, node: str, state_dir: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.slurm = slurm
        self.profile = profile
        self.comment = owner_comment(owner, node, state_dir)
        self.name = f"hpk_pilot_{node}"  # '_': never a pod's job name
        self.state_dir = state_dir
        self.clock = clock
        share = None
        if profile.pilot.nodes > 0:
            partition = profile.pilot.partition or profile.slurm.partition
            found = slurm.nodes(partition=partition)
            if found:
                share = NodeShare(found[0].cpus, found[0].memory_mb, found[0].gpus)
        self.rules = rules_for(profile, node_share=share)
        self._helds: dict[str, Held] = {}
        self._asked: float | None = None  # when refresh last asked Slurm (its clock)
        self._lock = threading.Lock()
        self._ticking = threading.Lock()  # held for a whole tick (its sbatch and scancel included)
        self._refreshing = threading.Lock()  # held for a whole refresh: one squeue in flight at a time

    # ------------------------------------------------------------------ books

    def helds(self) -> list[Held]:
        with self._lock:
            return list(self._helds.values())

    def adopt(self) -> list[str]:
        """Take over this owner's allocations that Slurm still runs or queues (after a restart); their ids."""
        found = [j for j in self.slurm.user_jobs() if j.comment == self.comment and j.state not in TERMINAL_STATES]
        with self._lock:
            for job in found:
                self._helds.setdefault(job.job_id, Held(job.job_id, job.state, idle_since=self.clock()))
        self.refresh()
        return [j.job_id for j in found]

    def assign(self, uid: str, need: Need, job_id: str, node: str) -> None:
        """Book a pod that already runs in ``job_id`` on ``node`` (adopted after a restart)."""
        with self._lock:
            held = self._helds.setdefault(job_id, Held(job_id, RUNNING))
            held.pods[uid] = (node, need)
            held.idle_since = None

    def place(self, need: Need) -> tuple[str, str] | None:
        """Book ``need`` in a running allocation with room: (allocation, node), or None for now."""
        with self._lock:
            spot = place(self._helds.values(), need, self.clock(), self.rules)
            if spot is not None:
                held = self._helds[spot[0]]
                held.pods[need.uid] = (spot[1], need)
                held.idle_since = None
        if spot is not None:
            self._touch_lease()
        return spot

    def fits(self, need: Need) -> bool:
        """A running allocation has room for ``need`` now (nothing booked)."""
        with self._lock:
            return place(self._helds.values(), need, self.clock(), self.rules) is not None

    def book_steps(self) -> None:
        """The books of every held allocation become the steps Slurm runs in it (one ``scontrol show step
        -o``), whoever started them: ``hpkctl run --pilot`` processes share their allocations, and
        each sees the others' steps only there. Call it under :meth:`placing`, so no step this process
        placed is missing from Slurm's answer."""
        shares = self.slurm.step_shares()
        with self._lock:
            for held in self._helds.values():
                held.pods.clear()
            for s in shares:
                if s.job_id in self._helds:
                    self._helds[s.job_id].pods[s.step_id] = (s.node, Need(s.step_id, s.cpus, s.memory_mb, s.gpus,
                                                                          nodes=s.node.count(",") + 1))
            for held in self._helds.values():
                if held.pods:
                    held.idle_since = None
                elif held.idle_since is None:
                    held.idle_since = self.clock()

    def placing(self) -> ExclusiveLock:
        """The lock of this owner's placements (blocking: :func:`hpkctl.pilot.launch.find_spot` takes it
        with a retry): between reading Slurm's steps and its own step appearing there, no other process
        of this owner places a pod."""
        out_dir = self.state_dir / "pilot"
        out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return ExclusiveLock(out_dir / f"placing-{self.name}.lock")

    @property
    def lease(self) -> Path:
        """Touched at every placement: the holders' script counts it as use (a short pod's step may
        come and go between two of its checks)."""
        return self.state_dir / "pilot" / f"lease-{self.name}"

    def _touch_lease(self) -> None:
        try:
            self.lease.touch()
        except OSError as exc:  # the holders then see only running steps: never fatal
            log.debug("pilot: cannot touch %s: %s", self.lease, exc)

    def done(self, uid: str) -> bool:
        """The pod's step ended: its share is free again. False when it held none (freed already)."""
        freed = False
        with self._lock:
            for held in self._helds.values():
                if held.pods.pop(uid, None) is not None:
                    freed = True
                    if not held.pods:
                        held.idle_since = self.clock()
        return freed

    def settled(self) -> bool:
        """Every allocation on the books runs, its nodes known: Slurm has nothing the pool waits for (an
        allocation's start), only an unexpected end, which the kubelet's status rounds find as often
        ([kubelet] slurm_poll)."""
        with self._lock:
            return all(h.state == RUNNING and h.nodes for h in self._helds.values())

    def where(self, uid: str) -> tuple[str, str] | None:
        with self._lock:
            return next(((h.job_id, h.pods[uid][0]) for h in self._helds.values() if uid in h.pods), None)

    def capacity(self) -> Capacity:
        """The node's capacity: the held allocations' shares plus what could still be requested."""
        with self._lock:
            shares = [s for h in self._helds.values() for s in h.nodes.values()]
            room = self.rules.max_allocations - len(self._helds)
        node, n = self.rules.shape.per_node, max(self.rules.shape.nodes, 1) * max(room, 0)
        held = NodeShare(sum(s.cpus for s in shares), sum(s.memory_mb for s in shares), sum(s.gpus for s in shares))
        return Capacity(held, NodeShare(node.cpus * n, node.memory_mb * n, node.gpus * n))

    # ------------------------------------------------------------------ Slurm

    def refresh(self, *, max_age: float = 0.0) -> list[str]:
        """Ask Slurm about every allocation (one squeue; scontrol for those not yet known running):
        states, ends, nodes. Allocations that ended leave the books; the uids placed in them are returned.
        ``max_age``: books asked about less than this many seconds ago are taken as they are (no Slurm
        call): each pod waiting for room retries every second, and one squeue serves them all. One refresh
        at a time: a caller whose books are due waits for the one in flight and takes its answer when it
        was asked late enough (steps that end together each refreshed, 16 squeue calls for 16 steps)."""
        since = self.clock() - max_age  # an answer asked after this will do
        if self._fresh(since, max_age):
            return []
        with self._refreshing:
            if self._fresh(since, max_age):  # the refresh this one waited for asked late enough
                return []
            return self._refresh()

    def _fresh(self, since: float, max_age: float) -> bool:
        with self._lock:
            return max_age > 0 and self._asked is not None and self._asked > since

    def _refresh(self) -> list[str]:
        with self._lock:
            ids = list(self._helds)
        if not ids:
            return []
        asked = self.clock()
        states = self.slurm.query(ids)
        with self._lock:
            self._asked = asked
        lost: list[str] = []
        for job_id in ids:
            info = states.get(job_id)
            state = info.state if info else "GONE"
            details = None
            with self._lock:
                held = self._helds.get(job_id)  # None: released meanwhile (tick, another thread)
                need_details = held is not None and state == RUNNING and (held.state != RUNNING or not held.nodes)
            if held is None:
                continue
            if need_details:
                details = self.slurm.allocation(job_id)
            with self._lock:
                if self._helds.get(job_id) is not held:
                    continue
                lost += self._take_state(job_id, held, state)
                if job_id not in self._helds:
                    continue
                if details is not None and details.state == RUNNING and details.nodes:
                    held.nodes, held.end = dict(details.nodes), details.end
                    if not held.pods and held.idle_since is None:
                        held.idle_since = self.clock()
                elif info is not None and info.end_time is not None:
                    held.end = info.end_time.timestamp()
        return lost

    def heard(self, states: Mapping[str, JobInfo | None]) -> None:
        """What another squeue said of some allocations (a status round's, about those its pods run in;
        ``None``: Slurm forgot the job), taken at once whatever the books' age: one that ended leaves the
        books, one that runs no more (requeued) takes no pod until a refresh finds it running again. With
        every allocation running the books are asked about only each slurm_poll, and a pod placed in a
        dead allocation meanwhile failed. The pods placed in one that ended are not named here: the
        status round that heard it finds their steps lost from the same answer (``lost_step_reports``)."""
        with self._lock:
            for job_id, info in states.items():
                held = self._helds.get(job_id)
                state = info.state if info is not None else "GONE"
                if held is not None and held.state == RUNNING and state != RUNNING:
                    self._take_state(job_id, held, state)

    def _take_state(self, job_id: str, held: Held, state: str) -> list[str]:
        """With the lock held: Slurm says ``state`` of ``held``. One that runs or waits takes it; one that
        ended leaves the books, and the uids placed in it are returned."""
        if state in (RUNNING, *WAITING):
            held.state = state
            return []
        del self._helds[job_id]
        return list(held.pods)

    def tick(self, pending: Sequence[Need]) -> Plan:
        """Request the allocations ``pending`` pods need (and a successor), release idle ones. One tick
        at a time (``_ticking``): the kubelet's workers tick at once when pods arrive together, and a
        tick that decided while another's sbatch ran would request again what that one requests (two
        pods created at once held two allocations with ``max_allocations = 1``)."""
        with self._ticking:
            return self._tick(pending)

    def _tick(self, pending: Sequence[Need]) -> Plan:
        with self._lock:
            decision = plan(list(self._helds.values()), pending, self.clock(), self.rules)
        for job_id in decision.release:
            log.info("pilot: releasing idle allocation %s", job_id)
            self.slurm.cancel(job_id)
            with self._lock:
                self._helds.pop(job_id, None)
        for _ in range(decision.request):
            job_id = self.hold()
            with self._lock:
                self._helds[job_id] = Held(job_id, "PENDING")
        return decision

    def hold(self) -> str:
        """Submit one allocation of the profile's shape; its job id."""
        p, s = self.profile.pilot, self.profile.slurm
        out_dir = self.state_dir / "pilot"
        out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        extra = [f"--account={s.account}"] if s.account else []
        extra += [f"--qos={s.qos}"] if s.qos else []
        args = hold_args(name=self.name, comment=self.comment, partition=p.partition or s.partition,
                         time_limit=p.time_limit, nodes=p.nodes, cpus=p.cpus, memory_mb=mem_mb(p.memory), gpus=p.gpus,
                         gres_name=self.profile.gpu.gres_name, output=out_dir / "holder-%j.out", extra_args=extra)
        self._touch_lease()
        job_id = self.slurm.hold(data_dir("sbatch") / "pilot-holder.sh", args=args,
                                 script_args=[str(2 * p.idle_release), str(self.lease)])
        log.info("pilot: requested allocation %s (%s)", job_id, self.comment)
        return job_id

    def release_all(self) -> None:
        """Cancel every allocation on the books (``hpkctl stop --all``; tests)."""
        for held in self.helds():
            self.slurm.cancel(held.job_id)
        with self._lock:
            self._helds.clear()

"""Drives a pilot ``Pool`` on the real Slurm in a process of user hpk: ``python pool_driver.py
renewal|across STATE_DIR OWNER``. Prints one JSON object (see test_pilot_pool_slurm.py).

renewal: ci's profile with Slurm's shortest allocation (2 CPUs for 1 minute, renewal margin 28 s): a
successor is due once the first allocation has less than 56 s left, and it stops taking pods at 28 s.
across: ci-multi's profile with allocations of two whole nodes: pods packed across their nodes."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from hpkctl.jobs import Slurm
from hpkctl.pilot.launch import find_spot
from hpkctl.pilot.plan import Need
from hpkctl.pilot.pool import Pool
from hpkctl.sites import load_site
from tests.support.waiting import wait_for

#: renewal's margin (s): a successor is due at 2 x MARGIN left, the last MARGIN take no pods. Just under
#: half of Slurm's shortest limit, a minute: the test waits the first allocation's 60 - MARGIN s.
MARGIN = 28


def across(state: Path, owner: str) -> dict[str, object]:
    """Three pods of 5 of a node's 8 CPUs into allocations of two whole nodes: two go to the two
    nodes of one allocation, each a step on its node; the third needs a second allocation."""
    multi = load_site("ci-multi")
    profile = multi.model_copy(update={"pilot": multi.pilot.model_copy(update={
        "enabled": True, "nodes": 2, "time_limit": "10", "max_allocations": 1})})
    slurm = Slurm(profile.slurm)
    pool = Pool(slurm, profile, owner=owner, node="across", state_dir=state)
    out: dict[str, object] = {"shape": [pool.rules.shape.nodes, pool.rules.shape.per_node.cpus]}
    try:
        spots = [find_spot(pool, Need(f"p{i}", 5, 1000), timeout=120) for i in range(2)]
        out["spots"] = spots
        # each "pod" runs until exec reached it: its step holds its node while exec looks for it there
        procs = [slurm.start_step(job, ["bash", "-c", f"echo $SLURMD_NODENAME >where-{i}; "
                                        f"while [ ! -e reached-{i} ]; do sleep 0.1; done"], name=f"p{i}",
                                  node=node, cpus=5, memory_mb=1000, output=state / f"p{i}.out", workdir=state,
                                  srun_log=state / f"p{i}.srun") for i, (job, node) in enumerate(spots)]
        out["exec_on"] = [exec_on(slurm, state, job, i) for i, (job, _) in enumerate(spots)]
        out["exits"] = [p.wait(timeout=60) for p in procs]
        out["ran_on"] = [(state / f"where-{i}").read_text().strip() for i in range(2)]
        out["third"] = pool.place(Need("p2", 5, 1000))  # no room left, and no second allocation allowed
    finally:
        pool.release_all()
    return out


def exec_on(slurm: Slurm, state: Path, job: str, i: int) -> str:
    """The pilot provider's exec of "pod" i: a step of its allocation on the node Slurm says its step
    runs on (``Slurm.step_node``); the exec's "job.sh" says where it ran and lets the pod end."""
    step = wait_for(f"step p{i}", lambda: next((s.step_id for s in slurm.steps() if s.name == f"p{i}"), None),
                    timeout=60, every=0.2)
    pod = state / f"pod{i}"
    (pod / "job").mkdir(parents=True)
    (pod / "job" / "job.sh").write_text(f'echo "$SLURMD_NODENAME"; : >"{state}/reached-{i}"\n')

    async def run() -> str:
        ex = await slurm.exec_step(job, pod_dir=pod, container="c", command=["true"], node=slurm.step_node(step))
        text = (await ex.read_stdout()).decode()
        await ex.wait()
        return text.strip()

    return asyncio.run(run())


def main() -> None:
    if sys.argv[1] == "across":
        print(json.dumps(across(Path(sys.argv[2]), sys.argv[3])))
        return
    state, owner = Path(sys.argv[2]), sys.argv[3]
    ci = load_site("ci")
    # idle_release: the holders release themselves after 2 x 60 s without a step or a placement, far
    # beyond this scenario's minute (the successor waits ~30 s for its first pod)
    pilot = ci.pilot.model_copy(update={"enabled": True, "cpus": 2, "memory": "512M", "time_limit": "1",
                                        "renewal_margin": MARGIN, "idle_release": 60, "max_allocations": 2})
    profile = ci.model_copy(update={"pilot": pilot})
    slurm = Slurm(profile.slurm)
    pool = Pool(slurm, profile, owner=owner, node="renewal", state_dir=state)
    out: dict[str, object] = {}
    try:
        first = find_spot(pool, Need("p1", 1, 100), timeout=120)[0]
        out["first"] = first
        # p1 runs until its allocation's last margin: a pod spanning the takeover. A "pod" that ended
        # at once (its step gone, still on the books) let the first allocation's holder release itself
        # after 2 x idle_release without a step while the successor waited in a busy Slurm's queue; the
        # books then lost the first allocation and this driver raised KeyError (a full run, once)
        proc = slurm.start_step(first, ["bash", "-c", f"while [ ! -e {state}/p1-go ]; do sleep 0.2; done"],
                                name="p1", node="", cpus=1, memory_mb=100, output=state / "p1.out", workdir=state,
                                srun_log=state / "p1.srun")
        # the successor: requested once the first has less than 2 x MARGIN s left, while it holds a pod
        def successor() -> str | None:
            pool.refresh()
            pool.tick([])
            others = [h for h in pool.helds() if h.job_id != first and h.state == "RUNNING"]
            return others[0].job_id if others else None

        out["successor"] = wait_for("a successor allocation", successor, timeout=90, every=2)
        books = {h.job_id: h for h in pool.helds()}
        assert first in books, f"the first allocation {first} left the books while p1 ran: {books}"
        out["first_left_when_successor_ran"] = round(books[first].left(time.time()))
        # once the first has less than the margin left, new pods go to the successor, although the
        # first has a CPU free and is the fuller one (p1 runs there)
        wait_for(f"the first allocation's last {MARGIN} s", lambda: books[first].left(time.time()) < MARGIN,
                 timeout=90, every=0.5)
        pool.refresh()
        second = find_spot(pool, Need("p2", 1, 100), timeout=30)[0]
        out["second_pod_in"] = second
        p2 = slurm.start_step(second, ["true"], name="p2", node="", cpus=1, memory_mb=100, output=state / "p2.out",
                              workdir=state, srun_log=state / "p2.srun")
        out["p2_exit"] = p2.wait(timeout=60)  # the successor runs it
        (state / "p1-go").touch()
        out["p1_exit"] = proc.wait(timeout=30)  # the first pod finished in the first allocation
        pool.done("p1")
        pool.done("p2")
        decision = pool.tick([])
        out["released"] = list(decision.release)
        out["held_after"] = sorted(h.job_id for h in pool.helds())
    finally:
        pool.release_all()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

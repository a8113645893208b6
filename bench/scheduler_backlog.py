#!/usr/bin/env python3
"""``hpkctl scheduler``'s bind rate: N pods are created in the Kubernetes API stand-in BEFORE the
scheduler starts, then the time from its start until the last pod is bound (a watch in this process
sees ``spec.nodeName`` set: a watch, not a LIST per poll, which loaded the stand-in being measured) and
until the last ``Scheduled`` event exists. The scheduler runs in this process. No Slurm involved.

usage: bench/scheduler_backlog.py [N]     (default 200; run from a checkout with the dev venv)
The stand-in's own pace bounds what this can show (it is one asyncio process on the same 2 cores);
the load average is printed, compare runs only at similar load.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpkctl.kube import Kube, node_path, pod_path  # noqa: E402
from hpkctl.scheduler.daemon import Scheduler  # noqa: E402
from tests.support.kubeapi import pod, start  # noqa: E402


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    d = Path(tempfile.mkdtemp(prefix="bench-scheduler-"))
    api = start(d / "state")
    try:
        node = "hpk-bench"
        assert api.post(node_path(), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})[0] == 201
        t = time.monotonic()
        for i in range(n):
            assert api.post(pod_path("default"), pod(f"b-{i}"))[0] == 201
        posted = time.monotonic() - t
        code, listed = api.get(pod_path("default"), params={"limit": "1"})
        assert code == 200, listed
        seen: dict[str, float] = {}  # pod name -> when this process saw it bound (its ADDED on the node's watch)

        def follow() -> None:  # a watch, not a LIST per poll: the bench must not load the stand-in it measures
            params = {"fieldSelector": f"spec.nodeName={node}", "resourceVersion": listed["metadata"]["resourceVersion"]}
            for ev in api.stream(pod_path("default"), params):
                if ev["type"] in ("ADDED", "MODIFIED"):
                    seen.setdefault(ev["object"]["metadata"]["name"], time.monotonic())
                if len(seen) >= n:
                    return

        watcher = threading.Thread(target=follow, daemon=True)
        watcher.start()
        stop = threading.Event()
        sched = Scheduler(Kube(str(api.kubeconfig)), node_name=node, scheduler_names=["default-scheduler"], stop=stop)
        t0 = time.monotonic()
        th = threading.Thread(target=sched.run, daemon=True)
        th.start()
        watcher.join(600)
        bound = max(seen.values()) - t0 if len(seen) == n else None
        first = min(seen.values()) - t0 if seen else None
        events = None
        while bound is not None and time.monotonic() - t0 < 600:
            code, ev = api.get("/api/v1/namespaces/default/events", params={"fieldSelector": "reason=Scheduled"})
            if code == 200 and len(ev["items"]) == n:
                events = time.monotonic() - t0
                break
            time.sleep(0.2)
        stop.set()
        th.join(10)
        load = os.getloadavg()
        print(f"scheduler backlog: {n} pods created before the scheduler started (POSTs took {posted:.1f} s, "
              f"{n / posted:.0f}/s: the stand-in's pace)")
        if bound is None:
            print("  NOT all bound within 600 s")
            return 1
        print(f"  all bound after {bound:.2f} s: {n / bound:.0f} binds/s (goal: 200/s or more); the first after "
              f"{first:.2f} s (the scheduler's start: its lists, the Node), the rest at {(n - 1) / (bound - first):.0f}/s")
        print(f"  all Scheduled events posted after {events:.2f} s" if events else "  Scheduled events: not all posted")
        print(f"  load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs")
        return 0
    finally:
        api.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

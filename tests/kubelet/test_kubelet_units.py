"""Unit tests of the kubelet's parts that need neither Slurm nor an API server: the work queue, the
status patch and its no-regression rule, the intent records, the node's capacity and times."""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpkctl.jobs import NodeInfo
from hpkctl.kube.workqueue import URGENT_LEAD, WorkQueue
from hpkctl.kubelet.node import NodeState, capacity, micro_time
from hpkctl.kubelet.podstatus import api_status, forbidden_transitions, never_regresses, reported_starts, status_patch
from hpkctl.pod.status import ContainerStatus, PodStatus
from tests.support.waiting import wait_for


# ---------------------------------------------------------------------------- work queue
def test_one_key_never_runs_twice_at_once_and_no_add_is_lost() -> None:
    running: dict[str, int] = {}
    overlap: list[str] = []
    calls: dict[str, int] = {}
    lock = threading.Lock()
    hold = threading.Event()  # "held" waits on it in its first run

    def handler(key: str) -> None:
        with lock:
            running[key] = running.get(key, 0) + 1
            if running[key] > 1:
                overlap.append(key)
            calls[key] = calls.get(key, 0) + 1
            first = calls[key] == 1
        if key == "held" and first:
            hold.wait(10)
        time.sleep(0.02)
        with lock:
            running[key] -= 1

    q = WorkQueue(handler, workers=4)
    q.start()
    for _ in range(20):
        for k in ("a", "b", "c"):
            q.add(k)
        time.sleep(0.005)
    wait_for("the burst to be worked off", q.idle, timeout=10, every=0.01)
    assert overlap == [] and all(1 <= calls[k] <= 21 for k in ("a", "b", "c")), calls
    # an add while the key's handler runs is not lost: the key runs again once that run ends
    q.add("held")
    wait_for("the first run of 'held'", lambda: running.get("held") == 1, timeout=10, every=0.01)
    q.add("held")
    q.add("held")  # coalesced with the one before: one more run, not two
    hold.set()
    wait_for("the queue to be idle", lambda: calls["held"] >= 2 and q.idle(), timeout=10, every=0.01)
    before = calls["a"]
    q.add("a")  # an add after the burst is worked on again
    wait_for("the add after the burst", lambda: calls["a"] > before and q.idle(), timeout=10, every=0.01)
    q.stop()
    assert overlap == []
    assert calls["held"] == 2 and calls["a"] == before + 1, calls


def test_urgent_keys_due_run_before_the_others_in_deadline_order_each() -> None:
    """The kubelet's pods still to be submitted go before status work queued earlier (a burst's
    creates waited up to 1.1 s behind other pods' status patches); a key not due yet waits all the
    same, and a key's deadlines still coalesce."""
    now = [100.0]
    order: list[str] = []
    urgent = {"new-1", "new-2", "new-later"}
    q = WorkQueue(order.append, workers=1, clock=lambda: now[0], urgent=urgent.__contains__)
    q.add("status-1")
    now[0] += 0.3
    q.add("status-2")
    q.add("new-1")
    q.add_after("new-later", 5)
    now[0] += 0.3
    q.add("new-2")
    q.add("new-1")  # coalesced
    assert q.drain() == 4
    assert order == ["new-1", "new-2", "status-1", "status-2"]
    now[0] += 5
    assert q.drain() == 1 and order[-1] == "new-later"


def test_urgent_pending_says_whether_an_urgent_key_is_due() -> None:
    """What the kubelet's API and events wait for at start: the first list's pods taken to be submitted.
    A key not due yet (a back-off), not urgent, or being worked on keeps nothing waiting."""
    now = [100.0]
    urgent = {"new-1", "new-later"}
    q = WorkQueue(lambda k: None, workers=1, clock=lambda: now[0], urgent=urgent.__contains__)
    assert not q.urgent_pending()
    q.add("status-1")
    q.add_after("new-later", 5)
    assert not q.urgent_pending()
    q.add("new-1")
    assert q.urgent_pending()
    assert q.drain() == 2 and not q.urgent_pending()
    now[0] += 5
    assert q.urgent_pending() and q.drain() == 1 and not q.urgent_pending()
    assert not WorkQueue(lambda k: None, workers=1).urgent_pending()  # no urgent keys at all


def test_urgent_keys_that_keep_coming_do_not_starve_a_key_due_longer_than_the_lead() -> None:
    """Each urgent run takes a quarter of URGENT_LEAD and brings a new urgent key and the same one
    again (a pilot pod waiting for room, a burst's creates): the status key queued before them runs
    once it has waited URGENT_LEAD, where an urgent-first queue would never run it."""
    now = [100.0]
    order: list[str] = []
    q: WorkQueue

    def handler(key: str) -> None:
        order.append(key)
        now[0] += URGENT_LEAD / 4
        if key.startswith("new"):
            q.add("new-waiting")
            q.add(f"new-{len(order)}")

    q = WorkQueue(handler, workers=1, clock=lambda: now[0], urgent=lambda k: k.startswith("new"))
    q.add("status")
    q.add("new-0")
    q.drain(limit=12)
    assert order[0] == "new-0" and "status" in order, order
    assert order.index("status") == 4, order  # after four urgent runs: a lead's worth


def test_a_pile_of_aged_keys_and_urgent_keys_are_taken_in_turn() -> None:
    """A backlog slower than URGENT_LEAD (a loaded machine): the status work queued meanwhile has aged,
    and the pods still to submit are due too. They are taken in turn, neither side waiting for the
    other to run dry: taking the aged keys all first stopped every sbatch for 6 s (200 pods, 8 workers)."""
    now = [100.0]
    order: list[str] = []
    q = WorkQueue(order.append, workers=1, clock=lambda: now[0], urgent=lambda k: k.startswith("new"))
    for i in range(4):
        q.add(f"status-{i}")
    now[0] += URGENT_LEAD + 1  # the status keys have aged
    for i in range(4):
        q.add(f"new-{i}")
    assert q.drain() == 8
    assert [k.split("-")[0] for k in order] == ["status", "new"] * 4, order
    assert order == ["status-0", "new-0", "status-1", "new-1", "status-2", "new-2", "status-3", "new-3"]
    q.add("status-young")
    q.add("new-9")
    assert q.drain() == 2 and order[-2:] == ["new-9", "status-young"]  # nothing aged: urgent first again


def test_add_after_delays_and_a_failing_handler_does_not_kill_workers() -> None:
    seen: list[tuple[str, float]] = []
    start = time.monotonic()

    def handler(key: str) -> None:
        seen.append((key, time.monotonic() - start))
        if key == "boom":
            raise RuntimeError("a bad pod")

    q = WorkQueue(handler, workers=1)
    q.start()
    q.add("boom")
    q.add_after("late", 0.3)
    q.add("now")
    wait_for("all three keys", lambda: len(seen) == 3, timeout=10, every=0.01)
    q.stop()
    keys = [k for k, _ in seen]
    assert keys == ["boom", "now", "late"]
    assert dict(seen)["late"] >= 0.3


def test_one_entry_per_key_and_the_earliest_deadline_wins() -> None:
    """A watch event during a pod's back-off runs the pod now (its gate then decides); a later
    deadline never pushes back an earlier one; a hundred adds of a key cost one run."""
    runs: list[str] = []
    gate = threading.Event()

    def handler(key: str) -> None:
        gate.wait(10)
        runs.append(key)

    q = WorkQueue(handler, workers=1)
    q.add_after("a", 600)
    assert q.due("a") is not None and q.due("a") > time.monotonic() + 500  # type: ignore[operator]
    q.add("a")  # earlier: replaces the 600 s deadline
    q.add_after("a", 600)  # later: ignored
    for _ in range(100):
        q.add("b")
    q.start()
    gate.set()
    wait_for("both keys worked on", lambda: len(runs) >= 2 and q.idle(), timeout=10, every=0.01)
    assert sorted(runs) == ["a", "b"]
    assert q.due("a") is None and q.due("b") is None  # nothing left behind for later
    q.stop()


# ---------------------------------------------------------------------------- status
def _status(phase: str, state: str, code: int | None = None, started: str | None = "2026-01-01T00:00:00Z") -> PodStatus:
    c = ContainerStatus(name="c", init=False, state=state, exit_code=code, started_at=started,
                        finished_at="2026-01-01T00:00:05Z" if state == "terminated" else None,
                        reason="Completed" if code == 0 else ("Error" if code else ""))
    return PodStatus(phase, "", "", code, "10.0.0.5", "n1", started, [c])


POD = {"metadata": {"uid": "u1", "generation": 2},
       "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}}


def test_api_status_shape_and_owned_conditions() -> None:
    out = api_status(POD, _status("Running", "running"), job_id="42", host_ip="10.0.0.5")
    assert out["phase"] == "Running" and out["podIP"] == "10.0.0.5" and out["hostIPs"] == [{"ip": "10.0.0.5"}]
    assert {c["type"] for c in out["conditions"]} == {"PodReadyToStartContainers", "Initialized", "ContainersReady",
                                                     "Ready"}  # PodScheduled is the scheduler's
    (cs,) = out["containerStatuses"]
    assert (cs["image"], cs["containerID"]) == ("busybox:1.36", "slurm://42/c")
    assert out["observedGeneration"] == 2
    assert "initContainerStatuses" not in out


def test_patch_carries_uid_skips_no_change_and_deletes_vanished_fields() -> None:
    pending = api_status(POD, PodStatus("Pending", "Submitted", "waiting", None, None, None, None, []),
                         job_id="", host_ip="")
    running = api_status(POD, _status("Running", "running"), job_id="42", host_ip="10.0.0.5", previous=pending)
    patch = status_patch("u1", running, pending)
    assert patch is not None and patch["metadata"] == {"uid": "u1"}
    assert status_patch("u1", running, running) is None
    # only timestamps differ: no patch either
    again = api_status(POD, _status("Running", "running"), job_id="42", host_ip="10.0.0.5")
    assert status_patch("u1", again, running) is None
    # a field the old status had and the new one lacks is deleted (SMP null)
    old = dict(running, reason="Something")
    assert status_patch("u1", running, old)["status"]["reason"] is None  # type: ignore[index]


def test_a_condition_turning_true_has_its_old_reason_and_message_deleted() -> None:
    pod = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    unready = api_status(pod, PodStatus("Pending", "", "", None, None, "n", "2026-01-01T00:00:00Z",
                                        [ContainerStatus(name="c", init=False, state="waiting")]), job_id="1", host_ip="")
    st = _status("Running", "running")
    st.containers[0].ready = True
    ready = api_status(pod, st, job_id="1", host_ip="", previous=unready)
    was = {c["type"]: c for c in unready["conditions"]}
    assert was["Ready"]["reason"] == "ContainersNotReady" and was["Ready"]["message"]
    sent = {c["type"]: c for c in status_patch("u1", ready, unready)["status"]["conditions"]}  # type: ignore[index]
    assert sent["Ready"]["status"] == "True"
    assert (sent["Ready"]["reason"], sent["Ready"]["message"]) == (None, None)  # SMP: null deletes
    assert all(v is not None for c in ready["conditions"] for k, v in c.items() if k != "lastProbeTime")


def test_condition_transition_time_kept_while_status_holds() -> None:
    first = api_status(POD, _status("Running", "running"), job_id="42", host_ip="")
    first["conditions"][0]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    second = api_status(POD, _status("Running", "running"), job_id="42", host_ip="", previous=first)
    assert second["conditions"][0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"


@pytest.mark.parametrize(("policy", "code", "ok"), [("Never", 0, False), ("Never", 1, False), ("OnFailure", 0, False),
                                                    ("OnFailure", 1, True), ("Always", 0, True)])
def test_a_terminated_container_never_goes_back_to_running(policy: str, code: int, ok: bool) -> None:
    pod = {"spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "x"}]}}
    done = api_status(pod, _status("Failed" if code else "Succeeded", "terminated", code), job_id="1", host_ip="")
    again = api_status(pod, _status("Running", "running"), job_id="1", host_ip="")
    assert never_regresses(again, done, spec=pod["spec"]) is ok
    assert never_regresses(done, done, spec=pod["spec"])


def _init(name: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "state": state}


@pytest.mark.parametrize("policy", ["Never", "OnFailure"])
def test_a_native_sidecar_may_restart_under_any_pod_policy_a_plain_init_container_may_not(policy: str) -> None:
    """kube-apiserver's ValidateInitContainerStateTransition: a restarting sidecar is no regression,
    so its crash must not freeze the pod's status; a plain init container that succeeded may not run
    again. The path names the index in the old status, as the server's error does."""
    spec = {"restartPolicy": policy, "initContainers": [{"name": "setup"}, {"name": "side", "restartPolicy": "Always"}],
            "containers": [{"name": "c"}]}
    ended = {"terminated": {"exitCode": 1}}
    old = {"initContainerStatuses": [_init("setup", {"terminated": {"exitCode": 0}}), _init("side", ended)]}
    side_again = {"initContainerStatuses": [_init("setup", {"terminated": {"exitCode": 0}}),
                                            _init("side", {"running": {}})]}
    assert forbidden_transitions(side_again, old, spec) == []
    setup_again = {"initContainerStatuses": [_init("setup", {"running": {}}), _init("side", {"running": {}})]}
    assert forbidden_transitions(setup_again, old, spec) == ["status.initContainerStatuses[0].state"]
    failed_setup = {"initContainerStatuses": [_init("setup", ended)]}
    retried = forbidden_transitions({"initContainerStatuses": [_init("setup", {"waiting": {}})]}, failed_setup, spec)
    assert retried == ([] if policy == "OnFailure" else ["status.initContainerStatuses[0].state"])
    assert forbidden_transitions(setup_again, old, dict(spec, restartPolicy="Always")) == []


# ---------------------------------------------------------------------------- node
def test_capacity_sums_usable_nodes_and_counts_gpus() -> None:
    nodes = [NodeInfo("a", ("p",), 16, 64000, 4, "mixed"), NodeInfo("b", ("p",), 8, 1000, 0, "idle"),
             NodeInfo("c", ("p",), 99, 99, 9, "drained"), NodeInfo("d", ("p",), 99, 99, 9, "down")]
    cap = capacity(nodes, max_pods=110)
    assert cap == {"cpu": "24", "memory": f"{65000 * 1024}Ki", "pods": "110", "ephemeral-storage": "0",
                   "nvidia.com/gpu": "4"}
    assert "nvidia.com/gpu" not in capacity(nodes[1:2], max_pods=1)


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)))
def test_micro_time_has_exactly_six_fractional_digits(dt: datetime) -> None:
    text = micro_time(dt.replace(tzinfo=timezone.utc))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", text), text


def test_node_status_heartbeat_only_change_is_not_a_change() -> None:
    from hpkctl.kubelet.node import _without_beats

    n = NodeState(name="hpk", address="10.1.1.1", port=10250, site="ci", runtime_version="apptainer://1")
    a, b = n.status(beat="2026-01-01T00:00:00Z"), n.status(beat="2026-01-01T00:05:00Z")
    assert a != b and _without_beats(a) == _without_beats(b)
    assert a["addresses"] == [{"type": "InternalIP", "address": "10.1.1.1"}]
    assert a["declaredFeatures"] == ["ExtendWebSocketsToKubelet"]


def test_node_reporter_asks_the_runtime_version_on_its_thread_before_registering() -> None:
    """The kubelet's start does not wait for `apptainer --version` (a process: the stand-in's is a Python
    start): the node thread asks it, once, and the Node it registers carries the answer."""
    import threading

    from hpkctl.kubelet.node import NodeReporter

    stop = threading.Event()
    asked: list[str] = []
    posted: list[dict[str, object]] = []

    class Kube:
        def get(self, path: str, **kw: object) -> object:
            return {"major": "1", "minor": "30"}

        def post(self, path: str, body: dict[str, object], **kw: object) -> object:
            posted.append(body)
            return {"metadata": {"uid": "node-uid"}}

        def patch(self, path: str, body: object, **kw: object) -> object:
            stop.set()  # the registration's first status: enough
            return {}

    def runtime() -> str:
        asked.append(threading.current_thread().name)
        return "apptainer://9.9.9"

    state = NodeState(name="hpk", address="10.1.1.1", port=10250, site="ci", runtime_version="apptainer://unknown")
    rep = NodeReporter(Kube(), state, slurm_nodes=lambda: [], max_pods=10, stop=stop,  # type: ignore[arg-type]
                       runtime=runtime)
    assert asked == []  # not at construction: the kubelet's start goes on meanwhile
    rep.thread.start()
    rep.thread.join(30)
    assert not rep.thread.is_alive() and rep.uid == "node-uid"
    assert asked == ["node-status"]
    info = posted[0]["status"]["nodeInfo"]  # type: ignore[index]
    assert info["containerRuntimeVersion"] == "apptainer://9.9.9"


def test_cluster_dns_is_coredns_on_port_53_from_the_kube_dns_endpoints() -> None:
    from hpkctl.kube import KubeError
    from hpkctl.kubelet.objects import cluster_dns

    class Kube:
        def __init__(self, answer: object) -> None:
            self.answer = answer
            self.paths: list[str] = []

        def get(self, path: str, **kw: object) -> object:
            self.paths.append(path)
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    def eps(port: int, ip: str = "10.1.2.3") -> dict[str, object]:
        return {"subsets": [{"addresses": [{"ip": ip}],
                             "ports": [{"name": "dns", "port": port, "protocol": "UDP"},
                                       {"name": "dns-tcp", "port": port, "protocol": "TCP"}]}]}

    k = Kube(eps(53))
    assert cluster_dns(k) == "10.1.2.3"  # type: ignore[arg-type]
    assert k.paths == ["/api/v1/namespaces/kube-system/endpoints/kube-dns"]
    assert cluster_dns(Kube(eps(10053))) == ""  # type: ignore[arg-type]  # resolv.conf has no port
    assert cluster_dns(Kube({"subsets": []})) == ""  # type: ignore[arg-type]
    assert cluster_dns(Kube(KubeError(404, "NotFound", "not found"))) == ""  # type: ignore[arg-type]
    assert cluster_dns(Kube(KubeError(403, "Forbidden", "no"))) == ""  # type: ignore[arg-type]


def test_reported_starts_are_the_runs_the_api_shows() -> None:
    status = {"initContainerStatuses": [{"name": "setup", "state": {"terminated": {"startedAt": "t1"}}}],
              "containerStatuses": [
                  {"name": "up", "state": {"running": {"startedAt": "t2"}}},
                  {"name": "crashing", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                   "lastState": {"terminated": {"startedAt": "t3"}}},
                  {"name": "new", "state": {"waiting": {"reason": "ContainerCreating"}}}]}
    assert reported_starts(status) == {"setup": "t1", "up": "t2", "crashing": "t3"}

"""``hpkctl scheduler`` (hpkctl.scheduler) against the Kubernetes API stand-in: pods of our
scheduler names are bound, others left alone; a pod whose nodeSelector, node affinity or missing
tolerations exclude the node stays Pending with PodScheduled=False/Unschedulable and one
FailedScheduling event, and is bound once the Node changes; a missing Node is waited for; stop is
prompt; and the real CLI stops on SIGTERM with status 0. Pure tests of the filters (fit.py) last."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hpkctl.kube import Kube, node_path, pod_path
from hpkctl.scheduler import fit
from hpkctl.scheduler.daemon import Scheduler, run_scheduler
from tests.support.kubeapi import KubeApi, pod, start
from tests.support.waiting import wait_for

Obj = dict[str, Any]
NS = "default"
VENV_BIN = Path(os.environ.get("HPK_VENV", "/opt/hpkctl-venv")) / "bin"
AFFINITY_MSG = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."


@pytest.fixture(scope="module")
def api() -> Iterator[KubeApi]:
    d = Path(tempfile.mkdtemp(prefix="scheduler-test-"))
    a = start(d / "state")
    try:
        yield a
    finally:
        a.stop()
        shutil.rmtree(d, ignore_errors=True)


def node_body(name: str, *, labels: dict[str, str] | None = None, taints: list[Obj] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "type": "virtual-kubelet",
                                                  **(labels or {})}},
            "spec": {"taints": taints} if taints else {}}


class Harness:
    """One Scheduler in a thread for one Node of this test; the pods it creates are deleted after."""

    def __init__(self, api: KubeApi, node: str, *, retry_interval: float = 300.0) -> None:
        self.api = api
        self.node = node
        self.stop = threading.Event()
        self.pods: list[str] = []
        self.sched = Scheduler(Kube(str(api.kubeconfig)), node_name=node,
                               scheduler_names=["hpk-scheduler", "default-scheduler"], stop=self.stop,
                               retry_interval=retry_interval, watch_timeout=30, backoff=(0.1, 0.5))
        self.thread = threading.Thread(target=self.sched.run, daemon=True)

    def create_node(self, **kw: Any) -> Obj:
        code, out = self.api.post(node_path(), node_body(self.node, **kw))
        assert code == 201, out
        return dict(out)

    def create(self, name: str, **spec: Any) -> Obj:
        code, out = self.api.post(pod_path(NS), pod(name, **spec))
        assert code == 201, out
        self.pods.append(name)
        return dict(out)

    def get(self, name: str) -> Obj:
        code, out = self.api.get(pod_path(NS, name))
        assert code == 200, out
        return dict(out)

    def condition(self, name: str) -> Obj | None:
        return next((c for c in self.get(name)["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)

    def wait_bound(self, name: str) -> Obj:
        p = wait_for(f"{name} bound to {self.node}", lambda: (q := self.get(name))["spec"].get("nodeName") and q)
        assert p["spec"]["nodeName"] == self.node
        cond = self.condition(name)
        assert cond is not None and cond["status"] == "True"
        return dict(p)

    def wait_unschedulable(self, name: str) -> Obj:
        cond = wait_for(f"{name} unschedulable", lambda: (c := self.condition(name)) and c["status"] == "False" and c)
        assert cond["reason"] == "Unschedulable"
        assert not self.get(name)["spec"].get("nodeName")
        return dict(cond)

    def events(self, name: str, reason: str) -> list[Obj]:
        uid = self.get(name)["metadata"]["uid"]
        code, out = self.api.get(f"/api/v1/namespaces/{NS}/events",
                                 params={"fieldSelector": f"involvedObject.uid={uid},reason={reason}"})
        assert code == 200, out
        return list(out["items"])

    def settled(self) -> None:
        """Until the scheduler has acted on every change made before this call: a pod created now for
        another scheduler (nothing to do) reaches its cache after every earlier change was queued (the
        reflector's callbacks run one at a time, in the watch's order), then its work queue goes idle
        (nothing being worked on, nothing due: each earlier pod was handled, its writes done)."""
        uid = self.create(f"sentinel-{uuid.uuid4().hex[:6]}", schedulerName="someone-else")["metadata"]["uid"]
        wait_for("a later pod in the scheduler's cache", lambda: self.sched.pods.get(uid) is not None)
        wait_for("the scheduler's work queue idle", self.sched.queue.idle)

    def label_node(self, **labels: str) -> None:
        assert self.api.patch(node_path(self.node), {"metadata": {"labels": labels}})[0] == 200

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive(), "the scheduler did not stop"
        for name in self.pods:
            self.api.delete(pod_path(NS, name), {"gracePeriodSeconds": 0})
        self.api.delete(node_path(self.node))


@pytest.fixture
def h(api: KubeApi) -> Iterator[Harness]:
    harness = Harness(api, f"hpk-{uuid.uuid4().hex[:6]}")
    try:
        yield harness
    finally:
        harness.close()


def started(h: Harness, **node: Any) -> Harness:
    h.create_node(**node)
    h.thread.start()
    return h


@pytest.mark.standin
def test_default_and_hpk_scheduler_pods_are_bound(h: Harness) -> None:
    started(h)
    h.create("by-default")  # the API server defaults schedulerName to default-scheduler
    h.create("by-hpk", schedulerName="hpk-scheduler")
    for name in ("by-default", "by-hpk"):
        h.wait_bound(name)
        (ev,) = wait_for("the Scheduled event", lambda n=name: h.events(n, "Scheduled"))
        assert ev["message"] == f"Successfully assigned {NS}/{name} to {h.node}"
        assert ev["source"]["component"] == "hpk-scheduler" and ev["type"] == "Normal"


@pytest.mark.standin
def test_pods_created_before_the_scheduler_starts_are_all_bound_once(h: Harness) -> None:
    """A backlog is bound by several workers at once (issue 23.2): every pod bound to the node, each
    with exactly one Scheduled event, posted off the bind path."""
    h.create_node()
    names = [f"backlog-{i}" for i in range(24)]
    for name in names:
        h.create(name)
    h.thread.start()
    for name in names:
        h.wait_bound(name)
    for name in names:
        (ev,) = wait_for(f"{name}'s Scheduled event", lambda n=name: h.events(n, "Scheduled"))
        assert ev["message"] == f"Successfully assigned {NS}/{name} to {h.node}" and ev["count"] == 1


@pytest.mark.standin
def test_pod_for_another_scheduler_is_left_alone(h: Harness) -> None:
    started(h)
    h.create("for-volcano", schedulerName="volcano")
    h.create("sentinel")  # created after it: once this one is bound, the other has been seen
    h.wait_bound("sentinel")
    h.settled()
    p = h.get("for-volcano")
    assert not p["spec"].get("nodeName") and h.condition("for-volcano") is None
    assert h.events("for-volcano", "FailedScheduling") == []


@pytest.mark.standin
def test_node_selector_mismatch_stays_pending_with_one_event(h: Harness) -> None:
    started(h)
    h.create("wants-ssd", nodeSelector={"disk": "ssd"})
    cond = h.wait_unschedulable("wants-ssd")
    assert cond["message"] == AFFINITY_MSG
    wait_for("the event", lambda: h.events("wants-ssd", "FailedScheduling"))
    h.settled()  # our own status patch came back as MODIFIED: it must not cause a second event
    (ev,) = h.events("wants-ssd", "FailedScheduling")
    assert (ev["type"], ev["message"], ev["count"], ev["source"]) == ("Warning", AFFINITY_MSG, 1,
                                                                      {"component": "hpk-scheduler"})
    assert ev["involvedObject"]["uid"] == h.get("wants-ssd")["metadata"]["uid"]
    assert h.get("wants-ssd")["status"]["phase"] == "Pending"


@pytest.mark.standin
def test_node_label_added_later_binds_the_pod(h: Harness) -> None:
    started(h)
    h.create("wants-gpu", nodeSelector={"hpk.io/gpu": "a100"})
    h.wait_unschedulable("wants-gpu")
    h.label_node(**{"hpk.io/gpu": "a100"})
    h.wait_bound("wants-gpu")
    assert len(h.events("wants-gpu", "FailedScheduling")) == 1


@pytest.mark.standin
def test_untolerated_taint_is_unschedulable_tolerated_is_bound(h: Harness) -> None:
    started(h, taints=[{"key": "hpk.io/slurm", "value": "batch", "effect": "NoSchedule"}])
    h.create("intolerant")
    h.create("tolerant", tolerations=[{"key": "hpk.io/slurm", "operator": "Exists", "effect": "NoSchedule"}])
    h.wait_bound("tolerant")
    cond = h.wait_unschedulable("intolerant")
    assert cond["message"] == "0/1 nodes are available: 1 node(s) had untolerated taint {hpk.io/slurm: batch}."
    # the taint removed: the Node's change makes the pod worth another try
    assert h.api.patch(node_path(h.node), {"spec": {"taints": None}}, kind="merge-patch")[0] == 200
    h.wait_bound("intolerant")


@pytest.mark.standin
def test_required_node_affinity(h: Harness) -> None:
    started(h, labels={"cores": "64", "zone": "a"})

    def affinity(*terms: Obj) -> Obj:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}

    h.create("fits", affinity=affinity(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                              {"key": "cores", "operator": "Gt", "values": ["32"]},
                              {"key": "gpu", "operator": "DoesNotExist"}]}))
    h.create("by-name", affinity=affinity({"matchFields": [{"key": "metadata.name", "operator": "In",
                                                            "values": [h.node]}]}))
    h.create("second-term", affinity=affinity(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
        {"matchExpressions": [{"key": "cores", "operator": "Exists"}]}))
    h.create("too-few-cores", affinity=affinity({"matchExpressions": [{"key": "cores", "operator": "Lt",
                                                                       "values": ["8"]}]}))
    h.create("not-zone-a", affinity=affinity({"matchExpressions": [{"key": "zone", "operator": "NotIn",
                                                                    "values": ["a"]}]}))
    for name in ("fits", "by-name", "second-term"):
        h.wait_bound(name)
    for name in ("too-few-cores", "not-zone-a"):
        assert h.wait_unschedulable(name)["message"] == AFFINITY_MSG


@pytest.mark.standin
def test_a_gated_pod_is_bound_once_its_last_gate_is_removed(h: Harness) -> None:
    started(h)
    h.create("gated", schedulingGates=[{"name": "example.com/a"}, {"name": "example.com/b"}])
    gated = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
             "message": "Scheduling is blocked due to non-empty scheduling gates"}
    assert h.condition("gated") == gated  # the API server's, on create
    h.create("sentinel")  # created after it: once this one is bound, the other has been seen
    h.wait_bound("sentinel")
    assert h.api.patch(pod_path(NS, "gated"), {"spec": {"schedulingGates": [{"name": "example.com/b"}]}},
                       kind="merge-patch")[0] == 200
    h.create("sentinel-2")  # the update of "gated" came before this one's ADDED
    h.wait_bound("sentinel-2")
    assert not h.get("gated")["spec"].get("nodeName") and h.condition("gated") == gated
    assert h.events("gated", "FailedScheduling") == []
    assert h.api.patch(pod_path(NS, "gated"), {"spec": {"schedulingGates": None}}, kind="merge-patch")[0] == 200
    h.wait_bound("gated")


@pytest.mark.standin
def test_missing_node_is_waited_for(h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    h.thread.start()  # no Node yet
    h.create("early")
    h.create("early-2")
    wait_for("the warning", lambda: "does not exist" in caplog.text)
    h.settled()  # both pods handled (without a node)
    assert not h.get("early")["spec"].get("nodeName") and h.condition("early") is None
    assert h.events("early", "FailedScheduling") == []
    assert caplog.text.count("does not exist") == 1  # said once, not per pod or per attempt
    h.create_node()
    h.wait_bound("early")
    h.wait_bound("early-2")


@pytest.mark.standin
def test_unschedulable_retries_aggregate_into_one_event(api: KubeApi) -> None:
    """kube-scheduler tries unschedulable pods again every 5 minutes (here every 0.5 s): each try
    bumps the one event's count, never adds events."""
    h = Harness(api, f"hpk-{uuid.uuid4().hex[:6]}", retry_interval=0.5)
    try:
        started(h)
        h.create("never", nodeSelector={"disk": "tape"})
        h.wait_unschedulable("never")
        wait_for("a bumped count", lambda: (e := h.events("never", "FailedScheduling")) and e[0]["count"] >= 3,
                 timeout=10)
        assert len(h.events("never", "FailedScheduling")) == 1
    finally:
        h.close()


@pytest.mark.standin
def test_stop_returns_promptly(api: KubeApi, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hpkctl.scheduler")
    stop = threading.Event()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(run_scheduler(str(api.kubeconfig), node_name="nowhere",
                                                                    scheduler_names=["hpk-scheduler"], stop=stop)))
    t.start()
    # the reflectors have started; their watches open and go quiet (300 s server timeouts) a moment later.
    # No sign tells from outside that they are open: the wait below can only make stop() find them open
    # (a prompt return then proves the cancel); it cannot fail the test, and without it stop() might
    # meet a list instead, which returns promptly as well (a pass that proves less, never a false failure)
    wait_for("the scheduler to start", lambda: "scheduling pods of" in caplog.text)  # logged once both started
    time.sleep(1.0)
    stop.set()
    t.join(60)  # far below the quiet watches' 300 s
    assert not t.is_alive() and result == [0]


@pytest.mark.standin
def test_cli_binds_and_stops_on_sigterm(api: KubeApi, tmp_path: Path) -> None:
    node = f"hpk-{uuid.uuid4().hex[:6]}"
    assert api.post(node_path(), node_body(node))[0] == 201
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    proc = subprocess.Popen([str(VENV_BIN / "hpkctl"), "scheduler", "--site", "ci", "--kubeconfig",
                             str(api.kubeconfig), "--node-name", node], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert api.post(pod_path(NS), pod("via-cli"))[0] == 201
        wait_for("the CLI to bind", lambda: api.get(pod_path(NS, "via-cli"))[1]["spec"].get("nodeName") == node,
                 timeout=20)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert f"default/via-cli bound to {node}" in err and "scheduler stopped" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        api.delete(pod_path(NS, "via-cli"), {"gracePeriodSeconds": 0})


# ---------------------------------------------------------------------------- pure: the filters


NODE = {"metadata": {"name": "hpk", "labels": {"kubernetes.io/hostname": "hpk", "cores": "64"}},
        "spec": {"taints": [{"key": "a", "value": "1", "effect": "NoSchedule"},
                            {"key": "soft", "effect": "PreferNoSchedule"}]}}


def _pod(**spec: Any) -> Obj:
    return {"metadata": {"name": "p"}, "spec": spec}


@pytest.mark.parametrize(("toleration", "ok"), [
    ({"key": "a", "operator": "Equal", "value": "1", "effect": "NoSchedule"}, True),
    ({"key": "a", "value": "1"}, True),  # operator defaults to Equal, empty effect matches any
    ({"key": "a", "value": "2"}, False),
    ({"key": "a", "operator": "Exists"}, True),
    ({"operator": "Exists"}, True),  # empty key + Exists tolerates everything
    ({"key": "a", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "b", "operator": "Exists"}, False),
    ({"key": "a", "operator": "Gt", "value": "0"}, False),  # unknown operator: tolerates nothing
])
def test_tolerations(toleration: Obj, ok: bool) -> None:
    reason = fit.unfit_reason(_pod(tolerations=[toleration]), NODE)
    assert (reason is None) == ok, reason
    if not ok:
        assert reason == "node(s) had untolerated taint {a: 1}"


def _req(*exprs: Obj, fields: list[Obj] | None = None) -> Obj:
    term: Obj = {"matchExpressions": list(exprs)} if exprs else {}
    if fields:
        term["matchFields"] = fields
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.mark.parametrize(("affinity", "ok"), [
    (_req({"key": "cores", "operator": "In", "values": ["64"]}), True),
    (_req({"key": "cores", "operator": "In", "values": []}), False),  # invalid: matches nothing
    (_req({"key": "missing", "operator": "NotIn", "values": ["x"]}), True),  # absent label is not in
    (_req({"key": "cores", "operator": "NotIn", "values": ["64"]}), False),
    (_req({"key": "cores", "operator": "Exists"}), True),
    (_req({"key": "cores", "operator": "Exists", "values": ["64"]}), False),
    (_req({"key": "cores", "operator": "DoesNotExist"}), False),
    (_req({"key": "cores", "operator": "Gt", "values": ["63"]}), True),
    (_req({"key": "cores", "operator": "Gt", "values": ["64"]}), False),
    (_req({"key": "cores", "operator": "Lt", "values": ["65"]}), True),
    (_req({"key": "cores", "operator": "Lt", "values": ["x"]}), False),
    (_req({"key": "kubernetes.io/hostname", "operator": "Gt", "values": ["1"]}), False),  # not a number
    (_req(fields=[{"key": "metadata.name", "operator": "In", "values": ["hpk"]}]), True),
    (_req(fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["hpk"]}]), False),
    (_req(fields=[{"key": "metadata.name", "operator": "In", "values": ["hpk", "x"]}]), False),  # one value only
    (_req(fields=[{"key": "metadata.uid", "operator": "In", "values": ["hpk"]}]), False),
    (_req({"key": "cores", "operator": "Exists"}, fields=[{"key": "metadata.name", "operator": "In",
                                                           "values": ["other"]}]), False),  # ANDed
    (_req(), False),  # an empty term matches nothing
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}, False),
    ({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}, True),  # preference only
])
def test_required_node_affinity_terms(affinity: Obj, ok: bool) -> None:
    tolerate_all = [{"operator": "Exists"}]
    assert (fit.unfit_reason(_pod(affinity=affinity, tolerations=tolerate_all), NODE) is None) == ok


def test_node_selector_and_cordon() -> None:
    tolerate_all = [{"operator": "Exists"}]
    assert fit.unfit_reason(_pod(nodeSelector={"cores": "64"}, tolerations=tolerate_all), NODE) is None
    assert fit.unfit_reason(_pod(nodeSelector={"cores": "64", "x": "y"}, tolerations=tolerate_all),
                            NODE) == fit.REASON_AFFINITY
    cordoned = {**NODE, "spec": {"unschedulable": True}}
    assert fit.unfit_reason(_pod(), cordoned) == fit.REASON_UNSCHEDULABLE
    assert fit.unfit_reason(_pod(tolerations=[{"key": fit.UNSCHEDULABLE_TAINT, "operator": "Exists",
                                               "effect": "NoSchedule"}]), cordoned) is None
    assert fit.failed_scheduling_message(fit.REASON_AFFINITY) == AFFINITY_MSG

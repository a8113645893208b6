"""The cases of the ``hpkctl run`` end-to-end tests (tests/integration/test_run_slurm.py,
test_run_lifecycle.py, test_lifecycle_slurm.py, test_probes_slurm.py) that are about one pod's
behaviour, run through the kubelet instead: the same manifest, created in the API stand-in, bound by
``hpkctl scheduler``, run by ``hpkctl kubelet`` on the real local Slurm with the Apptainer stand-in.
The outcome is asserted as an API client sees it (phase, container states, exit codes, reasons,
messages, restart counts, readiness, events) and ``kubectl logs``.

Where the API shows the same outcome differently from the CLI and the API's way is what Kubernetes
does, the Kubernetes behaviour is asserted and a comment says so. CLI-only cases (signals to
``hpkctl run``, ``--replace``'s messages, closed output, run records) have no kubelet equivalent;
the multi-node MPI case needs the two-node cluster the kubelet fixture does not use.

All pods of a cluster are created before its first test (``tests.support.launch``) and run
concurrently. Tests whose pods keep running (probes, deletes) come first, so the CPUs they hold are
freed before the short cases are checked; pods that end by themselves slowly (the time limits) are
created first and checked last. Three more clusters with their own site profiles: per-pod network namespaces
(``network = "cni"``), pulls before submission on the submit host (``pull = "submit"``), and both.
"""

from __future__ import annotations

import os
import pwd
import random
import select
import re
import shutil
import stat
import subprocess
import threading
import time
import zlib
from datetime import datetime, timezone
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.ci import HPK_USER, missing
from tests.support.cluster import Cluster, running_cluster
from tests.support.launch import (
    BUSYBOX,
    Env,
    Launched,
    conditions,
    configmap,
    container,
    events,
    finished,
    host_volume,
    jobcomp_states,
    jobs_of_uid,
    launch,
    launch_selected,
    logs,
    node_capacity,
    outdir,
    pod,
    secret,
    sh,
    terminated,
    wait_status,
)
from tests.support.pods import PODS
from tests.support.waiting import wait_for, wait_rewritten

pytestmark = [pytest.mark.slurm, pytest.mark.standin, pytest.mark.whole_node]  # pods at once: xdistgroups
SA = "/var/run/secrets/kubernetes.io/serviceaccount"
READ_UPTIME = "read up rest < /proc/uptime"  # $up: seconds with two decimals, one clock for every container

CNI = '\n[apptainer]\nnetwork = "cni"\ncni_network = "none"\nparent_image = "docker://hpk-parent"\n{binds}'
OFFLINE = '\n[apptainer]\npull = "submit"\nimage_cache = "{cache}"\n{binds}'
OFFLINE_CNI = CNI + 'pull = "submit"\nimage_cache = "{cache}"\n'
# A site that prepares Kubernetes' default terminationMessagePath (README, "Stopping a pod"): the
# cni cluster and the host-mode offline one bind the node's /dev/termination-log (issue 22.8).
DEV_TERMLOG = Path("/dev/termination-log")


# ---------------------------------------------------------------------------- clusters


def _cluster_with(extra: str) -> Iterator[Cluster]:
    """A cluster whose site profile has ``extra`` (``{cache}``: an image cache owned by hpk)."""
    def profile(root: Path) -> str:
        cache = root / "images"
        cache.mkdir()
        if os.geteuid() == 0:
            shutil.chown(cache, HPK_USER, HPK_USER)
            if not DEV_TERMLOG.exists():
                DEV_TERMLOG.touch(mode=0o644)  # what the site's admin does once per node
        binds = 'binds = ["/dev/termination-log"]\n' if DEV_TERMLOG.exists() else ""
        return extra.format(cache=cache, binds=binds)

    yield from running_cluster(profile)


@pytest.fixture(scope="module")
def cni_cluster() -> Iterator[Cluster]:
    yield from _cluster_with(CNI)


@pytest.fixture(scope="module")
def offline_cluster() -> Iterator[Cluster]:
    yield from _cluster_with(OFFLINE)


@pytest.fixture(scope="module")
def offline_cni_cluster() -> Iterator[Cluster]:
    yield from _cluster_with(OFFLINE_CNI)


@pytest.fixture(scope="module")
def launched(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[Launched]:
    yield from launch_selected(request, cluster, lambda item: "launched" in item.fixturenames)


@pytest.fixture(scope="module")
def cni_launched(request: pytest.FixtureRequest, cni_cluster: Cluster) -> Iterator[Launched]:
    yield from launch_selected(request, cni_cluster, lambda item: "cni_launched" in item.fixturenames)


@pytest.fixture(scope="module")
def offline_launched(request: pytest.FixtureRequest, offline_cluster: Cluster) -> Iterator[Launched]:
    yield from launch_selected(request, offline_cluster, lambda item: "offline_launched" in item.fixturenames)


@pytest.fixture(scope="module")
def offline_cni_launched(request: pytest.FixtureRequest, offline_cni_cluster: Cluster) -> Iterator[Launched]:
    yield from launch_selected(request, offline_cni_cluster, lambda item: "offline_cni_launched" in item.fixturenames)


def c_(name: str, script: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("image", BUSYBOX)
    return sh(name, script, **kw)


def note(what: str) -> list[str]:
    """An exec hook appending 'WHAT' to /out/events."""
    return ["sh", "-c", f'echo "{what}" >> /out/events']


OUT = [{"name": "out", "mountPath": "/out"}]


def _lines(d: Path, name: str = "events") -> list[str]:
    p = d / name
    return p.read_text().splitlines() if p.exists() else []


def _delete(cluster: Cluster, *names: str, wait: bool = True) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("delete", "pod", *names, f"--wait={str(wait).lower()}", "--timeout=120s", timeout=150,
                           check=False)


def _running(st: dict[str, Any], *names: str) -> bool:
    return st.get("phase") == "Running" and all("running" in container(st, n).get("state", {}) for n in names)


# ============================================================================ long-running pods
# test_probes_slurm.py


def _port() -> int:
    return random.randint(20000, 40000)


def _ready_after_delay(env: Env) -> list[dict[str, Any]]:
    port, d = _port(), outdir(env.cluster, "rc-ready")
    # httpd starts once the test opens the gate (not after a timer that load outruns, or that waits idle)
    server = c_("web", f"mkdir -p /tmp/www && echo ok >/tmp/www/ok && until [ -e /out/go ]; do sleep 0.2; done; "
                       f"exec httpd -f -p {port} -h /tmp/www", volumeMounts=OUT,
                readinessProbe={"httpGet": {"port": port, "path": "/ok"}, "periodSeconds": 1, "timeoutSeconds": 5})
    return [pod("rc-ready", [server], volumes=[host_volume(d)], restartPolicy="Always", terminationGracePeriodSeconds=2)]


#: the kubelet's back-off in its message, as Go prints a duration: "10s", "1m4s" (a loaded machine may
#: first look once the back-off has doubled past a minute)
GO_DURATION = r"(?:\d+m)?\d+s"


@launch(_ready_after_delay)
def test_http_readiness_becomes_ready_after_a_delay(launched: Launched) -> None:
    """Running but not ready (READY 0/1: ready False, started True, Ready False) until the HTTP
    readiness probe passes; then ready (1/1) with conditions Ready and ContainersReady True."""
    c = launched.cluster
    try:
        wait_status(c, "rc-ready", "running", lambda s: _running(s, "web"))
        (outdir(c, "rc-ready") / "go").touch()
        st = wait_status(c, "rc-ready", "Ready", lambda s: conditions(s).get("Ready") == "True")
        assert conditions(st)["ContainersReady"] == "True" and container(st, "web")["ready"] is True, st
        seen = [s for s in launched.history.statuses("rc-ready", uid=launched.uid("rc-ready"))
                if "running" in container(s, "web").get("state", {})]
        assert (container(seen[0], "web")["ready"], container(seen[0], "web")["started"]) == (False, True), seen[0]
        assert conditions(seen[0])["Ready"] == "False"
        assert c.kubectl("get", "pod", "rc-ready").stdout.splitlines()[1].split()[1] == "1/1"
    finally:
        _delete(c, "rc-ready", wait=False)


def _liveness(env: Env) -> list[dict[str, Any]]:
    # The hpkctl run case removes healthz from a background subshell after 3 s; on a machine running
    # sixty pods that races the probe and httpd's start (and the subshell outlives a killed run: see
    # test_a_restarted_container_leaves_no_process_behind). Here httpd serves a hostPath directory
    # and the test removes healthz once the first run serves it: the same failure, no timing guess.
    port, d = _port(), outdir(env.cluster, "rc-live")
    server = c_("web", f"echo serving; echo ok > /www/healthz; exec httpd -f -p {port} -h /www",
                volumeMounts=[{"name": "www", "mountPath": "/www"}],
                livenessProbe={"httpGet": {"port": port, "path": "/healthz"}, "periodSeconds": 1,
                               "failureThreshold": 2, "timeoutSeconds": 5})
    return [pod("rc-live", [server], volumes=[host_volume(d, "www")], restartPolicy="Always",
                terminationGracePeriodSeconds=2)]


@launch(_liveness)
def test_failing_liveness_probe_restarts_the_container(launched: Launched) -> None:
    """The liveness URL 404s: the container is stopped (SIGTERM, 143) and started again:
    restartCount >= 1 and lastState.terminated in the API, the first run's log as ``--previous``,
    no probe output in the container's log."""
    c = launched.cluster
    healthz = outdir(c, "rc-live") / "healthz"
    try:
        wait_status(c, "rc-live", "serving", lambda s: _running(s, "web") and healthz.exists())
        healthz.unlink()
        st = wait_status(c, "rc-live", "restarted", lambda s: container(s, "web").get("restartCount", 0) >= 1)
        assert st["phase"] == "Running", st
        assert container(st, "web")["lastState"]["terminated"]["exitCode"] in (143, 137), st
        assert logs(c, "rc-live", "--previous") == "serving\n"
        assert "probe" not in logs(c, "rc-live")
    finally:
        _delete(c, "rc-live", wait=False)


@launch(lambda env: [pod("rc-logonly", [{"name": "c", "image": BUSYBOX, "command": ["sleep", "300"],
                                         "livenessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1,
                                                           "failureThreshold": 1}}],
                         restartPolicy="Always", terminationGracePeriodSeconds=2)])
def test_log_holds_only_the_containers_output(launched: Launched) -> None:
    """``sleep`` writes nothing: killed by its liveness probe, its previous log must be empty."""
    c = launched.cluster
    try:
        wait_status(c, "rc-logonly", "restarted", lambda s: container(s, "c").get("restartCount", 0) >= 1)
        assert logs(c, "rc-logonly", "--previous") == ""
    finally:
        _delete(c, "rc-logonly", wait=False)


def _orphan(env: Env) -> list[dict[str, Any]]:
    d = outdir(env.cluster, "rc-orphan")
    # each run's background process is a sh whose $0 names this cluster's pod and whose $1 names the run,
    # so the test finds it among the node's processes (/proc/*/cmdline: one machine, the local Slurm's node)
    script = ("if [ -e /out/first ]; then rm -f /out/kill; run=second; else touch /out/first /out/kill; run=first; fi; "
              "sh -c 'while :; do sleep 0.2; done' " + _orphan_mark(d) + " \"$run\" & exec sleep 300")
    app = c_("app", script, volumeMounts=OUT,
             livenessProbe={"exec": {"command": ["sh", "-c", "test ! -e /out/kill"]}, "initialDelaySeconds": 1,
                            "periodSeconds": 1, "failureThreshold": 1})
    return [pod("rc-orphan", [app], volumes=[host_volume(d)], restartPolicy="Always", terminationGracePeriodSeconds=2)]


def _orphan_mark(d: Path) -> str:
    return f"hpk-orphan-{zlib.crc32(str(d).encode()):08x}"


def _orphans(d: Path) -> list[str]:
    """The runs (first, second) whose background process lives now."""
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        if _orphan_mark(d).encode() in argv[:-2] and len(argv) >= 2:
            out.append(argv[-2].decode())  # the cmdline ends with NUL: the last field is empty
    return out


@launch(_orphan)
def test_a_restarted_container_leaves_no_process_behind(launched: Launched) -> None:
    """The first run starts a background process and is killed by its liveness probe; the second run
    passes the probe and starts one too. Only the running container's may still exist (Kubernetes stops
    every process of a container it kills): looked for among the node's processes, where the live run's
    shows that the search finds them, and a first run's would wait forever."""
    c = launched.cluster
    d = outdir(c, "rc-orphan")
    try:
        wait_status(c, "rc-orphan", "restarted and running", lambda s: container(s, "app").get("restartCount", 0) >= 1
                    and "running" in container(s, "app").get("state", {}))
        wait_for("the live run's background process", lambda: "second" in _orphans(d), timeout=30)
        # the first run was stopped before the second started; its processes die with it. A leftover
        # loops forever, so this wait fails on one (and passes at once without)
        wait_for("no process of the first run", lambda: "first" not in _orphans(d), timeout=10)
    finally:
        _delete(c, "rc-orphan", wait=False)


@launch(lambda env: [pod("rc-startup", [c_("app", "sleep 10; touch /tmp/started; exec sleep 300",
                                           startupProbe={"exec": {"command": ["test", "-e", "/tmp/started"]},
                                                         "periodSeconds": 1, "failureThreshold": 30})],
                         restartPolicy="Always", terminationGracePeriodSeconds=2)])
def test_exec_startup_probe_gates_started_and_ready(launched: Launched) -> None:
    """Running with started and ready False until the exec startup probe passes, then both True."""
    c = launched.cluster
    try:
        st = wait_status(c, "rc-startup", "started and ready", lambda s: container(s, "app").get("started") is True
                         and container(s, "app").get("ready") is True)
        assert conditions(st)["Ready"] == "True" and container(st, "app")["restartCount"] == 0, st
        seen = [s for s in launched.history.statuses("rc-startup", uid=launched.uid("rc-startup"))
                if "running" in container(s, "app").get("state", {})]
        assert (container(seen[0], "app")["started"], container(seen[0], "app")["ready"]) == (False, False), seen[0]
    finally:
        _delete(c, "rc-startup", wait=False)


@launch(lambda env: [pod("rc-nostart", [c_("app", "echo up; exec sleep 300",
                                           startupProbe={"exec": {"command": ["sh", "-c", "echo not started; exit 1"]},
                                                         "periodSeconds": 1, "failureThreshold": 2})],
                         terminationGracePeriodSeconds=2)])
def test_failing_exec_startup_probe_kills_the_container(launched: Launched) -> None:
    """restartPolicy Never: the container the startup probe gave up on is killed and the pod Failed;
    it never counted as started."""
    c = launched.cluster
    st = finished(c, "rc-nostart")["status"]
    assert st["phase"] == "Failed", st
    assert terminated(st, "app")["exitCode"] in (143, 137), st
    assert container(st, "app")["started"] is False
    assert logs(c, "rc-nostart") == "up\n"


def _tcp(name: str) -> dict[str, Any]:
    port = _port()
    server = c_("web", f"sleep 2; exec httpd -f -p {port} -h /tmp",
                readinessProbe={"tcpSocket": {"port": port}, "periodSeconds": 1, "timeoutSeconds": 5},
                livenessProbe={"tcpSocket": {"port": port}, "initialDelaySeconds": 5, "periodSeconds": 1,
                               "timeoutSeconds": 5, "failureThreshold": 1})
    return pod(name, [server], restartPolicy="Always", terminationGracePeriodSeconds=2)


def _check_tcp(launched: Launched, name: str) -> None:
    """Ready by the TCP readiness probe, and the TCP liveness probe passes: each try rewrites its
    output file in the pod directory as it starts, and with failureThreshold 1 a failed try stops
    the container and ends its probes, so a second try proves the first passed (no restart)."""
    c = launched.cluster
    try:
        wait_status(c, name, "Ready", lambda s: conditions(s).get("Ready") == "True")
        tries = c.root / "hpk-state" / "pods" / launched.uid(name) / "run" / "web.liveness.probe"
        wait_rewritten("the liveness probe's try", tries)
        st = c.pod(name)["status"]  # type: ignore[index]
        assert container(st, "web")["restartCount"] == 0 and container(st, "web")["ready"] is True, st
        assert st["podIP"], st
    finally:
        _delete(c, name, wait=False)


@launch(lambda env: [_tcp("rc-tcp-host")])
def test_tcp_probe_host_network(launched: Launched) -> None:
    _check_tcp(launched, "rc-tcp-host")


# ---------------------------------------------------------------------------- hooks and grace period
# test_lifecycle_slurm.py::test_hooks_in_order_and_the_grace_period_on_delete


def _grace_pod(env: Env, name: str, *, hooks: bool) -> dict[str, Any]:
    d = outdir(env.cluster, name)
    lifecycle = {"lifecycle": {"postStart": {"exec": {"command": note("poststart")}},
                               "preStop": {"exec": {"command": note("prestop")}}}} if hooks else {}
    polite = c_("polite", f"trap '{READ_UPTIME}; echo \"term $up\" >> /out/events; exit 0' TERM; "
                          "while :; do sleep 0.05; done", volumeMounts=OUT, **lifecycle)
    stubborn = c_("stubborn", f"trap '' TERM; while :; do {READ_UPTIME}; echo $up > /out/alive.tmp; "
                              "mv /out/alive.tmp /out/alive; sleep 0.05; done", volumeMounts=OUT)
    return pod(name, [polite, stubborn], volumes=[host_volume(d)], terminationGracePeriodSeconds=3)


@launch(lambda env: [_grace_pod(env, "rc-grace", hooks=True)])
def test_hooks_in_order_and_the_grace_period_on_delete(launched: Launched) -> None:
    """'polite' traps SIGTERM and exits, 'stubborn' ignores it and is killed when the 3 s are up:
    postStart, then on ``kubectl delete`` preStop, then SIGTERM; the object is gone once both ended
    (the kubelet's final delete), within the grace period plus the kubelet's margin."""
    c = launched.cluster
    d = outdir(c, "rc-grace")
    wait_status(c, "rc-grace", "both containers running", lambda s: _running(s, "polite", "stubborn"))
    assert _lines(d)[:1] == ["poststart"]
    r = _delete(c, "rc-grace")
    assert r.returncode == 0, r.stderr
    assert c.pod("rc-grace") is None
    seen = [ln.split()[0] for ln in _lines(d)]
    assert seen == ["poststart", "prestop", "term"], seen
    term = float(_lines(d)[2].split()[1])
    alive = float((d / "alive").read_text())
    assert alive - term >= 1.5, (term, alive)  # not killed with the SIGTERM (see the next test)
    # killed at the pod's 3 s, not the default 30 s (the container's own clock: load cannot stretch it)
    assert alive - term < 25, (term, alive)
    evs = events(c, "rc-grace", launched.uid("rc-grace"))
    assert [r for _, r, _ in evs].count("Killing") >= 1, evs


GRACE_PODS = [f"rc-grace-{i}" for i in range(3)]


@launch(lambda env: [_grace_pod(env, n, hooks=False) for n in GRACE_PODS])
def test_sigkill_waits_for_the_whole_grace_period(launched: Launched) -> None:
    """Three pods deleted together (each job's shell has its own phase of $SECONDS): in every one
    the container that ignores SIGTERM lives on for the whole terminationGracePeriodSeconds."""
    c = launched.cluster
    for n in GRACE_PODS:
        wait_status(c, n, "both containers running", lambda s: _running(s, "polite", "stubborn"))
    assert _delete(c, *GRACE_PODS).returncode == 0
    lived = {}
    for n in GRACE_PODS:
        d = outdir(c, n)
        lived[n] = round(float((d / "alive").read_text()) - float(_lines(d)[0].split()[1]), 2)
    assert all(v >= 2.95 for v in lived.values()), lived


# ---------------------------------------------------------------------------- delete, vanish, re-create
# test_run_slurm.py::test_delete_while_running_cancels_the_job


# terminationGracePeriodSeconds 5 here and below: the default 30 s would only lengthen the worst case
@launch(lambda env: [pod("rc-delete", [c_("sleeper", "echo up; sleep 300")], terminationGracePeriodSeconds=5)])
def test_delete_while_running_cancels_the_job(launched: Launched) -> None:
    """``kubectl delete`` of a running pod: a Killing event, the Slurm job ends CANCELLED, the
    object is gone (the kubelet's final delete)."""
    c = launched.cluster
    wait_status(c, "rc-delete", "running", lambda s: _running(s, "sleeper"))
    job_id = c.job_id("rc-delete")
    assert _delete(c, "rc-delete").returncode == 0
    assert c.pod("rc-delete") is None
    assert jobcomp_states(job_id) == ["CANCELLED"]
    assert "Killing" in {r for _, r, _ in events(c, "rc-delete", launched.uid("rc-delete"))}


# test_run_lifecycle.py::test_vanished_pod_directory_is_a_status_not_a_traceback
def _vanish(cluster: Cluster, launched: Launched, name: str) -> None:
    wait_status(cluster, name, "running", lambda s: _running(s, "c"))
    pod_dir = cluster.root / "hpk-state" / "pods" / launched.uid(name)
    assert pod_dir.is_dir()
    subprocess.run(["rm", "-rf", str(pod_dir)], check=True)


@launch(lambda env: [pod("rc-vanish", [c_("c", "echo hi; sleep 300")], terminationGracePeriodSeconds=5)])
def test_vanished_pod_directory_can_still_be_deleted(launched: Launched) -> None:
    """The pod's directory removed under a running job: the kubelet survives, a delete still ends
    the job and removes the object. (``hpkctl delete`` sees the directory is gone and cancels at
    once: CANCELLED. The kubelet sends its usual SIGTERM to the batch shell, whose stop sequence
    then fails on the missing directory: the job ends FAILED before the scancel. Either way it ends.)"""
    c = launched.cluster
    _vanish(c, launched, "rc-vanish")
    job_id = c.job_id("rc-vanish")
    wait_status(c, "rc-vanish", "PodDirectoryMissing (status rounds over the missing directory)",
                lambda s: "PodDirectoryMissing" in s.get("reason", "") + s.get("message", ""), timeout=30)
    assert _delete(c, "rc-vanish").returncode == 0
    assert c.pod("rc-vanish") is None
    assert jobcomp_states(job_id)[-1:] in (["CANCELLED"], ["FAILED"])
    assert c.node_ready()


@launch(lambda env: [pod("rc-vanish-status", [c_("c", "echo hi; sleep 300")], terminationGracePeriodSeconds=5)])
def test_vanished_pod_directory_is_reported(launched: Launched) -> None:
    c = launched.cluster
    try:
        _vanish(c, launched, "rc-vanish-status")

        def missing() -> dict[str, Any] | None:  # found by the status audit ([kubelet] status_audit, 2 s here)
            st = c.pod("rc-vanish-status")["status"]  # type: ignore[index]
            return st if "PodDirectoryMissing" in st.get("reason", "") + st.get("message", "") else None

        wait_for("the pod's status to say PodDirectoryMissing", missing, timeout=30)
        after = launched.history.statuses("rc-vanish-status", uid=launched.uid("rc-vanish-status"))
        ran = next(i for i, s in enumerate(after) if "running" in container(s, "c").get("state", {}))
        assert not [s for s in after[ran:] if "waiting" in container(s, "c").get("state", {})], after[-1]
    finally:
        _delete(c, "rc-vanish-status", wait=False)


# test_run_lifecycle.py::test_rerun_is_refused_until_deleted_or_replaced. Through the API a name is
# taken while its pod exists (409 AlreadyExists); "--replace" is delete + create.
@launch(lambda env: [pod("rc-rerun", [c_("main", "echo slow; sleep 300")], terminationGracePeriodSeconds=5)])
def test_replacing_a_running_pod_by_delete_and_create(launched: Launched) -> None:
    """A second pod of the same name is refused while the first exists; once the running one is
    deleted (its job CANCELLED) the new one (another uid) runs as a job of its own and its log is
    its own."""
    c = launched.cluster
    wait_status(c, "rc-rerun", "running", lambda s: _running(s, "main"))
    old_job, old_uid = c.job_id("rc-rerun"), launched.uid("rc-rerun")
    code, body = c.api.post("/api/v1/namespaces/default/pods", pod("rc-rerun", [c_("main", "echo second")]))
    assert (code, body["reason"]) == (409, "AlreadyExists"), body
    assert _delete(c, "rc-rerun").returncode == 0
    assert jobcomp_states(old_job) == ["CANCELLED"]
    new = c.create(pod("rc-rerun", [c_("main", "echo second")]))
    try:
        st = finished(c, "rc-rerun")["status"]
        assert st["phase"] == "Succeeded", st
        assert new["metadata"]["uid"] != old_uid and c.job_id("rc-rerun") not in ("", old_job)
        assert logs(c, "rc-rerun") == "second\n"
        assert jobs_of_uid(new["metadata"]["uid"]) == [c.job_id("rc-rerun")]
    finally:
        _delete(c, "rc-rerun", wait=False)


# test_run_slurm.py::test_detached_run_status_and_logs_follow
def _follow(env: Env) -> list[dict[str, Any]]:
    d = outdir(env.cluster, "rc-follow")
    script = "echo waiting; while [ ! -e /out/go ]; do sleep 0.1; done; for i in 1 2 3; do echo line $i; sleep 0.5; done"
    return [pod("rc-follow", [c_("counter", script, volumeMounts=OUT)], volumes=[host_volume(d)])]


@launch(_follow)
def test_logs_follow_until_the_container_ends(launched: Launched) -> None:
    """``kubectl logs -f`` started while the container waits: it streams every line as written and
    returns when the container ends."""
    c = launched.cluster
    wait_status(c, "rc-follow", "running", lambda s: _running(s, "counter"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(c.api.state), "KUBECONFIG": str(c.api.kubeconfig)}
    from tests.support.kubeapi import KUBECTL
    proc = subprocess.Popen([str(KUBECTL), "logs", "-f", "rc-follow"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        # the line written before the container waits: kubectl is following now (no time guessed), and
        # the lines after it are written only once the test says go, so they can only come by streaming
        assert select.select([proc.stdout], [], [], 60)[0], "kubectl logs -f printed nothing in 60 s"
        assert proc.stdout.readline() == "waiting\n"  # type: ignore[union-attr]
        (outdir(c, "rc-follow") / "go").touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, out) == (0, "line 1\nline 2\nline 3\n")
    assert finished(c, "rc-follow", timeout=30)["status"]["phase"] == "Succeeded"


# ============================================================================ short cases
# test_run_slurm.py


@launch(lambda env: [pod("rc-hello", [c_("hello", "echo hello world")])])
def test_hello_world(launched: Launched) -> None:
    c = launched.cluster
    st = finished(c, "rc-hello")["status"]
    assert st["phase"] == "Succeeded", st
    assert (terminated(st, "hello")["exitCode"], terminated(st, "hello")["reason"]) == (0, "Completed")
    assert logs(c, "rc-hello") == "hello world\n"


QUOTES_SCRIPT = (
    "cat <<'EOF' > /tmp/script.sh\n"
    "echo \"single 'quotes', \\\"double\\\", `backticks`, $(dollar) and \\\\backslash\"\n"
    "EOF\n"
    "cat /tmp/script.sh\n"
    "echo 'it'\"'\"'s done' \"$0\" \"$1\"\n"
)


@launch(lambda env: [pod("rc-quotes", [{"name": "quotes", "image": BUSYBOX, "command": ["/bin/sh", "-c"],
                                        "args": [QUOTES_SCRIPT, "arg0 with spaces",
                                                 "$(not expanded) `nor this` ${HOME}"]}])])
def test_scripting_quotes_and_heredocs(launched: Launched) -> None:
    """A heredoc script in ``args`` with every kind of quoting; ``$0``/``$1`` from further args.
    ``$(not expanded)`` is a Kubernetes variable reference to a name that is not defined (it
    contains a space: not even a valid one), so it stays as written."""
    c = launched.cluster
    st = finished(c, "rc-quotes")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "rc-quotes").splitlines() == [
        "echo \"single 'quotes', \\\"double\\\", `backticks`, $(dollar) and \\\\backslash\"",
        "it's done arg0 with spaces $(not expanded) `nor this` ${HOME}",
    ]


@launch(lambda env: [
    configmap("rc-settings", {"LEVEL": "debug", "MULTI": "line one\nline 'two'"}),
    secret("rc-creds", {"TOKEN": b"s3cr$t `x`"}),
    pod("rc-env", [c_("env", 'printf "%s|" "$PLAIN" "$LVL" "$TOK" "$COMBINED" "$CFG_MULTI"; echo; '
                             'env | grep -c -e SLURM_ -e HPK_ || true',
                      env=[{"name": "PLAIN", "value": "a \"b\" 'c'"},
                           {"name": "LVL", "valueFrom": {"configMapKeyRef": {"name": "rc-settings", "key": "LEVEL"}}},
                           {"name": "TOK", "valueFrom": {"secretKeyRef": {"name": "rc-creds", "key": "TOKEN"}}},
                           {"name": "COMBINED", "value": "$(LVL)-$(PLAIN)"}],
                      envFrom=[{"prefix": "CFG_", "configMapRef": {"name": "rc-settings"}}])])])
def test_env_from_values_configmaps_and_secrets(launched: Launched) -> None:
    """Values, ConfigMap and Secret keys, ``$(VAR)`` composition, a prefixed envFrom; no Slurm or
    hpk variable of the job leaks into the container."""
    c = launched.cluster
    st = finished(c, "rc-env")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "rc-env") == "a \"b\" 'c'|debug|s3cr$t `x`|debug-a \"b\" 'c'|line one\nline 'two'|\n0\n"


@launch(lambda env: [pod("rc-init", [c_("main", "cat /work/a /work/b", volumeMounts=[{"name": "work", "mountPath": "/work"}])],
                         initContainers=[c_("first", "echo one > /work/a",
                                            volumeMounts=[{"name": "work", "mountPath": "/work"}]),
                                         c_("second", "test -s /work/a && echo two > /work/b",
                                            volumeMounts=[{"name": "work", "mountPath": "/work"}])],
                         volumes=[{"name": "work", "emptyDir": {}}])])
def test_init_containers_pass_data_through_an_empty_dir(launched: Launched) -> None:
    c = launched.cluster
    st = finished(c, "rc-init")["status"]
    assert st["phase"] == "Succeeded", st
    assert [(s["name"], s["state"]["terminated"]["reason"]) for s in st["initContainerStatuses"]] == [
        ("first", "Completed"), ("second", "Completed")]
    assert logs(c, "rc-init") == "one\ntwo\n"


@launch(lambda env: [pod("rc-initfail", [c_("main", "echo must not run")],
                         initContainers=[c_("broken", "echo broken; exit 4")])])
def test_failed_init_container_fails_the_pod(launched: Launched) -> None:
    """restartPolicy Never: the pod is Failed, Initialized False (ContainersNotInitialized, naming the
    init container, as the real kubelet says), the init container terminated with exit code 4, the
    main container never started (its log is refused by the API server: waiting to start)."""
    c = launched.cluster
    st = finished(c, "rc-initfail")["status"]
    assert (st["phase"], st["reason"], st["message"]) == (
        "Failed", "InitContainerFailed", "init container broken exited with code 4"), st
    init = terminated(st, "broken", init=True)
    assert (init["exitCode"], init["reason"]) == (4, "Error"), st
    cond = next(x for x in st["conditions"] if x["type"] == "Initialized")
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "ContainersNotInitialized", "containers with incomplete status: [broken]"), st
    main = container(st, "main")
    assert "waiting" in main["state"] and main["restartCount"] == 0, st
    assert logs(c, "rc-initfail", "-c", "broken") == "broken\n"
    r = c.kubectl("logs", "rc-initfail", "-c", "main", check=False)
    assert r.returncode != 0 and "BadRequest" in r.stderr and "is waiting to start" in r.stderr, r.stderr


def _pair(env: Env) -> list[dict[str, Any]]:
    port, tag = _port(), f"shm-{random.randint(0, 10**6)}"
    server = c_("server", f"echo shared-{tag} > /dev/shm/{tag}; echo pong | nc -l -p {port} 127.0.0.1")
    client = c_("client", f"for i in $(seq 100); do out=$(echo ping | nc 127.0.0.1 {port} 2>/dev/null) "
                          f"&& [ -n \"$out\" ] && break; sleep 0.1; done; echo \"got $out\"; cat /dev/shm/{tag}; "
                          f"rm -f /dev/shm/{tag}")
    return [pod("rc-pair", [server, client], annotations={"test/tag": tag})]


@launch(_pair)
def test_two_containers_talk_over_localhost_and_share_dev_shm(launched: Launched) -> None:
    c = launched.cluster
    p = finished(c, "rc-pair")
    assert p["status"]["phase"] == "Succeeded", p["status"]
    tag = p["metadata"]["annotations"]["test/tag"]
    assert logs(c, "rc-pair", "-c", "client") == f"got pong\nshared-{tag}\n"
    assert logs(c, "rc-pair", "-c", "server") == "ping\n"


def _host_path(env: Env) -> list[dict[str, Any]]:
    d = outdir(env.cluster, "rc-hostpath-data")
    (d / "input.txt").write_text("from the host\n")
    (d / "input.txt").chmod(0o644)
    d.chmod(0o755)
    mounts = [{"name": "d", "mountPath": "/data"}]
    if env.params["case"] == "present":
        return [pod("rc-hostpath-present", [c_("main", "cat /data/input.txt", volumeMounts=mounts)],
                    volumes=[{"name": "d", "hostPath": {"path": str(d), "type": "Directory"}}])]
    return [pod("rc-hostpath-missing", [c_("main", "echo must not run", volumeMounts=mounts)],
                volumes=[{"name": "d", "hostPath": {"path": str(d / "nope"), "type": "Directory"}}])]


@pytest.mark.parametrize("case", ["present", "missing"])
@launch(_host_path)
def test_host_path_and_missing_host_path(launched: Launched, case: str) -> None:
    """A hostPath directory is mounted. One that does not exist (type Directory): the pod is Failed
    with reason HostPathCheckFailed naming the path, its container never started. (The real
    kubelet keeps such a pod Pending with FailedMount events and retries the mount; hpk fails it,
    as ``hpkctl run`` does: the job would hold its allocation waiting for nothing.)"""
    c = launched.cluster
    name = f"rc-hostpath-{case}"
    st = finished(c, name)["status"]
    if case == "present":
        assert st["phase"] == "Succeeded", st
        assert logs(c, name) == "from the host\n"
        return
    assert (st["phase"], st["reason"]) == ("Failed", "HostPathCheckFailed"), st
    assert str(outdir(c, "rc-hostpath-data") / "nope") in st["message"], st
    assert "waiting" in container(st, "main")["state"], st


@launch(lambda env: [pod("rc-fail", [c_("main", "echo about to fail; exit 3")])])
def test_failing_container_gives_its_exit_code_and_reason(launched: Launched) -> None:
    c = launched.cluster
    st = finished(c, "rc-fail")["status"]
    assert (st["phase"], st["reason"], st["message"]) == ("Failed", "Error", "container main exited with code 3"), st
    assert (terminated(st, "main")["exitCode"], terminated(st, "main")["reason"]) == (3, "Error")
    assert logs(c, "rc-fail") == "about to fail\n"
    assert ("Warning", "Failed", "Error: container main exited with code 3") in events(c, "rc-fail",
                                                                                        launched.uid("rc-fail"))


@launch(lambda env: [pod("rc-onfailure", [c_("main", "if [ -e /state/once ]; then echo second run; else touch /state/once; "
                                                     "echo first run; exit 1; fi",
                                             volumeMounts=[{"name": "s", "mountPath": "/state"}])],
                         restartPolicy="OnFailure", volumes=[{"name": "s", "emptyDir": {}}])])
def test_restart_policy_on_failure_restarts_until_success(launched: Launched) -> None:
    """Exit 1, restarted (the emptyDir survives), exit 0: Succeeded, restartCount 1, lastState the
    first run (exit 1, Error), ``--previous`` its log."""
    c = launched.cluster
    st = finished(c, "rc-onfailure")["status"]
    assert st["phase"] == "Succeeded", st
    main = container(st, "main")
    assert main["restartCount"] == 1, st
    assert (main["lastState"]["terminated"]["exitCode"], main["lastState"]["terminated"]["reason"]) == (1, "Error")
    assert terminated(st, "main")["exitCode"] == 0
    assert logs(c, "rc-onfailure") == "second run\n"
    assert logs(c, "rc-onfailure", "--previous") == "first run\n"


@launch(lambda env: [pod("rc-oom", [c_("hog", "exec dd if=/dev/zero of=/dev/null bs=300M count=1",
                                       resources={"limits": {"memory": "64Mi"}})])])
def test_memory_over_the_limit_is_oom_killed(launched: Launched) -> None:
    """As the real kubelet reports it: the container terminated with exit code 137, reason OOMKilled."""
    c = launched.cluster
    st = finished(c, "rc-oom")["status"]
    assert (st["phase"], st["reason"]) == ("Failed", "OOMKilled"), st
    assert (terminated(st, "hog")["exitCode"], terminated(st, "hog")["reason"]) == (137, "OOMKilled"), st


# test_run_slurm.py::test_pod_from_kubectl_get_yaml_runs_on_one_and_several_nodes (one node: the
# kubelet's cluster has one)
def _api_shape(env: Env) -> list[dict[str, Any]]:
    doc = yaml.safe_load((PODS / "api-server-shape.yaml").read_text())
    doc["metadata"]["name"] = "rc-apishape"
    doc["metadata"].pop("resourceVersion")  # see the test
    doc["spec"]["restartPolicy"] = "Never"
    doc["spec"]["containers"][0].update(image=BUSYBOX, command=["sh", "-c", "cat $SA/namespace; echo; ls $SA"],
                                        env=[{"name": "SA", "value": SA}])
    return [doc]


@launch(_api_shape)
def test_pod_from_kubectl_get_yaml_runs(launched: Launched) -> None:
    """A pod as ``kubectl get -o yaml`` dumped it (uid, managedFields, defaults, its own
    kube-api-access volume, status) is accepted and runs. The API server refuses to create an
    object that carries a resourceVersion (which ``hpkctl run`` ignores), so it is dropped, as one
    must for ``kubectl create -f`` of a dump."""
    c = launched.cluster
    doc = yaml.safe_load((PODS / "api-server-shape.yaml").read_text())
    doc["metadata"]["name"] = "rc-apishape-rv"
    code, body = c.api.post("/api/v1/namespaces/default/pods", doc)
    assert (code, body.get("message")) == (400, "resourceVersion should not be set on objects to be created"), body
    st = finished(c, "rc-apishape")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "rc-apishape") == "default\nca.crt\nnamespace\ntoken\n"


# ---------------------------------------------------------------------------- test_run_lifecycle.py


def test_two_concurrent_creates_of_one_name_give_one_pod_and_one_job(launched: Launched) -> None:
    """Two clients create the same pod at once: one 201, one 409 AlreadyExists; one Slurm job."""
    c = launched.cluster
    results: list[int] = []

    def create() -> None:
        results.append(c.api.post("/api/v1/namespaces/default/pods", pod("rc-twice", [c_("main", "echo ran; sleep 1")]))[0])

    threads = [threading.Thread(target=create) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert sorted(results) == [201, 409]
        p = finished(c, "rc-twice")
        assert p["status"]["phase"] == "Succeeded", p["status"]
        assert logs(c, "rc-twice") == "ran\n"
        assert jobs_of_uid(p["metadata"]["uid"]) == [c.job_id("rc-twice")]
    finally:
        _delete(c, "rc-twice", wait=False)


@launch(lambda env: [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rc-team"}},
                     pod("rc-inteam", [c_("main", f"echo in team; cat {SA}/namespace")], namespace="rc-team")])
def test_namespaces_as_kubectl_has_them(launched: Launched) -> None:
    """A pod of another namespace runs there (its service-account namespace file says so), is listed
    there and not in default, and its log is read with ``-n``."""
    c = launched.cluster
    st = finished(c, "rc-inteam", namespace="rc-team")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "rc-inteam", namespace="rc-team") == "in team\nrc-team"
    assert "rc-inteam" in c.kubectl("get", "pods", "-n", "rc-team").stdout
    r = c.kubectl("get", "pod", "rc-inteam", check=False)
    assert r.returncode != 0 and "NotFound" in r.stderr, r.stderr
    assert "rc-team/rc-inteam" in {f"{e['involvedObject']['namespace']}/{e['involvedObject']['name']}"
                                   for e in c.events("rc-inteam", "rc-team")}


def _over(env: Env) -> dict[str, Any]:
    cpus, mem_mib = node_capacity()
    if env.params["what"] == "cpu":
        return {"requests": {"cpu": str(cpus * 4)}}
    return {"limits": {"memory": f"{mem_mib * 50}Mi"}}


@pytest.mark.parametrize("what", [
    "cpu",
    "memory"])
@launch(lambda env: [pod(f"rc-huge-{env.params['what']}", [c_("main", "echo never", resources=_over(env))])])
def test_request_no_node_can_hold_fails(launched: Launched, what: str) -> None:
    """4x the CPUs / 50x the memory of the biggest node (sinfo): the pod is Failed with the reason
    and its job gone (hpkctl run: exit 125, the job cancelled, or sbatch's refusal)."""
    c = launched.cluster
    name = f"rc-huge-{what}"
    wait_status(c, name, "Slurm's verdict", lambda s: s.get("phase") == "Failed"
                or "PartitionConfig" in s.get("message", ""), timeout=60)
    st = wait_status(c, name, "Failed", lambda s: s.get("phase") == "Failed", timeout=10)
    if what == "memory":
        assert st["reason"] == "SlurmRejected" and "sbatch refused the job" in st["message"], st
        assert not c.job_id(name)
    else:
        assert "PartitionConfig" in st.get("reason", "") + st.get("message", ""), st
        assert jobcomp_states(c.job_id(name)) == ["CANCELLED"]


EXITS = {"exit7": (["sh", "-c", "exit 7"], 7), "notfound": (["/no/such/program"], 127)}


@pytest.mark.parametrize("case", [
    "exit7",
    "notfound"])
@launch(lambda env: [pod(f"rc-code-{env.params['case']}", [{"name": "main", "image": BUSYBOX,
                                                            "command": EXITS[env.params["case"]][0]}])])
def test_exit_statuses_cannot_be_confused(launched: Launched, case: str) -> None:
    """The container's own exit code is the terminated state's exitCode and in the pod message."""
    c = launched.cluster
    name, code = f"rc-code-{case}", EXITS[case][1]
    st = finished(c, name)["status"]
    assert st["phase"] == "Failed", st
    assert terminated(st, "main")["exitCode"] == code, st
    assert st["message"] == f"container main exited with code {code}", st


@launch(lambda env: [pod("rc-private", [c_("main", "true")])])
def test_state_directories_and_records_are_private(launched: Launched) -> None:
    """The pod's directory (its volumes, env files, logs) is 0700 and the kubelet's records (its log)
    0600 in a 0700 directory, owned by the user the kubelet runs as."""
    c = launched.cluster
    finished(c, "rc-private")
    uid = launched.uid("rc-private")
    hpk = pwd.getpwnam(HPK_USER).pw_uid
    pod_dir = c.root / "hpk-state" / "pods" / uid
    node = c.root / "hpk-state" / "kubelet" / "hpk"
    assert uid in (node / "records.log").read_text()
    for path, mode in ((pod_dir, 0o700), (node, 0o700), (node / "records.log", 0o600)):
        st = path.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (mode, hpk), path


@launch(lambda env: [pod("rc-done", [c_("main", "echo done")])])
def test_deleting_a_finished_pod_kills_nothing(launched: Launched) -> None:
    c = launched.cluster
    assert finished(c, "rc-done")["status"]["phase"] == "Succeeded"
    uid = launched.uid("rc-done")
    assert _delete(c, "rc-done").returncode == 0
    # the kubelet logs the stop after it decided (and queued a Killing, if it had one), "job N cancelled"
    # if it cancelled one
    stopped = re.compile(rf"pod \S*rc-done \(uid {uid}\) stopped(.*)")
    line = wait_for("the kubelet to stop rc-done", lambda: stopped.search(c.log("kubelet")), timeout=60)
    assert "cancelled" not in line.group(1), line.group(0)
    # its events go out in order on one thread: a later pod's Submitted event means any Killing is out too
    after = c.create(pod("rc-done-after", [c_("main", "true")]))["metadata"]["uid"]
    try:
        wait_for("a later pod's Submitted event", lambda: any(r == "Submitted" for _, r, _ in
                                                             events(c, "rc-done-after", after)), timeout=60)
    finally:
        _delete(c, "rc-done-after", wait=False)
    assert "Killing" not in {r for _, r, _ in events(c, "rc-done", uid)}


# ---------------------------------------------------------------------------- test_lifecycle_slurm.py


def _sidecar(env: Env) -> list[dict[str, Any]]:
    d = outdir(env.cluster, "rc-sidecar")
    side = c_("side", 'echo side-up >> /out/events; trap \'echo side-term >> /out/events; exit 0\' TERM; '
                      'while :; do sleep 0.1; done', volumeMounts=OUT, restartPolicy="Always",
              lifecycle={"preStop": {"exec": {"command": note("side-prestop")}}})
    main = c_("main", "sleep 1; echo main >> /out/events; echo done", volumeMounts=OUT)
    return [pod("rc-sidecar", [main], initContainers=[side], volumes=[host_volume(d)], terminationGracePeriodSeconds=5)]


@launch(_sidecar)
def test_job_pod_with_a_native_sidecar_completes(launched: Launched) -> None:
    """An init container with restartPolicy Always runs beside the main container and is stopped
    (preStop, SIGTERM) once the main container ended: the pod Succeeded, the sidecar terminated with
    its own exit code 0."""
    c = launched.cluster
    st = finished(c, "rc-sidecar")["status"]
    assert st["phase"] == "Succeeded", st
    assert terminated(st, "side", init=True)["exitCode"] == 0, st
    assert logs(c, "rc-sidecar", "-c", "main") == "done\n"
    assert _lines(outdir(c, "rc-sidecar")) == ["side-up", "main", "side-prestop", "side-term"]


def _crashing_sidecar(env: Env) -> list[dict[str, Any]]:
    d = outdir(env.cluster, "rc-side-crash")
    side = c_("side", "echo up >> /out/side; sleep 1; exit 1", volumeMounts=OUT, restartPolicy="Always")
    main = c_("main", "i=0; while [ \"$(wc -l < /out/side)\" -lt 2 ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i+1)); done; "
                      "wc -l < /out/side", volumeMounts=OUT)
    return [pod("rc-side-crash", [main], initContainers=[side], volumes=[host_volume(d)],
                terminationGracePeriodSeconds=2)]


@launch(_crashing_sidecar)
def test_a_crashing_native_sidecar_never_freezes_the_pods_status(launched: Launched) -> None:
    """Issue 22.9: in a Never pod, a sidecar that exits 1 is restarted (restartPolicy Always), which
    the API server allows for a restartable init container: the status goes on being reported, the
    sidecar's restarts show, and the pod ends Succeeded once its main container did (it waits for the
    sidecar's second start)."""
    c = launched.cluster
    st = finished(c, "rc-side-crash", timeout=120)["status"]
    assert st["phase"] == "Succeeded", st
    assert container(st, "side", init=True)["restartCount"] >= 1, st
    assert terminated(st, "main")["exitCode"] == 0, st
    assert "not reporting a terminated container as running again" not in c.log("kubelet")


@launch(lambda env: [pod("rc-msg", [
    c_("file", "printf 'bye from the file\\n' > /tmp/term; echo not this", terminationMessagePath="/tmp/term"),
    c_("log", "i=0; while [ $i -lt 100 ]; do echo line $i; i=$((i+1)); done; exit 2",
       terminationMessagePolicy="FallbackToLogsOnError"),
    c_("hook", "sleep 30", lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "echo no way; exit 1"]}}})])])
def test_termination_messages_and_a_failed_post_start_hook(launched: Launched) -> None:
    """terminated.message from terminationMessagePath; FallbackToLogsOnError: the log's last 80
    lines; a failed postStart hook kills the container (reason FailedPostStartHook, the hook's
    output in the message)."""
    c = launched.cluster
    st = finished(c, "rc-msg")["status"]
    assert st["phase"] == "Failed", st
    assert terminated(st, "file")["message"] == "bye from the file\n", st
    tail = terminated(st, "log")["message"]
    assert tail == "".join(f"line {i}\n" for i in range(20, 100)), tail
    hook = terminated(st, "hook")
    assert hook["reason"] == "FailedPostStartHook" and "no way" in hook["message"], hook
    assert logs(c, "rc-msg", "-c", "file") == "not this\n"


# ============================================================================ slow, self-ending
# Their pods are created first (``early``) and their tests come last: the wait overlaps the rest.
# test_lifecycle_slurm.py::test_the_time_limit_runs_the_stop_sequence


def _time_limit(env: Env) -> list[dict[str, Any]]:
    d = outdir(env.cluster, "rc-timelimit")
    main = c_("main", "trap 'echo term >> /out/events; exit 0' TERM; while :; do sleep 0.1; done", volumeMounts=OUT,
              lifecycle={"preStop": {"exec": {"command": note("prestop")}}})
    return [pod("rc-timelimit", [main], volumes=[host_volume(d)], terminationGracePeriodSeconds=2,
                annotations={"slurm-job.hpk.io/flags": "--time=1"})]


@launch(_time_limit, early=True)
def test_the_time_limit_runs_the_stop_sequence(launched: Launched) -> None:
    """Slurm's time limit (a flags annotation: the shortest is a minute; the TERM comes up to 60 s
    early): preStop, then SIGTERM; the container's own exit (0, its TERM trap) is recorded; the pod
    is Failed with reason DeadlineExceeded."""
    c = launched.cluster
    st = finished(c, "rc-timelimit", timeout=200)["status"]
    assert (st["phase"], st["reason"]) == ("Failed", "DeadlineExceeded"), st
    assert terminated(st, "main")["exitCode"] == 0, st
    assert _lines(outdir(c, "rc-timelimit")) == ["prestop", "term"]


# test_run_slurm.py::test_time_limit_is_deadline_exceeded
@launch(lambda env: [pod("rc-deadline", [c_("sleeper", "echo started; sleep 600")], activeDeadlineSeconds=8)],
        early=True)
def test_active_deadline_is_deadline_exceeded(launched: Launched) -> None:
    """activeDeadlineSeconds is kept to the second, not rounded to Slurm's whole minutes: the pod is
    stopped when it has passed since the pod started (never before), with its stop sequence, and is
    Failed with reason DeadlineExceeded and the real kubelet's message; the container stopped by
    SIGTERM (143)."""
    c = launched.cluster
    st = finished(c, "rc-deadline", timeout=200)["status"]
    assert (st["phase"], st["reason"]) == ("Failed", "DeadlineExceeded"), st
    assert st["message"] == "Pod was active on the node longer than the specified deadline", st
    sleeper = terminated(st, "sleeper")
    assert sleeper["exitCode"] == 143, st
    assert logs(c, "rc-deadline") == "started\n"
    ran = _seconds(sleeper["finishedAt"]) - _seconds(st["startTime"])
    assert 8 - 1 <= ran <= 8 + 20, (ran, st)  # RFC 3339 seconds; a minute off before the runtime's timer


def _seconds(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


# ============================================================================ other site profiles
# test_run_slurm.py::test_own_network_namespace_mode


def _netns(env: Env) -> list[dict[str, Any]]:
    port = _port()
    server = c_("server", f"echo pong | nc -l -p {port} 127.0.0.1")
    client = c_("client", f"for i in $(seq 100); do out=$(nc 127.0.0.1 {port} </dev/null 2>/dev/null) "
                          f"&& [ -n \"$out\" ] && break; sleep 0.1; done; echo \"got $out\"; "
                          "echo links=$(ip -o link | wc -l)")
    return [pod("rc-netns", [server, client])]


@launch(_netns)
def test_own_network_namespace_mode(cni_launched: Launched) -> None:
    """network = "cni": the containers of a pod share a network namespace of their own (loopback only)."""
    c = cni_launched.cluster
    st = finished(c, "rc-netns")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "rc-netns", "-c", "client") == "got pong\nlinks=1\n"


@launch(lambda env: [_tcp("rc-tcp-cni")])
def test_tcp_probe_own_network_namespace(cni_launched: Launched) -> None:
    _check_tcp(cni_launched, "rc-tcp-cni")


# test_lifecycle_slurm.py::test_a_site_that_binds_dev_termination_log_collects_the_documentations_message
def _termlog(name: str) -> list[dict[str, Any]]:
    """The documentation's termination-message example ("Determine the Reason for Pod Failure", sleep
    shortened: the API stand-in defaults terminationMessagePath to /dev/termination-log, as the API
    server does), a message longer than the kubelet's 4096 bytes, and a path of the pod's own."""
    docs = {"name": "termination-demo-container", "image": BUSYBOX, "command": ["/bin/sh"],
            "args": ["-c", "sleep 1 && echo Sleep expired > /dev/termination-log"]}
    big = c_("big", "head -c 5000 /dev/zero | tr '\\0' a > /dev/termination-log; "
                    "echo END >> /dev/termination-log; exit 1")
    custom = c_("custom", "echo from elsewhere > /termination/msg", terminationMessagePath="/termination/msg")
    return [pod(name, [docs, big, custom])]


def _check_termlog(launched: Launched, name: str) -> None:
    if not DEV_TERMLOG.exists():
        missing("a host file /dev/termination-log", fix="run the tests as root, as .ci/run does")
    st = finished(launched.cluster, name)["status"]
    assert st["phase"] == "Failed", st
    assert terminated(st, "termination-demo-container")["message"] == "Sleep expired\n", st
    assert terminated(st, "big")["message"] == "a" * 4092 + "END\n", st  # the last 4096 bytes, as the kubelet reads
    assert terminated(st, "custom")["message"] == "from elsewhere\n", st
    assert DEV_TERMLOG.stat().st_size == 0  # each container wrote its own file, bound over the node's


@launch(lambda env: _termlog("rc-termlog"))
def test_the_default_termination_message_path_at_a_site_that_binds_it(offline_launched: Launched) -> None:
    """Issue 22.8, host network mode: [apptainer] binds names the node's /dev/termination-log, which
    Apptainer adds to its minimal /dev, so the job binds each container's message file over it."""
    _check_termlog(offline_launched, "rc-termlog")


@launch(lambda env: _termlog("rc-termlog-cni"))
def test_the_default_termination_message_path_at_a_site_that_binds_it_in_cni_mode(cni_launched: Launched) -> None:
    """Issue 22.8, cni mode: the same through the pod's parent container (which has the node's /dev)."""
    _check_termlog(cni_launched, "rc-termlog-cni")


# test_run_slurm.py::test_pull_before_submit_with_a_user_profile
@launch(lambda env: [pod("rc-offline", [c_("main", "echo pulled at submit")])])
def test_pull_before_submit(offline_launched: Launched) -> None:
    """pull = "submit" (offline compute nodes): the kubelet pulls the image on its host before it
    submits the job, with Pulling and Pulled events; the SIF in the profile's cache belongs to the
    kubelet's user; the job runs it."""
    c = offline_launched.cluster
    st = finished(c, "rc-offline")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "rc-offline") == "pulled at submit\n"
    evs = [(r, m) for _, r, m in events(c, "rc-offline", offline_launched.uid("rc-offline"))]
    source = "docker://docker.io/library/busybox:1.36"
    assert ("Pulling", f"Pulling image(s) {source}") in evs and ("Pulled", f"Image(s) pulled: {source}") in evs, evs
    assert [r for r, _ in evs].index("Pulled") < [r for r, _ in evs].index("Started"), evs
    sifs = list((c.root / "images").glob("*busybox*.sif"))
    assert sifs and all(p.stat().st_uid == pwd.getpwnam(HPK_USER).pw_uid for p in sifs), sifs


@launch(lambda env: [pod("rc-noimage", [c_("main", "true", image="no-such-image:1.0")])])
def test_unknown_image_backs_off_pending(offline_launched: Launched) -> None:
    """An image the registry does not have, pulled by the kubelet: the pod stays Pending with its
    container waiting in ImagePullBackOff (after ErrImagePull), and Failed Warning events give the
    registry's answer; no Slurm job."""
    c = offline_launched.cluster
    uid = offline_launched.uid("rc-noimage")
    st = wait_status(c, "rc-noimage", "ImagePullBackOff", lambda s: (container(s, "main").get("state") or {}).get(
        "waiting", {}).get("reason") == "ImagePullBackOff", timeout=60)
    assert st["phase"] == "Pending", st
    assert "manifest unknown" in container(st, "main")["state"]["waiting"]["message"], st
    reasons = [(container(s, "main").get("state") or {}).get("waiting", {}).get("reason")
               for s in offline_launched.history.statuses("rc-noimage", uid=uid)]
    assert "ErrImagePull" in reasons and reasons.index("ErrImagePull") < reasons.index("ImagePullBackOff"), reasons
    assert any(t == "Warning" and r == "Failed" and "no-such-image" in m for t, r, m in events(c, "rc-noimage", uid))
    assert not c.job_id("rc-noimage")


@launch(lambda env: [pod("rc-offline-cni", [c_("main", "echo pulled at submit")])])
def test_pull_before_submit_in_own_network_namespace_mode(offline_cni_launched: Launched) -> None:
    c = offline_cni_launched.cluster
    st = finished(c, "rc-offline-cni")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "rc-offline-cni") == "pulled at submit\n"


# ---------------------------------------------------------------------------- issue 22: fidelity
# tests/integration/test_run_fidelity_slurm.py, through the kubelet


def _hostname(name: str) -> dict[str, Any]:
    return pod(name, [c_("app", "hostname; cat /etc/hostname")], hostname="web-0", subdomain="nginx")


@launch(lambda env: [_hostname("rc-hostname")])
def test_hostname_is_the_pods_in_host_network_mode(launched: Launched) -> None:
    """set_hostname: spec.hostname in host network mode too (Apptainer's --hostname, its own UTS namespace)."""
    c = launched.cluster
    assert finished(c, "rc-hostname")["status"]["phase"] == "Succeeded"
    assert logs(c, "rc-hostname") == "web-0\nweb-0\n"


@launch(lambda env: [_hostname("rc-hostname-cni")])
def test_hostname_is_the_pods_in_own_network_namespace_mode(cni_launched: Launched) -> None:
    c = cni_launched.cluster
    assert finished(c, "rc-hostname-cni")["status"]["phase"] == "Succeeded"
    assert logs(c, "rc-hostname-cni") == "web-0\nweb-0\n"


@launch(lambda env: [pod("rc-initloop", [c_("main", "echo main ran")],
                         initContainers=[c_("proxy", "exec sleep 300", restartPolicy="Always"),
                                         c_("setup", "echo setting up; exit 3")], restartPolicy="Always",
                         terminationGracePeriodSeconds=2)])
def test_failing_init_container_leaves_the_pod_pending_in_crash_loop_back_off(launched: Launched) -> None:
    """The init container after a native sidecar keeps failing: the pod is never Running, though the
    sidecar runs (kubectl: Init:CrashLoopBackOff); during the back-off the container is waiting
    CrashLoopBackOff with the kubelet's message and the failed run as lastState; a Started event for
    its run and a BackOff Warning event in the kubelet's words."""
    c = launched.cluster
    uid = launched.uid("rc-initloop")
    try:
        st = wait_status(c, "rc-initloop", "in a back-off", lambda s: (container(s, "setup", init=True).get(
            "state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff")
        assert st["phase"] == "Pending" and "reason" not in st, st
        assert "running" in container(st, "proxy", init=True)["state"], st
        assert ("Normal", "Started", "Started container setup") in events(c, "rc-initloop", uid)
        setup = container(st, "setup", init=True)
        assert re.fullmatch(rf"back-off {GO_DURATION} restarting failed container=setup pod=rc-initloop_default\({uid}\)",
                            setup["state"]["waiting"]["message"]), setup
        assert (setup["lastState"]["terminated"]["exitCode"], setup["lastState"]["terminated"]["reason"]) == (3, "Error")
        wait_for("kubectl's Init:CrashLoopBackOff",
                 lambda: "Init:CrashLoopBackOff" in c.kubectl("get", "pod", "rc-initloop").stdout)
        wait_for("the BackOff event", lambda: ("Warning", "BackOff", "Back-off restarting failed container setup in "
                                               f"pod rc-initloop_default({uid})") in events(c, "rc-initloop", uid))
        running = [s for s in launched.history.statuses("rc-initloop", uid=uid) if s.get("phase") == "Running"]
        assert not running, running  # whole, so that a failure says which path made it Running
    finally:
        _delete(c, "rc-initloop", wait=False)


@launch(lambda env: [pod("rc-oomrestart", [c_("hog", "if [ -e /state/once ]; then echo second run; else "
                                                      "touch /state/once; exec dd if=/dev/zero of=/dev/null bs=300M "
                                                      "count=1; fi",
                                              volumeMounts=[{"name": "state", "mountPath": "/state"}],
                                              resources={"limits": {"memory": "100Mi"}})],
                         restartPolicy="OnFailure", volumes=[{"name": "state", "emptyDir": {}}])])
def test_a_container_over_its_memory_limit_is_oom_killed_and_restarted(launched: Launched) -> None:
    """The first run is killed by the OOM killer: lastState 137 OOMKilled; restarted, the pod Succeeded."""
    c = launched.cluster
    st = finished(c, "rc-oomrestart")["status"]
    assert st["phase"] == "Succeeded", st
    hog = container(st, "hog")
    assert hog["restartCount"] == 1, hog
    assert (hog["lastState"]["terminated"]["exitCode"], hog["lastState"]["terminated"]["reason"]) == (137, "OOMKilled")
    assert logs(c, "rc-oomrestart") == "second run\n"


def _order(env: Env) -> list[dict[str, Any]]:
    shared = [{"name": "shared", "mountPath": "/shared"}]
    wait = ["sh", "-c", "until [ -e /shared/ready ]; do sleep 0.1; done"]
    first = c_("first", "sleep 2; echo from-first > /shared/ready; exec sleep 3", volumeMounts=shared,
               lifecycle={"postStart": {"exec": {"command": wait}}})
    second = c_("second", "cat /shared/ready", volumeMounts=shared)
    return [pod("rc-order", [first, second], volumes=[{"name": "shared", "emptyDir": {}}])]


@launch(_order)
def test_containers_start_in_order_after_post_start(launched: Launched) -> None:
    """The second container starts once the first runs and its postStart hook returned."""
    c = launched.cluster
    assert finished(c, "rc-order")["status"]["phase"] == "Succeeded"
    assert logs(c, "rc-order", "-c", "second") == "from-first\n"


@launch(lambda env: [pod("rc-crashloop", [c_("app", "echo crashing; exit 1")], restartPolicy="Always",
                         terminationGracePeriodSeconds=2)])
def test_a_crashing_container_waits_in_crash_loop_back_off_between_runs(launched: Launched) -> None:
    """Between its runs the container is waiting CrashLoopBackOff with lastState the run that ended;
    the pod Running; kubectl shows CrashLoopBackOff."""
    c = launched.cluster
    uid = launched.uid("rc-crashloop")
    try:
        st = wait_status(c, "rc-crashloop", "in a back-off", lambda s: (container(s, "app").get(
            "state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff")
        assert st["phase"] == "Running" and "reason" not in st, st
        app = container(st, "app")
        assert re.fullmatch(rf"back-off {GO_DURATION} restarting failed container=app pod=rc-crashloop_default\({uid}\)",
                            app["state"]["waiting"]["message"]), app
        assert (app["lastState"]["terminated"]["exitCode"], app["lastState"]["terminated"]["reason"]) == (1, "Error")
        wait_for("kubectl's CrashLoopBackOff", lambda: "CrashLoopBackOff" in c.kubectl("get", "pod", "rc-crashloop").stdout)
    finally:
        _delete(c, "rc-crashloop", wait=False)


# ---------------------------------------------------------------------------- the same cases in pilot mode
# A kubelet in pilot mode ([pilot] enabled: hpkctl/provider/pilotpod.py) runs its pods as job steps of
# allocations it holds, from the same job script: these cases, unchanged, prove the pod semantics are
# the same under both providers. Cases about the Slurm job itself (CANCELLED in jobcomp, a job's time
# limit, jobs found by uid) have no pilot equivalent and are not repeated.
PILOT = "\n[pilot]\nenabled = true\nmax_allocations = 3\n"


@pytest.fixture(scope="module")
def pilot_cluster() -> Iterator[Cluster]:
    for c in _cluster_with(PILOT):
        try:
            yield c
        finally:  # a stopped kubelet leaves its allocations to the next one: cancel those it requested
            held = re.findall(r"pilot: requested allocation (\d+) ", c.log("kubelet"))
            if held:
                subprocess.run(["scancel", *held], capture_output=True, check=False)


@pytest.fixture(scope="module")
def pilot_launched(request: pytest.FixtureRequest, pilot_cluster: Cluster) -> Iterator[Launched]:
    yield from launch_selected(request, pilot_cluster, lambda item: "pilot_launched" in item.fixturenames)


def _in_pilot_mode(case: Any) -> Any:
    """``case`` again, on the pilot-mode kubelet: the same pods (its launch builder), the same asserts."""
    def test(pilot_launched: Launched) -> None:
        case(pilot_launched)

    test._hpk_launch = case._hpk_launch  # type: ignore[attr-defined]
    test._hpk_early = getattr(case, "_hpk_early", False)  # type: ignore[attr-defined]
    test.__doc__ = f"{case.__name__}, on a kubelet in pilot mode. {case.__doc__ or ''}"
    return test


test_pilot_hooks_in_order_and_the_grace_period_on_delete = _in_pilot_mode(
    test_hooks_in_order_and_the_grace_period_on_delete)
test_pilot_failing_liveness_probe_restarts_the_container = _in_pilot_mode(
    test_failing_liveness_probe_restarts_the_container)
test_pilot_hello_world = _in_pilot_mode(test_hello_world)
test_pilot_init_containers_pass_data_through_an_empty_dir = _in_pilot_mode(
    test_init_containers_pass_data_through_an_empty_dir)
test_pilot_failed_init_container_fails_the_pod = _in_pilot_mode(test_failed_init_container_fails_the_pod)
test_pilot_failing_container_gives_its_exit_code_and_reason = _in_pilot_mode(
    test_failing_container_gives_its_exit_code_and_reason)
test_pilot_restart_policy_on_failure_restarts_until_success = _in_pilot_mode(
    test_restart_policy_on_failure_restarts_until_success)
test_pilot_memory_over_the_limit_is_oom_killed = _in_pilot_mode(test_memory_over_the_limit_is_oom_killed)
test_pilot_job_pod_with_a_native_sidecar_completes = _in_pilot_mode(test_job_pod_with_a_native_sidecar_completes)
test_pilot_active_deadline_is_deadline_exceeded = _in_pilot_mode(test_active_deadline_is_deadline_exceeded)
test_pilot_termination_messages_and_a_failed_post_start_hook = _in_pilot_mode(
    test_termination_messages_and_a_failed_post_start_hook)


@launch(lambda env: [pod("rc-pilot-placed", [c_("main", "true")])])
def test_pilot_cases_ran_as_steps_of_held_allocations(pilot_launched: Launched) -> None:
    """Every pod the pilot-mode cases created (this test's own among them, so it holds whichever
    cases are selected and in whatever order they run) was placed as a step of an allocation the
    kubelet holds, whose job is named hpk_pilot_hpk: none ran as a job of its own."""
    c = pilot_launched.cluster
    assert finished(c, "rc-pilot-placed")["status"]["phase"] == "Succeeded"
    created = {name for kind, _, name in pilot_launched.created if kind == "Pod"}

    def placed() -> list[tuple[str, str]] | None:
        found = re.findall(r"pod default/(\S+): step of pilot allocation (\d+) on ", c.log("kubelet"))
        return found if created <= {name for name, _ in found} else None

    try:
        steps = wait_for("every pilot-mode pod placed as a step", placed, timeout=120)
    except AssertionError:
        raise AssertionError(f"pods never placed as steps: {created}\n{c.log('kubelet')[-3000:]}") from None
    for job in {job for _, job in steps}:
        name = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={job}", "--format=%j"],
                              capture_output=True, text=True, check=False).stdout.strip()
        assert name in ("hpk_pilot_hpk", ""), name  # "": released and forgotten by Slurm

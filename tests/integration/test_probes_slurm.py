"""Probes on the real local Slurm, as user hpk (issue 9): an HTTP readiness probe that passes after a
delay (READY 0/1, then 1/1), a failing HTTP liveness probe that restarts the container, an exec
startup probe that gates started/ready and one that fails, a TCP probe in both network modes.

Timers are short: periodSeconds 1, small thresholds, and user profiles over ci/ci-cni with a 1 s
restart back-off. The servers are busybox httpd on a random port (host network: the node's)."""

from __future__ import annotations

import os
import pwd
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.ci import HPK_USER
from tests.support.hpk import Hpk, pod, unique
from tests.support.waiting import wait_rewritten

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
BUSYBOX = "busybox:1.36"
SITES = {"host": "ci-probes", "cni": "ci-cni-probes"}


@pytest.fixture
def fast(hpk: Hpk) -> Hpk:
    """User profiles over ci and ci-cni with a 1 s restart back-off."""
    sites = hpk.home / ".config" / "hpk" / "sites"
    uid, gid = pwd.getpwnam(HPK_USER).pw_uid, pwd.getpwnam(HPK_USER).pw_gid
    for d in (hpk.home / ".config", hpk.home / ".config" / "hpk", sites):
        d.mkdir(exist_ok=True)
        os.chown(d, uid, gid)
    for base, name in (("ci", SITES["host"]), ("ci-cni", SITES["cni"])):
        path = sites / f"{name}.toml"
        path.write_text(f'extends = "{base}"\n\n[pods]\nrestart_backoff = 1\nrestart_backoff_max = 1\n')
        os.chown(path, uid, gid)
    return hpk


def httpd(name: str, script: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": BUSYBOX, "command": ["sh", "-c", script], **kw}


def _status(hpk: Hpk, name: str, site: str) -> tuple[str, dict[str, Any]]:
    text = hpk.hpkctl("status", name, "--site", site)
    assert text.rc == 0, text.output
    return text.stdout, hpk.status(name, site)


def wait_for(hpk: Hpk, name: str, site: str, cond: Callable[[str, dict[str, Any]], bool],
             timeout: float = 90) -> tuple[str, dict[str, Any]]:
    end = time.monotonic() + timeout
    while True:
        text, st = _status(hpk, name, site)
        if cond(text, st):
            return text, st
        assert time.monotonic() < end, (text, st)
        time.sleep(0.5)


GATED = "until [ -e /gate/go ]; do sleep 0.2; done; "  # the test opens the gate, not a timer that load outruns


def gate(hpk: Hpk) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]:
    """A hostPath directory the container waits in until the test creates ``go``: (dir, volumes, mounts)."""
    d = hpk.workdir / unique("gate")
    d.mkdir()
    d.chmod(0o777)
    return d, [{"name": "gate", "hostPath": {"path": str(d), "type": "Directory"}}], \
        [{"name": "gate", "mountPath": "/gate"}]


def _row(text: str, name: str) -> list[str]:
    return next(ln.split() for ln in text.splitlines() if ln.startswith(name))


def _main(st: dict[str, Any]) -> dict[str, Any]:
    cs: dict[str, Any] = st["status"]["containerStatuses"][0]
    return cs


def _delete(hpk: Hpk, name: str, site: str) -> None:
    hpk.hpkctl("delete", name, "--site", site)


def test_http_readiness_becomes_ready_after_a_delay(fast: Hpk) -> None:
    name, site, port = unique("ready"), SITES["host"], random.randint(20000, 40000)
    d, volumes, mounts = gate(fast)
    server = httpd("web", f"mkdir -p /tmp/www && echo ok >/tmp/www/ok && {GATED}exec httpd -f -p {port} -h /tmp/www",
                   readinessProbe={"httpGet": {"port": port, "path": "/ok"}, "periodSeconds": 1},
                   volumeMounts=mounts)
    r = fast.run(pod(name, [server], restartPolicy="Always", volumes=volumes), site=site, extra=("--detach",))
    assert r.rc == 0, r.output
    try:
        text, st = wait_for(fast, name, site, lambda t, s: _main(s)["state"].get("running") is not None)
        assert _row(text, name)[1] == "0/1", text
        assert _main(st)["ready"] is False and _main(st)["started"] is True
        (d / "go").touch()
        text, st = wait_for(fast, name, site, lambda t, s: _row(t, name)[1] == "1/1")
        conds = {c["type"]: c["status"] for c in st["status"]["conditions"]}
        assert conds["Ready"] == "True" and conds["ContainersReady"] == "True", conds
    finally:
        _delete(fast, name, site)


def test_failing_liveness_probe_restarts_the_container(fast: Hpk) -> None:
    name, site, port = unique("live"), SITES["host"], random.randint(20000, 40000)
    script = (f"echo serving; mkdir -p /tmp/www && echo ok >/tmp/www/healthz; (sleep 3; rm /tmp/www/healthz) & "
              f"exec httpd -f -p {port} -h /tmp/www")
    server = httpd("web", script, livenessProbe={"httpGet": {"port": port, "path": "/healthz"}, "periodSeconds": 1,
                                                 "failureThreshold": 2})
    r = fast.run(pod(name, [server], restartPolicy="Always"), site=site, extra=("--detach",))
    assert r.rc == 0, r.output
    try:
        wait_for(fast, name, site, lambda t, s: _main(s)["restartCount"] >= 1)
        text, st = _status(fast, name, site)
        assert "container web probe: Liveness probe failed: HTTP probe failed with statuscode: 404" in text, text
        assert _main(st)["lastState"]["terminated"]["exitCode"] in (143, 137)
        prev = fast.hpkctl("logs", name, "--site", site, "--previous")
        assert prev.rc == 0 and prev.stdout.startswith("serving\n"), prev.output
        log = fast.hpkctl("logs", name, "--site", site)
        assert "probe" not in log.stdout  # probe failures never go into the container's log
    finally:
        _delete(fast, name, site)


def test_exec_startup_probe_gates_started_and_ready(fast: Hpk) -> None:
    name, site = unique("startup"), SITES["host"]
    d, volumes, mounts = gate(fast)
    app = httpd("app", f"{GATED}touch /tmp/started; exec sleep 300",
                startupProbe={"exec": {"command": ["test", "-e", "/tmp/started"]}, "periodSeconds": 1,
                              "failureThreshold": 300}, volumeMounts=mounts)
    r = fast.run(pod(name, [app], restartPolicy="Always", volumes=volumes), site=site, extra=("--detach",))
    assert r.rc == 0, r.output
    try:
        text, st = wait_for(fast, name, site, lambda t, s: _main(s)["state"].get("running") is not None)
        assert (_main(st)["started"], _main(st)["ready"]) == (False, False), st
        (d / "go").touch()
        text, st = wait_for(fast, name, site, lambda t, s: _main(s)["started"])
        wait_for(fast, name, site, lambda t, s: _main(s)["ready"] and _row(t, name)[1] == "1/1")
    finally:
        _delete(fast, name, site)


def test_failing_exec_startup_probe_kills_the_container(fast: Hpk) -> None:
    name, site = unique("nostart"), SITES["host"]
    app = httpd("app", "echo up; exec sleep 300",
                startupProbe={"exec": {"command": ["sh", "-c", "echo not started; exit 1"]}, "periodSeconds": 1,
                              "failureThreshold": 2})
    r = fast.run(pod(name, [app]), site=site, timeout=120)  # restartPolicy Never: the pod ends
    assert r.rc in (143, 137), r.output
    text, st = _status(fast, name, site)
    assert "container app probe: Startup probe failed: not started" in text, text
    assert _main(st)["started"] is False
    _delete(fast, name, site)


@pytest.mark.parametrize("mode", ["host", "cni"])
def test_tcp_probe_in_both_network_modes(fast: Hpk, mode: str) -> None:
    """TCP probes reach the server where the pod runs, in both network modes: readiness makes the
    container ready (READY 1/1), and liveness passes. Each liveness try rewrites its output file in
    the pod directory as it starts, and with failureThreshold 1 a failed try stops the container and
    ends its probes: so a second try proves the first one passed, and the container never restarted."""
    name, site, port = unique(f"tcp-{mode}"), SITES[mode], random.randint(20000, 40000)
    server = httpd("web", f"exec httpd -f -p {port} -h /tmp",
                   readinessProbe={"tcpSocket": {"port": port}, "periodSeconds": 1},
                   livenessProbe={"tcpSocket": {"port": port}, "initialDelaySeconds": 2, "periodSeconds": 1,
                                  "failureThreshold": 1})
    r = fast.run(pod(name, [server], restartPolicy="Always"), site=site, extra=("--detach",))
    assert r.rc == 0, r.output
    try:
        text, st = wait_for(fast, name, site, lambda t, s: _row(t, name)[1] == "1/1")
        pod_dir = Path(st["podDir"])
        tries = pod_dir / "run" / "web.liveness.probe"
        wait_rewritten("the liveness probe's try", tries)
        text, st = _status(fast, name, site)
        assert _main(st)["restartCount"] == 0 and _main(st)["ready"] is True, text
        assert st["status"]["podIP"]
        probes_log = pod_dir / "logs" / "web.probes.log"
        assert "Liveness" not in (probes_log.read_text() if probes_log.exists() else ""), probes_log.read_text()
    finally:
        _delete(fast, name, site)

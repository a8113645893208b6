"""``hpkctl run`` pods behave as Kubernetes says (issue 22): the phase while init containers fail,
the CrashLoopBackOff state during a restart back-off, OOMKilled for one container's run, containers
started one after another, and the pod's hostname in every network mode. On the real local Slurm as
user hpk, with the Apptainer stand-in; the kubelet's side of the same cases is in
tests/kubelet/test_kubelet_runcases_slurm.py ("issue 22")."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.support.hpk import Hpk, pod, unique

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
BUSYBOX = "busybox:1.36"
SHARED = [{"name": "shared", "mountPath": "/shared"}]


def c(name: str, script: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": BUSYBOX, "command": ["sh", "-c", script], **kw}


def _wait(hpk: Hpk, name: str, what: str, cond: Any, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    st: dict[str, Any] = {}
    while time.monotonic() < deadline:
        st = hpk.status(name)["status"]
        if cond(st):
            return st
        time.sleep(0.3)
    pytest.fail(f"{name}: never {what}: {st}")


@pytest.mark.parametrize("site", ["ci", "ci-cni"])
def test_hostname_is_the_pods_in_every_network_mode(hpk: Hpk, site: str) -> None:
    """set_hostname: ``hostname`` (and Apptainer's /etc/hostname) is spec.hostname, in host mode too."""
    p = pod(unique("hn"), [c("app", "hostname; cat /etc/hostname")], hostname="web-0", subdomain="nginx")
    r = hpk.run(p, site=site)
    assert r.rc == 0, r.output
    assert r.stdout == "web-0\nweb-0\n", r.output


def test_failing_init_container_leaves_the_pod_pending_in_crash_loop_back_off(hpk: Hpk) -> None:
    """An init container that keeps failing (restartPolicy Always: it is retried) after a native
    sidecar: the pod stays Pending (Init:CrashLoopBackOff) though the sidecar runs, and during each
    back-off the container is waiting with the kubelet's message and the failed run as lastState."""
    name = unique("initloop")
    p = pod(name, [c("main", "echo main ran")], initContainers=[
        c("proxy", "exec sleep 300", restartPolicy="Always"), c("setup", "echo setting up; exit 3")],
            restartPolicy="Always", terminationGracePeriodSeconds=2)
    r = hpk.run(p, extra=("--detach",))
    assert r.rc == 0, r.output
    try:
        st = _wait(hpk, name, "in a back-off", lambda s: any(
            i["name"] == "setup" and i["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
            for i in s.get("initContainerStatuses") or []))
        assert st["phase"] == "Pending", st
        assert hpk.status(name)["status"]["phase"] == "Pending"
        proxy, setup = st["initContainerStatuses"]
        assert "running" in proxy["state"], st
        assert re.fullmatch(rf"back-off \d+s restarting failed container=setup pod={name}_default\(.+\)",
                            setup["state"]["waiting"]["message"]), setup
        assert (setup["lastState"]["terminated"]["exitCode"], setup["lastState"]["terminated"]["reason"]) == (3, "Error")
        assert "running" not in st["containerStatuses"][0]["state"], st
        _wait(hpk, name, "listed as Init:CrashLoopBackOff",
              lambda s: "Init:CrashLoopBackOff" in hpk.hpkctl("status", name, "--site", "ci").stdout)
    finally:
        hpk.hpkctl("delete", name, "--site", "ci")


def test_a_container_over_its_memory_limit_is_oom_killed_and_restarted(hpk: Hpk) -> None:
    """The first run allocates past the limit: the kernel kills it (137), its reason is OOMKilled;
    OnFailure restarts it, the second run succeeds and so does the pod (Slurm's OUT_OF_MEMORY for
    the job does not override the job's record of which run was killed)."""
    name = unique("oomrestart")
    hog = c("hog", "if [ -e /state/once ]; then echo second run; else touch /state/once; "
                   "exec dd if=/dev/zero of=/dev/null bs=300M count=1; fi",
            volumeMounts=[{"name": "state", "mountPath": "/state"}], resources={"limits": {"memory": "100Mi"}})
    r = hpk.run(pod(name, [hog], restartPolicy="OnFailure", volumes=[{"name": "state", "emptyDir": {}}]))
    assert r.rc == 0, r.output
    st = hpk.status(name)["status"]
    assert st["phase"] == "Succeeded", st
    [cs] = st["containerStatuses"]
    assert cs["restartCount"] == 1, cs
    assert (cs["lastState"]["terminated"]["exitCode"], cs["lastState"]["terminated"]["reason"]) == (137, "OOMKilled")
    assert cs["state"]["terminated"]["reason"] == "Completed"


def test_containers_start_in_order_after_post_start(hpk: Hpk) -> None:
    """The second container starts only once the first one has started and its postStart hook has
    returned: the hook waits for the file the first container writes after 2 s; the second reads it."""
    first = c("first", "sleep 2; echo from-first > /shared/ready; exec sleep 3", volumeMounts=SHARED,
              lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "until [ -e /shared/ready ]; do sleep 0.1; done"]}}})
    second = c("second", "cat /shared/ready", volumeMounts=SHARED)
    r = hpk.run(pod(unique("order"), [first, second], volumes=[{"name": "shared", "emptyDir": {}}]))
    assert r.rc == 0, r.output
    assert "[second] from-first" in r.stdout, r.output


def test_a_crashing_container_waits_in_crash_loop_back_off_between_runs(hpk: Hpk) -> None:
    """restartPolicy Always, the container exits 1: between its runs it is waiting CrashLoopBackOff
    (the run that ended as lastState), the pod Running; hpkctl status shows CrashLoopBackOff."""
    name = unique("crashloop")
    r = hpk.run(pod(name, [c("app", "echo crashing; exit 1")], restartPolicy="Always",
                    terminationGracePeriodSeconds=2), extra=("--detach",))
    assert r.rc == 0, r.output
    try:
        st = _wait(hpk, name, "in a back-off", lambda s: (s.get("containerStatuses") or [{}])[0]
                   .get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff")
        assert st["phase"] == "Running", st
        [app] = st["containerStatuses"]
        assert re.fullmatch(rf"back-off \d+s restarting failed container=app pod={name}_default\(.+\)",
                            app["state"]["waiting"]["message"]), app
        assert (app["lastState"]["terminated"]["exitCode"], app["lastState"]["terminated"]["reason"]) == (1, "Error")
        _wait(hpk, name, "listed as CrashLoopBackOff",
              lambda s: "CrashLoopBackOff" in hpk.hpkctl("status", name, "--site", "ci").stdout)
    finally:
        hpk.hpkctl("delete", name, "--site", "ci")

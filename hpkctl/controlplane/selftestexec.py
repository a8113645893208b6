"""``hpkctl selftest``'s "exec and logs" row: one pod through the running private cluster's API.

Only when a cluster of the profile runs (``hpkctl start``: its control-plane and kubelet jobs in
Slurm, the ``endpoint`` published, the API answering with ``admin.kubeconfig``, as ``hpkctl status``
sees it); otherwise SKIP. The pod is bound to the profile's node (``spec.nodeName``: no scheduler in
the way), prints a line with quotes, ``$``, backslashes, a tab and UTF-8, then sleeps. Once it is
Running, ``GET pods/NAME/log`` (the kubelet's containerLogs through the API server) must return that
line byte for byte, and ``pods/NAME/exec`` (WebSocket v5 through the API server to the kubelet) must
return a command's stdout, stderr and exit code. Then the pod is deleted, and must be gone. Each step
is written to the row's log, so a FAIL says where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from hpkctl.controlplane.launch import CONTROLPLANE, KUBELET
from hpkctl.controlplane.lifecycle import Cluster
from hpkctl.errors import HpkError
from hpkctl.jobs import Slurm, SlurmError
from hpkctl.kube import Kube, KubeError
from hpkctl.kube.client import pod_path
from hpkctl.kube.podexec import pod_exec
from hpkctl.local.selftest import ENV_VALUE, FAIL, IMAGE, NS, PASS, SKIP, Result
from hpkctl.sites.schema import SiteProfile

CASE = "exec and logs"
POD = "exec-logs"
EXEC = ["sh", "-c", "echo out; echo err >&2; exit 3"]


class _Failed(Exception):
    pass


def _pod(node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": NS},
            "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "c", "image": IMAGE, "env": [{"name": "V", "value": ENV_VALUE}],
                                     "command": ["sh", "-c", 'printf "%s\\n" "$V"; exec sleep 600']}]}}


def _until(what: str, probe: Callable[[], Any], deadline: float) -> Any:
    """``probe()``'s first truthy answer, polled every 0.5 s; _Failed naming ``what`` at the deadline."""
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise _Failed(f"timed out waiting for {what}")
        time.sleep(0.5)


def _get(kube: Kube) -> dict[str, Any] | None:
    try:
        return dict(kube.get(pod_path(NS, POD)))
    except KubeError as e:
        if e.code == 404:
            return None
        raise


def _gone(kube: Kube, deadline: float) -> None:
    try:
        kube.delete(pod_path(NS, POD))
    except KubeError as e:
        if e.code != 404:
            raise
    _until(f"pod {NS}/{POD} to be gone after its delete", lambda: _get(kube) is None, deadline)


def _running(kube: Kube, deadline: float) -> None:
    def probe() -> bool:
        pod = _get(kube) or {}
        st = pod.get("status") or {}
        if st.get("phase") in ("Succeeded", "Failed"):
            raise _Failed(f"the pod ended {st.get('phase')} ({st.get('reason', '')}: {st.get('message', '')}) "
                          "instead of running")
        return st.get("phase") == "Running" and any(
            "running" in (c.get("state") or {}) for c in st.get("containerStatuses") or [])
    _until(f"pod {NS}/{POD} to be Running on its node", probe, deadline)


def _steps(kube: Kube, node: str, log: TextIO, timeout: float) -> None:
    def say(line: str) -> None:
        print(line, file=log, flush=True)

    deadline = time.monotonic() + timeout
    try:
        kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    except KubeError as e:
        if e.code != 409:
            raise
    _gone(kube, deadline)  # a previous run's pod
    kube.post(pod_path(NS), _pod(node))
    say(f"created pod {NS}/{POD} on node {node}")
    _running(kube, deadline)
    say("the pod is Running")
    want = (ENV_VALUE + "\n").encode()
    got: list[bytes] = [b""]

    def logged() -> bool:
        got[0] = kube.raw("GET", pod_path(NS, POD, "log"), query={"container": "c"})
        return got[0] == want
    try:
        _until("the container's log", logged, min(deadline, time.monotonic() + 30))
    except _Failed:
        raise _Failed(f"GET pods/{POD}/log returned {got[0]!r}, expected {want!r}") from None
    say(f"GET pods/{POD}/log returned the printed line byte for byte: {got[0]!r}")
    res = pod_exec(kube, NS, POD, "c", EXEC, timeout=max(5.0, deadline - time.monotonic()))
    say(f"exec {EXEC}: stdout {res.stdout!r}, stderr {res.stderr!r}, exit code {res.exit_code} {res.message}")
    if (res.stdout, res.stderr, res.exit_code) != (b"out\n", b"err\n", 3):
        raise _Failed(f"exec returned stdout {res.stdout!r}, stderr {res.stderr!r}, exit code {res.exit_code} "
                      f"{res.message}".rstrip() + "; expected 'out\\n', 'err\\n' and 3")


def exec_and_logs(profile: SiteProfile, slurm: Slurm, *, site: str, python: str, work_dir: Path,
                  timeout: float = 180.0) -> Result:
    """The row: SKIP without a running cluster, else PASS or FAIL with the steps in ``work_dir``'s log."""
    cluster = Cluster(profile, slurm=slurm, site=site, python=python)
    try:
        st = cluster.status(pods=False)
    except SlurmError as e:
        return Result(CASE, FAIL, f"cannot list the cluster's Slurm jobs: {e.message}")
    if not st.endpoint or not all(any(not j.pending for j in st.jobs.of(k)) for k in (CONTROLPLANE, KUBELET)):
        return Result(CASE, SKIP, f"no cluster of this profile runs (hpkctl start --site {site})")
    started = time.monotonic()
    work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = work_dir / f"{POD}.log"
    res = Result(CASE, FAIL, log=str(path))
    with open(path, "w", encoding="utf-8") as log:
        if st.api != "ok":
            res.detail = f"the cluster's API server does not answer: {st.api}"
        else:
            kube = Kube(str(cluster.layout.kubeconfig("admin")), pool_size=2)
            try:
                _steps(kube, profile.pods.node_name, log, timeout)
                res.result = PASS
            except (_Failed, HpkError) as e:
                res.detail = str(e)
            finally:
                try:
                    _gone(kube, time.monotonic() + 60)
                    print(f"deleted pod {NS}/{POD}: gone", file=log)
                except (_Failed, HpkError) as e:
                    res.result, res.detail = FAIL, res.detail or f"the pod's delete: {e}"
                kube.close()
        if res.detail:
            print(f"FAIL: {res.detail}", file=log)
    res.seconds = time.monotonic() - started
    return res


__all__ = ["CASE", "exec_and_logs"]

"""The kubelet's HTTPS API (hpkctl/kubelet/server.py) over real pod directories, without Slurm.

TLS with a CA and certificates made here (the Kubernetes stand-in's PKI code); requests for plain
HTTP, aiohttp for WebSockets. exec runs against a fake step in place of ``Slurm.exec_step`` (the
real srun step is proven in tests/integration/test_kubelet_exec_slurm.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import ssl
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
import pytest
import requests

from ci.standin.kubeapi.certs import Pki
from hpkctl.jobs import Slurm
from hpkctl.kubelet import logs
from hpkctl.kubelet.certs import serving_tls
from hpkctl.kubelet.logs import rfc3339nano, tail_offset
from hpkctl.kubelet.server import KubeletServer
from hpkctl.kubelet.stats import JobUsage, job_usage
from hpkctl.kubelet.table import PodTable, Tracked
from hpkctl.pod.status import ContainerStatus, PodStatus
from hpkctl.provider.jobpod import JobPodProvider
from hpkctl.provider.records import SUBMITTED, PodRecord, Records
from hpkctl.sites import load_site
from hpkctl.sites.schema import SlurmSection
from tests.support.waiting import wait_for

NS = "default"


# ---------------------------------------------------------------------------- PKI, pods, server


@dataclass(frozen=True)
class Certs:
    ca: str
    server: tuple[str, str]
    client: tuple[str, str]
    stranger: tuple[str, str]  # signed by another CA
    scheduler: tuple[str, str]  # the cluster CA's, but not the API server's kubelet client
    admin: tuple[str, str]  # the cluster CA's, group system:masters

    def tls(self) -> ssl.SSLContext:
        """The server's TLS settings, as the kubelet loads them before it starts the server."""
        return serving_tls(self.server[0], self.server[1], self.ca)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    pki = Pki(tmp_path_factory.mktemp("pki"))
    other = Pki(tmp_path_factory.mktemp("other-pki"))
    server = pki.leaf("kubelet-serving", cn="system:node:hpk", orgs=("system:nodes",), server=True,
                      sans=("127.0.0.1", "localhost"))
    client = pki.leaf("apiserver-kubelet-client", cn="kube-apiserver-kubelet-client", orgs=("system:masters",))
    stranger = other.leaf("intruder", cn="intruder")
    scheduler = pki.leaf("scheduler", cn="system:kube-scheduler")
    admin = pki.leaf("admin", cn="someone", orgs=("system:masters",))
    return Certs(str(pki.dir / "ca.crt"), (str(server[0]), str(server[1])), (str(client[0]), str(client[1])),
                 (str(stranger[0]), str(stranger[1])), (str(scheduler[0]), str(scheduler[1])),
                 (str(admin[0]), str(admin[1])))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def pod_object(name: str, containers: list[str], *, restart: str = "Never", uid: str = "") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}"},
            "spec": {"restartPolicy": restart, "nodeName": "hpk",
                     "containers": [{"name": c, "image": f"busybox:{c}"} for c in containers]}}


@dataclass
class Track:
    """A tracked pod and its pod directory (which only the provider knows)."""

    uid: str
    pod: dict[str, Any]
    pod_dir: Path


def provider_at(root: Path) -> JobPodProvider:
    """The job-per-pod provider with its records (and pods) under ``root``."""
    profile = load_site("ci")
    profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": str(root)})})
    return JobPodProvider(slurm=Slurm(SlurmSection()), profile=profile, records=Records(root / "kubelet"))


def track(served: Served, name: str, containers: list[str], *, restart: str = "Never",
          running: tuple[str, ...] = (), job_id: str = "4711") -> Track:
    """A pod with a pod directory and the provider's record of it: ``running`` containers have started
    and not exited."""
    pod = pod_object(name, containers, restart=restart)
    pod_dir = served.root / name
    _write(pod_dir / "job" / "pod.json", json.dumps(pod))
    (pod_dir / "logs").mkdir(parents=True, exist_ok=True)
    statuses = []
    for c in running:
        _write(pod_dir / "status" / f"{c}.started", "2026-11-24T10:00:00Z\n")
        _write(pod_dir / "logs" / f"{c}.log", "")
        statuses.append(ContainerStatus(name=c, init=False, state="running", started_at="2026-11-24T10:00:00Z"))
    status = PodStatus("Running" if running else "Pending", "", "", None, "10.0.0.5", "vm", "2026-11-24T10:00:00Z",
                       statuses)
    t = Tracked(uid=f"uid-{name}", namespace=NS, name=name, pod=pod, job_id=job_id, status=status)
    served.provider.records.save(PodRecord(uid=t.uid, namespace=NS, name=name, pod_dir=str(pod_dir),
                                           state=SUBMITTED, job_id=job_id))
    served.provider.leftovers()  # the provider reads its records
    served.table.put(t)
    return Track(t.uid, t.pod, pod_dir)


@dataclass
class Served:
    server: KubeletServer
    table: PodTable
    root: Path
    certs: Certs
    provider: JobPodProvider

    @property
    def slurm(self) -> Slurm:
        return self.provider.slurm

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.port}"

    def get(self, path: str, **kw: Any) -> requests.Response:
        return requests.get(self.url + path, cert=self.certs.client, verify=self.certs.ca, timeout=20, **kw)


@pytest.fixture
def served(certs: Certs, tmp_path: Path) -> Iterator[Served]:
    table = PodTable()
    provider = provider_at(tmp_path)
    server = KubeletServer(table, provider=provider, node_name="hpk", host="127.0.0.1", port=0, tls=certs.tls(),
                           cgroup_root=tmp_path / "cgroup",
                           follow_poll=0.05)
    server.start()
    try:
        yield Served(server, table, tmp_path / "pods", certs, provider)
    finally:
        server.stop()


def _status(r: requests.Response, code: int) -> str:
    assert r.status_code == code, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == code
    return str(body["message"])


# ---------------------------------------------------------------------------- TLS and the simple routes


def test_anyone_else_is_asked_about_once_per_cache_time(certs: Certs, tmp_path: Path) -> None:
    """Identities the kubelet does not serve at once are asked about (SubjectAccessReview, the real
    kubelet's webhook authorisation); answers are kept for the kubelet's cache times."""
    from hpkctl.kubelet.authz import ALLOWED_TTL, DENIED_TTL, Decisions

    asked: list[tuple[str, tuple[str, ...], str, str]] = []

    def review(user: str, groups: Any, verb: str, sub: str) -> bool:
        asked.append((user, tuple(groups), verb, sub))
        return sub == "stats"

    server = KubeletServer(PodTable(), provider=provider_at(tmp_path), node_name="hpk", host="127.0.0.1", port=0,
                           tls=certs.tls(),
                           review=review, cgroup_root=tmp_path / "cgroup")
    server.start()
    try:
        url = f"https://127.0.0.1:{server.port}"
        for _ in range(2):
            assert requests.get(f"{url}/stats/summary", cert=certs.scheduler, verify=certs.ca,
                                timeout=20).status_code == 200
            assert requests.get(f"{url}/pods", cert=certs.scheduler, verify=certs.ca, timeout=20).status_code == 403
        assert requests.get(f"{url}/pods", cert=certs.client, verify=certs.ca, timeout=20).status_code == 200
    finally:
        server.stop()
    assert asked == [("system:kube-scheduler", (), "get", "stats"), ("system:kube-scheduler", (), "get", "proxy")]
    now = [0.0]
    d = Decisions(review, clock=lambda: now[0])
    assert d.allowed("u", [], "get", "proxy") is False
    now[0] = DENIED_TTL - 1  # the real kubelet's 30 s by default
    assert d.allowed("u", [], "get", "proxy") is False and len(asked) == 3
    now[0] = DENIED_TTL + 1
    assert d.allowed("u", [], "get", "proxy") is False and len(asked) == 4
    assert d.allowed("u", [], "get", "stats") is True
    now[0] += ALLOWED_TTL - 1
    assert d.allowed("u", [], "get", "stats") is True and len(asked) == 5
    now[0] = 0.0  # [kubelet] authz_denied_ttl shortens the denials' time only
    short = Decisions(review, clock=lambda: now[0], denied_ttl=2.0)
    assert short.allowed("u", [], "get", "proxy") is False and short.allowed("u", [], "get", "stats") is True
    now[0] = 1.0
    assert short.allowed("u", [], "get", "proxy") is False and len(asked) == 7
    now[0] = 3.0
    assert short.allowed("u", [], "get", "proxy") is False and len(asked) == 8
    assert short.allowed("u", [], "get", "stats") is True and len(asked) == 8


@pytest.mark.parametrize("method, path, subresource", [
    ("GET", "/pods", "proxy"), ("POST", "/exec/default/p/c?command=id&stdout=1", "proxy"),
    ("GET", "/containerLogs/default/p/c", "proxy"), ("GET", "/stats/summary", "stats"), ("GET", "/healthz", "healthz")])
def test_a_certificate_of_the_cluster_ca_is_not_enough(served: Served, method: str, path: str,
                                                       subresource: str) -> None:
    """Issue 20.9: the scheduler's certificate (same CA) may not list pods, read logs or exec; the real
    kubelet's 403 names the node subresource. The API server's kubelet client and system:masters may."""
    r = requests.request(method, served.url + path, cert=served.certs.scheduler, verify=served.certs.ca, timeout=20)
    assert _status(r, 403) == (f"Forbidden (user=system:kube-scheduler, verb={'create' if method == 'POST' else 'get'}, "
                               f"resource=nodes, subresource(s)=[{subresource}])")
    for cert in (served.certs.client, served.certs.admin):
        r = requests.get(served.url + "/healthz", cert=cert, verify=served.certs.ca, timeout=20)
        assert r.status_code == 200 and r.text == "ok"


def test_only_clients_with_a_certificate_of_the_cluster_ca_get_in(served: Served) -> None:
    assert served.server.port > 0
    assert served.get("/healthz").text == "ok"
    # Without a client certificate, or with one of another CA, the server ends the handshake (under
    # TLS 1.3 the client may see that only as a closed connection, not as an SSLError).
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(served.url + "/healthz", verify=served.certs.ca, timeout=20)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(served.url + "/healthz", cert=served.certs.stranger, verify=served.certs.ca, timeout=20)


def test_unreadable_tls_files_are_refused_before_a_server_is_made(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="cannot load its TLS files") as e:
        serving_tls(str(tmp_path / "missing.crt"), certs.server[1], certs.ca)
    assert "missing.crt" in str(e.value)


def test_start_refuses_a_port_in_use(served: Served, certs: Certs) -> None:
    second = KubeletServer(PodTable(), provider=served.provider, node_name="hpk", host="127.0.0.1", port=served.server.port,
                           tls=certs.tls())
    with pytest.raises(Exception, match=f"cannot listen on 127.0.0.1:{served.server.port}"):
        second.start()
    assert served.get("/healthz").text == "ok"  # the first one is not disturbed


def test_pods_lists_the_raw_objects_and_runningpods_the_running_ones(served: Served) -> None:
    a = track(served, "a", ["main", "side"], running=("main",))
    b = track(served, "b", ["main"])
    items = served.get("/pods").json()["items"]
    assert sorted(items, key=lambda p: p["metadata"]["name"]) == [a.pod, b.pod]
    running = served.get("/runningpods/").json()
    assert running["kind"] == "PodList"
    assert [(p["metadata"]["name"], p["metadata"]["uid"], p["spec"]["containers"]) for p in running["items"]] == [
        ("a", "uid-a", [{"name": "main", "image": "busybox:main"}])]


def test_unknown_routes_pods_and_containers_are_404_statuses(served: Served) -> None:
    track(served, "a", ["main"], running=("main",))
    assert "/containerLogs/NS/POD/CONTAINER" in _status(served.get("/nothing"), 404)
    assert _status(served.get("/containerLogs/default/ghost/main"), 404) == \
        'pod "ghost" does not exist in namespace "default" on node hpk'
    assert _status(served.get("/containerLogs/other/a/main"), 404).startswith('pod "a" does not exist in namespace "other"')
    assert _status(served.get("/containerLogs/default/a/nope"), 404) == 'container "nope" not found in pod "a" (it has: main)'


def test_stats_summary_reads_the_jobs_cgroup_where_there_is_one(served: Served, tmp_path: Path) -> None:
    measured = track(served, "measured", ["main"], running=("main",), job_id="123")
    track(served, "elsewhere", ["main"], running=("main",), job_id="456")  # no cgroup here
    job = tmp_path / "cgroup" / "system.slice" / "slurmstepd.scope" / "job_123"
    _write(job / "cpu.stat", "usage_usec 5000\nuser_usec 4000\n")
    _write(job / "memory.current", "1048576\n")
    _write(job / "memory.stat", "anon 1000\ninactive_file 4096\n")
    summary = served.get("/stats/summary").json()
    assert summary["node"]["nodeName"] == "hpk" and "cpu" not in summary["node"]
    pods = {p["podRef"]["name"]: p for p in summary["pods"]}
    assert pods["measured"]["podRef"]["uid"] == measured.uid
    assert pods["measured"]["cpu"]["usageCoreNanoSeconds"] == 5_000_000
    assert "usageNanoCores" not in pods["measured"]["cpu"]  # one reading gives no rate
    assert (pods["measured"]["memory"]["usageBytes"], pods["measured"]["memory"]["workingSetBytes"]) == (1048576, 1044480)
    assert pods["measured"]["containers"] == [{"name": "main", "startTime": "2026-11-24T10:00:00Z"}]
    assert "cpu" not in pods["elsewhere"] and "memory" not in pods["elsewhere"]
    _write(job / "cpu.stat", "usage_usec 1005000\n")  # one more CPU second since the last reading
    again = {p["podRef"]["name"]: p for p in served.get("/stats/summary").json()["pods"]}
    assert again["measured"]["cpu"]["usageNanoCores"] > 0


def test_job_usage_reads_cgroup_v1_memory_and_cpuacct(tmp_path: Path) -> None:
    mem = tmp_path / "memory" / "slurm_vm" / "uid_1001" / "job_77"
    _write(mem / "memory.usage_in_bytes", "2000000\n")
    _write(mem / "memory.stat", "cache 5\ntotal_inactive_file 1000000\n")
    assert job_usage("77", root=tmp_path) == JobUsage(cpu_ns=None, memory=2000000, working_set=1000000)
    _write(tmp_path / "cpuacct" / "slurm_vm" / "uid_1001" / "job_77" / "cpuacct.usage", "123456789\n")
    assert job_usage("77", root=tmp_path).cpu_ns == 123456789
    assert job_usage("78", root=tmp_path) == JobUsage() and job_usage("../x", root=tmp_path) == JobUsage()


# ---------------------------------------------------------------------------- logs


def test_logs_whole_tail_limit_and_previous(served: Served) -> None:
    t = track(served, "a", ["main"], running=("main",))
    assert t.pod_dir is not None
    _write(t.pod_dir / "logs" / "main.log", "one\ntwo\nthree\n")
    base = "/containerLogs/default/a/main"
    assert served.get(base).text == "one\ntwo\nthree\n"
    assert served.get(base, params={"tailLines": 2}).text == "two\nthree\n"
    assert served.get(base, params={"tailLines": 0}).text == ""
    assert served.get(base, params={"tailLines": 10}).text == "one\ntwo\nthree\n"
    assert served.get(base, params={"tail": 1}).text == "three\n"  # the kubelet's legacy name
    assert served.get(base, params={"limitBytes": 5}).text == "one\nt"
    assert served.get(base, params={"tailLines": 2, "limitBytes": 6}).text == "two\nth"
    assert _status(served.get(base, params={"previous": "true"}), 400) == \
        'previous terminated container "main" in pod "a" not found'
    _write(t.pod_dir / "logs" / "main.previous.log", "before the restart\nlast line without newline")
    assert served.get(base, params={"previous": "true", "tailLines": 1}).text == "last line without newline"


def test_a_log_read_that_hangs_holds_up_only_its_own_stream(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """File reads run off the server's event loop: while one log read is stuck (a hung file system,
    here a read that waits on an event), other requests are answered."""
    t = track(served, "a", ["main"], running=("main",))
    _write(t.pod_dir / "logs" / "main.log", "one\ntwo\n")
    stuck, release = threading.Event(), threading.Event()

    def hanging_tail_offset(fh: BinaryIO, lines: int) -> int:
        stuck.set()
        assert release.wait(20)
        return tail_offset(fh, lines)

    monkeypatch.setattr(logs, "tail_offset", hanging_tail_offset)
    got: dict[str, str] = {}
    reader = threading.Thread(target=lambda: got.update(text=served.get("/containerLogs/default/a/main",
                                                                        params={"tailLines": 1}).text))
    reader.start()
    try:
        assert stuck.wait(20), "the log request never reached its read"
        assert served.get("/healthz").text == "ok"  # the loop is free while the read hangs
        assert served.get("/pods").json()["items"][0]["metadata"]["name"] == "a"
    finally:
        release.set()
        reader.join(20)
    assert got == {"text": "two\n"}


def test_log_options_are_validated_as_kubernetes_does(served: Served) -> None:
    track(served, "a", ["main"], running=("main",))
    base = "/containerLogs/default/a/main"
    assert _status(served.get(base, params={"sinceSeconds": 5, "sinceTime": "2026-11-24T10:00:00Z"}), 422) == \
        "at most one of `sinceTime` or `sinceSeconds` may be specified"
    assert "must be greater than or equal to 0" in _status(served.get(base, params={"tailLines": -1}), 422)
    assert "must be greater than 0" in _status(served.get(base, params={"limitBytes": 0}), 422)
    assert "not a boolean" in _status(served.get(base, params={"follow": "maybe"}), 400)
    assert "RFC 3339" in _status(served.get(base, params={"sinceTime": "yesterday"}), 400)
    assert "only stream=All" in _status(served.get(base, params={"stream": "Stderr"}), 400)


def test_a_container_that_has_not_started_has_no_log_yet(served: Served) -> None:
    track(served, "a", ["main"])
    assert _status(served.get("/containerLogs/default/a/main"), 400) == \
        'container "main" in pod "a" is waiting to start: ContainerCreating'


def test_timestamps_are_the_files_time_for_what_it_holds_and_since_selects_the_file(served: Served) -> None:
    t = track(served, "a", ["main"], running=("main",))
    assert t.pod_dir is not None
    log = t.pod_dir / "logs" / "main.log"
    _write(log, "one\ntwo\n")
    when = 1_790_000_000.25
    os.utime(log, (when, when))
    base = "/containerLogs/default/a/main"
    stamp = rfc3339nano(when)
    assert stamp == "2026-09-21T14:13:20.25Z"
    assert served.get(base, params={"timestamps": "true"}).text == f"{stamp} one\n{stamp} two\n"
    assert served.get(base, params={"sinceTime": "2026-09-21T14:13:21Z"}).text == ""  # last written before
    assert served.get(base, params={"sinceTime": "2026-09-21T14:13:20Z"}).text == "one\ntwo\n"
    assert served.get(base, params={"sinceSeconds": 60}).text == ""  # 2026-09 is long before now


def _follow(served: Served, path: str, params: dict[str, Any]) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def read() -> None:
        with served.get(path, params={**params, "follow": "true"}, stream=True) as r:
            assert r.status_code == 200
            for chunk in r.iter_content(chunk_size=None):
                got.append(chunk)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


def test_follow_streams_until_the_container_has_exited(served: Served) -> None:
    t = track(served, "a", ["main"], running=("main",))
    assert t.pod_dir is not None
    log = t.pod_dir / "logs" / "main.log"
    _write(log, "early\n")
    thread, got = _follow(served, "/containerLogs/default/a/main", {"timestamps": "true"})
    wait_for("early in the stream", lambda: b"early" in b"".join(got), timeout=10)
    with log.open("a") as fh:
        fh.write("later\n")
    wait_for("later in the stream", lambda: b"later" in b"".join(got), timeout=10)
    assert thread.is_alive()  # still running: the stream stays open
    with log.open("a") as fh:
        fh.write("last words\n")
    _write(t.pod_dir / "status" / "main.exitcode", "0\n")  # the job records the exit after the output
    thread.join(10)
    assert not thread.is_alive()
    lines = b"".join(got).decode().splitlines()
    assert [ln.split(" ", 1)[1] for ln in lines] == ["early", "later", "last words"]
    stamps = [ln.split(" ", 1)[0] for ln in lines]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", s) for s in stamps)
    assert stamps == sorted(stamps)


def test_follow_goes_on_across_a_restart_without_losing_lines(served: Served) -> None:
    t = track(served, "a", ["main"], restart="Always", running=("main",))
    assert t.pod_dir is not None
    logs = t.pod_dir / "logs"
    _write(logs / "main.log", "run 1\n")
    thread, got = _follow(served, "/containerLogs/default/a/main", {})
    wait_for("run 1 in the stream", lambda: b"run 1" in b"".join(got), timeout=10)
    with (logs / "main.log").open("a") as fh:  # written just before the job moves the file aside
        fh.write("run 1 end\n")
    _write(t.pod_dir / "status" / "main.exitcode", "1\n")  # Always: it runs again, the follow goes on
    (logs / "main.log").rename(logs / "main.previous.log")
    # the follower read the moved file to its end, and goes on (had it stopped, run 2 below never comes)
    wait_for("the end of run 1 in the stream", lambda: b"run 1 end" in b"".join(got), timeout=10)
    assert thread.is_alive()
    (t.pod_dir / "status" / "main.exitcode").unlink()
    _write(logs / "main.log", "run 2\n")
    wait_for("run 2 in the stream", lambda: b"run 2" in b"".join(got), timeout=10)
    _write(t.pod_dir / "status" / "pod.done", "0\n")
    thread.join(10)
    assert not thread.is_alive()
    assert b"".join(got) == b"run 1\nrun 1 end\nrun 2\n"


def test_follow_ends_when_the_pod_leaves_the_table(served: Served) -> None:
    t = track(served, "a", ["main"], running=("main",))
    assert t.pod_dir is not None
    _write(t.pod_dir / "logs" / "main.log", "open\n")
    thread, got = _follow(served, "/containerLogs/default/a/main", {})
    wait_for("the follow to stream", lambda: b"open" in b"".join(got), timeout=10)
    assert thread.is_alive()
    served.table.pop(t.uid)
    thread.join(10)
    assert not thread.is_alive()


def test_stop_ends_open_follows(certs: Certs, tmp_path: Path) -> None:
    table = PodTable()
    provider = provider_at(tmp_path)
    server = KubeletServer(table, provider=provider, node_name="hpk", host="127.0.0.1", port=0,
                           tls=certs.tls(),
                           follow_poll=0.05)
    server.start()
    served = Served(server, table, tmp_path, certs, provider)
    t = track(served, "a", ["main"], running=("main",))
    assert t.pod_dir is not None
    _write(t.pod_dir / "logs" / "main.log", "open\n")
    thread, got = _follow(served, "/containerLogs/default/a/main", {})
    wait_for("the follow to stream", lambda: b"open" in b"".join(got), timeout=10)
    server.stop()
    thread.join(60)
    assert not thread.is_alive()  # the follow of an open container's log never ends on its own


# ---------------------------------------------------------------------------- exec and attach


@dataclass
class FakeStep:
    """Stands for hpkctl.jobs.Step: a command that prints, echoes its stdin ("cat") and exits."""

    stdout: list[bytes]
    stderr: list[bytes]
    code: int
    cat: bool = False
    failure: str | None = None
    resized: list[tuple[int, int]] = field(default_factory=list)
    terminated: bool = False
    closed: bool = False
    _out: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)
    _err: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)
    _end: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        for d in self.stdout:
            self._out.put_nowait(d)
        for d in self.stderr:
            self._err.put_nowait(d)
        self._err.put_nowait(b"")
        if not self.cat:
            self._finish()

    def _finish(self) -> None:
        self._out.put_nowait(b"")
        self._end.set()

    async def read_stdout(self) -> bytes:
        return await self._out.get()

    async def read_stderr(self) -> bytes:
        return await self._err.get()

    async def write_stdin(self, data: bytes) -> None:
        self._out.put_nowait(data)

    def close_stdin(self) -> None:
        self._finish()

    def resize(self, width: int, height: int) -> None:
        self.resized.append((width, height))

    async def wait(self) -> int:
        await self._end.wait()
        return -9 if self.terminated else self.code

    def start_failure(self, code: int) -> str | None:
        return self.failure

    def terminate(self) -> None:
        if not self._end.is_set():
            self.terminated = True
            self._finish()

    def close(self) -> None:
        self.closed = True


class FakeExec:
    """Replaces Slurm.exec_step; remembers its calls and the step it made."""

    def __init__(self, **step: Any) -> None:
        self.step_args = step
        self.calls: list[dict[str, Any]] = []
        self.step: FakeStep | None = None

    async def __call__(self, job_id: str, **kw: Any) -> FakeStep:
        self.calls.append({"job_id": job_id, **kw})
        self.step = FakeStep(**self.step_args)
        return self.step


def _client_ssl(certs: Certs) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=certs.ca)
    ctx.load_cert_chain(*certs.client)
    return ctx


async def _ws(served: Served, path: str, *, protocols: tuple[str, ...] = ("v5.channel.k8s.io",),
              send: Sequence[bytes] = (), timeout: float = 20) -> tuple[str | None, list[tuple[int, bytes]]]:
    """Open the WebSocket, send ``send`` (channel byte first), collect (channel, data) until it closes."""
    got: list[tuple[int, bytes]] = []
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(served.url + path, ssl=_client_ssl(served.certs), protocols=protocols,
                                      timeout=aiohttp.ClientWSTimeout(ws_close=timeout)) as ws:
            for data in send:
                await ws.send_bytes(data)
            async with asyncio.timeout(timeout):
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        got.append((msg.data[0], msg.data[1:]))
            protocol = ws.protocol
    await asyncio.sleep(0.1)  # aiohttp closes TLS transports a moment after the session (its docs' advice)
    return protocol, got


def _exec_path(pod: str, container: str, *command: str, **flags: str) -> str:
    query = "&".join([*(f"command={c}" for c in command), *(f"{k}={v}" for k, v in flags.items())])
    return f"/exec/default/{pod}/{container}?{query}"


def _channel(got: list[tuple[int, bytes]], channel: int) -> bytes:
    return b"".join(d for c, d in got if c == channel)


def test_exec_streams_output_and_the_exit_code_on_the_error_channel(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    t = track(served, "a", ["main"], running=("main",), job_id="812")
    fake = FakeExec(stdout=[b"a-host\n", b"PRETTY_NAME=x\n"], stderr=[b"warning\n"], code=3)
    monkeypatch.setattr(served.slurm, "exec_step", fake)
    protocol, got = asyncio.run(_ws(served, _exec_path("a", "main", "sh", "-c", "exit%203", output="1", error="1")))
    assert protocol == "v5.channel.k8s.io"
    assert got[0] == (1, b"")  # the kubelet's "stream is up"
    assert _channel(got, 1) == b"a-host\nPRETTY_NAME=x\n" and _channel(got, 2) == b"warning\n"
    status = json.loads(_channel(got, 3))
    assert (status["status"], status["reason"], status["details"]["causes"]) == (
        "Failure", "NonZeroExitCode", [{"reason": "ExitCode", "message": "3"}])
    assert got[-1][0] == 3
    assert fake.calls == [{"job_id": "812", "pod_dir": t.pod_dir, "container": "main",
                           "command": ("sh", "-c", "exit 3"), "tty": False, "stdin": False}]
    assert fake.step is not None and fake.step.closed


def test_exec_command_lines_stay_out_of_the_kubelets_log(served: Served, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 20.18: an exec's words may hold a token (curl -H 'Authorization: ...'); neither the
    kubelet's exec line nor its access log shows them."""
    track(served, "a", ["main"], running=("main",), job_id="812")
    monkeypatch.setattr(served.slurm, "exec_step", FakeExec(stdout=[b"ok\n"], stderr=[], code=0))
    with caplog.at_level(logging.DEBUG):
        asyncio.run(_ws(served, _exec_path("a", "main", "echo", "Bearer-s3cr3t", output="1")))
    assert "exec in default/a/main: 2 word(s)" in caplog.text and "/exec/default/a/main" in caplog.text
    assert "s3cr3t" not in caplog.text


def test_exec_stdin_reaches_the_command_until_v5_closes_it(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    track(served, "a", ["main"], running=("main",))
    fake = FakeExec(stdout=[], stderr=[], code=0, cat=True)
    monkeypatch.setattr(served.slurm, "exec_step", fake)
    _, got = asyncio.run(_ws(served, _exec_path("a", "main", "cat", stdin="true", stdout="true", stderr="true"),
                             send=[b"\x00hello ", b"\x00world\n", b"\xff\x00"]))
    assert _channel(got, 1) == b"hello world\n"
    assert json.loads(_channel(got, 3)) == {"metadata": {}, "status": "Success"}
    assert fake.calls[0]["stdin"] is True


def test_exec_with_a_tty_passes_resizes_and_has_no_stderr(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    track(served, "a", ["main"], running=("main",))
    fake = FakeExec(stdout=[], stderr=[b"srun said something\n"], code=0, cat=True)
    monkeypatch.setattr(served.slurm, "exec_step", fake)
    resize = b"\x04" + json.dumps({"Width": 120, "Height": 40}).encode()
    _, got = asyncio.run(_ws(served, _exec_path("a", "main", "sh", input="1", output="1", error="1", tty="1"),
                             send=[resize, b"\x00ls\r", b"\xff\x00"]))
    assert fake.calls[0]["tty"] is True and fake.step is not None and fake.step.resized == [(120, 40)]
    assert _channel(got, 1) == b"ls\r" and _channel(got, 2) == b""


def test_older_protocols_v4_json_and_channel_k8s_io_text(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    track(served, "a", ["main"], running=("main",))
    monkeypatch.setattr(served.slurm, "exec_step", FakeExec(stdout=[b"x"], stderr=[], code=2))
    path = _exec_path("a", "main", "false", output="1")
    protocol, got = asyncio.run(_ws(served, path, protocols=("v4.channel.k8s.io",)))
    assert protocol == "v4.channel.k8s.io" and json.loads(_channel(got, 3))["details"]["causes"][0]["message"] == "2"
    protocol, got = asyncio.run(_ws(served, path, protocols=("channel.k8s.io",)))
    assert protocol == "channel.k8s.io"
    assert _channel(got, 3).decode().startswith("command terminated with non-zero exit code")
    monkeypatch.setattr(served.slurm, "exec_step", FakeExec(stdout=[b"x"], stderr=[], code=0))
    _, got = asyncio.run(_ws(served, path, protocols=("channel.k8s.io",)))
    assert (1, b"x") in got and 3 not in [c for c, _ in got]  # success: nothing on the error channel


def test_a_step_srun_could_not_start_is_a_failure_with_srun_s_words(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    track(served, "a", ["main"], running=("main",))
    monkeypatch.setattr(served.slurm, "exec_step", FakeExec(stdout=[], stderr=[], code=1,
                                                           failure="Unable to create step for job 4711: Job/step already completing or completed"))
    _, got = asyncio.run(_ws(served, _exec_path("a", "main", "true", output="1")))
    status = json.loads(_channel(got, 3))
    assert status["status"] == "Failure" and status["reason"] == "InternalError"
    assert status["message"] == ("srun could not start the command: Unable to create step for job 4711: "
                                 "Job/step already completing or completed")


def test_a_client_that_leaves_cancels_the_step(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    track(served, "a", ["main"], running=("main",))
    fake = FakeExec(stdout=[b"running\n"], stderr=[], code=0, cat=True)  # never ends by itself
    monkeypatch.setattr(served.slurm, "exec_step", fake)

    async def leave() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(served.url + _exec_path("a", "main", "sleep", output="1", input="1"),
                                          ssl=_client_ssl(served.certs), protocols=("v5.channel.k8s.io",)) as ws:
                msg = await ws.receive()
                assert msg.data == b"\x01"
        await asyncio.sleep(0.1)

    asyncio.run(leave())
    wait_for("the step ended", lambda: fake.step is not None and fake.step.terminated and fake.step.closed, timeout=10)


def test_exec_refusals_before_the_upgrade(served: Served) -> None:
    t = track(served, "a", ["main", "done"], running=("main",))
    assert t.pod_dir is not None
    _write(t.pod_dir / "status" / "done.started", "2026-11-24T10:00:00Z\n")
    _write(t.pod_dir / "status" / "done.exitcode", "0\n")
    spdy = served.get(_exec_path("a", "main", "ls", output="1"), headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1",
                                                                         "X-Stream-Protocol-Version": "v4.channel.k8s.io"})
    assert _status(spdy, 501) == ("not supported: this kubelet speaks WebSocket (v5.channel.k8s.io) only; use kubectl "
                                  ">= 1.30 against an API server >= 1.36 with the node's declaredFeatures "
                                  "ExtendWebSocketsToKubelet")
    assert "need a WebSocket upgrade" in _status(served.get(_exec_path("a", "main", "ls", output="1")), 400)
    ws_headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                  "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    assert "this kubelet speaks v5.channel.k8s.io" in _status(
        served.get(_exec_path("a", "main", "ls", output="1"), headers={**ws_headers, "Sec-WebSocket-Protocol": "v2.portforward.k8s.io"}), 400)
    assert _status(served.get(_exec_path("ghost", "main", "ls", output="1"), headers=ws_headers), 404).startswith('pod "ghost"')
    assert "at least 1 of stdin, stdout, stderr" in _status(served.get(_exec_path("a", "main", "ls"), headers=ws_headers), 400)
    assert "no command given" in _status(served.get(_exec_path("a", "main", output="1"), headers=ws_headers), 400)
    assert _status(served.get(_exec_path("a", "done", "ls", output="1"), headers=ws_headers), 400) == \
        'container "done" in pod "a" is not running: it has terminated (exit code 0)'


def test_attach_streams_new_output_until_the_container_ends_and_refuses_stdin(served: Served,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    t = track(served, "a", ["main"], running=("main",))
    assert t.pod_dir is not None
    log = t.pod_dir / "logs" / "main.log"
    _write(log, "from before the attach\n")
    ws_headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                  "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    refusal = _status(served.get("/attach/default/a/main?input=1&output=1", headers=ws_headers), 400)
    assert "no stdin" in refusal and "kubectl exec -it" in refusal

    positioned = threading.Event()  # the attach has taken the log's end as its start

    def spy(fh: BinaryIO, lines: int) -> int:
        offset = tail_offset(fh, lines)
        positioned.set()
        return offset

    monkeypatch.setattr(logs, "tail_offset", spy)

    def later() -> None:
        positioned.wait(20)
        with log.open("a") as fh:
            fh.write("after the attach\n")
        _write(t.pod_dir / "status" / "main.exitcode", "0\n")  # type: ignore[operator]

    writer = threading.Thread(target=later)
    writer.start()
    _, got = asyncio.run(_ws(served, "/attach/default/a/main?output=1&error=1"))
    writer.join()
    assert got[0] == (1, b"") and _channel(got, 1) == b"after the attach\n"
    assert json.loads(_channel(got, 3)) == {"metadata": {}, "status": "Success"}

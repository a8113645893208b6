"""The bootstrap inside the control-plane job (hpkctl/controlplane/bootstrap.py, ``hpkctl controlplane run``).

The real etcd (Debian's ``etcd-server``) and, for the binaries this machine cannot have, the stand-ins
``ci/standin/kube-apiserver`` (started under that name, it takes exactly the real flags the bootstrap
passes), ``kube-controller-manager`` and ``coredns``, first on PATH. ``hpkctl controlplane run`` runs as a
real process and gets real signals. Checked: start order and health waits (each component starts only
after the previous one answered healthy: the bootstrap's log and the stand-ins' own time-stamped logs),
the published kubeconfigs with the real kubectl (admin; the kubelet's identity is ``system:node:hpk``),
the profile's ports, the flags for a kubelet that is away for a while, SIGTERM stopping everything in
reverse order, a restart keeping the CA, the credentials, the objects and etcd's data, and errors that
name the component, its log and the fix.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hpkctl.typed import ValidationError

from hpkctl.controlplane import components as comp
from hpkctl.controlplane import objects
from hpkctl.controlplane.pki import ensure_pki
from hpkctl.controlplane.statedir import Layout, read_endpoint
from hpkctl.kube.address import node_hosts
from hpkctl.runtime.supervise import Supervisor
from hpkctl.sites.schema import ControlPlaneSection, SiteProfile
from tests.support.ci import REPO, missing
from tests.support.kubeapi import listen_port, require_kubectl, require_modules
from tests.support.waiting import wait_for

STANDIN = REPO / "ci" / "standin"
ORDER = ["etcd", "kube-apiserver", "kube-controller-manager", "coredns"]


# ------------------------------------------------------------------------------ the profile section


def test_controlplane_section_defaults() -> None:
    cp = SiteProfile(name="x").controlplane
    assert cp.state_dir == "~/.hpk/controlplane"
    assert (cp.apiserver_port, cp.etcd_client_port, cp.etcd_peer_port) == (6443, 2379, 2380)
    assert (cp.controller_manager_port, cp.coredns_port, cp.coredns_ready_port) == (10257, 10053, 8181)
    assert (cp.service_cidr, cp.cluster_dns_ip, cp.dns_upstream) == ("10.96.0.0/12", "10.96.0.10", ["/etc/resolv.conf"])


@pytest.mark.parametrize(("values", "message"), [
    ({"coredns_port": 2379}, "etcd_client_port and coredns_port are both 2379"),
    ({"cluster_dns_ip": "10.100.0.10", "service_cidr": "10.96.0.0/16"}, "must lie inside service_cidr"),
    ({"cluster_dns_ip": "10.96.0.1"}, "not be its network address or its first address"),
    ({"cluster_dns_ip": "ten"}, "is not an IP address"),
    ({"service_cidr": "10.96.0.1/12"}, "host bits zero"),
    ({"service_cidr": "10.96.0.0/12,10.97.0.0/16"}, "different IP families"),
    ({"dns_upstream": ["dns.google"]}, "neither an IP address"),
    ({"dns_upstream": ["8.8.8.8:99999"]}, "not a number in 1-65535"),
    ({"dns_upstream": []}, "dns_upstream is empty"),
    ({"apiserver_port": 0}, "greater than or equal to 1"),
])
def test_controlplane_section_refuses(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        ControlPlaneSection(**values)


def test_controlplane_section_accepts_upstreams_and_dual_stack() -> None:
    cp = ControlPlaneSection(dns_upstream=["8.8.8.8", "9.9.9.9:53", "[2001:db8::1]:5353", "2001:db8::2", "/etc/r.conf"],
                             service_cidr="10.96.0.0/12,fd00:10:96::/112")
    assert len(cp.dns_upstream) == 5


# ------------------------------------------------------------------------------ flags (unit)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return ensure_pki(tmp_path_factory.mktemp("pki") / "pki", hosts=["node1", "192.0.2.7"])


PORTS = comp.Ports(apiserver=6443, etcd_client=2379, etcd_peer=2380, controller_manager=10257, coredns=10053,
                   coredns_ready=8181)


def _flags(argv: list[str]) -> dict[str, str]:
    assert all(a.startswith("--") and "=" in a for a in argv[1:]), argv  # --flag=value throughout
    return dict(a[2:].split("=", 1) for a in argv[1:])


def test_kubelet_away_flags_have_the_chosen_values(pki: Any) -> None:
    """A kubelet away for a while must not make the control plane evict (and so cancel) every pod."""
    api = _flags(comp.apiserver_argv("kube-apiserver", pki=pki, ports=PORTS, advertise_address="192.0.2.7",
                                     service_cidr="10.96.0.0/12", cluster_domain="cluster.local"))
    assert comp.TOLERATION_SECONDS == 365 * 24 * 3600
    assert api["default-not-ready-toleration-seconds"] == api["default-unreachable-toleration-seconds"] == "31536000"
    assert "DefaultTolerationSeconds" in api["enable-admission-plugins"].split(",")
    kcm = _flags(comp.controller_manager_argv("kube-controller-manager", pki=pki, ports=PORTS,
                                              kubeconfig=Path("/k")))
    assert kcm["node-monitor-grace-period"] == kcm["node-startup-grace-period"] == "5m0s"
    assert kcm["node-monitor-period"] == "5s"


def test_apiserver_flags(pki: Any) -> None:
    f = _flags(comp.apiserver_argv("kube-apiserver", pki=pki, ports=PORTS, advertise_address="192.0.2.7",
                                   service_cidr="10.96.0.0/12", cluster_domain="hpk.local"))
    assert f["etcd-servers"] == "https://127.0.0.1:2379"
    assert (f["etcd-certfile"], f["etcd-keyfile"]) == (str(pki.apiserver_etcd_client.cert), str(pki.apiserver_etcd_client.key))
    assert f["etcd-cafile"] == str(pki.etcd_ca.cert)
    assert (f["secure-port"], f["bind-address"], f["advertise-address"]) == ("6443", "0.0.0.0", "192.0.2.7")
    assert (f["tls-cert-file"], f["client-ca-file"]) == (str(pki.apiserver.cert), str(pki.ca.cert))
    assert f["kubelet-client-certificate"] == str(pki.apiserver_kubelet_client.cert)
    assert f["service-account-key-file"] == str(pki.service_account_pub)
    assert f["service-account-signing-key-file"] == str(pki.service_account_key)
    assert f["service-account-issuer"] == "https://kubernetes.default.svc.hpk.local"
    assert f["authorization-mode"] == "Node,RBAC"
    assert set(f["enable-admission-plugins"].split(",")) >= {"NodeRestriction", "MutatingAdmissionPolicy",
                                                             "ValidatingAdmissionPolicy"}
    assert f["requestheader-client-ca-file"] == str(pki.front_proxy_ca.cert)
    assert f["requestheader-allowed-names"] == "front-proxy-client"
    assert f["proxy-client-cert-file"] == str(pki.front_proxy_client.cert)


def test_controller_manager_etcd_and_corefile(pki: Any, tmp_path: Path) -> None:
    kcm = _flags(comp.controller_manager_argv("kube-controller-manager", pki=pki, ports=PORTS,
                                              kubeconfig=Path("/k")))
    assert (kcm["cluster-signing-cert-file"], kcm["cluster-signing-key-file"]) == (str(pki.ca.cert), str(pki.ca.key))
    assert kcm["service-account-private-key-file"] == str(pki.service_account_key)
    assert (kcm["root-ca-file"], kcm["use-service-account-credentials"]) == (str(pki.ca.cert), "true")
    assert (kcm["bind-address"], kcm["secure-port"]) == ("127.0.0.1", "10257")
    etcd = _flags(comp.etcd_argv("etcd", pki=pki, data_dir=tmp_path, ports=PORTS))
    assert etcd["listen-client-urls"] == "https://127.0.0.1:2379" and etcd["listen-peer-urls"] == "https://127.0.0.1:2380"
    assert etcd["client-cert-auth"] == etcd["peer-client-cert-auth"] == "true"
    assert etcd["trusted-ca-file"] == str(pki.etcd_ca.cert)
    text = comp.corefile(ports=PORTS, cluster_domain="cluster.local", kubeconfig=Path("/a b/k"),
                         upstream=["/etc/resolv.conf", "9.9.9.9"])
    assert text.startswith(".:10053 {\n") and "ready 127.0.0.1:8181" in text
    assert 'kubeconfig "/a b/k"' in text and "forward . /etc/resolv.conf 9.9.9.9" in text
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in text


def test_node_hosts_has_names_and_address() -> None:
    hosts = node_hosts("192.0.2.9")
    assert socket.gethostname() in hosts and hosts[-1] == "192.0.2.9" and len(hosts) == len(set(hosts))


# ------------------------------------------------------------------------------ the stand-ins are strict


def _standin(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(STANDIN / name), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


@pytest.mark.standin
def test_apiserver_standin_takes_exactly_the_bootstraps_flags(pki: Any) -> None:
    require_modules()
    sys.path.insert(0, str(STANDIN))
    try:
        from kubeapi import realflags  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(STANDIN))
    argv = comp.apiserver_argv("kube-apiserver", pki=pki, ports=PORTS, advertise_address="192.0.2.7",
                               service_cidr="10.96.0.0/12", cluster_domain="cluster.local")
    values = realflags.parse(argv[1:])
    assert set(values) == set(realflags.FLAGS) == {a[2:].split("=")[0] for a in argv[1:]}
    assert values["secure-port"] == 6443 and values["default-unreachable-toleration-seconds"] == 31536000
    good = argv[1:]
    for bad, message in [
        ([*good, "--insecure-port=8080"], "unknown flag: --insecure-port"),
        ([a if not a.startswith("--secure-port") else "--secure-port=http" for a in good], 'invalid argument "http"'),
        ([a if not a.startswith("--enable-admission") else "--enable-admission-plugins=NodeRestriction,Nope"
          for a in good], 'admission plugin "Nope" is unknown'),
        ([a if not a.startswith("--tls-cert-file") else "--tls-cert-file=/nonexistent" for a in good],
         "open /nonexistent"),
        ([a if not a.startswith("--authorization-mode") else "--authorization-mode=Node,Magic" for a in good],
         'authorization mode "Magic" is unknown'),
        ([a if not a.startswith("--default-unreachable") else "--default-unreachable-toleration-seconds=1y"
          for a in good], "invalid syntax"),
        ([a for a in good if not a.startswith("--etcd-servers")], "--etcd-servers must be specified"),
        ([*good, "extra"], "does not take any arguments"),
        ([a if not a.startswith("--tls-private-key-file") else f"--tls-private-key-file={pki.admin.key}"
          for a in good], "private key does not match"),
    ]:
        with pytest.raises(realflags.FlagError, match=re.escape(message)):
            realflags.parse(bad)
    # the binary itself: exit 1 with kube-apiserver's "Error: ..." line
    r = _standin("kube-apiserver", *good, "--storage-backend=etcd3")
    assert r.returncode == 1 and "Error: unknown flag: --storage-backend" in r.stderr


@pytest.mark.standin
def test_controller_manager_and_coredns_standins_are_strict(pki: Any, tmp_path: Path) -> None:
    require_modules()
    kc = tmp_path / "k.kubeconfig"
    kc.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": {}}]}))
    argv = comp.controller_manager_argv("x", pki=pki, ports=PORTS, kubeconfig=kc)[1:]
    for extra, message in [(["--pod-eviction-timeout=5m"], "unknown flag: --pod-eviction-timeout"),
                           (["--node-monitor-grace-period=5 minutes"], "invalid duration"),
                           (["--leader-elect=maybe"], "ParseBool")]:
        r = _standin("kube-controller-manager", *argv, *extra)
        assert r.returncode == 1 and message in r.stderr, r.stderr
    r = _standin("kube-controller-manager", *[a for a in argv if "signing-key" not in a])
    assert r.returncode == 1 and "must be given together" in r.stderr
    good = comp.corefile(ports=PORTS, cluster_domain="cluster.local", kubeconfig=kc, upstream=["/etc/resolv.conf"])
    for text, message in [(good.replace("    loop\n", "    rewrite name a b\n"), "Unknown directive 'rewrite'"),
                          (good.replace("pods insecure", "pods sometimes"), "expected disabled, insecure or verified"),
                          (good.replace("/etc/resolv.conf", "dns.google"), "not an IP address or file"),
                          (good.replace(".:10053", ".:dns"), "expected .:PORT"),
                          (good.replace("        kubeconfig", "        kubecfg"), "unknown property 'kubecfg'")]:
        (tmp_path / "Corefile").write_text(text)
        r = _standin("coredns", "-conf", str(tmp_path / "Corefile"))
        assert r.returncode == 2 and message in r.stderr, r.stderr
    r = _standin("coredns", "-conf", str(tmp_path / "Corefile"), "-dns.port=53")
    assert r.returncode == 2 and "takes -conf only" in r.stderr


# ------------------------------------------------------------------------------ the bootstrap, for real


def _require_etcd() -> None:
    if not (shutil.which("etcd") and shutil.which("etcdctl")):
        missing("etcd is not installed", fix="apt-get install etcd-server etcd-client (ci/setup does)")


@dataclass
class ControlPlane:
    """One ``hpkctl controlplane run`` in ``root`` with its own free ports and the stand-ins on PATH."""

    root: Path
    ports: dict[str, int]
    extra_path: list[Path] = field(default_factory=list)
    timeout: float = 60.0
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0
    state_dir: Path | None = None  # default: root/state

    @property
    def state(self) -> Path:
        return self.state_dir or self.root / "state"

    @property
    def layout(self) -> Layout:
        return Layout(self.state)

    @property
    def log(self) -> Path:
        return self.root / f"bootstrap.{self.runs}.log"

    def site(self, bin_dir: str = "") -> Path:
        lines = ['extends = "ci"', "[controlplane]", f'state_dir = "{self.state}"',
                 f'bin_dir = "{bin_dir}"',  # empty: from PATH (the stand-ins and the fakes of extra_path)
                 f"start_timeout = {self.timeout}", *(f"{k} = {v}" for k, v in self.ports.items())]
        path = self.root / "site.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def env(self) -> dict[str, str]:
        path = os.pathsep.join([*map(str, self.extra_path), str(STANDIN), os.environ["PATH"]])
        return {**os.environ, "PATH": path, "HPK_STANDIN_APISERVER_DIR": str(self.root / "apiserver-standin"),
                "HOME": str(self.root / "home")}

    def start(self) -> "ControlPlane":
        self.runs += 1
        site = self.site()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "hpkctl", "controlplane", "run", "--site", str(site)],
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=self.env(),
                                         start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ep = read_endpoint(self.state)
            if ep is not None:
                return ep
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"hpkctl controlplane run ended ({self.proc.returncode}):\n{self.text()}")
            time.sleep(0.1)
        pytest.fail(f"no endpoint within {timeout} s:\n{self.text()}")

    def wait_exit(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait_exit()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def pids(self) -> dict[str, int]:
        """Component → pid, from this run's "NAME: started (pid N)" lines."""
        return {m[1]: int(m[2]) for m in re.finditer(r"hpkctl\.supervise INFO (\S+): started \(pid (\d+)\)", self.text())}

    def cleanup(self) -> None:
        """Never leave a process behind, whatever a test did."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for n in range(1, self.runs + 1):
            log = self.root / f"bootstrap.{n}.log"
            for m in re.finditer(r"started \(pid (\d+)\)", log.read_text(errors="replace") if log.exists() else ""):
                try:
                    os.kill(int(m[1]), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _ports() -> dict[str, int]:
    names = ("apiserver_port", "etcd_client_port", "etcd_peer_port", "controller_manager_port", "coredns_port",
             "coredns_ready_port")
    ports: dict[str, int] = {}
    while len(set(ports.values())) < len(names):
        ports = {n: listen_port() for n in names}
    return ports


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(require_kubectl()), "--kubeconfig", str(kubeconfig), *args], capture_output=True,
                       text=True, timeout=60)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def etcdctl(cp: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    pki = cp.layout.pki
    return subprocess.run(["etcdctl", f"--endpoints=https://127.0.0.1:{cp.ports['etcd_client_port']}",
                           f"--cacert={pki / 'etcd' / 'ca.crt'}", f"--cert={pki / 'apiserver-etcd-client.crt'}",
                           f"--key={pki / 'apiserver-etcd-client.key'}", *args],
                          capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"})


def _times(text: str, pattern: str) -> datetime:
    """When the bootstrap logged a line matching ``pattern`` (its logging timestamp)."""
    m = re.search(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*" + pattern, text, re.M)
    assert m, f"no line {pattern!r} in:\n{text}"
    return datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f")


def _standin_time(log: Path, pattern: str) -> datetime:
    """When a stand-in logged a line matching ``pattern`` (its own timestamp)."""
    m = re.search(r"^(\S+) \S+ stand-in: .*" + pattern, log.read_text(), re.M)
    assert m, f"no line {pattern!r} in {log}:\n{log.read_text()}"
    return datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S.%f")


@pytest.fixture
def controlplane(tmp_path: Path) -> Iterator[ControlPlane]:
    _require_etcd()
    require_modules()
    cp = ControlPlane(tmp_path, _ports())
    try:
        yield cp
    finally:
        cp.cleanup()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, dict[str, Any]]]:
    """One control plane, ready, shared by the read-only tests below."""
    _require_etcd()
    require_modules()
    cp = ControlPlane(tmp_path_factory.mktemp("cp"), _ports())
    try:
        cp.start()
        yield cp, cp.wait_ready()
    finally:
        cp.cleanup()


@pytest.mark.standin
def test_order_and_health_waits(running: tuple[ControlPlane, dict[str, Any]]) -> None:
    cp, _ = running
    # the fixture returns once the endpoint is published; "control plane ready" is logged just after
    text = wait_for("the control plane's ready line", lambda: t if "control plane ready" in (t := cp.text()) else None,
                    timeout=30)
    # each component is started only after the previous one answered its health probe
    steps = [("PKI in", "etcd: starting"), ("etcd: healthy", "kube-apiserver: starting"),
             ("kube-apiserver: healthy", "kube-controller-manager: starting"),
             ("kube-controller-manager: healthy", "coredns: starting"),
             ("coredns: healthy", "services rule: admission policies"),
             ("services rule: admission policies", "hpk-scheduler: started"),
             ("hpk-scheduler: running", "published .*endpoint"), ("published", "control plane ready")]
    for before, after in steps:
        assert text.index(re.search(before, text)[0]) < text.index(re.search(after, text)[0]), (before, after)  # type: ignore[index]
    assert "etcd: healthy after" in text and "(https://127.0.0.1:%d/health)" % cp.ports["etcd_client_port"] in text
    assert "/readyz)" in text and "/healthz)" in text and "/ready)" in text
    # the components' own clocks agree: the API server reached a healthy etcd, the controller manager
    # and CoreDNS reached the API server, each after the bootstrap saw the previous one healthy
    logs = cp.layout.logs
    assert _standin_time(logs / "kube-apiserver.log", r"etcd .*/health answered \{\"health\":\s*\"true\"") >= \
        _times(text, "etcd: healthy")
    assert _standin_time(logs / "kube-controller-manager.log", "read /api/v1/namespaces/kube-system") >= \
        _times(text, "kube-apiserver: healthy")
    assert _standin_time(logs / "coredns.log", "read /api/v1/namespaces") >= \
        _times(text, "kube-controller-manager: healthy")
    assert set(cp.pids()) == set(ORDER)
    status = json.loads(cp.layout.status.read_text())
    assert status["phase"] == "ready" and status["pid"] == cp.proc.pid  # type: ignore[union-attr]


@pytest.mark.standin
def test_published_kubeconfigs_work_and_are_scoped(running: tuple[ControlPlane, dict[str, Any]]) -> None:
    cp, ep = running
    lay = cp.layout
    assert ep["server"] == f"https://{ep['address']}:{cp.ports['apiserver_port']}" and ep["node_name"] == "hpk"
    assert ep["kubeconfigs"] == {u: str(lay.kubeconfig(u)) for u in ("admin", "kubelet", "scheduler")}
    assert ep["pid"] == cp.proc.pid  # type: ignore[union-attr]
    for f in (lay.endpoint, *map(lay.kubeconfig, ("admin", "kubelet", "scheduler"))):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    for d in (lay.root, lay.pki, lay.etcd_data, lay.logs, lay.run):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    out = kubectl(lay.kubeconfig("admin"), "get", "ns").stdout
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= {ln.split()[0] for ln in out.splitlines()[1:]}
    who = {}
    for user in ("admin", "kubelet", "scheduler"):
        doc = yaml.safe_load(lay.kubeconfig(user).read_text())
        assert doc["clusters"][0]["cluster"]["server"] == ep["server"]
        r = kubectl(lay.kubeconfig(user), "auth", "whoami", "-o", "json")
        who[user] = json.loads(r.stdout)["status"]["userInfo"]
        who[user]["cert"] = doc["users"][0]["user"]["client-certificate-data"]
    assert who["kubelet"]["username"] == "system:node:hpk" and "system:nodes" in who["kubelet"]["groups"]
    assert who["admin"]["username"] == "kubernetes-admin" and "system:masters" in who["admin"]["groups"]
    assert who["scheduler"]["username"] == "system:kube-scheduler"
    assert who["kubelet"]["cert"] != who["admin"]["cert"]
    assert "system:masters" not in who["kubelet"]["groups"] + who["scheduler"]["groups"]
    # the serving certificate names the address the kubeconfigs dial (kubectl verified it above), and
    # the CA in them is the PKI's
    ca = base64.b64decode(yaml.safe_load(lay.kubeconfig("kubelet").read_text())["clusters"][0]["cluster"]
                          ["certificate-authority-data"])
    assert ca == (lay.pki / "ca.crt").read_bytes()


@pytest.mark.standin
def test_cluster_objects_dns_and_tolerations(running: tuple[ControlPlane, dict[str, Any]]) -> None:
    cp, ep = running
    admin = cp.layout.kubeconfig("admin")
    svc = json.loads(kubectl(admin, "get", "svc", "-n", "kube-system", "kube-dns", "-o", "json").stdout)
    assert svc["spec"]["clusterIP"] == "10.96.0.10"
    assert {(p["protocol"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]} == \
        {("UDP", 53, cp.ports["coredns_port"]), ("TCP", 53, cp.ports["coredns_port"])}
    eps = json.loads(kubectl(admin, "get", "endpoints", "-n", "kube-system", "kube-dns", "-o", "json").stdout)
    assert eps["subsets"][0]["addresses"] == [{"ip": ep["address"]}]
    assert {p["port"] for p in eps["subsets"][0]["ports"]} == {cp.ports["coredns_port"]}
    for kind, name in (("mutatingadmissionpolicy", objects.HEADLESS_POLICY),
                       ("mutatingadmissionpolicybinding", objects.HEADLESS_POLICY),
                       ("validatingadmissionpolicy", objects.SERVICE_TYPES_POLICY),
                       ("validatingadmissionpolicybinding", objects.SERVICE_TYPES_POLICY)):
        kubectl(admin, "get", kind, name)
    role = json.loads(kubectl(admin, "get", "clusterrolebinding", "system:coredns", "-o", "json").stdout)
    assert role["subjects"] == [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]
    # the Corefile CoreDNS runs with, and its kubeconfig: a token of kube-system/coredns, not a certificate
    corefile = (cp.layout.run / "Corefile").read_text()
    assert corefile.startswith(f".:{cp.ports['coredns_port']} {{") and "kubernetes cluster.local" in corefile
    user = yaml.safe_load((cp.layout.run / "coredns.kubeconfig").read_text())["users"][0]["user"]
    assert set(user) == {"token"}
    claims = json.loads(base64.urlsafe_b64decode(user["token"].split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:kube-system:coredns"
    assert claims["iss"] == "https://kubernetes.default.svc.cluster.local"
    # DefaultTolerationSeconds with the bootstrap's values: a pod tolerates an absent kubelet for a year
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tol", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    r = subprocess.run([str(require_kubectl()), "--kubeconfig", str(admin), "create", "-f", "-", "-o", "json"],
                       input=json.dumps(pod), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    tols = {t["key"]: t.get("tolerationSeconds") for t in json.loads(r.stdout)["spec"]["tolerations"]}
    assert tols == {"node.kubernetes.io/not-ready": 31536000, "node.kubernetes.io/unreachable": 31536000}


def _create(kubeconfig: Path, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(require_kubectl()), "--kubeconfig", str(kubeconfig), "create", "-f", "-", "-o", "json"],
                       input=json.dumps(obj), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def _service(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"port": 80}], **spec}}


@pytest.mark.standin
def test_services_become_headless_and_node_ports_are_reported(running: tuple[ControlPlane, dict[str, Any]]) -> None:
    """The services rule as the API server evaluates it (the stand-in runs the policies' CEL)."""
    cp, _ = running
    admin = cp.layout.kubeconfig("admin")
    for svc in (_service("plain", selector={"app": "a"}), _service("given-ip", clusterIP="10.96.7.7",
                                                                  clusterIPs=["10.96.7.7"])):
        r = _create(admin, svc)
        spec = json.loads(r.stdout)["spec"]
        assert (spec["clusterIP"], spec["clusterIPs"], r.stderr) == ("None", ["None"], ""), svc
    # NodePort/LoadBalancer: admitted as they are, with a warning kubectl prints
    for kind in ("NodePort", "LoadBalancer"):
        r = _create(admin, _service(kind.lower(), type=kind))
        assert json.loads(r.stdout)["spec"]["type"] == kind
        assert f"Warning: Validation failed for ValidatingAdmissionPolicy '{objects.SERVICE_TYPES_POLICY}'" in r.stderr
        assert f"Service default/{kind.lower()} has type {kind}: hpk has no kube-proxy" in r.stderr
    r = _create(admin, {**_service("ext", type="ExternalName", externalName="example.org")})
    assert "clusterIP" not in json.loads(r.stdout)["spec"] and r.stderr == ""
    # kube-dns keeps the cluster DNS IP even when made again after the rule exists (a later start)
    kubectl(admin, "delete", "service", "-n", "kube-system", "kube-dns")
    r = _create(admin, _service("kube-dns", "kube-system", clusterIP="10.96.0.10"))
    assert json.loads(r.stdout)["spec"]["clusterIP"] == "10.96.0.10"
    # any other kube-system Service is made headless
    r = _create(admin, _service("other", "kube-system"))
    assert json.loads(r.stdout)["spec"]["clusterIP"] == "None"


@pytest.mark.standin
def test_sigterm_stops_in_reverse_order_and_a_restart_keeps_objects_and_credentials(controlplane: ControlPlane) -> None:
    cp = controlplane
    cp.start()
    ep = cp.wait_ready()
    lay = cp.layout
    admin_before = lay.kubeconfig("admin").read_bytes()
    kubelet_before = lay.kubeconfig("kubelet").read_bytes()
    ca_before = (lay.pki / "ca.crt").read_bytes()
    kept = cp.root / "old-admin.kubeconfig"
    kept.write_bytes(admin_before)
    os.chmod(kept, 0o600)
    kubectl(kept, "create", "configmap", "before-restart", "--from-literal=k=v")
    r = etcdctl(cp, "put", "/hpk-test/marker", "still-here")
    assert r.returncode == 0, r.stderr
    pids = cp.pids()
    assert set(pids) == set(ORDER)

    assert cp.stop(signal.SIGTERM) == 0
    text = cp.text()
    stopping = _stopping(text)
    assert stopping == ["hpk-scheduler", "coredns", "kube-controller-manager", "kube-apiserver", "etcd"], text
    for name in ORDER:
        assert re.search(rf"INFO {name}: stopped \((exit status 0|killed by SIGTERM)\)", text), (name, text)
        assert not _alive(pids[name]), name
    # each stand-in logged its own stop, in reverse order of start
    stops = {n: _standin_time(lay.log(n), "stopped") for n in ("coredns", "kube-controller-manager", "kube-apiserver")}
    assert stops["coredns"] <= stops["kube-controller-manager"] <= stops["kube-apiserver"]
    assert not lay.endpoint.exists()
    assert json.loads(lay.status.read_text())["phase"] == "stopped"

    cp.start()
    ep2 = cp.wait_ready()
    assert ep2["server"] == ep["server"] and ep2["pid"] != ep["pid"]
    assert (lay.pki / "ca.crt").read_bytes() == ca_before
    # the very same credentials: the kubeconfigs are written again, byte for byte the same
    assert lay.kubeconfig("admin").read_bytes() == admin_before
    assert lay.kubeconfig("kubelet").read_bytes() == kubelet_before
    out = kubectl(kept, "get", "configmap", "before-restart", "-o", "jsonpath={.data.k}").stdout
    assert out == "v"
    r = etcdctl(cp, "get", "--print-value-only", "/hpk-test/marker")
    assert r.returncode == 0 and r.stdout.strip() == "still-here", r.stderr
    # the previous run's logs are kept next to this run's
    assert (lay.logs / "etcd.log.1").exists() and (lay.logs / "etcd.log").exists()
    assert cp.stop(signal.SIGINT) == 0


def _stopping(text: str) -> list[str]:
    """The components the bootstrap stopped, in its order."""
    return [m[1] for m in re.finditer(r"INFO (\S+): stopping(?: \(pid \d+\))?$", text, re.M)]


def _fake(directory: Path, name: str, script: str) -> Path:
    directory.mkdir(exist_ok=True)
    f = directory / name
    f.write_text("#!/bin/bash\n" + script)
    f.chmod(0o755)
    return directory


@pytest.mark.standin
def test_a_component_that_fails_to_start_is_named_with_its_log_and_the_rest_stopped(controlplane: ControlPlane) -> None:
    cp = controlplane
    cp.extra_path = [_fake(cp.root / "bin", "kube-controller-manager",
                           'echo "E0101 unable to load client CA provider: boom" >&2\nexit 255\n')]
    cp.start()
    assert cp.wait_exit() == 125
    text = cp.text()
    assert "hpkctl: error: kube-controller-manager ended (exit status 255) before it was healthy" in text
    assert f"its log {cp.layout.log('kube-controller-manager')} ends:" in text and "boom" in text
    assert "fix: read its log" in text and "controller_manager_port" in text
    pids = cp.pids()
    for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
        assert not _alive(pids[name]), name
    assert _stopping(text) == ["kube-apiserver", "etcd"]
    assert "coredns" not in pids
    status = json.loads(cp.layout.status.read_text())
    assert status["phase"] == "failed" and "kube-controller-manager" in status["message"]
    assert not cp.layout.endpoint.exists()


@pytest.mark.standin
def test_a_component_that_never_gets_healthy_times_out_naming_it(controlplane: ControlPlane) -> None:
    cp = controlplane
    cp.timeout = 15  # the one start_timeout of every component: the API stand-in's start must fit in it under load
    cp.extra_path = [_fake(cp.root / "bin", "coredns", "echo waiting forever >&2\nexec sleep 600\n")]
    cp.start()
    assert cp.wait_exit() == 125
    text = cp.text()
    assert re.search(r"coredns did not become healthy within 15 s \(http://127\.0\.0\.1:\d+/ready: connection refused\)",
                     text), text
    assert "waiting forever" in text and "raise [controlplane] start_timeout" in text
    assert not any(_alive(p) for p in cp.pids().values())


@pytest.mark.standin
def test_a_port_in_use_names_the_profile_key(controlplane: ControlPlane) -> None:
    cp = controlplane
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", cp.ports["apiserver_port"]))
        s.listen()
        cp.start()
        assert cp.wait_exit() == 125
    text = cp.text()
    assert f"kube-apiserver: TCP port {cp.ports['apiserver_port']} ([controlplane] apiserver_port) is in use" in text
    assert "choose another [controlplane] apiserver_port" in text
    assert not any(_alive(p) for p in cp.pids().values())


@pytest.mark.standin
def test_a_missing_binary_is_found_before_anything_starts(controlplane: ControlPlane, tmp_path: Path) -> None:
    cp = controlplane
    empty = tmp_path / "nothing"
    empty.mkdir()
    cp.site(bin_dir=str(empty))
    cp.runs += 1
    with open(cp.log, "wb") as out:
        cp.proc = subprocess.Popen([sys.executable, "-m", "hpkctl", "controlplane", "run", "--site",
                                    str(cp.root / "site.toml")], stdout=out, stderr=out, env=cp.env())
    assert cp.wait_exit() == 125
    assert f"etcd: not found in [controlplane] bin_dir {empty}" in cp.text()
    assert cp.pids() == {}


@pytest.mark.standin
def test_a_component_that_dies_later_stops_the_rest_and_fails_the_job(controlplane: ControlPlane) -> None:
    cp = controlplane
    cp.start()
    cp.wait_ready()
    pids = cp.pids()
    os.kill(pids["kube-controller-manager"], signal.SIGKILL)
    assert cp.wait_exit() == 125
    text = cp.text()
    assert re.search(r"kube-controller-manager \(pid \d+\) ended on its own \(killed by SIGKILL\)", text)
    assert "hpkctl: error: kube-controller-manager ended (killed by SIGKILL) after running" in text
    assert _stopping(text) == \
        ["hpk-scheduler", "coredns", "kube-apiserver", "etcd"]
    assert not any(_alive(p) for p in pids.values())
    assert not cp.layout.endpoint.exists() and json.loads(cp.layout.status.read_text())["phase"] == "failed"


@pytest.mark.standin
def test_sigterm_while_starting_stops_what_was_started(controlplane: ControlPlane) -> None:
    cp = controlplane
    cp.extra_path = [_fake(cp.root / "bin", "coredns", "exec sleep 600\n")]
    cp.start()
    wait_for("coredns to be started", lambda: "coredns: started" in cp.text(), timeout=60)
    assert cp.stop(signal.SIGTERM) == 0
    text = cp.text()
    assert "stopped before the control plane was ready" in text
    assert _stopping(text) == [
        "coredns", "kube-controller-manager", "kube-apiserver", "etcd"]
    assert not any(_alive(p) for p in cp.pids().values())


@pytest.mark.standin
def test_two_control_planes_cannot_share_a_state_directory(controlplane: ControlPlane) -> None:
    cp = controlplane
    cp.start()
    cp.wait_ready()
    (cp.root / "second").mkdir()
    second = ControlPlane(cp.root / "second", _ports(), state_dir=cp.state)
    second.start()
    try:
        assert second.wait_exit() == 125
        assert f"another control plane runs with state directory {cp.state} (pid {cp.proc.pid} on" in second.text()  # type: ignore[union-attr]
    finally:
        second.cleanup()
    assert read_endpoint(cp.state) is not None  # the first one is untouched
    assert cp.stop() == 0


# ------------------------------------------------------------------------------ the supervisor


def test_supervisor_stops_in_reverse_order_and_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    sup = Supervisor()
    a = sup.start("a", ["sleep", "60"], log_file=tmp_path / "a.log")
    b = sup.start("b", ["bash", "-c", "trap '' TERM; echo ignoring; sleep 60"], log_file=tmp_path / "b.log")
    wait_for("b to ignore SIGTERM", lambda: "ignoring" in (tmp_path / "b.log").read_text(), timeout=20, every=0.05)
    t0 = time.monotonic()
    done = sup.stop_all(timeout=1.0)
    assert [n for n, _ in done] == ["b", "a"]
    assert dict(done) == {"b": -signal.SIGKILL, "a": -signal.SIGTERM}
    assert time.monotonic() - t0 < 5
    assert a.poll() is not None and b.poll() is not None
    assert "ignoring" in (tmp_path / "b.log").read_text()
    # the next run keeps the previous log as NAME.log.1
    sup.start("a", ["true"], log_file=tmp_path / "a.log").popen.wait()
    assert (tmp_path / "a.log.1").exists()

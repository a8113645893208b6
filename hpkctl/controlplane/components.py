"""The control plane's components as command lines: etcd, kube-apiserver, kube-controller-manager and
CoreDNS (its Corefile), from the site profile and the PKI. Pure functions; :mod:`bootstrap` runs them.

The flags are those of the pinned releases (:mod:`hpkctl.controlplane.versions`: Kubernetes 1.36, etcd
3.6; Debian's etcd 3.4, which the tests run, takes the same ones). Every value is given as ``--flag=value``
so the command line reads the same in ``ps`` and in the logs.

A kubelet that is away for a while
----------------------------------
The hpk kubelet runs as a Slurm job of its own; it is away whenever that job is requeued, waits in the
queue, or is replaced by a new one before its time limit. The control plane must not read that as "the
node and its pods are gone" (``../shared/notes/kubelet-api.md`` §1.9): the pods are Slurm jobs that keep
running without the kubelet, and an eviction would cancel them.

- ``--default-not-ready-toleration-seconds`` and ``--default-unreachable-toleration-seconds`` of
  kube-apiserver (the DefaultTolerationSeconds admission plugin, which gives every pod without its own
  such toleration ``node.kubernetes.io/not-ready`` and ``unreachable`` NoExecute tolerations for this
  long) are :data:`TOLERATION_SECONDS` = one year instead of 300 s. Longer than any Slurm time limit and
  queue wait, so in effect the taint manager never evicts our pods; still a finite int64 of seconds that
  every consumer (the taint manager's duration arithmetic, clients) handles. The flag cannot say
  "forever" (no ``tolerationSeconds``): only a toleration in the pod itself can.
- ``--node-monitor-grace-period`` of kube-controller-manager (50 s by default) is how long the node's
  Lease may go unrenewed before the node is ``Unknown``, its pods ``Ready=False`` and out of their
  Services' endpoints. :data:`NODE_MONITOR_GRACE_PERIOD` = 5 minutes covers a kubelet restart and a
  job taking over from another (seconds to a minute) with room to spare, while a kubelet that is
  really gone still shows as such within minutes. ``--node-startup-grace-period`` gets the same value
  (a kubelet job may start and then wait for Slurm before it posts its first status);
  ``--node-monitor-period`` stays at its 5 s (how often the controller looks, not a tolerance).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hpkctl.controlplane.pki import Pki

#: tolerationSeconds DefaultTolerationSeconds gives pods for not-ready and unreachable nodes (one year)
TOLERATION_SECONDS = 365 * 24 * 3600
#: how long the node may go without renewing its Lease before it is Unknown (kube-controller-manager)
NODE_MONITOR_GRACE_PERIOD = "5m0s"
NODE_STARTUP_GRACE_PERIOD = "5m0s"
NODE_MONITOR_PERIOD = "5s"
#: admission plugins enabled on top of kube-apiserver's defaults: NodeRestriction (a kubelet may change
#: only its own Node and pods), DefaultTolerationSeconds (the tolerations above; on by default, named so
#: it is never dropped), MutatingAdmissionPolicy and ValidatingAdmissionPolicy (the services rule,
#: :mod:`hpkctl.controlplane.objects`; both GA and on by default in 1.36, named for the same reason)
ADMISSION_PLUGINS = ("NodeRestriction", "DefaultTolerationSeconds", "MutatingAdmissionPolicy",
                     "ValidatingAdmissionPolicy")
AUTHORIZATION_MODES = ("Node", "RBAC")
#: the name etcd's single member has (its data directory records it)
ETCD_MEMBER = "hpk"
#: the user name the front proxy's client certificate carries (pki: front-proxy-client)
FRONT_PROXY_USER = "front-proxy-client"


@dataclass(frozen=True)
class Ports:
    apiserver: int
    etcd_client: int
    etcd_peer: int
    controller_manager: int
    coredns: int
    coredns_ready: int


def service_account_issuer(cluster_domain: str) -> str:
    """The issuer of service-account tokens, as kubeadm sets it."""
    return f"https://kubernetes.default.svc.{cluster_domain}"


def etcd_url(port: int) -> str:
    return f"https://127.0.0.1:{port}"


def etcd_argv(binary: str, *, pki: Pki, data_dir: Path, ports: Ports) -> list[str]:
    """A single-member etcd on loopback; clients and the peer port need certificates of the etcd CA."""
    client, peer = etcd_url(ports.etcd_client), etcd_url(ports.etcd_peer)
    return [
        binary,
        f"--name={ETCD_MEMBER}",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={ETCD_MEMBER}={peer}",
        "--initial-cluster-state=new",  # ignored once the data directory holds a member
        f"--cert-file={pki.etcd_server.cert}",
        f"--key-file={pki.etcd_server.key}",
        "--client-cert-auth=true",
        f"--trusted-ca-file={pki.etcd_ca.cert}",
        f"--peer-cert-file={pki.etcd_peer.cert}",
        f"--peer-key-file={pki.etcd_peer.key}",
        "--peer-client-cert-auth=true",
        f"--peer-trusted-ca-file={pki.etcd_ca.cert}",
        "--logger=zap",
        "--log-outputs=stderr",
    ]


def apiserver_argv(binary: str, *, pki: Pki, ports: Ports, advertise_address: str, service_cidr: str,
                   cluster_domain: str) -> list[str]:
    """kube-apiserver on all interfaces (the kubelet and users dial it from other nodes)."""
    return [
        binary,
        f"--advertise-address={advertise_address}",
        "--bind-address=0.0.0.0",
        f"--secure-port={ports.apiserver}",
        f"--etcd-servers={etcd_url(ports.etcd_client)}",
        f"--etcd-cafile={pki.etcd_ca.cert}",
        f"--etcd-certfile={pki.apiserver_etcd_client.cert}",
        f"--etcd-keyfile={pki.apiserver_etcd_client.key}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
        "--kubelet-preferred-address-types=InternalIP,Hostname,ExternalIP",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-account-issuer={service_account_issuer(cluster_domain)}",
        f"--service-cluster-ip-range={service_cidr}",
        f"--authorization-mode={','.join(AUTHORIZATION_MODES)}",
        f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_USER}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
        f"--proxy-client-key-file={pki.front_proxy_client.key}",
        f"--default-not-ready-toleration-seconds={TOLERATION_SECONDS}",
        f"--default-unreachable-toleration-seconds={TOLERATION_SECONDS}",
    ]


def controller_manager_argv(binary: str, *, pki: Pki, ports: Ports, kubeconfig: Path) -> list[str]:
    """kube-controller-manager: one instance (no leader election: two control planes cannot share one
    etcd data directory anyway), /healthz on loopback with an in-memory self-signed certificate."""
    return [
        binary,
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        "--leader-elect=false",
        "--cluster-name=hpk",
        f"--cluster-signing-cert-file={pki.ca.cert}",
        f"--cluster-signing-key-file={pki.ca.key}",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca.cert}",
        "--use-service-account-credentials=true",
        f"--node-monitor-period={NODE_MONITOR_PERIOD}",
        f"--node-monitor-grace-period={NODE_MONITOR_GRACE_PERIOD}",
        f"--node-startup-grace-period={NODE_STARTUP_GRACE_PERIOD}",
    ]


def coredns_argv(binary: str, *, corefile: Path) -> list[str]:
    return [binary, "-conf", str(corefile)]


def corefile(*, ports: Ports, cluster_domain: str, kubeconfig: Path, upstream: Sequence[str]) -> str:
    """CoreDNS's configuration: the cluster domain (and reverse zones) from the API through the
    ``kubernetes`` plugin with its own kubeconfig, everything else forwarded to ``upstream``."""
    return (
        f".:{ports.coredns} {{\n"
        "    errors\n"
        f"    ready 127.0.0.1:{ports.coredns_ready}\n"
        f"    kubernetes {cluster_domain} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {_token(str(kubeconfig))}\n"
        "        pods insecure\n"
        "        fallthrough in-addr.arpa ip6.arpa\n"
        "        ttl 30\n"
        "    }\n"
        f"    forward . {' '.join(_token(u) for u in upstream)}\n"
        "    cache 30\n"
        "    loop\n"
        "    loadbalance\n"
        "}\n"
    )


def _token(text: str) -> str:
    """One Corefile token: quoted when it holds white space, quotes or braces (a state directory may)."""
    if text and not any(c.isspace() or c in '"{}#\\' for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def first_service_ip(service_cidr: str) -> str:
    """The kubernetes Service's cluster IP: the first address of the (first) service range."""
    net = ipaddress.ip_network(service_cidr.split(",")[0].strip())
    return str(net.network_address + 1)


__all__ = ["ADMISSION_PLUGINS", "AUTHORIZATION_MODES", "NODE_MONITOR_GRACE_PERIOD", "NODE_MONITOR_PERIOD",
           "NODE_STARTUP_GRACE_PERIOD", "Ports", "TOLERATION_SECONDS", "apiserver_argv", "controller_manager_argv",
           "coredns_argv", "corefile", "etcd_argv", "etcd_url", "first_service_ip", "service_account_issuer"]

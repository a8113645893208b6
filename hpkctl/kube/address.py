"""The address this host publishes to the cluster (the kubelet's InternalIP, the API server's SAN), and
the names a certificate for it must carry."""

from __future__ import annotations

import ipaddress
import re
import socket

_DNS = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


def host_address() -> str:
    """This host's IP as other nodes dial it: the source address of a route outward (no packet is
    sent), else the resolved host name, else loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def node_hosts(address: str) -> list[str]:
    """What the API server's certificate must name for this node: its host names and ``address``."""
    hosts = []
    for name in (socket.gethostname(), socket.getfqdn(), address):
        if name and (is_ip(name) or _DNS.fullmatch(name)) and name not in hosts:
            hosts.append(name)
    return hosts


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True

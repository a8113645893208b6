"""The address this host publishes to the cluster (the kubelet's InternalIP, the API server's SAN)."""

from __future__ import annotations

import socket


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

"""Starting one component, the way every step of the bootstrap does it.

Split out of :mod:`hpkctl.controlplane.bootstrap` (which says *in what order* the control plane
starts) because each step goes through the same motions, and each must fail the same way: find the
binary, check its ports before it does (so a port in use is named, not buried in its log), start it
under the supervisor, wait for its health probe with a deadline while watching that it has not
ended, and retry API calls while the API server is briefly unavailable. Every failure is a
:class:`ControlPlaneError` that names the component, its log's last lines and the fix.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hpkctl.controlplane.health import Probe
from hpkctl.errors import ControlPlaneError
from hpkctl.kube import KubeError, KubeUnavailable
from hpkctl.runtime.supervise import Child, describe_status

log = logging.getLogger("hpkctl.controlplane")

#: seconds between two health probes of a starting component
POLL = 0.25


class Stopped(Exception):
    """``stop`` was set while starting."""


def find_binary(name: str, *, bin_dir: str, env: Mapping[str, str]) -> str:
    """``name`` in ``[controlplane] bin_dir``, else on the job's PATH; ControlPlaneError if in neither."""
    path = bin_dir or env.get("PATH", os.defpath)
    found = shutil.which(name, path=path)
    if found is None:
        where = f"[controlplane] bin_dir {bin_dir}" if bin_dir else f"PATH ({path})"
        raise ControlPlaneError(f"{name}: not found in {where}",
                                hint="run the control plane from its image (hpkctl build, then hpkctl start), "
                                     "or set [controlplane] bin_dir to where etcd, kube-apiserver, "
                                     "kube-controller-manager and coredns are")
    return found


def port_free(port: int, host: str, *, udp: bool = False) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM) as s:
        if not udp:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def check_ports(name: str, ports: tuple[tuple[str, int, str, bool], ...], *, profile: str) -> None:
    """Each ``(profile key, port, host, udp)`` is free on this node, else ControlPlaneError naming the key."""
    for key, port, host, udp in ports:
        if not port_free(port, host, udp=udp):
            raise ControlPlaneError(
                f"{name}: {'UDP' if udp else 'TCP'} port {port} ([controlplane] {key}) is in use on this node "
                f"(another user's control plane, or another program)",
                hint=f"choose another [controlplane] {key} in your site profile (~/.config/hpk/sites/"
                     f"{profile}.toml): every user on a shared node needs ports of their own")


def wait_healthy(name: str, child: Child, probe: Probe, *, fix: str, timeout: float, stop: threading.Event) -> None:
    """Until ``probe`` passes: ControlPlaneError if ``child`` ends or ``timeout`` passes first,
    :class:`Stopped` if ``stop`` is set."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    detail = "not probed yet"
    while True:
        if stop.is_set():
            raise Stopped()
        status = child.poll()
        if status is not None:
            raise ControlPlaneError(
                f"{name} ended ({describe_status(status)}) before it was healthy; its log {child.log} ends:\n"
                f"{indent(child.tail())}", hint=fix)
        ok, detail = probe()
        if ok:
            log.info("%s: healthy after %.1f s (%s)", name, time.monotonic() - t0, probe.url)
            return
        if time.monotonic() >= deadline:
            raise ControlPlaneError(
                f"{name} did not become healthy within {timeout:.0f} s ({probe.url}: {detail}); "
                f"its log {child.log} ends:\n{indent(child.tail())}",
                hint=fix + f"; a slow node: raise [controlplane] start_timeout ({timeout:.0f} s)")
        stop.wait(POLL)


def call_api(what: str, call: Callable[[], Any], *, timeout: float, stop: threading.Event, apiserver_log: Path) -> Any:
    """One API call of the bootstrap, retried while the API server is briefly unavailable."""
    deadline = time.monotonic() + timeout
    while True:
        if stop.is_set():
            raise Stopped()
        try:
            return call()
        except KubeUnavailable as e:
            if time.monotonic() >= deadline:
                raise ControlPlaneError(f"{what}: the API server did not answer: {e}",
                                        hint=f"read {apiserver_log}") from None
        except KubeError as e:
            raise ControlPlaneError(f"{what}: the API server refused: {e}",
                                    hint=f"read {apiserver_log}; this kube-apiserver may "
                                         "not have the API (Kubernetes 1.36 or newer is needed)") from None
        stop.wait(1.0)


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines()) or "    (empty)"

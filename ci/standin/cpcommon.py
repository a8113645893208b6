"""What the two control-plane stand-ins share: a command line refused as the real binaries refuse it,
the API server reached with the kubeconfig they were given, and serving until SIGTERM.

Split out of ``controlplane_standins.py`` (the entry point and kube-controller-manager) and
``coredns_standin.py`` so that each stand-in's module holds only what that binary does; this part is
what makes either of them strict: an unknown flag, a malformed value or an unreadable file exits
with an error, as the real component would.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import os
import re
import signal
import ssl
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import ClientSession, ClientTimeout, web

_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
_BOOL = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
         "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


class Refused(Exception):
    """The command line or configuration the real binary would refuse."""


def say(name: str, message: str) -> None:
    stamp = dt.datetime.now().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    print(f"{stamp} {name} stand-in: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ value checks


def flag_ip(v: str) -> str:
    ipaddress.ip_address(v)
    return v


def flag_port(v: str) -> int:
    n = int(v, 10)
    if not 0 < n < 65536:
        raise ValueError(f"port {n} out of range")
    return n


def flag_duration(v: str) -> str:
    if not _DURATION.match(v):
        raise ValueError(f'time: invalid duration "{v}"')
    return v


def flag_bool(v: str) -> bool:
    if v not in _BOOL:
        raise ValueError(f'strconv.ParseBool: parsing "{v}": invalid syntax')
    return _BOOL[v]


def flag_pem_file(v: str) -> Path:
    p = Path(v)
    data = p.read_bytes()
    if b"-----BEGIN " not in data:
        raise ValueError(f"{v}: no PEM data")
    return p


def flag_kubeconfig(v: str) -> Path:
    p = Path(v)
    doc = yaml.safe_load(p.read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "Config" or not doc.get("clusters"):
        raise ValueError(f"{v} is not a kubeconfig")
    return p


def flag_text(v: str) -> str:
    if not v:
        raise ValueError("empty")
    return v


def parse_pflags(prog: str, argv: list[str], flags: dict[str, Callable[[str], Any]],
                 bools: tuple[str, ...] = ()) -> dict[str, Any]:
    """pflag's ``--name=value`` / ``--name value`` / bare booleans; anything unknown is refused."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--"):
            raise Refused(f'"{prog}" does not take any arguments, got [{arg!r}]' if not arg.startswith("-")
                          else f"unknown shorthand flag: {arg[1:2]!r} in {arg}")
        name, eq, value = arg[2:].partition("=")
        if name not in flags:
            raise Refused(f"unknown flag: --{name}")
        if not eq:
            if name in bools:
                value = "true"
            elif i < len(argv):
                value = argv[i]
                i += 1
            else:
                raise Refused(f"flag needs an argument: --{name}")
        try:
            out[name] = flags[name](value)
        except (ValueError, OSError, yaml.YAMLError) as e:
            raise Refused(f'invalid argument "{value}" for "--{name}" flag: {e}') from None
    return out


# ------------------------------------------------------------------------------ the API, as a client


class ApiClient:
    """GETs against the API server with a kubeconfig's CA and credentials (client cert or token)."""

    def __init__(self, kubeconfig: Path) -> None:
        doc = yaml.safe_load(kubeconfig.read_text())
        ctx_name = doc.get("current-context")
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
        self.server = cluster["server"].rstrip("/")
        self.ssl = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        self.headers: dict[str, str] = {}
        if "token" in user:
            self.headers["Authorization"] = f"Bearer {user['token']}"
        elif "client-certificate-data" in user:
            d = tempfile.mkdtemp(prefix="standin-")
            cert, key = Path(d, "c.crt"), Path(d, "c.key")
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            os.chmod(key, 0o600)
            self.ssl.load_cert_chain(str(cert), str(key))
            cert.unlink()
            key.unlink()
            os.rmdir(d)
        else:
            raise Refused(f"{kubeconfig}: no client certificate and no token")

    async def get(self, path: str) -> tuple[int, str]:
        async with ClientSession(timeout=ClientTimeout(total=5)) as s:
            async with s.get(self.server + path, ssl=self.ssl, headers=self.headers) as r:
                return r.status, (await r.text())[:300]


async def until_reachable(name: str, api: ApiClient, paths: tuple[str, ...], on_ok: Callable[[], None]) -> None:
    """Retry the GETs (as the real components retry) until every one answers 200."""
    last = ""
    while True:
        try:
            results = [(p, *(await api.get(p))) for p in paths]
            bad = [(p, st, body) for p, st, body in results if st != 200]
            if not bad:
                say(name, f"read {', '.join(paths)} from {api.server}")
                on_ok()
                return
            msg = "; ".join(f"GET {p}: HTTP {st} {body}" for p, st, body in bad)
        except Exception as e:  # noqa: BLE001 - unreachable or TLS: retried, reported once per change
            msg = f"{type(e).__name__}: {e}"
        if msg != last:
            say(name, f"API server not usable yet: {msg}")
            last = msg
        await asyncio.sleep(0.5)


async def serve_until_signal(runners: list[web.AppRunner], tasks: list[asyncio.Future[Any]]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for t in tasks:
        t.cancel()
    for r in runners:
        await r.cleanup()

"""CoreDNS stand-in (tests only; see ci/standin/README.md): the Corefile and command line checked as
strictly as CoreDNS checks them, the DNS port bound, ``/ready`` served once the API is readable.

Split out of ``controlplane_standins.py`` (the entry point, which dispatches here) because the
Corefile parser is a tokenizer and grammar of its own that shares nothing with kube-controller-
manager but the base in ``cpcommon.py``. No DNS query is answered.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from cpcommon import ApiClient, Refused, flag_kubeconfig, flag_port, say, serve_until_signal, until_reachable

def tokens(text: str) -> list[tuple[str, int]]:
    """Caddyfile tokens with their line numbers: white space separates, "..." quotes (\\" escapes), # comments."""
    out: list[tuple[str, int]] = []
    i, line = 0, 1
    while i < len(text):
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif c == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
        elif c == '"':
            i += 1
            buf = []
            while i < len(text) and text[i] != '"':
                if text[i] == "\\" and i + 1 < len(text):
                    i += 1
                buf.append(text[i])
                i += 1
            if i >= len(text):
                raise Refused(f"Corefile:{line} - Error during parsing: unterminated quote")
            i += 1
            out.append(("".join(buf), line))
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] != '"':
                j += 1
            out.append((text[i:j], line))
            i = j
    return out


def _lines(toks: list[tuple[str, int]]) -> list[list[str]]:
    """Tokens grouped per line (a directive and its arguments), braces kept as tokens."""
    lines: dict[int, list[str]] = {}
    for t, n in toks:
        lines.setdefault(n, []).append(t)
    return [lines[n] for n in sorted(lines)]


#: directive → number of arguments allowed (min, max); the plugins this stand-in knows
DIRECTIVES = {"errors": (0, 0), "ready": (0, 1), "kubernetes": (0, 99), "forward": (2, 16), "cache": (0, 1),
              "loop": (0, 0), "loadbalance": (0, 1), "log": (0, 0), "health": (0, 1), "reload": (0, 2)}
K8S_SUBDIRECTIVES = {"kubeconfig": (1, 2), "pods": (1, 1), "fallthrough": (0, 99), "ttl": (1, 1),
                     "endpoint": (1, 1), "namespaces": (1, 99), "noendpoints": (0, 0)}


def _hostport(v: str, what: str) -> tuple[str, int]:
    host, _, port = v.rpartition(":")
    try:
        if host:
            ipaddress.ip_address(host.strip("[]"))
        return host or "0.0.0.0", flag_port(port)
    except ValueError:
        raise Refused(f"{what}: {v!r} is not host:port") from None


def parse_corefile(text: str) -> dict[str, Any]:
    """The one server block hpkctl writes, checked: its port, ready address, kubernetes zones and
    kubeconfig, forward targets."""
    lines = _lines(tokens(text))
    if not lines or lines[0][-1] != "{" or len(lines[0]) != 2:
        raise Refused("Corefile: expected one server block '.:PORT {'")
    key = lines[0][0]
    if not re.fullmatch(r"\.:\d+", key):
        raise Refused(f"Corefile: server block key {key!r}: expected .:PORT")
    conf: dict[str, Any] = {"port": flag_port(key[2:]), "directives": []}
    i = 1
    depth = 1
    while i < len(lines):
        words = lines[i]
        i += 1
        if words == ["}"]:
            depth -= 1
            if depth == 0:
                if any(lines[i:]):
                    raise Refused("Corefile: only one server block is supported by this stand-in")
                break
            continue
        directive, args = words[0], words[1:]
        block = bool(args) and args[-1] == "{"
        if block:
            args = args[:-1]
        if directive not in DIRECTIVES:
            raise Refused(f"Corefile:{i} - Error during parsing: Unknown directive '{directive}'")
        lo, hi = DIRECTIVES[directive]
        if not lo <= len(args) <= hi:
            raise Refused(f"Corefile:{i} - Error during parsing: Wrong argument count or unexpected line ending "
                          f"after '{directive}'")
        conf["directives"].append(directive)
        if directive == "ready":
            conf["ready"] = _hostport(args[0] if args else ":8181", "ready")
        elif directive == "cache" and args:
            int(args[0])
        elif directive == "forward":
            if args[0] != ".":
                raise Refused(f"forward: this stand-in expects 'forward . TO...', got {args[0]!r}")
            for to in args[1:]:
                if to.startswith("/"):
                    if not Path(to).is_file():
                        raise Refused(f"forward: {to}: no such file")
                else:
                    host = to.rsplit(":", 1)[0] if to.count(":") == 1 else to
                    try:
                        ipaddress.ip_address(host.strip("[]"))
                    except ValueError:
                        raise Refused(f"forward: not an IP address or file: {to!r}") from None
            conf["forward"] = args[1:]
        elif directive == "kubernetes":
            if not args:
                raise Refused("kubernetes: give the cluster domain as its first zone")
            conf["zones"] = args
            sub: dict[str, list[str]] = {}
            if block:
                while True:
                    if i >= len(lines):
                        raise Refused("Corefile: unterminated kubernetes block")
                    w = lines[i]
                    i += 1
                    if w == ["}"]:
                        break
                    if w[0] not in K8S_SUBDIRECTIVES:
                        raise Refused(f"Corefile:{i} - Error during parsing: unknown property '{w[0]}'")
                    slo, shi = K8S_SUBDIRECTIVES[w[0]]
                    if not slo <= len(w) - 1 <= shi:
                        raise Refused(f"Corefile:{i} - Error during parsing: Wrong argument count for '{w[0]}'")
                    sub[w[0]] = w[1:]
            if "pods" in sub and sub["pods"][0] not in ("disabled", "insecure", "verified"):
                raise Refused(f"kubernetes: pods {sub['pods'][0]!r}: expected disabled, insecure or verified")
            if "ttl" in sub and not 0 <= int(sub["ttl"][0]) <= 3600:
                raise Refused("kubernetes: ttl must be in range [0, 3600]")
            if "kubeconfig" not in sub:
                raise Refused("kubernetes: this stand-in needs 'kubeconfig PATH' (it does not run in a pod)")
            conf["kubeconfig"] = flag_kubeconfig(sub["kubeconfig"][0])
    else:
        raise Refused("Corefile: unterminated server block")
    if "ready" not in conf:
        raise Refused("Corefile: no 'ready' directive: this stand-in serves only /ready")
    return conf


def parse_go_flags(argv: list[str]) -> dict[str, str]:
    """CoreDNS's command line (Go's flag package: -name value, -name=value, --name as -name)."""
    known = {"conf": True, "pidfile": True, "quiet": False, "version": False, "plugins": False, "dns.port": True}
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            raise Refused(f"extra command line arguments: {argv[i - 1:]}")
        name, eq, value = arg.lstrip("-").partition("=")
        if name not in known:
            raise Refused(f"flag provided but not defined: -{name}")
        if known[name] and not eq:
            if i >= len(argv):
                raise Refused(f"flag needs an argument: -{name}")
            value = argv[i]
            i += 1
        out[name] = value if known[name] else "true"
    if set(out) - {"conf"}:
        raise Refused(f"this stand-in takes -conf only, got {sorted(out)}")
    if "conf" not in out:
        raise Refused("-conf CORE FILE is required by this stand-in (CoreDNS would look for ./Corefile)")
    return out


class _Silent(asyncio.DatagramProtocol):
    pass


async def coredns(argv: list[str]) -> int:
    name = "coredns"
    flags = parse_go_flags(argv)
    conf = parse_corefile(Path(flags["conf"]).read_text())
    say(name, f"Corefile {flags['conf']}: port {conf['port']}, zones {conf['zones']}, forward {conf.get('forward')}")
    loop = asyncio.get_running_loop()
    # the DNS port, bound as CoreDNS binds it (all interfaces, UDP and TCP): a port in use fails here too
    udp, _ = await loop.create_datagram_endpoint(_Silent, local_addr=("0.0.0.0", conf["port"]))
    tcp = await asyncio.start_server(lambda r, w: w.close(), "0.0.0.0", conf["port"])
    api = ApiClient(conf["kubeconfig"])
    synced = asyncio.Event()
    task = asyncio.ensure_future(until_reachable(
        name, api, ("/api/v1/namespaces?limit=1", "/api/v1/services?limit=1",
                    "/apis/discovery.k8s.io/v1/endpointslices?limit=1"), synced.set))

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="OK") if synced.is_set() else web.Response(status=503, text="kubernetes")

    app = web.Application()
    app.router.add_get("/ready", ready)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    host, port = conf["ready"]
    await web.TCPSite(runner, host, port).start()
    say(name, f"/ready on http://{host}:{port}; DNS port {conf['port']} bound (queries are not answered)")
    try:
        await serve_until_signal([runner], [task])
    finally:
        udp.close()
        tcp.close()
    say(name, "stopped")
    return 0

"""Stand-ins for kube-controller-manager and CoreDNS (tests only; see ci/standin/README.md).

Neither binary can be installed on these machines. The control-plane bootstrap
(``hpkctl/controlplane/components.py``) starts them by name; tests put ``ci/standin`` first on PATH so
these answer instead. Each checks its command line as strictly as the real binary (an unknown flag,
a malformed value, an unreadable file, a Corefile directive it does not know: exit with an error),
does what the bootstrap waits for (reach the API server with the credentials it was given, serve the
health endpoint). kube-controller-manager then runs the pod side of the workload controllers and pod
GC (``kcm/``); no DNS query is answered.
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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import ClientSession, ClientTimeout, web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
_BOOL = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
         "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


class Refused(Exception):
    """The command line or configuration the real binary would refuse."""


def say(name: str, message: str) -> None:
    stamp = dt.datetime.now().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    print(f"{stamp} {name} stand-in: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ value checks


def _ip(v: str) -> str:
    ipaddress.ip_address(v)
    return v


def _port(v: str) -> int:
    n = int(v, 10)
    if not 0 < n < 65536:
        raise ValueError(f"port {n} out of range")
    return n


def _duration(v: str) -> str:
    if not _DURATION.match(v):
        raise ValueError(f'time: invalid duration "{v}"')
    return v


def _bool(v: str) -> bool:
    if v not in _BOOL:
        raise ValueError(f'strconv.ParseBool: parsing "{v}": invalid syntax')
    return _BOOL[v]


def _pem_file(v: str) -> Path:
    p = Path(v)
    data = p.read_bytes()
    if b"-----BEGIN " not in data:
        raise ValueError(f"{v}: no PEM data")
    return p


def _kubeconfig(v: str) -> Path:
    p = Path(v)
    doc = yaml.safe_load(p.read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "Config" or not doc.get("clusters"):
        raise ValueError(f"{v} is not a kubeconfig")
    return p


def _text(v: str) -> str:
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


# ------------------------------------------------------------------------------ kube-controller-manager

#: exactly the flags hpkctl's bootstrap passes (hpkctl/controlplane/components.py controller_manager_argv)
KCM_FLAGS: dict[str, Callable[[str], Any]] = {
    "kubeconfig": _kubeconfig,
    "authentication-kubeconfig": _kubeconfig,
    "authorization-kubeconfig": _kubeconfig,
    "bind-address": _ip,
    "secure-port": _port,
    "leader-elect": _bool,
    "cluster-name": _text,
    "cluster-signing-cert-file": _pem_file,
    "cluster-signing-key-file": _pem_file,
    "service-account-private-key-file": _pem_file,
    "root-ca-file": _pem_file,
    "use-service-account-credentials": _bool,
    "node-monitor-period": _duration,
    "node-monitor-grace-period": _duration,
    "node-startup-grace-period": _duration,
    "terminated-pod-gc-threshold": int,  # not passed by the bootstrap (real default 12500); tests lower it
}
KCM_BOOLS = ("leader-elect", "use-service-account-credentials")


def _self_signed(cn: str) -> tuple[str, str]:
    """An in-memory self-signed serving certificate, as kube-controller-manager makes one without --tls-cert-file."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    d = tempfile.mkdtemp(prefix="standin-kcm-")
    c, k = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
    Path(c).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    Path(k).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return c, k


def _check_signing_pair(v: dict[str, Any]) -> None:
    if ("cluster-signing-cert-file" in v) != ("cluster-signing-key-file" in v):
        raise Refused("--cluster-signing-cert-file and --cluster-signing-key-file must be given together")
    if "cluster-signing-cert-file" in v:
        cert = x509.load_pem_x509_certificate(v["cluster-signing-cert-file"].read_bytes())
        key = serialization.load_pem_private_key(v["cluster-signing-key-file"].read_bytes(), None)
        if cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) != \
                key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
            raise Refused("error reading CA cert file: the cluster signing certificate and key do not match")
    if "service-account-private-key-file" in v:
        serialization.load_pem_private_key(v["service-account-private-key-file"].read_bytes(), None)


async def kcm(argv: list[str]) -> int:
    name = "kube-controller-manager"
    v = parse_pflags(name, argv, KCM_FLAGS, KCM_BOOLS)
    for required in ("kubeconfig",):
        if required not in v:
            raise Refused(f"--{required} is required by this stand-in (it has no in-cluster configuration)")
    _check_signing_pair(v)
    say(name, "flags: " + " ".join(f"--{k}={x}" for k, x in v.items()))
    api = ApiClient(v["kubeconfig"])
    reachable = asyncio.Event()
    task = asyncio.ensure_future(until_reachable(name, api, ("/api/v1/namespaces/kube-system",), reachable.set))

    async def controllers() -> None:
        await reachable.wait()
        sys.path.insert(0, str(Path(__file__).parent))
        from kcm.client import Kube
        from kcm.loop import run
        await run(Kube(api.server, api.ssl, api.headers), gc_threshold=v.get("terminated-pod-gc-threshold", 12500))

    loop_task = asyncio.ensure_future(controllers())

    async def healthz(request: web.Request) -> web.Response:
        if not reachable.is_set():
            return web.Response(status=500, text="[-]api-server failed: not reached yet\nhealthz check failed\n")
        return web.Response(text="ok")

    async def forbidden(request: web.Request) -> web.Response:
        return web.Response(status=403, text="forbidden (stand-in serves /healthz only)\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_route("*", "/{tail:.*}", forbidden)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    cert, key = _self_signed(f"{v.get('bind-address', '0.0.0.0')}@{int(time.time())}")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    await web.TCPSite(runner, v.get("bind-address", "0.0.0.0"), v.get("secure-port", 10257), ssl_context=ctx).start()
    say(name, f"serving /healthz on https://{v.get('bind-address', '0.0.0.0')}:{v.get('secure-port', 10257)}")
    await serve_until_signal([runner], [task, loop_task])
    say(name, "stopped")
    return 0


# ------------------------------------------------------------------------------ CoreDNS


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
        return host or "0.0.0.0", _port(port)
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
    conf: dict[str, Any] = {"port": _port(key[2:]), "directives": []}
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
            conf["kubeconfig"] = _kubeconfig(sub["kubeconfig"][0])
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


def main(which: str, argv: list[str]) -> int:
    entry = {"kube-controller-manager": kcm, "coredns": coredns}[which]
    try:
        return asyncio.run(entry(argv))
    except Refused as e:
        print(f"Error: {e}", file=sys.stderr, flush=True)
        return 1 if which != "coredns" else 2
    except OSError as e:
        print(f"Error: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))

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
import datetime as dt
import ipaddress
import os
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# run as a script with python -P: its siblings (cpcommon, coredns_standin, kcm/) are imported from its directory
sys.path.insert(0, str(Path(__file__).parent))

from coredns_standin import coredns  # noqa: E402
from cpcommon import (ApiClient, Refused, flag_bool, flag_duration, flag_ip, flag_kubeconfig,  # noqa: E402
                      flag_pem_file, flag_port, flag_text, parse_pflags, say, serve_until_signal, until_reachable)


# ------------------------------------------------------------------------------ kube-controller-manager

#: exactly the flags hpkctl's bootstrap passes (hpkctl/controlplane/components.py controller_manager_argv)
KCM_FLAGS: dict[str, Callable[[str], Any]] = {
    "kubeconfig": flag_kubeconfig,
    "authentication-kubeconfig": flag_kubeconfig,
    "authorization-kubeconfig": flag_kubeconfig,
    "bind-address": flag_ip,
    "secure-port": flag_port,
    "leader-elect": flag_bool,
    "cluster-name": flag_text,
    "cluster-signing-cert-file": flag_pem_file,
    "cluster-signing-key-file": flag_pem_file,
    "service-account-private-key-file": flag_pem_file,
    "root-ca-file": flag_pem_file,
    "use-service-account-credentials": flag_bool,
    "node-monitor-period": flag_duration,
    "node-monitor-grace-period": flag_duration,
    "node-startup-grace-period": flag_duration,
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

"""Health probes of the control plane's components: one HTTP(S) GET each, answered in a second or two.

A probe returns ``(healthy, detail)``; ``detail`` is what to show when the wait for it runs out
("connection refused", "HTTP 500: [-]etcd failed"...).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from hpkctl.controlplane.pki import CertKey

PROBE_TIMEOUT = 3.0


@dataclass(frozen=True)
class Probe:
    """``GET url``: TLS with ``ca`` (None: not verified, for self-signed health ports) and ``client``."""

    url: str
    ca: Path | None = None
    client: CertKey | None = None
    #: what the body must be (stripped), if anything
    body: str | None = None
    #: a JSON body's ``health`` field must be "true" (etcd)
    etcd: bool = False

    def __call__(self) -> tuple[bool, str]:
        return probe(self)


def _context(p: Probe) -> ssl.SSLContext:
    if p.ca is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=str(p.ca))
    if p.client is not None:
        ctx.load_cert_chain(str(p.client.cert), str(p.client.key))
    return ctx


def probe(p: Probe, *, timeout: float = PROBE_TIMEOUT) -> tuple[bool, str]:
    scheme, _, rest = p.url.partition("://")
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.rpartition(":")
    conn: http.client.HTTPConnection
    try:
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=_context(p))
        else:
            conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        try:
            conn.request("GET", "/" + path, headers={"Accept": "*/*"})
            resp = conn.getresponse()
            data = resp.read(64 * 1024).decode(errors="replace")
        finally:
            conn.close()
    except ssl.SSLError as e:
        return False, f"TLS: {e.reason or e}"
    except (ConnectionRefusedError, socket.timeout, TimeoutError) as e:
        return False, "connection refused" if isinstance(e, ConnectionRefusedError) else "no answer (timeout)"
    except (OSError, http.client.HTTPException) as e:
        return False, f"{type(e).__name__}: {e}"
    text = data.strip()
    if resp.status != 200:
        return False, f"HTTP {resp.status}: {text[:300]}"
    if p.etcd:
        try:
            ok = json.loads(text).get("health") == "true"
        except (ValueError, AttributeError):
            ok = False
        return ok, text[:300]
    if p.body is not None and text != p.body:
        return False, f"HTTP 200 but {text[:300]!r}"
    return True, text[:300]


__all__ = ["PROBE_TIMEOUT", "Probe", "probe"]

"""``exec`` in a pod's container through the API server (``pods/NAME/exec``), as ``kubectl exec`` does it.

WebSocket ``v5.channel.k8s.io`` (what kubectl 1.30+ speaks, and what the API server passes on to a
kubelet with ``ExtendWebSocketsToKubelet``): every binary message is one channel byte then data,
1 stdout, 2 stderr, 3 the end as a ``metav1.Status`` (``Success``, or ``Failure`` with the exit code
in ``details.causes[{reason: ExitCode}]``). The ``kubernetes`` package's ``stream`` speaks v4 only, so
this is aiohttp, authenticated from the same kubeconfig as :class:`~hpkctl.kube.client.Kube`.
No stdin, no TTY: what a self-test or a script needs.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from urllib.parse import urlencode

import aiohttp

from hpkctl.kube.client import Kube, KubeUnavailable, pod_path

V5 = "v5.channel.k8s.io"
STDOUT, STDERR, ERROR = 1, 2, 3


@dataclass(frozen=True)
class ExecResult:
    stdout: bytes
    stderr: bytes
    exit_code: int
    message: str = ""  # the Status message of a failure that is not the command's own exit code


def exit_code(status: dict[str, object]) -> tuple[int, str]:
    """The command's exit code from channel 3's Status, and the message when the exec itself failed (-1)."""
    if status.get("status") == "Success":
        return 0, ""
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes if isinstance(causes, list) else []:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(str(cause.get("message"))), ""
            except ValueError:
                break
    return -1, str(status.get("message") or status)


def _ssl(kube: Kube) -> ssl.SSLContext | bool:
    if not kube.verify_tls:
        return False
    ctx = ssl.create_default_context(cafile=kube.ca_file)
    if kube.cert_file and kube.key_file:
        ctx.load_cert_chain(kube.cert_file, kube.key_file)
    return ctx


async def _exec(kube: Kube, url: str, timeout: float) -> ExecResult:
    got: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray(), ERROR: bytearray()}
    headers = {"Authorization": kube.authorization} if kube.authorization else {}
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url, ssl=_ssl(kube), protocols=(V5,), headers=headers,
                                      timeout=aiohttp.ClientWSTimeout(ws_close=timeout)) as ws:
            async with asyncio.timeout(timeout):
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY and msg.data and msg.data[0] in got:
                        got[msg.data[0]] += msg.data[1:]
    await asyncio.sleep(0.1)  # aiohttp closes TLS transports a moment after the session (its docs' advice)
    if not got[ERROR]:
        return ExecResult(bytes(got[STDOUT]), bytes(got[STDERR]), -1, "the stream closed without a status")
    try:
        status = json.loads(got[ERROR])
    except ValueError:
        status = {"message": got[ERROR].decode(errors="replace")}
    code, message = exit_code(status if isinstance(status, dict) else {"message": str(status)})
    return ExecResult(bytes(got[STDOUT]), bytes(got[STDERR]), code, message)


def pod_exec(kube: Kube, namespace: str, name: str, container: str, command: list[str], *,
             timeout: float = 60.0) -> ExecResult:
    """Run ``command`` in the container; its output and exit code. KubeUnavailable when no stream opens."""
    query = urlencode([*(("command", c) for c in command), ("container", container), ("stdout", "true"),
                       ("stderr", "true")])
    url = f"{kube.host}{pod_path(namespace, name, 'exec')}?{query}"
    try:
        return asyncio.run(_exec(kube, url, timeout))
    except aiohttp.WSServerHandshakeError as e:
        raise KubeUnavailable(f"exec in {namespace}/{name}: the API server refused the stream: {e.status} "
                              f"{e.message}") from e
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise KubeUnavailable(f"exec in {namespace}/{name}: {e or type(e).__name__}") from e


__all__ = ["ExecResult", "exit_code", "pod_exec"]

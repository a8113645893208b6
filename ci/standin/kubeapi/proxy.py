"""The API server's connections to a kubelet: ``pods/log``, ``pods/exec``/``attach``, ``nodes/proxy``.

As kube-apiserver: the kubelet's address is the Node's first ``status.addresses`` entry of the
preferred types and ``status.daemonEndpoints.kubeletEndpoint.Port``; the connection is HTTPS with
the API server's client certificate (CN ``kube-apiserver-kubelet-client``), the kubelet's own
certificate verified only when a CA is given (``--kubelet-certificate-authority``). exec/attach
pass the client's WebSocket through (1.36+ with ``ExtendWebSocketsToKubelet`` declared by the
Node); the SPDY translation older servers do is not offered, and says so.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from .errors import ApiError, bad_request, not_found

if TYPE_CHECKING:
    from .handlers import Server

DEFAULT_ADDRESS_TYPES = ("Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP")
LOG_PARAMS = ("follow", "previous", "timestamps", "tailLines", "sinceSeconds", "sinceTime", "limitBytes", "stream")
STREAM_PARAMS = {"stdin": "input", "stdout": "output", "stderr": "error", "tty": "tty"}
WS_FEATURE = "ExtendWebSocketsToKubelet"


class KubeletClient:
    def __init__(self, cert: Path, key: Path, *, ca: Path | None,
                 address_types: tuple[str, ...] = DEFAULT_ADDRESS_TYPES) -> None:
        self.ssl = ssl.create_default_context(cafile=str(ca) if ca else None)
        if ca is None:
            self.ssl.check_hostname = False
            self.ssl.verify_mode = ssl.CERT_NONE
        self.ssl.load_cert_chain(str(cert), str(key))
        self.address_types = address_types
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=10))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def base(self, node: dict[str, Any]) -> str:
        st = node.get("status") or {}
        addrs = st.get("addresses") or []
        port = ((st.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 10250
        for typ in self.address_types:
            for a in addrs:
                if a.get("type") == typ and a.get("address"):
                    host = a["address"]
                    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        raise ApiError(500, "InternalError", f'no preferred addresses found; known addresses: {addrs}')


def _node_of(srv: "Server", name: str) -> dict[str, Any]:
    node = srv.api.store.get("nodes.", "", name)
    if node is None:
        raise not_found("nodes", "", name)
    return node


def _container(pod: dict[str, Any], wanted: str) -> str:
    spec = pod.get("spec") or {}
    names = [c["name"] for c in spec.get("containers") or []]
    inits = [c["name"] for c in spec.get("initContainers") or []]
    eph = [c["name"] for c in spec.get("ephemeralContainers") or []]
    name = pod["metadata"]["name"]
    if not wanted:
        if len(names) == 1:
            return str(names[0])
        msg = f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
        if inits:
            msg += f" or one of the init containers: [{' '.join(inits)}]"
        raise bad_request(msg)
    if wanted not in names + inits + eph:
        raise bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


async def _error_from(resp: aiohttp.ClientResponse) -> ApiError:
    text = (await resp.text(errors="replace")).strip()
    reason = {400: "BadRequest", 403: "Forbidden", 404: "NotFound"}.get(resp.status, "InternalError")
    return ApiError(resp.status if resp.status in (400, 403, 404) else 500, reason, text or resp.reason or "error")


async def pod_log(srv: "Server", request: web.Request, ns: str, name: str) -> web.StreamResponse:
    pod = srv.api.get(srv_rt(srv, "pods"), ns, name)
    q = request.query
    container = _container(pod, q.get("container", ""))
    if "sinceSeconds" in q and "sinceTime" in q:
        raise ApiError(422, "Invalid", "PodLogOptions \"\" is invalid: [sinceSeconds: Forbidden: at most one of "
                       "`sinceTime` or `sinceSeconds` may be specified]")
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        return web.Response(body=b"", content_type="text/plain")
    base = srv.kubelet.base(_node_of(srv, node_name))
    params = [(k, v) for k in LOG_PARAMS for v in q.getall(k, [])]
    url = f"{base}/containerLogs/{ns}/{name}/{container}"
    try:
        upstream = await srv.kubelet.session().get(url, params=params, ssl=srv.kubelet.ssl)
    except aiohttp.ClientError as e:
        raise ApiError(500, "InternalError", f"Get \"{url}\": {e}") from None
    async with upstream:
        if upstream.status != 200:
            raise await _error_from(upstream)
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        async for chunk in upstream.content.iter_any():
            await resp.write(chunk)
        await resp.write_eof()
        return resp


def srv_rt(srv: "Server", plural: str) -> Any:
    from .resources import find
    return find("", "v1", plural)


async def pod_stream(srv: "Server", request: web.Request, ns: str, name: str, sub: str) -> web.StreamResponse:
    pod = srv.api.get(srv_rt(srv, "pods"), ns, name)
    q = request.query
    container = _container(pod, q.get("container", ""))
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        raise bad_request(f"pod {name} does not have a host assigned")
    node = _node_of(srv, node_name)
    if WS_FEATURE not in ((node.get("status") or {}).get("declaredFeatures") or []):
        raise ApiError(500, "InternalError", f"node {node_name} does not declare {WS_FEATURE}: a 1.36 API server "
                       "would translate to SPDY for it, which the stand-in does not offer")
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise bad_request("Upgrade request required" if "Upgrade" not in request.headers else
                          "the Kubernetes API stand-in passes only WebSocket (v5.channel.k8s.io) streams to "
                          "kubelets; SPDY is not supported")
    params: list[tuple[str, str]] = [("command", c) for c in q.getall("command", [])]
    for k, v in STREAM_PARAMS.items():
        if q.get(k) in ("true", "1"):
            params.append((v, "1"))
    protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    url = f"{srv.kubelet.base(node).replace('https://', 'wss://')}/{sub}/{ns}/{name}/{container}"
    try:
        upstream = await srv.kubelet.session().ws_connect(url, params=params, protocols=protocols,
                                                          ssl=srv.kubelet.ssl, max_msg_size=0)
    except aiohttp.WSServerHandshakeError as e:
        raise ApiError(e.status if e.status in (400, 403, 404) else 500, "InternalError",
                       f"error dialing kubelet: {e.message}") from None
    except aiohttp.ClientError as e:
        raise ApiError(500, "InternalError", f"error dialing kubelet: {e}") from None
    ws = web.WebSocketResponse(protocols=(upstream.protocol,) if upstream.protocol else (), max_msg_size=0)
    await ws.prepare(request)
    await _pump(ws, upstream)
    return ws


async def _pump(client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse) -> None:
    async def forward(src: Any, dst: Any) -> None:
        async for msg in src:
            if msg.type == aiohttp.WSMsgType.BINARY:
                await dst.send_bytes(msg.data)
            elif msg.type == aiohttp.WSMsgType.TEXT:
                await dst.send_str(msg.data)
            else:
                break
    tasks = [asyncio.ensure_future(forward(upstream, client)), asyncio.ensure_future(forward(client, upstream))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await upstream.close()
        await client.close()


async def node_proxy(srv: "Server", request: web.Request, name: str, subpath: str) -> web.StreamResponse:
    base = srv.kubelet.base(_node_of(srv, name))
    url = f"{base}/{subpath}"
    try:
        async with srv.kubelet.session().request(request.method, url, params=list(request.query.items()),
                                                 data=await request.read() or None, ssl=srv.kubelet.ssl) as up:
            body = await up.read()
            return web.Response(status=up.status, body=body,
                                headers={"Content-Type": up.headers.get("Content-Type", "text/plain")})
    except aiohttp.ClientError as e:
        raise ApiError(503, "ServiceUnavailable", f"error trying to reach service: {e}") from None

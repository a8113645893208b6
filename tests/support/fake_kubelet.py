"""A tiny fake kubelet for the API stand-in's proxy tests: HTTPS with the serving certificate the
stand-in issued for the node, client certificates required (the cluster CA), and the routes the
API server proxies to: ``/containerLogs``, ``/exec`` (WebSocket ``v5.channel.k8s.io``),
``/runningpods/``. It records every request (path, query, client CN)."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web


class FakeKubelet:
    def __init__(self, pki: Path, node: str = "hpk") -> None:
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / f"kubelet-{node}-serving.crt"), str(pki / f"kubelet-{node}-serving.key"))
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> "FakeKubelet":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/containerLogs/{ns}/{pod}/{container}", self._logs)
        app.router.add_route("*", "/exec/{ns}/{pod}/{container}", self._exec)
        app.router.add_get("/runningpods/", self._running)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ctx)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def _record(self, request: web.Request) -> None:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        cn = next((v for rdn in (cert or {}).get("subject", ()) for k, v in rdn if k == "commonName"), "")
        self.requests.append({"path": request.path, "query": list(request.query.items()), "cn": cn,
                              "method": request.method})

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        lines = 3 if request.query.get("follow") != "true" else 5
        for i in range(lines):
            await resp.write(f"{request.match_info['container']} line {i}\n".encode())
            if request.query.get("follow") == "true":
                await asyncio.sleep(0.2)
        await resp.write_eof()
        return resp

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        ws = web.WebSocketResponse(protocols=("v5.channel.k8s.io", "v4.channel.k8s.io"))
        await ws.prepare(request)
        command = request.query.getall("command", [])
        await ws.send_bytes(b"\x01" + (" ".join(command) + "\n").encode())
        if request.query.get("input") == "1":  # echo stdin until the client closes it (v5: 255, 0)
            stdin = b""
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.BINARY or msg.data[:2] == b"\xff\x00":
                    break
                if msg.data[:1] == b"\x00":
                    stdin += msg.data[1:]
            await ws.send_bytes(b"\x01" + stdin)
        code = 3 if command[-1:] == ["fail"] else 0
        status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        if code:
            status = {"metadata": {}, "status": "Failure", "message": f"command terminated with non-zero exit code",
                      "reason": "NonZeroExitCode",
                      "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        return ws

    async def _running(self, request: web.Request) -> web.Response:
        self._record(request)
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "items": []})

    def node(self, name: str = "hpk", *, websocket: bool = True) -> dict[str, Any]:
        """A Node object pointing at this fake kubelet."""
        status: dict[str, Any] = {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
                            "lastHeartbeatTime": "2026-11-24T00:00:00Z", "lastTransitionTime": "2026-11-24T00:00:00Z"}],
            "nodeInfo": {"kubeletVersion": "v1.36.0-hpk", "machineID": "", "systemUUID": "", "bootID": "",
                         "kernelVersion": "6.1", "osImage": "Debian 12", "containerRuntimeVersion": "slurm://22.5",
                         "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            "capacity": {"cpu": "16", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "16", "memory": "16Gi", "pods": "110"}}
        if websocket:
            status["declaredFeatures"] = ["ExtendWebSocketsToKubelet"]
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "type": "virtual-kubelet"}}, "spec": {}, "status": status}

"""A small async client for the API server (aiohttp): list, create, patch, delete, status writes.
Errors other than the expected conflicts come back as (status, body); the loop logs and retries."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
import sys
from typing import Any

from aiohttp import ClientSession, ClientTimeout

Obj = dict[str, Any]


def say(message: str) -> None:
    stamp = dt.datetime.now().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    print(f"{stamp} kube-controller-manager stand-in: {message}", file=sys.stderr, flush=True)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s: str) -> float:
    return dt.datetime.strptime(s[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc).timestamp()


class Kube:
    def __init__(self, server: str, context: ssl.SSLContext, headers: dict[str, str]) -> None:
        self.server, self.ssl, self.headers = server, context, headers
        self.session: ClientSession | None = None

    async def open(self) -> None:
        self.session = ClientSession(timeout=ClientTimeout(total=30), headers=self.headers)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def call(self, method: str, path: str, body: Any = None,
                   ctype: str = "application/json") -> tuple[int, Any]:
        assert self.session is not None
        data = None if body is None else json.dumps(body)
        async with self.session.request(method, self.server + path, data=data, ssl=self.ssl,
                                        headers={"Content-Type": ctype} if data else {}) as r:
            text = await r.text()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text

    async def list(self, path: str) -> list[Obj]:
        code, body = await self.call("GET", path)
        if code != 200:
            raise RuntimeError(f"GET {path}: HTTP {code} {str(body)[:200]}")
        return list(body.get("items") or [])

    async def write(self, what: str, method: str, path: str, body: Any = None,
                    ctype: str = "application/json") -> Obj | None:
        """A write whose failure is logged (404/409 are normal races: the next round sees the news)."""
        code, out = await self.call(method, path, body, ctype)
        if code >= 300:
            if code not in (404, 409):
                say(f"{what}: HTTP {code} {out.get('message') if isinstance(out, dict) else str(out)[:200]}")
            return None
        return out if isinstance(out, dict) else {}

    async def watch(self, path: str, wake: asyncio.Event) -> None:
        """Wake the loop on every event of ``path`` (a watch, re-opened when it ends)."""
        assert self.session is not None
        while True:
            try:
                async with self.session.get(f"{self.server}{path}?watch=true&allowWatchBookmarks=false",
                                            ssl=self.ssl, timeout=ClientTimeout(total=None, sock_read=600)) as r:
                    if r.status != 200:
                        raise RuntimeError(f"HTTP {r.status}")
                    async for _ in r.content:
                        wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the API server restarting: watch again
                say(f"watch {path}: {type(e).__name__}: {e}")
            await asyncio.sleep(1)


def path_of(kind: str, ns: str, name: str = "") -> str:
    base = {"Pod": "/api/v1", "Job": "/apis/batch/v1", "ReplicaSet": "/apis/apps/v1",
            "Deployment": "/apis/apps/v1", "StatefulSet": "/apis/apps/v1"}[kind]
    plural = kind.lower() + "s"
    return f"{base}/namespaces/{ns}/{plural}" + (f"/{name}" if name else "")


def controller_of(obj: Obj) -> Obj | None:
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


API_VERSIONS = {"Job": "batch/v1", "ReplicaSet": "apps/v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1"}


def owner_ref(owner: Obj, kind: str) -> Obj:
    """The controller reference a controller puts on what it makes (list items carry no kind)."""
    return {"apiVersion": API_VERSIONS[kind], "kind": kind, "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def ns_name(obj: Obj) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]

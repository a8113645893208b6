"""HTTP: routing of ``/api`` and ``/apis`` paths, authentication, request bodies and query
parameters, answers (objects, lists, Tables, Status errors), discovery.

One catch-all route parses the path as kube-apiserver's request-info resolver does, so every
type in ``resources`` gets the same collection/object/subresource/namespace handling.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import yaml
from aiohttp import web

from . import nodeauth, openapi, protobuf, proxy, rbac, resources, subresources, tables, watch
from .api import Api
from .certs import Pki
from .errors import ApiError, bad_request
from .resources import ResourceType
from .matching import Selector

log = logging.getLogger("kubeapi")
PUBLIC = ("/healthz", "/readyz", "/livez", "/version")
FIELD_VALIDATION = ("Strict", "Warn", "Ignore")
#: the request's key in the stand-in's counts (``counts``), once it is known to be an API request
COUNTED = "standin.counted"
USER = "standin.user"


@dataclass
class Target:
    rt: ResourceType
    ns: str | None  # None: all namespaces (or cluster-scoped)
    name: str = ""
    sub: str = ""
    subpath: str = ""


def resolve(parts: list[str]) -> Target | dict[str, Any] | None:
    """Path segments -> a Target, a discovery document, or None (404)."""
    if parts == ["api"]:
        return {"discovery": "api"}
    if parts == ["apis"]:
        return resources.api_group_list()
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 2:
        if len(parts) == 2:
            return resources.api_group(parts[1])
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return resources.resource_list(group, version)
    ns: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        rt = resources.find(group, version, rest[2])
        if rt is not None and rt.namespaced:
            ns, rest = rest[1], rest[2:]
    rt = resources.find(group, version, rest[0])
    if rt is None or (ns is not None) != rt.namespaced and not (ns is None and len(rest) == 1):
        return None
    if rt.namespaced and ns is None and len(rest) > 1:
        return None
    return Target(rt, ns, rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else "",
                  "/".join(rest[3:]))


def json_response(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers = {}
    if warnings:
        headers["Warning"] = ", ".join('299 - "' + w.replace('"', '\\"') + '"' for w in warnings)
    return web.Response(status=status, body=json.dumps(body, separators=(",", ":")).encode(),
                        content_type="application/json", headers=headers)


def error_response(e: ApiError) -> web.Response:
    return json_response(e.status(), e.code)


class Server:
    def __init__(self, api: Api, pki: Pki, settings: watch.WatchSettings, kubelet: proxy.KubeletClient,
                 protobuf_binary: str = "") -> None:
        self.protobuf_binary = protobuf_binary
        self.api = api
        self.pki = pki
        self.settings = settings
        self.kubelet = kubelet

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=8 * 1024 * 1024)
        app["protobuf_binary"] = self.protobuf_binary
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    # ------------------------------------------------------------------ auth and errors
    def user(self, request: web.Request) -> str | None:
        """Who sent the request (its client certificate's CN, or a bearer token's subject); worked out
        once per request (a certificate decode, or an RSA verification), asked several times."""
        if USER not in request:
            request[USER] = self._user(request)
        return request[USER]  # type: ignore[no-any-return]

    def _user(self, request: web.Request) -> str | None:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        if cert:
            for rdn in cert.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        return str(v)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            claims = self.pki.verify_jwt(auth[7:])
            if claims:
                return str(claims.get("sub"))
        return None

    @web.middleware
    async def _middleware(self, request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        user = self.user(request)
        if request.path not in PUBLIC and user is None:
            return error_response(ApiError(401, "Unauthorized", "Unauthorized"))
        nodeauth.CURRENT.set((user or "", tuple(self.groups(request))))  # for NodeRestriction in the Api
        try:
            resp = await handler(request)
        except ApiError as e:
            resp = error_response(e)
        except web.HTTPException:
            raise
        except Exception as e:  # noqa: BLE001 - a bug must answer 500 like the real server, not hang
            log.exception("internal error on %s %s", request.method, request.path)
            resp = error_response(ApiError(500, "InternalError", f"Internal error occurred: {e}"))
        counted = request.get(COUNTED)
        if counted and resp.status >= 400:
            self.api.store.counts.error(counted, resp.status)
        return resp

    # ------------------------------------------------------------------ dispatch
    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if path == "/version":
            return json_response(resources.VERSION)
        if path == "/standin/compact" and request.method == "POST":
            return json_response({"resourceVersion": str(self.api.store.compact())})
        if path == "/standin/requests" and request.method == "GET":
            return json_response(self.api.store.counts.document())
        if path == "/openapi/v3":
            return json_response(openapi.index())
        if path.startswith("/openapi/v3/"):
            gv = path[len("/openapi/v3/"):].split("/")
            if gv[:1] == ["api"] and gv[1:] == ["v1"]:
                return web.Response(body=openapi.document("", "v1"), content_type="application/json")
            if gv[:1] == ["apis"] and len(gv) == 3 and gv[1] in resources.groups():
                return web.Response(body=openapi.document(gv[1], gv[2]), content_type="application/json")
        if path == "/openapi/v2":
            return web.Response(body=openapi.v2_document(),
                                headers={"Content-Type": "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"})
        if path.startswith("/openapi/"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        parts = [p for p in path.split("/") if p]
        target = resolve(parts)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if isinstance(target, dict):
            if target.get("discovery") == "api":
                return json_response(resources.api_versions(self.api.server))
            return json_response(target)
        user = nodeauth.CURRENT.get()[0]
        request[COUNTED] = key = self.api.store.counts.key(
            user, nodeauth.verb(request.method, target.name, request.query), target.rt.plural, target.sub)
        self.api.store.counts.request(key)
        self._authorize(request, target)
        if target.rt.extra.get("read_only") and request.method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"the API stand-in serves no {target.rt.plural}: it cannot serve "
                           "custom resources (a real kube-apiserver would); use a real cluster for CRDs")
        if target.sub:
            return await subresources.handle(self, request, target)
        if not target.name:
            return await self._collection(request, target)
        return await self._object(request, target)

    def _authorize(self, request: web.Request, t: Target) -> None:
        """Node identities get what the Node authorizer grants (``nodeauth``); others everything."""
        user, groups = nodeauth.CURRENT.get()
        node = nodeauth.node_identity(user, groups) if self.api.node_authorization else None
        if node is None:
            return
        r = nodeauth.Request(verb=nodeauth.verb(request.method, t.name, request.query), group=t.rt.group,
                             resource=t.rt.plural, sub=t.sub, namespace=t.ns or "", name=t.name,
                             field_selector=request.query.get("fieldSelector", ""))
        allowed, reason = nodeauth.authorize(self.api.store, node, r)
        if not allowed:
            log.warning("forbidden for %s: %s %s (%s)", user, r.verb, request.path_qs, reason)
            raise nodeauth.forbidden(user, r, reason)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def flags(request: web.Request) -> dict[str, Any]:
        q = request.query
        fv = q.get("fieldValidation", "Warn")
        if fv not in FIELD_VALIDATION:
            raise bad_request(f"fieldValidation parameter unsupported: {fv}")
        dry = q.getall("dryRun", [])
        if any(d != "All" for d in dry):
            raise bad_request(f"Invalid dry run value: {dry}")
        return {"field_validation": fv, "dry_run": bool(dry)}

    @staticmethod
    async def body(request: web.Request, *, optional: bool = False) -> Any:
        raw = await request.read()
        if not raw:
            if optional:
                return {}
            raise bad_request("the body of the request was empty")
        ctype = request.content_type
        if ctype == "application/vnd.kubernetes.protobuf":
            try:
                return protobuf.decode(raw, request.app["protobuf_binary"])
            except protobuf.Unsupported as e:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                               f"accepted media types include: application/json, application/yaml ({e})") from None
        try:
            if ctype in ("application/yaml", "application/x-yaml"):
                return yaml.safe_load(raw)
            if ctype in ("application/json", "application/octet-stream", "") or optional:
                return json.loads(raw)
        except ValueError as e:
            raise bad_request(f"couldn't decode the request body: {e}") from None
        log.warning("415 for Content-Type %r on %s %s", request.headers.get("Content-Type"), request.method, request.path)
        raise ApiError(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - '
                       f'accepted media types include: application/json, application/yaml')

    def answer(self, request: web.Request, rt: ResourceType, obj: dict[str, Any], status: int = 200,
               warnings: list[str] | None = None) -> web.Response:
        out = self.api.encode(rt, obj) if obj.get("kind") != "Status" else obj
        if "as=Table" in request.headers.get("Accept", "") and out.get("kind") != "Status":
            out = tables.table(rt.key, [out], rv=out["metadata"].get("resourceVersion", ""),
                               include=request.query.get("includeObject", "Metadata"))
        return json_response(out, status, warnings)

    # ------------------------------------------------------------------ collections
    async def _collection(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        if request.method == "POST" and t.rt.extra.get("virtual"):
            return json_response(self._review(request, t.rt, await self.body(request)), 201)
        if request.method == "POST":
            if t.rt.namespaced and t.ns is None:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            obj, warnings = self.api.create(t.rt, t.ns or "", await self.body(request), **self.flags(request),
                                            user=self.user(request) or "")
            return self.answer(request, t.rt, obj, 201, warnings)
        sel = Selector.parse(t.rt.key, q.get("labelSelector", ""), q.get("fieldSelector", ""))
        if t.rt.group == "events.k8s.io" and t.ns is not None:
            pass
        if request.method == "DELETE":
            opts = await self.body(request, optional=True)
            for o in self.api.store.list(t.rt.key, t.ns):
                if sel.matches(o):
                    self.api.delete(t.rt, t.ns or "", o["metadata"]["name"], opts, dry_run=self.flags(request)["dry_run"])
            return json_response(self._list(t, sel, {}))
        if request.method != "GET":
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if q.get("watch") in ("true", "1"):
            encode = self._watch_encoder(request, t.rt)
            return await watch.serve(request, self.api.store, t.rt, t.ns, sel, encode, self.settings)
        out = self._list(t, sel, q)
        if "as=Table" in request.headers.get("Accept", ""):
            tbl = tables.table(t.rt.key, out["items"], rv=out["metadata"]["resourceVersion"],
                               include=q.get("includeObject", "Metadata"))
            if "continue" in out["metadata"]:
                tbl["metadata"]["continue"] = out["metadata"]["continue"]
            return json_response(tbl)
        return json_response(out)

    def _review(self, request: web.Request, rt: ResourceType, body: Any) -> dict[str, Any]:
        """Everyone authenticated may do everything here (no RBAC); say who they are."""
        out = dict(body) if isinstance(body, dict) else {}
        out.update({"apiVersion": rt.api_version, "kind": rt.kind})
        out.setdefault("metadata", {})["creationTimestamp"] = None
        if rt.kind == "SelfSubjectReview":
            user, groups = self.user(request) or "", self.groups(request)
            out["status"] = {"userInfo": {"username": user, "groups": [*groups, "system:authenticated"]}}
        elif rt.kind == "SubjectAccessReview":  # someone else's rights: RBAC over the stored bindings
            out["status"] = rbac.review(self.api.store, dict(out.get("spec") or {}))
        else:
            out["status"] = {"allowed": True, "reason": "the stand-in has no RBAC: every authenticated user may"}
        return out

    def groups(self, request: web.Request) -> list[str]:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        return [str(v) for rdn in (cert or {}).get("subject", ()) for k, v in rdn if k == "organizationName"]

    def _watch_encoder(self, request: web.Request, rt: ResourceType) -> watch.Encoder:
        if "as=Table" in request.headers.get("Accept", ""):
            include = request.query.get("includeObject", "Metadata")
            return lambda o: tables.table(rt.key, [self.api.encode(rt, o)],
                                          rv=o["metadata"].get("resourceVersion", ""), include=include)
        return lambda o: self.api.encode(rt, o)

    def _list(self, t: Target, sel: Selector, q: Any) -> dict[str, Any]:
        items = [o for o in self.api.store.list(t.rt.key, t.ns) if sel.matches(o)]
        meta: dict[str, Any] = {"resourceVersion": str(self.api.store.rv)}
        start = q.get("continue", "")
        if start:
            try:
                after = tuple(json.loads(base64.b64decode(start))["after"])
            except (ValueError, KeyError, TypeError):
                raise bad_request("continue key is not valid") from None
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
        limit = int(q.get("limit", "0") or 0)
        if limit > 0 and len(items) > limit:
            last = items[limit - 1]["metadata"]
            meta["continue"] = base64.b64encode(json.dumps(
                {"after": [last.get("namespace", ""), last["name"]]}).encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        out_items = []
        for o in items:
            e = dict(self.api.encode(t.rt, o))
            e.pop("apiVersion", None)
            e.pop("kind", None)
            out_items.append(e)
        return {"kind": f"{t.rt.kind}List", "apiVersion": t.rt.api_version, "metadata": meta, "items": out_items}

    # ------------------------------------------------------------------ objects
    async def _object(self, request: web.Request, t: Target) -> web.StreamResponse:
        ns, m = t.ns or "", request.method
        if m == "GET":
            return self.answer(request, t.rt, self.api.get(t.rt, ns, t.name))
        if m == "PUT":
            obj, w = self.api.update(t.rt, ns, t.name, await self.body(request), **self.flags(request),
                                     user=self.user(request) or "")
            return self.answer(request, t.rt, obj, 200, w)
        if m == "PATCH":
            obj, w, created = self.api.patch(t.rt, ns, t.name, await request.read(), request.content_type,
                                             field_manager=request.query.get("fieldManager", ""),
                                             **self.flags(request), user=self.user(request) or "")
            return self.answer(request, t.rt, obj, 201 if created else 200, w)
        if m == "DELETE":
            opts = dict(await self.body(request, optional=True) or {})
            if "gracePeriodSeconds" in request.query:
                opts["gracePeriodSeconds"] = int(request.query["gracePeriodSeconds"])
            out = self.api.delete(t.rt, ns, t.name, opts, dry_run=self.flags(request)["dry_run"])
            pending = out.get("kind") != "Status" and self.api.store.get(t.rt.key, ns, t.name) is not None
            return self.answer(request, t.rt, out, 202 if pending and out["metadata"].get("finalizers") else 200)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

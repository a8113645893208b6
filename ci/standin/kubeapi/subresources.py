"""Subresources: ``status`` (its own write rules), ``binding`` (the scheduler's one write),
``token`` (TokenRequest: a signed, pod-bound service-account JWT), ``eviction``, and the
kubelet proxies ``log``, ``exec``, ``attach``, ``proxy`` (see ``proxy``)."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import nodeauth, proxy
from .api import now
from .errors import ApiError, FieldError, conflict, invalid, not_found
from .store import clone

if TYPE_CHECKING:
    from .handlers import Server, Target

SUCCESS_201 = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


async def handle(srv: "Server", request: web.Request, t: "Target") -> web.StreamResponse:
    from .handlers import json_response
    if t.sub not in t.rt.subresources:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    ns, m = t.ns or "", request.method
    if t.sub == "status":
        if m == "GET":
            return srv.answer(request, t.rt, srv.api.get(t.rt, ns, t.name))
        if m == "PUT":
            obj, w = srv.api.update(t.rt, ns, t.name, await srv.body(request), sub="status", **srv.flags(request))
            return srv.answer(request, t.rt, obj, 200, w)
        if m == "PATCH":
            obj, w, _ = srv.api.patch(t.rt, ns, t.name, await request.read(), request.content_type, sub="status",
                                      field_manager=request.query.get("fieldManager", ""), **srv.flags(request))
            return srv.answer(request, t.rt, obj, 200, w)
    elif t.sub == "binding" and m == "POST":
        bind(srv, ns, t.name, await srv.body(request))
        return json_response(SUCCESS_201, 201)
    elif t.sub == "eviction" and m == "POST":
        body = await srv.body(request)
        srv.api.delete(t.rt, ns, t.name, dict(body.get("deleteOptions") or {}), sub="eviction")
        return json_response(SUCCESS_201, 201)
    elif t.sub == "token" and m == "POST":
        return json_response(token(srv, ns, t.name, await srv.body(request)), 201)
    elif t.sub == "log" and m == "GET":
        return await proxy.pod_log(srv, request, ns, t.name)
    elif t.sub in ("exec", "attach") and m in ("GET", "POST"):
        return await proxy.pod_stream(srv, request, ns, t.name, t.sub)
    elif t.sub == "proxy" and t.rt.key == "nodes.":
        trailing = "/" if request.path.endswith("/") and t.subpath else ""
        return await proxy.node_proxy(srv, request, t.name, t.subpath + trailing)
    elif t.sub == "scale":
        return await scale(srv, request, t)
    elif t.sub == "finalize" and m == "PUT":
        obj = srv.api.get(t.rt, ns, t.name)
        obj["spec"] = (await srv.body(request)).get("spec", {})
        srv.api.store.put(t.rt.key, obj)
        srv.api.sweep_namespace(t.name)
        return srv.answer(request, t.rt, obj)
    raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def bind(srv: "Server", ns: str, name: str, body: dict[str, Any]) -> None:
    """pkg/registry/core/pod/storage BindingREST: set nodeName once, PodScheduled=True."""
    pods = srv.api.store
    target = (body.get("target") or {})
    if not target.get("name"):
        raise invalid("Binding", "", name, [FieldError("FieldValueRequired", "target.name")])
    pod = pods.get("pods.", ns, name)
    if pod is None:
        raise not_found("pods", "", name)
    pod = clone(pod)
    uid = (body.get("metadata") or {}).get("uid")
    if uid and uid != pod["metadata"]["uid"]:
        raise conflict("pods", "", name, f"Precondition failed: UID in precondition: {uid}, "
                       f"UID in object meta: {pod['metadata']['uid']}")
    if pod["metadata"].get("deletionTimestamp"):
        raise conflict("pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host")
    if pod["spec"].get("nodeName"):
        raise conflict("pods/binding", "", name, f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
    if pod["spec"].get("schedulingGates"):
        raise conflict("pods/binding", "", name, f"pod {name} has non-empty .spec.schedulingGates")
    pod["spec"]["nodeName"] = target["name"]
    for k, v in ((body.get("metadata") or {}).get("annotations") or {}).items():
        pod["metadata"].setdefault("annotations", {})[k] = v
    conds = [c for c in pod.setdefault("status", {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
    conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now()})
    pod["status"]["conditions"] = conds
    pods.put("pods.", pod)


def token(srv: "Server", ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """TokenRequest: pkg/registry/core/serviceaccount/storage/token.go."""
    sa = srv.api.store.get("serviceaccounts.", ns, name)
    if sa is None:
        raise not_found("serviceaccounts", "", name)
    spec = dict(body.get("spec") or {})
    if srv.api.node_restriction:
        nodeauth.admit(srv.api.store, operation="CREATE", plural="serviceaccounts", group="", sub="token",
                       name=name, new={"metadata": {"namespace": ns}, "spec": spec}, old=None)
    exp = int(spec.get("expirationSeconds") or 3600)
    if exp < 600:
        raise invalid("TokenRequest", "authentication.k8s.io", name, [FieldError(
            "FieldValueInvalid", "spec.expirationSeconds", "may not specify a duration less than 10 minutes", exp)])
    audiences = spec.get("audiences") or [srv.pki.issuer]
    k8s: dict[str, Any] = {"namespace": ns, "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]}}
    ref = spec.get("boundObjectRef")
    if ref:
        kind = ref.get("kind")
        if kind not in ("Pod", "Secret", "Node"):
            raise invalid("TokenRequest", "authentication.k8s.io", name, [FieldError(
                "FieldValueNotSupported", "spec.boundObjectRef.kind", 'supported values: "Pod", "Secret", "Node"', kind)])
        key = {"Pod": "pods.", "Secret": "secrets.", "Node": "nodes."}[kind]
        obj = srv.api.store.get(key, "" if kind == "Node" else ns, ref.get("name", ""))
        if obj is None:
            raise not_found(key.rstrip("."), "", ref.get("name", ""))
        if ref.get("uid") and ref["uid"] != obj["metadata"]["uid"]:
            raise conflict(key.rstrip("."), "", ref.get("name", ""),
                           f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                           "The object might have been deleted and then recreated")
        k8s[kind.lower()] = {"name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}
        node = (obj.get("spec") or {}).get("nodeName") if kind == "Pod" else None
        if node:
            n = srv.api.store.get("nodes.", "", node)
            k8s["node"] = {"name": node, "uid": n["metadata"]["uid"] if n else ""}
    iat = int(time.time())
    claims = {"aud": audiences, "exp": iat + exp, "iat": iat, "iss": srv.pki.issuer, "jti": str(uuid.uuid4()),
              "kubernetes.io": k8s, "nbf": iat, "sub": f"system:serviceaccount:{ns}:{name}"}
    expires = datetime.fromtimestamp(iat + exp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": None},
            "spec": {"audiences": audiences, "expirationSeconds": exp, "boundObjectRef": ref},
            "status": {"token": srv.pki.sign_jwt(claims), "expirationTimestamp": expires}}


async def scale(srv: "Server", request: web.Request, t: "Target") -> web.StreamResponse:
    """autoscaling/v1 Scale view of spec.replicas (kubectl scale PATCHes it)."""
    from .handlers import json_response
    from .patch import merge_patch, json_patch
    ns = t.ns or ""
    obj = srv.api.get(t.rt, ns, t.name)

    def view(o: dict[str, Any]) -> dict[str, Any]:
        sel = ((o.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: o["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                            "creationTimestamp") if k in o["metadata"]},
                "spec": {"replicas": (o.get("spec") or {}).get("replicas", 1)},
                "status": {"replicas": (o.get("status") or {}).get("replicas", 0),
                           "selector": ",".join(f"{k}={v}" for k, v in sorted(sel.items()))}}
    if request.method == "GET":
        return json_response(view(obj))
    cur = view(obj)
    if request.method == "PUT":
        new = await srv.body(request)
    elif request.method == "PATCH":
        raw = await request.read()
        patch = __import__("json").loads(raw or b"null")
        new = json_patch(cur, patch) if request.content_type == "application/json-patch+json" else merge_patch(cur, patch)
    else:
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    rv = (new.get("metadata") or {}).get("resourceVersion")
    if rv and rv != obj["metadata"]["resourceVersion"]:
        raise conflict(t.rt.plural, t.rt.group, t.name)
    replicas = (new.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or replicas < 0:
        raise invalid("Scale", "autoscaling", t.name, [FieldError("FieldValueInvalid", "spec.replicas",
                                                                  "must be greater than or equal to 0", replicas)])
    obj.setdefault("spec", {})["replicas"] = replicas
    stored, _ = srv.api.update(t.rt, ns, t.name, obj)
    return json_response(view(stored))

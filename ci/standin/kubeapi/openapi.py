"""``/openapi/v3``: the per-group-version OpenAPI documents kubectl reads.

kubectl (1.37 here) downloads them before ``apply``/``create`` (measured: without them it stops with
"failed to download openapi"): it checks that the PATCH operation of the kind accepts
``fieldValidation`` (then validation is left to the server), computes client-side apply patches
from the schemas' ``x-kubernetes-patch-*`` keys, and ``kubectl explain`` prints them. The schemas
are kubernetes-validate's (non-strict) definitions, so they are the real ones of the modelled release (``SCHEMA_VERSION``).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import kubernetes_validate

from .resources import SCHEMA_VERSION, TYPES, VERSION, ResourceType, groups

VERSION_TEXT = VERSION["gitVersion"]

PATCH_TYPES = ("application/apply-patch+yaml", "application/json-patch+json",
               "application/merge-patch+json", "application/strategic-merge-patch+json")
QUERY = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


@lru_cache(maxsize=1)
def _schemas() -> dict[str, Any]:
    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    text = (base / f"v{SCHEMA_VERSION}-local" / "_definitions.json").read_text(encoding="utf-8")
    defs: dict[str, Any] = json.loads(text.replace('"#/$defs/', '"#/components/schemas/'))["$defs"]
    return {k: _openapi_types(v) for k, v in defs.items()}


def _openapi_types(node: Any) -> Any:
    """JSON Schema's ``"type": ["string", "null"]`` as OpenAPI's single ``"type": "string"``
    (kubectl explain's templates compare ``type`` with a string)."""
    if isinstance(node, list):
        return [_openapi_types(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _openapi_types(v) for k, v in node.items()}
    t = out.get("type")
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        if rest:
            out["type"] = rest[0]
        else:
            out.pop("type")
    return out


def _def_name(rt: ResourceType) -> str:
    for name, d in _schemas().items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            if (gvk["group"], gvk["version"], gvk["kind"]) == (rt.group, rt.version, rt.kind):
                return name
    return ""


def _op(rt: ResourceType, action: str, ref: str) -> dict[str, Any]:
    params = [{"name": q, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for q in QUERY]
    return {"operationId": f"{action}{rt.kind}", "parameters": params,
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}}},
            "x-kubernetes-action": action,
            **({"requestBody": {"content": {t: {"schema": {"type": "object"}} for t in PATCH_TYPES}}}
               if action == "patch" else {}),
            "x-kubernetes-group-version-kind": {"group": rt.group, "kind": rt.kind, "version": rt.version}}


@lru_cache(maxsize=32)
def document(group: str, version: str) -> bytes:
    paths: dict[str, Any] = {}
    for rt in TYPES:
        if (rt.group, rt.version) != (group, version):
            continue
        ref = f"#/components/schemas/{_def_name(rt)}"
        prefix = "/" + _gv_path(group, version) + ("/namespaces/{namespace}" if rt.namespaced else "")
        paths[f"{prefix}/{rt.plural}"] = {"get": _op(rt, "list", ref), "post": _op(rt, "post", ref)}
        paths[f"{prefix}/{rt.plural}/{{name}}"] = {
            "get": _op(rt, "get", ref), "put": _op(rt, "put", ref), "patch": _op(rt, "patch", ref),
            "delete": _op(rt, "delete", ref)}
    doc = {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION_TEXT},
           "paths": paths, "components": {"schemas": _schemas()}}
    return json.dumps(doc, separators=(",", ":")).encode()


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (payloads here are shorter than 128 bytes)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def v2_document() -> bytes:
    """``/openapi/v2`` as the protobuf ``openapi_v2.Document`` (gnostic) kubectl asks for: swagger 2.0 and
    its info, no paths or definitions. kubectl reads it only for a kind the v3 documents do not name (to
    validate it client-side, which it skips for a kind the document does not define either); then the
    discovery documents tell it "no matches for kind". Field numbers: gnostic's OpenAPIv2.proto
    (Document: swagger 1, info 2; Info: title 1, version 2)."""
    info = _field(1, b"Kubernetes") + _field(2, VERSION_TEXT.encode())
    return _field(1, b"2.0") + _field(2, info)


def index() -> dict[str, Any]:
    out = {}
    for group, versions in [("", ["v1"]), *groups().items()]:
        for v in versions:
            h = hashlib.sha512(document(group, v)).hexdigest()[:128].upper()
            out[_gv_path(group, v)] = {"serverRelativeURL": f"/openapi/v3/{_gv_path(group, v)}?hash={h}"}
    return {"paths": out}

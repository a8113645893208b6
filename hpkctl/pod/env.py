"""A container's environment, built the way the kubelet builds it (``makeEnvironmentVariables``).

Order and precedence follow Kubernetes: ``envFrom`` sources in order, then ``env`` entries in order
(each ``value`` may reference earlier variables with ``$(NAME)``), then service-link variables for
names not already set. Values from ``status.podIP``/``status.hostIP`` are only known when the job
starts on a node, so they stay :class:`RuntimeRef` parts until then.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from hpkctl.errors import PodError
from hpkctl.pod.context import HOST_IP, POD_IP, Ctx
from hpkctl.pod.expansion import expand
from hpkctl.pod.resources import PodResources, resource_field
from hpkctl.pod.shell import Value, is_identifier, literal, secret

_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def decode(data: bytes) -> str:
    """Bytes of a ConfigMap/Secret value as text; undecodable bytes survive (surrogateescape)."""
    return data.decode("utf-8", "surrogateescape")


def field_value(ctx: Ctx, path: str, *, where: str, allow_whole_maps: bool = False) -> Value:
    """Value of a Downward API ``fieldRef``."""
    meta = ctx.meta
    simple: dict[str, Value] = {
        "metadata.name": literal(ctx.name),
        "metadata.namespace": literal(ctx.namespace),
        "metadata.uid": literal(ctx.uid),
        "spec.nodeName": literal(ctx.node_name),
        "spec.serviceAccountName": literal(ctx.spec.get("serviceAccountName") or "default"),
        "status.podIP": (POD_IP,),
        "status.podIPs": (POD_IP,),
        "status.hostIP": (HOST_IP,),
        "status.hostIPs": (HOST_IP,),
    }
    if path in simple:
        return simple[path]
    m = _LABEL_REF.match(path)
    if m:
        return literal(str((meta.get(m.group(1)) or {}).get(m.group(2), "")))
    if allow_whole_maps and path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        # the kubelet's fieldpath.FormatMap: sorted key="value" lines, no newline after the last
        return literal("\n".join(f"{k}={go_quote(str(v))}" for k, v in sorted(items.items())))
    raise PodError("CreateContainerConfigError", f"{where}: fieldPath {path!r} is not supported",
                   hint="use metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'], "
                        "metadata.annotations['k'], spec.nodeName, spec.serviceAccountName, status.podIP or "
                        "status.hostIP")


def go_quote(text: str) -> str:
    """Go's ``%q`` formatting, used by the Downward API for label and annotation files."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\a":
            out.append("\\a")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif ch == "\v":
            out.append("\\v")
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def service_env(services: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Service-link variables (``FOO_SERVICE_HOST`` ...) for services that have a cluster IP.

    Headless services (``clusterIP: None``) get none, as in Kubernetes; hpkctl's admission hook
    makes every service headless, so in practice this carries the ``kubernetes`` service only.
    """
    env: dict[str, str] = {}
    for svc in services:
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP") or ""
        if ip in ("", "None"):
            continue
        prefix = (svc.get("metadata") or {}).get("name", "").upper().replace("-", "_")
        ports = spec.get("ports") or []
        env[f"{prefix}_SERVICE_HOST"] = ip
        if ports:
            env[f"{prefix}_SERVICE_PORT"] = str(ports[0].get("port"))
        for p in ports:
            if p.get("name"):
                env[f"{prefix}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p.get("port"))
        if ports:
            first = ports[0]
            env[f"{prefix}_PORT"] = f"{(first.get('protocol') or 'TCP').lower()}://{ip}:{first.get('port')}"
        for p in ports:
            proto = p.get("protocol") or "TCP"  # null: the API server's default
            base = f"{prefix}_PORT_{p.get('port')}_{proto.upper()}"
            env[base] = f"{proto.lower()}://{ip}:{p.get('port')}"
            env[f"{base}_PROTO"] = proto.lower()
            env[f"{base}_PORT"] = str(p.get("port"))
            env[f"{base}_ADDR"] = ip
    return env


def container_env(ctx: Ctx, container: Mapping[str, Any], *, where: str, resources: PodResources,
                  services: Mapping[str, str]) -> dict[str, Value]:
    """The container's environment as name → value (runtime parts kept symbolic)."""
    env: dict[str, Value] = {}

    def lookup() -> dict[str, Value]:
        merged = {k: literal(v) for k, v in services.items()}
        merged.update(env)
        return merged

    for i, src in enumerate(container.get("envFrom") or []):
        w = f"{where}.envFrom[{i}]"
        prefix = src.get("prefix") or ""
        if "configMapRef" in src:
            ref, kind, getter = src["configMapRef"], "ConfigMap", ctx.objects.configmap
        elif "secretRef" in src:
            ref, kind, getter = src["secretRef"], "Secret", ctx.objects.secret
        else:
            raise PodError("CreateContainerConfigError", f"{w}: needs configMapRef or secretRef")
        data = getter(ctx.namespace, ref.get("name", ""))
        if data is None:
            if not ref.get("optional"):
                ctx.missing(f'{kind.lower()} "{ref.get("name")}" not found', where=w)
            continue
        for key in sorted(data):
            name = prefix + key
            if not is_identifier(name):
                ctx.warn(f"{w}: key {key!r} of {kind} {ref.get('name')!r} is not a valid variable name; skipped")
                continue
            env[name] = (secret if kind == "Secret" else literal)(decode(data[key]))

    for i, item in enumerate(container.get("env") or []):
        w = f"{where}.env[{i}]"
        name = item["name"]  # a shell identifier (hpkctl.pod.model: Apptainer's --env-file needs one)
        source = item.get("valueFrom")
        if not source:
            env[name] = expand(str(item.get("value") or ""), lookup())
            continue
        value = _value_from(ctx, source, where=f"{w}.valueFrom", container=container.get("name", ""),
                            resources=resources)
        if value is not None:
            env[name] = value

    for key, val in services.items():
        env.setdefault(key, literal(val))
    # The container runtime sets HOSTNAME to the pod's hostname, below anything the pod sets.
    env.setdefault("HOSTNAME", literal(ctx.hostname))
    return env


def _value_from(ctx: Ctx, source: Mapping[str, Any], *, where: str, container: str,
                resources: PodResources) -> Value | None:
    if "fieldRef" in source:
        return field_value(ctx, source["fieldRef"].get("fieldPath", ""), where=f"{where}.fieldRef")
    if "resourceFieldRef" in source:
        ref = source["resourceFieldRef"]
        return literal(resource_field(ctx, resources, container=ref.get("containerName") or container,
                                      resource=ref.get("resource", ""), divisor=ref.get("divisor"),
                                      where=f"{where}.resourceFieldRef"))
    for key, kind, getter in (("configMapKeyRef", "configmap", ctx.objects.configmap),
                              ("secretKeyRef", "secret", ctx.objects.secret)):
        if key in source:
            ref = source[key]
            data = getter(ctx.namespace, ref.get("name", ""))
            if data is None:
                if not ref.get("optional"):
                    ctx.missing(f'{kind} "{ref.get("name")}" not found', where=f"{where}.{key}")
                return None
            if ref.get("key") not in data:
                if not ref.get("optional"):
                    ctx.missing(f'couldn\'t find key {ref.get("key")} in {kind} {ctx.namespace}/{ref.get("name")}',
                                where=f"{where}.{key}")
                return None
            return (secret if kind == "secret" else literal)(decode(data[ref["key"]]))
    raise PodError("CreateContainerConfigError", f"{where}: unsupported source {sorted(source)}",
                   hint="use fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef")

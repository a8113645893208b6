"""Pod volumes → directories, payload files and Apptainer binds.

- Payload volumes (configMap, secret, downwardAPI, projected) are written by hpkctl into the pod
  directory before submission; mounts of them are read-only, as in Kubernetes.
- emptyDir and dir-backed persistentVolumeClaims are created by the job; ``medium: Memory`` lives
  on the node's tmpfs (``[pods].memory_dir``), and ``sizeLimit`` is watched by the job, which
  evicts the pod when it is exceeded (what the kubelet does).
- hostPath ``type`` checks run in the job, on the node that mounts the path.
Apptainer's bind syntax uses ``:`` and ``,`` as separators, so paths holding them are refused.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hpkctl.errors import PodError
from hpkctl.pod.context import Ctx
from hpkctl.pod.env import field_value
from hpkctl.pod.expansion import expand
from hpkctl.pod.hostpaths import allowed_root
from hpkctl.pod.quantity import parse_quantity
from hpkctl.pod.resources import PodResources, resource_field
from hpkctl.pod.shell import Value, concat, has_secret, is_static, literal, static_text

HOSTPATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
CLUSTER_CA_CONFIGMAP = "kube-root-ca.crt"
_READ_ONLY_KINDS = ("configMap", "secret", "downwardAPI", "projected")
_UNSUPPORTED_HINT = ("supported volume types: emptyDir, hostPath, configMap, secret, projected, downwardAPI, "
                     "persistentVolumeClaim")


@dataclass(frozen=True)
class PayloadFile:
    path: str  # relative to the pod directory
    data: bytes
    mode: int
    origin: str  # e.g. 'configMap default/app key "x"'; "" when present
    missing: bool = False
    deferred: bool = False  # a token the kubelet writes after sbatch; the job waits for it (hpk_wait_token)


@dataclass(frozen=True)
class JobDir:
    """A directory the job creates (emptyDir, PVC) with an optional size limit it watches."""

    volume: str
    path: str
    size_limit_kib: int | None = None
    size_limit: str = ""  # as the manifest wrote it (the eviction message quotes it)


@dataclass(frozen=True)
class HostPathCheck:
    volume: str
    path: str
    type: str


@dataclass(frozen=True)
class Bind:
    source: Value
    dest: str
    read_only: bool
    root: str = ""  # the volume's directory when subPath/subPathExpr picks a path in it (checked by the job)
    host: bool = False  # a hostPath: the job also keeps it off hpkctl's state (hpkctl.pod.hostpaths)


@dataclass
class VolumePlan:
    sources: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # name → (kind, host path, ro)
    payloads: list[PayloadFile] = field(default_factory=list)
    job_dirs: list[JobDir] = field(default_factory=list)
    hostpath_checks: list[HostPathCheck] = field(default_factory=list)
    hostpath_roots: dict[str, str] = field(default_factory=dict)  # hostPath volume → its allowed prefix


PvcResolver = Callable[[str, str], str]


def default_pvc_resolver(state_dir: str) -> PvcResolver:
    """Without a control plane a claim is a directory under ``<state_dir>/pvc/<namespace>/<claim>``."""
    return lambda namespace, claim: posixpath.join(state_dir, "pvc", namespace, claim)


def bindable(path: str) -> bool:
    """Whether Apptainer's ``--bind src:dst`` syntax can carry ``path`` (no ``:`` ``,`` or line break)."""
    return not any(c in path for c in ":,\n\0")


def _check_path(path: str, *, where: str) -> None:
    if not bindable(path):
        raise PodError("InvalidMountPath", f"{where}: {path!r} contains ':', ',' or a line break, which "
                       "Apptainer's --bind cannot express", hint="rename the path")


def _relative(path: str, *, where: str) -> str:
    norm = posixpath.normpath(path)
    if path.startswith("/") or norm == ".." or norm.startswith("../") or "/../" in f"/{path}/":
        raise PodError("InvalidVolume", f"{where}: path {path!r} must be relative and must not contain '..'")
    return norm


def _mode(value: Any, default: int, *, where: str) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or not 0 <= value <= 0o777:
        raise PodError("InvalidVolume", f"{where}: mode {value!r} must be an integer 0..0777 (decimal 0..511)")
    return value


def plan_volumes(ctx: Ctx, resources: PodResources, *, pvc_resolver: PvcResolver) -> VolumePlan:
    plan = VolumePlan()
    for i, vol in enumerate(ctx.spec.get("volumes") or []):
        where = f"spec.volumes[{i}]"
        name = vol.get("name", "")
        vdir = posixpath.join(ctx.pod_dir, "volumes", name)
        kinds = [k for k in vol if k != "name"]
        kind = kinds[0] if kinds else ""
        src = vol.get(kind) or {}
        if kind == "emptyDir":
            limit = src.get("sizeLimit")
            kib = int(parse_quantity(limit) // 1024) if limit else None
            if src.get("medium") == "Memory":
                path = posixpath.join(ctx.profile.pods.memory_dir, f"hpk-{ctx.uid}", name)
            elif src.get("medium") in (None, ""):
                path = vdir
            else:
                raise PodError("UnsupportedVolume", f"{where}.emptyDir.medium: {src.get('medium')!r} is not supported",
                               hint="use medium: Memory or leave it empty")
            plan.job_dirs.append(JobDir(name, path, kib, str(limit or "")))
            plan.sources[name] = (kind, path, False)
        elif kind == "hostPath":
            path = src["path"]  # absolute, and type one of HOSTPATH_TYPES (hpkctl.pod.model)
            htype = src.get("type") or ""
            _check_path(path, where=f"{where}.hostPath.path")
            plan.hostpath_roots[name] = allowed_root(ctx.profile, path, where=f"{where}.hostPath.path")
            plan.hostpath_checks.append(HostPathCheck(name, path, htype))
            plan.sources[name] = (kind, path, False)
        elif kind == "persistentVolumeClaim":
            claim = src.get("claimName", "")
            path = pvc_resolver(ctx.namespace, claim)
            _check_path(path, where=f"{where}.persistentVolumeClaim")
            plan.job_dirs.append(JobDir(name, path))
            plan.sources[name] = (kind, path, bool(src.get("readOnly")))
        elif kind in ("configMap", "secret"):
            plan.payloads += _object_payload(ctx, kind, src, vdir=vdir, where=f"{where}.{kind}",
                                             default_mode=_mode(src.get("defaultMode"), 0o644, where=where))
            plan.sources[name] = (kind, vdir, True)
        elif kind == "downwardAPI":
            plan.payloads += _downward_payload(ctx, resources, src.get("items") or [], vdir=vdir,
                                               where=f"{where}.downwardAPI",
                                               default_mode=_mode(src.get("defaultMode"), 0o644, where=where))
            plan.sources[name] = (kind, vdir, True)
        elif kind == "projected":
            default_mode = _mode(src.get("defaultMode"), 0o644, where=f"{where}.projected.defaultMode")
            for j, given in enumerate(src.get("sources") or []):
                pw = f"{where}.projected.sources[{j}]"
                proj = {k: v for k, v in given.items() if v is not None}  # `configMap: null` is no source
                if "configMap" in proj or "secret" in proj:
                    pk = "configMap" if "configMap" in proj else "secret"
                    plan.payloads += _object_payload(ctx, pk, proj[pk], vdir=vdir, where=f"{pw}.{pk}",
                                                     default_mode=default_mode)
                elif "downwardAPI" in proj:
                    plan.payloads += _downward_payload(ctx, resources, proj["downwardAPI"].get("items") or [],
                                                       vdir=vdir, where=f"{pw}.downwardAPI", default_mode=default_mode)
                elif "serviceAccountToken" in proj:
                    tok = proj["serviceAccountToken"]
                    rel = _relative(tok.get("path", "token"), where=f"{pw}.serviceAccountToken.path")
                    if getattr(ctx.objects, "defers_tokens", False):  # written after sbatch, waited for by the job
                        plan.payloads.append(PayloadFile(posixpath.join(vdir, rel), b"", default_mode, "", deferred=True))
                        continue
                    issue = getattr(ctx.objects, "service_account_token", None)  # the kubelet's source has it
                    token = issue(ctx.namespace, ctx.spec.get("serviceAccountName") or "default",
                                  audience=tok.get("audience"),
                                  expiration_seconds=tok.get("expirationSeconds")) if issue else None
                    if token is None:
                        ctx.warn(f"{pw}: no control plane: the service account token at {rel} is empty")
                    plan.payloads.append(PayloadFile(posixpath.join(vdir, rel), token or b"", default_mode,
                                                     "" if token else "serviceAccountToken (needs a control plane)",
                                                     missing=token is None))
                else:
                    raise PodError("UnsupportedVolume", f"{pw}: projected source {sorted(proj)} is not supported",
                                   hint="use configMap, secret, downwardAPI or serviceAccountToken")
            plan.sources[name] = (kind, vdir, True)
        else:
            raise PodError("UnsupportedVolume", f"{where}: volume {name!r} of type {kind or '(none)'!r} is not supported",
                           hint=_UNSUPPORTED_HINT)
    return plan


def _object_payload(ctx: Ctx, kind: str, src: Mapping[str, Any], *, vdir: str, where: str,
                    default_mode: int) -> list[PayloadFile]:
    getter = ctx.objects.configmap if kind == "configMap" else ctx.objects.secret
    obj_name = src.get("name") if kind == "configMap" else src.get("secretName", src.get("name"))
    data = getter(ctx.namespace, obj_name or "")
    origin = f"{kind} {ctx.namespace}/{obj_name}"
    items = src.get("items")
    if data is None:
        if src.get("optional"):
            return []
        if kind == "configMap" and obj_name == CLUSTER_CA_CONFIGMAP:
            # Published by the control plane in every namespace; without one there is no cluster CA.
            ctx.warn(f"{where}: no control plane: {CLUSTER_CA_CONFIGMAP} (the cluster CA) is left empty")
        else:
            ctx.missing(f'{kind.lower()} "{obj_name}" not found', where=where)
        keys = [(it.get("key", ""), it.get("path", it.get("key", "")), it.get("mode")) for it in items or []]
        return [PayloadFile(posixpath.join(vdir, _relative(p, where=where)), b"", 0o644, f"{origin} key {k!r}",
                            missing=True) for k, p, _ in keys] or [
            PayloadFile(posixpath.join(vdir, "..."), b"", 0o644, f"{origin} (every key)", missing=True)]
    out = []
    if items is None:
        for key in sorted(data):
            out.append(PayloadFile(posixpath.join(vdir, _relative(key, where=where)), data[key], default_mode, ""))
        return out
    for k, item in enumerate(items):
        key = item.get("key", "")
        rel = _relative(item.get("path", key), where=f"{where}.items[{k}].path")
        mode = _mode(item.get("mode"), default_mode, where=f"{where}.items[{k}].mode")
        if key not in data:
            if src.get("optional"):
                continue
            ctx.missing(f"{origin} has no key {key!r}", where=f"{where}.items[{k}]")
            out.append(PayloadFile(posixpath.join(vdir, rel), b"", mode, f"{origin} key {key!r}", missing=True))
            continue
        out.append(PayloadFile(posixpath.join(vdir, rel), data[key], mode, ""))
    return out


def _downward_payload(ctx: Ctx, resources: PodResources, items: list[Mapping[str, Any]], *, vdir: str,
                      where: str, default_mode: int) -> list[PayloadFile]:
    out = []
    for k, item in enumerate(items):
        iw = f"{where}.items[{k}]"
        rel = _relative(item.get("path", ""), where=f"{iw}.path")
        mode = _mode(item.get("mode"), default_mode, where=f"{iw}.mode")
        if "fieldRef" in item:
            path = item["fieldRef"].get("fieldPath", "")
            if path.startswith("status.") or path.startswith("spec."):
                raise PodError("InvalidVolume", f"{iw}.fieldRef: {path!r} is not allowed in a downwardAPI volume",
                               hint="use it as an environment variable instead")
            value = static_text(field_value(ctx, path, where=f"{iw}.fieldRef", allow_whole_maps=True))
        elif "resourceFieldRef" in item:
            ref = item["resourceFieldRef"]
            value = resource_field(ctx, resources, container=ref.get("containerName", ""),
                                   resource=ref.get("resource", ""), divisor=ref.get("divisor"),
                                   where=f"{iw}.resourceFieldRef")
        else:
            raise PodError("InvalidVolume", f"{iw}: needs fieldRef or resourceFieldRef")
        out.append(PayloadFile(posixpath.join(vdir, rel), value.encode("utf-8", "surrogateescape"), mode, ""))
    return out


def container_binds(ctx: Ctx, plan: VolumePlan, container: Mapping[str, Any], *, where: str,
                    env: Mapping[str, Value]) -> tuple[list[Bind], list[Value]]:
    """Binds for a container's volumeMounts, plus subPath directories the job must create."""
    binds: list[Bind] = []
    subdirs: list[Value] = []
    for i, mount in enumerate(container.get("volumeMounts") or []):
        mw = f"{where}.volumeMounts[{i}]"
        vname = mount.get("name", "")
        if vname not in plan.sources:
            raise PodError("InvalidVolume", f"{mw}.name: no volume named {vname!r} in spec.volumes")
        kind, host, intrinsic_ro = plan.sources[vname]
        dest = mount["mountPath"]  # absolute (hpkctl.pod.model)
        _check_path(dest, where=f"{mw}.mountPath")
        source: Value = literal(host)
        sub: Value = ()
        if mount.get("subPath"):
            sub = literal(_relative(mount["subPath"], where=f"{mw}.subPath"))
        elif mount.get("subPathExpr"):
            sub = expand(mount["subPathExpr"], env)
            if is_static(sub) and not has_secret(sub):
                sub = literal(_relative(static_text(sub), where=f"{mw}.subPathExpr"))
        if sub:
            source = concat(literal(host + "/"), sub)
            if kind not in _READ_ONLY_KINDS:
                subdirs.append(source)
        if is_static(source):
            _check_path(static_text(source), where=f"{mw}.subPath")
        ro = bool(mount.get("readOnly")) or kind in _READ_ONLY_KINDS or intrinsic_ro
        # a hostPath is checked (resolved, at the job) against its allowed prefix, with or without subPath
        root = plan.hostpath_roots.get(vname) or (host if sub else "")
        binds.append(Bind(source, dest, ro, root=root, host=kind == "hostPath"))
    return binds, subdirs

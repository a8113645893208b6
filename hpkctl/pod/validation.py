"""Validating a pod against :mod:`hpkctl.pod.model`, with messages a user can act on.

Every problem names the source (a file and document, or "pod ns/name" in the kubelet), the field
path as Kubernetes writes it (``spec.containers[1].volumeMounts[0].subPath``), the value, the rule
and a fix. All problems of a pod are reported at once. Rules that span fields (unique names,
mounts of existing volumes, request ≤ limit, one source per volume) are checked here, after the
field types, as the API server does. :func:`unhonoured_fields` lists the fields hpkctl reads but
does not act on yet, for warnings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from hpkctl.errors import ManifestError
from hpkctl.typed import ValidationError
from hpkctl.pod.fieldtypes import K8sModel
from hpkctl.pod.handlers import handler_problems
from hpkctl.pod.lifecycle import DEFAULT_MESSAGE_PATH, message_bound
from hpkctl.pod.probes import probe_problems
from hpkctl.pod.model import ConfigMapObject, Container, Pod, SecretObject, ServiceObject
from hpkctl.pod.quantity import parse_quantity

M = TypeVar("M", bound=K8sModel)
_STRING_LISTS = {"command", "args", "hostnames", "searches", "nameservers", "add", "drop"}
#: Fields whose keys are user data: shown as ``requests[cpu]``, not ``requests.cpu``.
_MAP_FIELDS = {"requests", "limits", "labels", "annotations", "nodeSelector"}
_EXPECTED = {
    "string_type": "a string", "int_type": "an integer", "bool_type": "true or false",
    "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
    "int_from_float": "an integer", "float_type": "a number",
}


@dataclass(frozen=True)
class Problem:
    path: str
    value: Any
    message: str
    hint: str = ""
    missing: bool = False

    def text(self) -> str:
        if self.missing:
            return f"{self.path}: {self.message}"
        return f"{self.path}: {describe(self.value)}: {self.message}"


class PodValidationError(ManifestError):
    """A pod breaks Kubernetes' (or hpkctl's) rules; ``problems`` holds each one."""

    def __init__(self, message: str, *, hint: str = "", problems: tuple[Problem, ...] = ()) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems


def describe(value: Any) -> str:
    """A value for a message: short, one line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def field_path(loc: Iterable[Any], *, prefix: str = "") -> str:
    out = prefix.rstrip(".") if prefix else ""
    prev: Any = None
    for part in loc:
        if isinstance(part, int) or prev in _MAP_FIELDS:
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
        prev = part
    return out


def _problem(err: Mapping[str, Any], *, prefix: str) -> Problem:
    path = field_path(err["loc"], prefix=prefix)
    typ = err["type"]
    given = err.get("input")
    if typ == "k8s_rule":
        return Problem(path, given, err["msg"], (err.get("ctx") or {}).get("hint", ""))
    if typ == "missing":
        return Problem(path, None, "required", "add it", missing=True)
    if typ in _EXPECTED:
        expected = _EXPECTED[typ]
        hint = ""
        if expected == "a string" and isinstance(given, (int, float)):
            hint = f'quote it: "{given}"'
        elif expected == "a list":
            hint = "write it as a YAML list ('- item' lines or [a, b])"
            if err["loc"] and err["loc"][-1] in _STRING_LISTS:
                expected = "a list of strings"
                hint = f'write {err["loc"][-1]}: ["sh", "-c", "..."]' if err["loc"][-1] in ("command", "args") else hint
        return Problem(path, given, f"must be {expected}", hint)
    if typ == "literal_error":
        return Problem(path, given, f"must be {(err.get('ctx') or {}).get('expected', 'one of the allowed values')}")
    if typ == "too_short":
        return Problem(path, given, "must not be empty" if err.get("ctx", {}).get("min_length") == 1 else err["msg"])
    return Problem(path, given, err["msg"][0].lower() + err["msg"][1:])


def validate_pod(pod: Any, *, source: str, prefix: str = "") -> Pod:
    """``pod`` as a :class:`Pod`, or :class:`PodValidationError` naming every problem.

    ``source`` opens each message (``"job.yaml: document 2 (Job train)"``); ``prefix`` is where the
    pod sits in that document (``"spec.template."`` for a workload's template).
    """
    model = _validate(Pod, pod, source=source, prefix=prefix)
    problems = list(_cross_field(model, pod, prefix=prefix))
    if problems:
        _raise(source, problems)
    return model


def validate_object(obj: Mapping[str, Any], *, source: str) -> None:
    """Check a ConfigMap, Secret or Service as the API server would (names, keys, base64 data, ports)."""
    classes: dict[str, type[K8sModel]] = {"ConfigMap": ConfigMapObject, "Service": ServiceObject}
    cls = classes.get(str(obj.get("kind")), SecretObject)
    _validate(cls, obj, source=source, prefix="")


def _validate(cls: type[M], doc: Any, *, source: str, prefix: str) -> M:
    if not isinstance(doc, Mapping):
        _raise(source, [Problem(prefix.rstrip(".") or "(object)", doc, "must be a mapping (a Kubernetes object)")])
    try:
        return cls.model_validate(dict(doc))
    except ValidationError as exc:
        _raise(source, [_problem(e, prefix=prefix) for e in exc.errors()])


def _raise(source: str, problems: list[Problem]) -> NoReturn:
    if len(problems) == 1:
        p = problems[0]
        raise PodValidationError(f"{source}: {p.text()}", hint=p.hint, problems=(p,))
    lines = [f"{source}: {len(problems)} problems:"]
    for i, p in enumerate(problems, 1):
        lines.append(f"  {i}. {p.text()}" + (f"\n     fix: {p.hint}" if p.hint else ""))
    raise PodValidationError("\n".join(lines), hint="fix each field named above", problems=tuple(problems))


def _cross_field(model: Pod, raw: Mapping[str, Any], *, prefix: str) -> Iterable[Problem]:
    spec = model.spec
    at = prefix + "spec"
    raw_spec = raw.get("spec") or {}
    seen: dict[str, str] = {}
    groups = (("initContainers", spec.init_containers or []), ("containers", spec.containers))
    for key, containers in groups:
        for i, c in enumerate(containers):
            where = f"{at}.{key}[{i}]"
            if c.name in seen:
                yield Problem(f"{where}.name", c.name, f"duplicate container name (also {seen[c.name]})",
                              "container names must be unique across initContainers and containers")
            seen.setdefault(c.name, f"{where}.name")
            if key == "containers" and c.restart_policy is not None:
                yield Problem(f"{where}.restartPolicy", c.restart_policy,
                              "may only be set on init containers (sidecars)", "remove it")
            yield from _container(c, where=where)
            yield from _lifecycle(c, where=where, grace=_grace(spec.termination_grace_period_seconds))
            for path, value, message, hint in probe_problems(c, where=where, init=key == "initContainers",
                                                             sidecar=c.restart_policy == "Always"):
                yield Problem(path, value, message, hint, missing=value is None)
    volumes: dict[str, int] = {}
    for i, v in enumerate(spec.volumes or []):
        where = f"{at}.volumes[{i}]"
        if v.name in volumes:
            yield Problem(f"{where}.name", v.name, f"duplicate volume name (also {at}.volumes[{volumes[v.name]}])",
                          "give each volume its own name")
        volumes.setdefault(v.name, i)
        raw_vol = (raw_spec.get("volumes") or [])[i]
        kinds = sorted(k for k in raw_vol if k != "name")
        if len(kinds) > 1:
            yield Problem(where, raw_vol, f"may not specify more than 1 volume type (has {', '.join(kinds)})",
                          "split it into one volume per type")
        elif not kinds:
            yield Problem(where, raw_vol, "must specify a volume type", "add e.g. emptyDir: {}")
        for j, f in enumerate((v.downward_api.items or []) if v.downward_api else []):
            if (f.field_ref is None) == (f.resource_field_ref is None):
                yield Problem(f"{where}.downwardAPI.items[{j}]", None,
                              "must specify exactly one of fieldRef and resourceFieldRef", missing=True)
        for j, proj in enumerate((v.projected.sources or []) if v.projected else []):
            given = [k for k in ("configMap", "secret", "downwardAPI", "serviceAccountToken")
                     if getattr(proj, {"configMap": "config_map", "downwardAPI": "downward_api",
                                       "serviceAccountToken": "service_account_token"}.get(k, k)) is not None]
            if len(given) > 1:
                yield Problem(f"{where}.projected.sources[{j}]", None,
                              f"may not specify more than 1 source type (has {', '.join(given)})", missing=True)
    for key, containers in groups:
        for i, c in enumerate(containers):
            for j, m in enumerate(c.volume_mounts or []):
                if m.name not in volumes:
                    yield Problem(f"{at}.{key}[{i}].volumeMounts[{j}].name", m.name,
                                  "not found: no volume of that name in spec.volumes",
                                  "add the volume to spec.volumes or fix the name")


def _grace(value: int | None) -> int:
    return 30 if value is None else value


def _lifecycle(c: Container, *, where: str, grace: int) -> Iterable[Problem]:
    """postStart/preStop: one handler each (exec, httpGet, tcpSocket, sleep), named ports that exist."""
    if c.lifecycle is None:
        return
    ports = [p.name for p in c.ports or [] if p.name]
    for key, handler in (("postStart", c.lifecycle.post_start), ("preStop", c.lifecycle.pre_stop)):
        if handler is not None:
            for path, value, message, hint in handler_problems(
                    handler, where=f"{where}.lifecycle.{key}", port_names=ports, grace=grace,
                    allowed=("exec", "http_get", "tcp_socket", "sleep")):
                yield Problem(path, value, message, hint, missing=value is None)


def _container(c: Container, *, where: str) -> Iterable[Problem]:
    for j, e in enumerate(c.env or []):
        ew = f"{where}.env[{j}]"
        if e.value_from is not None:
            src = e.value_from
            n = sum(x is not None for x in (src.field_ref, src.resource_field_ref, src.config_map_key_ref,
                                            src.secret_key_ref))
            if e.value:
                yield Problem(f"{ew}.valueFrom", None, "may not be specified when `value` is not empty",
                              "keep either value or valueFrom", missing=True)
            if n > 1:
                yield Problem(f"{ew}.valueFrom", None, "may not have more than one field specified at a time",
                              missing=True)
    for j, ef in enumerate(c.env_from or []):
        if ef.config_map_ref is not None and ef.secret_ref is not None:
            yield Problem(f"{where}.envFrom[{j}]", None, "may not have more than one field specified at a time",
                          "use one envFrom entry per ConfigMap or Secret", missing=True)
    paths: dict[str, int] = {}
    for j, m in enumerate(c.volume_mounts or []):
        mw = f"{where}.volumeMounts[{j}]"
        if m.sub_path and m.sub_path_expr:
            yield Problem(f"{mw}.subPathExpr", m.sub_path_expr, "subPathExpr and subPath are mutually exclusive",
                          "keep one of them")
        if m.mount_path in paths:
            yield Problem(f"{mw}.mountPath", m.mount_path, f"must be unique (also volumeMounts[{paths[m.mount_path]}])")
        paths.setdefault(m.mount_path, j)
    ports: dict[str, int] = {}
    for j, p in enumerate(c.ports or []):
        if p.name is not None:
            if p.name in ports:
                yield Problem(f"{where}.ports[{j}].name", p.name, f"duplicate port name (also ports[{ports[p.name]}])")
            ports.setdefault(p.name, j)
    res = c.resources
    if res is not None and res.requests and res.limits:
        for name, req in res.requests.items():
            if name in res.limits and parse_quantity(req) > parse_quantity(res.limits[name]):
                yield Problem(f"{where}.resources.requests[{name}]", req,
                              f"must be less than or equal to {name} limit of {res.limits[name]}",
                              f"lower the request or raise resources.limits[{name}]")


# --- fields read but not acted on ----------------------------------------------------------------------
_CONTAINER_IGNORED = {
    "stdin": "containers get no stdin",
    "stdinOnce": "containers get no stdin",
    "tty": "containers get no terminal",
    "resizePolicy": "in-place resize is not supported",
}
_SPEC_IGNORED = {
    "nodeSelector": "Slurm chooses the node (use the slurm-job.hpk.io/flags annotation, e.g. --constraint)",
    "affinity": "Slurm chooses the node (use the slurm-job.hpk.io/flags annotation, e.g. --constraint)",
    "tolerations": "there are no taints: Slurm chooses the node",
    "topologySpreadConstraints": "Slurm chooses the node",
    "priorityClassName": "Slurm decides priority (use --qos or --nice in the flags annotation)",
    "priority": "Slurm decides priority",
    "runtimeClassName": "every container runs under Apptainer",
    "hostNetwork": "the network mode comes from the site profile ([apptainer].network)",
    "hostPID": "containers share the job's process namespace as Apptainer gives it",
    "hostIPC": "containers share the job's IPC namespace as Apptainer gives it",
    "shareProcessNamespace": "Apptainer decides the process namespace",
    "readinessGates": "there is no readiness",
    "overhead": "Slurm allocates the requests only",
    "preemptionPolicy": "Slurm decides preemption",
    "ephemeralContainers": "they need a control plane",
    "resourceClaims": "dynamic resource allocation is not supported",
    "hostUsers": "Apptainer decides the user namespace",
    "os": "pods run on the Slurm nodes' Linux",
    "schedulingGates": "Slurm schedules the job at once",
}
_POD_SC_IGNORED = ("fsGroup", "fsGroupChangePolicy", "supplementalGroups", "sysctls", "seccompProfile",
                   "seLinuxOptions", "appArmorProfile", "windowsOptions")
_SC_IGNORED = ("allowPrivilegeEscalation", "seccompProfile", "seLinuxOptions", "appArmorProfile", "procMount",
               "windowsOptions")


#: What the API server adds to every pod: not the user's choice, so no warning.
_API_DEFAULTS: dict[str, Any] = {"preemptionPolicy": "PreemptLowerPriority", "priority": 0}
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def unhonoured_fields(pod: Mapping[str, Any], binds: Iterable[str] = ()) -> list[str]:
    """Warnings for the fields of a (valid) pod that hpkctl reads but does not act on yet (binds:
    the site profile's [apptainer] binds, which may make a terminationMessagePath under /dev work)."""
    out: list[str] = []
    spec = pod.get("spec") or {}
    for key, why in _SPEC_IGNORED.items():
        value = spec.get(key)
        if key == "tolerations" and isinstance(value, list):
            value = [t for t in value if not (isinstance(t, dict) and t.get("key") in _DEFAULT_TOLERATIONS)]
        if value not in (None, False, "", [], {}) and (key not in _API_DEFAULTS or value != _API_DEFAULTS[key]):
            out.append(f"spec.{key}: not honoured, ignored: {why}")
    if spec.get("schedulerName") not in (None, "", "default-scheduler"):
        out.append(f"spec.schedulerName: {spec['schedulerName']!r} is not honoured: Slurm schedules the pod")
    psc = spec.get("securityContext") or {}
    for key in _POD_SC_IGNORED:
        if psc.get(key) not in (None, [], {}):
            out.append(f"spec.securityContext.{key}: not honoured by unprivileged Apptainer, ignored")
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            where = f"spec.{group}[{i}]"
            for key, why in _CONTAINER_IGNORED.items():
                if c.get(key) not in (None, False, {}, []):
                    out.append(f"{where}.{key}: not honoured, ignored: {why}")
            path = c.get("terminationMessagePath")
            if path not in (None, DEFAULT_MESSAGE_PATH) and not message_bound(str(path), binds):
                out.append(f"{where}.terminationMessagePath: {path} is not honoured: Apptainer's minimal /dev holds "
                           "no file to bind there unless the site profile's [apptainer] binds add that host path; "
                           "choose a path outside /dev (e.g. /tmp/termination-log)")
            if (c.get("lifecycle") or {}).get("stopSignal"):
                out.append(f"{where}.lifecycle.stopSignal: not honoured, ignored: containers get SIGTERM")
            for j, p in enumerate(c.get("ports") or []):
                if p.get("hostPort"):
                    out.append(f"{where}.ports[{j}].hostPort: not honoured: the container listens on "
                               f"containerPort {p.get('containerPort')} of the pod's address, no port is mapped")
            for key in _SC_IGNORED:
                if (c.get("securityContext") or {}).get(key) not in (None, {}):
                    out.append(f"{where}.securityContext.{key}: not honoured by unprivileged Apptainer, ignored")
            for j, m in enumerate(c.get("volumeMounts") or []):
                if m.get("mountPropagation") not in (None, "None"):
                    out.append(f"{where}.volumeMounts[{j}].mountPropagation: not honoured, ignored")
    return out


__all__ = ["PodValidationError", "Problem", "describe", "field_path", "unhonoured_fields", "validate_object", "validate_pod"]

"""Probes: ``startupProbe``, ``livenessProbe``, ``readinessProbe`` — the model, the API server's rules
(``validateProbe``, ``validateLivenessProbe``... in ``k8s.io/kubernetes/pkg/apis/core/validation``) and
the plan the job runs (``sbatch/runtime.sh``, section "probes").

The API server defaults a timing field left at 0 (``periodSeconds`` 10, ``timeoutSeconds`` 1,
``successThreshold`` 1, ``failureThreshold`` 3) and refuses negative values; hpkctl does the same.
Handlers: ``exec`` (``<function>_exec``, a new ``apptainer exec`` in the container's image and mounts),
``httpGet`` and ``tcpSocket`` (plain bash on the node or in the parent container, towards the pod's
address). ``grpc`` is refused: the job has no gRPC client (see :func:`plan_probes`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from hpkctl.typed import Field

from hpkctl.errors import PodError
from hpkctl.pod.fieldtypes import K8sModel, checked, rule
from hpkctl.pod.handlers import ExecAction, GRPCAction, HTTPGetAction, SleepAction, TCPSocketAction, handler_problems
from hpkctl.pod.shell import RuntimeRef, Value, literal

KINDS = (("startup", "startupProbe"), ("liveness", "livenessProbe"), ("readiness", "readinessProbe"))
DEFAULTS = {"period": 10, "timeout": 1, "success": 1, "failure": 3}
#: What the kubelet of this Kubernetes version sends as User-Agent (sbatch/runtime.sh: HPK_PROBE_AGENT).
USER_AGENT = "kube-probe/1.36"
_HOST = re.compile(r"[A-Za-z0-9._:-]+")
INT32_MAX = 2**31 - 1


def _non_negative(value: int) -> None:
    if value < 0:
        raise rule("must be greater than or equal to 0", "0 means the default; give a positive number")


def _positive(value: int) -> None:
    if value <= 0:
        raise rule("must be greater than 0", "give the grace period in seconds, or leave it out")


Seconds = Annotated[int, Field(le=INT32_MAX), checked(_non_negative)]


class Probe(K8sModel):
    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    grpc: GRPCAction | None = None
    sleep: SleepAction | None = None  # not a probe handler: modelled so the rule can name it
    initial_delay_seconds: Seconds | None = None
    timeout_seconds: Seconds | None = None
    period_seconds: Seconds | None = None
    success_threshold: Seconds | None = None
    failure_threshold: Seconds | None = None
    termination_grace_period_seconds: Annotated[int, checked(_positive)] | None = None


def probe_problems(c: Any, *, where: str, sidecar: bool, init: bool) -> Iterable[tuple[str, Any, str, str]]:
    """The rules across a container's probe fields, as ``(path, value, message, hint)``."""
    ports = [p.name for p in c.ports or [] if p.name]
    for kind, key in KINDS:
        probe: Probe | None = getattr(c, f"{kind}_probe", None)
        if probe is None:
            continue
        at = f"{where}.{key}"
        if init and not sidecar:
            yield at, None, "may not be set for init containers without restartPolicy=Always", \
                "remove it, or make the init container a sidecar (restartPolicy: Always)"
            continue
        yield from handler_problems(probe, where=at, port_names=ports, grace=INT32_MAX,
                                    allowed=("exec", "http_get", "tcp_socket", "grpc"))
        if kind in ("liveness", "startup") and probe.success_threshold not in (None, 0, 1):
            yield f"{at}.successThreshold", probe.success_threshold, "must be 1", \
                f"{key} counts one success; leave successThreshold out"
        if kind == "readiness" and probe.termination_grace_period_seconds is not None:
            yield f"{at}.terminationGracePeriodSeconds", probe.termination_grace_period_seconds, \
                "must not be set for readinessProbes", "remove it (a readiness probe never stops the container)"
        for action, field in ((probe.http_get, "httpGet"), (probe.tcp_socket, "tcpSocket")):
            host = getattr(action, "host", None)
            if host and not _HOST.fullmatch(host):
                yield f"{at}.{field}.host", host, \
                    "must be an IP address or a host name (letters, digits, '.', '-', '_' and ':')", \
                    "leave it out to probe the pod's own address"


@dataclass(frozen=True)
class ProbePlan:
    """One probe as the job runs it: timing, then ``handler`` (exec | http | tcp) and its words."""

    kind: str  # startup | liveness | readiness
    delay: int
    period: int
    timeout: int
    success: int
    failure: int
    grace: int | None  # the probe's terminationGracePeriodSeconds (liveness/startup), else the pod's
    handler: str
    args: tuple[Value, ...]


def _or_default(value: int | None, key: str) -> int:
    return DEFAULTS[key] if not value else value


def _port(port: int | str, container: Mapping[str, Any]) -> int:
    if isinstance(port, int):
        return port
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise AssertionError(f"port {port!r} was validated")  # validation.py: names a container port


def request_target(path: str | None) -> str:
    """The request target the kubelet sends for ``httpGet.path``: '/' when empty, a '/' put in front of
    a relative path (Go's URL), and bytes that cannot stand in an HTTP request line (space, controls,
    non-ASCII) percent-encoded; everything else exactly as written."""
    path = path or "/"
    if not path.startswith("/"):
        path = "/" + path
    out = []
    for byte in path.encode("utf-8", "surrogateescape"):
        out.append(chr(byte) if 0x20 < byte < 0x7F else f"%{byte:02X}")
    return "".join(out)


def plan_probes(c: Mapping[str, Any], *, where: str) -> list[ProbePlan]:
    """The probes of container ``c`` (validated by :mod:`hpkctl.pod.validation`), startup first."""
    out = []
    for kind, key in KINDS:
        if c.get(key) is None:
            continue
        probe = Probe.model_validate(c[key])
        if probe.grpc is not None:
            raise PodError("UnsupportedProbe", f"{where}.{key}.grpc: gRPC probes are not run by hpkctl (the job "
                           "has no gRPC client)",
                           hint="use an exec probe that runs a gRPC health client in the container (e.g. "
                                "[grpc_health_probe, -addr=:PORT]), or a tcpSocket probe on the same port")
        host: Value = (RuntimeRef("HPK_POD_IP"),)
        if probe.exec is not None:
            handler, args = "exec", tuple(literal(w) for w in probe.exec.command or [])
        elif probe.http_get is not None:
            g = probe.http_get
            words: list[Value] = [literal(g.scheme or "HTTP"), literal(g.host) if g.host else host,
                                  literal(str(_port(g.port, c))), literal(request_target(g.path))]
            for h in g.http_headers or []:
                words += [literal(h.name), literal(h.value)]
            handler, args = "http", tuple(words)
        else:
            t = probe.tcp_socket
            assert t is not None  # validated: exactly one handler
            handler, args = "tcp", (literal(t.host) if t.host else host, literal(str(_port(t.port, c))))
        out.append(ProbePlan(
            kind=kind, delay=probe.initial_delay_seconds or 0,
            period=_or_default(probe.period_seconds, "period"), timeout=_or_default(probe.timeout_seconds, "timeout"),
            success=_or_default(probe.success_threshold, "success"),
            failure=_or_default(probe.failure_threshold, "failure"),
            grace=probe.termination_grace_period_seconds if kind != "readiness" else None,
            handler=handler, args=args))
    return out


__all__ = ["KINDS", "USER_AGENT", "Probe", "ProbePlan", "plan_probes", "probe_problems", "request_target"]

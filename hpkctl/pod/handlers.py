"""Handlers shared by lifecycle hooks and probes: ``exec``, ``httpGet``, ``tcpSocket``, ``sleep``
(and ``grpc`` for probes), with the API server's rules (``validateHandler``, ``validateHTTPGetAction``,
``validateSleepAction`` in ``k8s.io/kubernetes/pkg/apis/core/validation``).

Field types are checked by :mod:`hpkctl.typed`; :func:`handler_problems` checks what spans fields (exactly one
handler, a named port that names a container port, sleep within the grace period) and yields
``(path, value, message, hint)`` for :mod:`hpkctl.pod.validation` to turn into problems.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from hpkctl.typed import Field

from hpkctl.pod.fieldtypes import K8sModel, Text, checked, rule

HTTP_HEADER_NAME = re.compile(r"[-A-Za-z0-9]+")


def _port(value: int | str) -> None:
    if isinstance(value, int) and not 1 <= value <= 65535:
        raise rule("must be between 1 and 65535, inclusive")
    if isinstance(value, str) and not value:
        raise rule("must be a port number or an IANA service name, not empty")


#: What Kubernetes calls an IntOrString port: 1-65535, or an IANA service name (checked across fields).
PortValue = Annotated[int | str, checked(_port)]


def _header_name(value: str) -> None:
    if not HTTP_HEADER_NAME.fullmatch(value):
        raise rule("must be an HTTP header name: letters, digits and '-'", "e.g. 'X-Custom-Header'")


def _header_value(value: str) -> None:
    if any(ch in value for ch in "\r\n\0"):
        raise rule("must not contain a line break or NUL byte (it would end the HTTP header)")


class ExecAction(K8sModel):
    command: list[Text] | None = None


class HTTPHeader(K8sModel):
    name: Annotated[str, checked(_header_name)]
    value: Annotated[str, checked(_header_value)]


class HTTPGetAction(K8sModel):
    path: Annotated[str, checked(_header_value)] | None = None  # defaulted to "/"
    port: PortValue
    host: Annotated[str, checked(_header_value)] | None = None  # defaulted to the pod IP
    scheme: Literal["HTTP", "HTTPS"] | None = None
    http_headers: list[HTTPHeader] | None = None


class TCPSocketAction(K8sModel):
    port: PortValue
    host: Annotated[str, checked(_header_value)] | None = None


class GRPCAction(K8sModel):
    port: Annotated[int, Field(ge=1, le=65535)]
    service: Text | None = None


class SleepAction(K8sModel):
    seconds: Annotated[int, Field(ge=0)]


class LifecycleHandler(K8sModel):
    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None  # accepted by the API, but never runs (Kubernetes: a failure)
    sleep: SleepAction | None = None


class Lifecycle(K8sModel):
    post_start: LifecycleHandler | None = None
    pre_stop: LifecycleHandler | None = None
    stop_signal: Text | None = None


HANDLER_KINDS = ("exec", "http_get", "tcp_socket", "grpc", "sleep")
_FIELD = {"exec": "exec", "http_get": "httpGet", "tcp_socket": "tcpSocket", "grpc": "grpc", "sleep": "sleep"}


def handler_problems(handler: Any, *, where: str, port_names: Sequence[str], grace: int,
                     allowed: Sequence[str]) -> Iterable[tuple[str, Any, str, str]]:
    """Rules across a handler's fields: exactly one action of ``allowed``; ``exec.command`` not
    empty; a named port among the container's ``port_names``; ``sleep.seconds`` at most ``grace``."""
    given = [k for k in HANDLER_KINDS if getattr(handler, k, None) is not None]
    names = ", ".join(_FIELD[k] for k in allowed)
    if not given:
        yield where, None, f"must specify a handler type ({names})", f"add one of {names}"
    elif len(given) > 1:
        yield where, None, f"may not specify more than 1 handler type (has {', '.join(_FIELD[k] for k in given)})", \
            "keep one"
    for kind in given:
        if kind not in allowed:
            yield f"{where}.{_FIELD[kind]}", None, f"is not supported here (only {names})", "use another handler"
    if handler.exec is not None and not handler.exec.command:
        yield f"{where}.exec.command", None, "required", "add the command to run, e.g. [sh, -c, '...']"
    for kind in ("http_get", "tcp_socket"):
        action = getattr(handler, kind, None)
        if action is not None and isinstance(action.port, str):
            port = action.port
            path = f"{where}.{_FIELD[kind]}.port"
            if port.isdigit():
                yield path, port, "must be a number (without quotes) or an IANA service name", "write it as 8080"
            elif port not in port_names:
                yield path, port, "must be a number or the name of one of the container's ports", \
                    "add a ports entry with this name, or give the number"
    sleep = getattr(handler, "sleep", None)
    if sleep is not None and sleep.seconds > grace:
        yield f"{where}.sleep.seconds", sleep.seconds, \
            f"must be non-negative and no more than terminationGracePeriodSeconds ({grace})", \
            "shorten the sleep or raise spec.terminationGracePeriodSeconds"

"""Kubernetes' field rules as annotated types: names (DNS-1123 labels and subdomains, IANA port names,
ConfigMap/Secret keys, env var names), paths, quantities, modes; and :class:`K8sModel`, the base of
every modelled object (camelCase JSON, unknown fields allowed, modelled ones strict).

The rules follow ``k8s.io/apimachinery/pkg/util/validation`` and
``k8s.io/kubernetes/pkg/apis/core/validation``; each error says the rule and how to fix the value.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any

from hpkctl.typed import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, RuleError, to_camel

from hpkctl.pod.quantity import parse_quantity

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
SHELL_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PORT_NAME = re.compile(r"[-a-z0-9]+")
#: Quantities above this are refused (Kubernetes keeps them in an int64 of milli-units, roughly).
MAX_QUANTITY = Decimal(2) ** 63


def rule(message: str, hint: str = "") -> RuleError:
    """A broken rule: ``message`` says what the value must be, ``hint`` how to fix it."""
    return RuleError("k8s_rule", message, {"hint": hint} if hint else {})


def checked(check: Callable[[Any], None]) -> AfterValidator:
    def run(value: Any) -> Any:
        check(value)
        return value
    return AfterValidator(run)


def _text(value: str) -> None:
    if "\0" in value:
        raise rule("must not contain a NUL byte (no argument, file name or variable can hold one)")


def _dns_label(value: str) -> None:
    if len(value) > 63:
        raise rule("must be no more than 63 characters (a DNS-1123 label)")
    if not DNS1123_LABEL.fullmatch(value):
        raise rule("must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a "
                   "letter or digit (regex [a-z0-9]([-a-z0-9]*[a-z0-9])?)", "e.g. 'my-name' or 'abc-123'")


def _dns_subdomain(value: str) -> None:
    if len(value) > 253:
        raise rule("must be no more than 253 characters (a DNS-1123 subdomain)")
    if not DNS1123_SUBDOMAIN.fullmatch(value):
        raise rule("must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', each part starting "
                   "and ending with a letter or digit", "e.g. 'example.com' or 'my-app'")


def _port_name(value: str) -> None:
    if len(value) > 15:
        raise rule("must be no more than 15 characters (an IANA service name)")
    if not PORT_NAME.fullmatch(value) or not re.search("[a-z]", value) or "--" in value \
            or value.startswith("-") or value.endswith("-"):
        raise rule("must be an IANA service name: lowercase letters, digits and '-', at least one letter, "
                   "no '--', not starting or ending with '-'", "e.g. 'http' or 'metrics-1'")


def _config_key(value: str) -> None:
    if len(value) > 253:
        raise rule("must be no more than 253 characters (a ConfigMap/Secret key)")
    if not CONFIG_KEY.fullmatch(value):
        raise rule("must be a ConfigMap/Secret key: letters, digits, '-', '_' and '.' (regex [-._a-zA-Z0-9]+)",
                   "e.g. 'key.name', 'KEY_NAME' or 'key-name'")
    if value in (".", "..") or value.startswith(".."):
        raise rule("must not be '.' or '..' and must not start with '..'")


def _env_name(value: str) -> None:
    if not SHELL_IDENTIFIER.fullmatch(value):
        raise rule("must be letters, digits and '_', not starting with a digit: Apptainer reads the "
                   "environment as a shell --env-file, which takes no other names (Kubernetes itself allows "
                   "any printable ASCII but '=')", "rename the variable, e.g. 'MY_VAR'")


def _absolute_path(value: str) -> None:
    if not value.startswith("/"):
        raise rule("must be an absolute path (starting with '/')", "e.g. '/data'")


def _relative_path(value: str) -> None:
    """``validateLocalDescendingPath``: relative, no ``..`` element."""
    if value.startswith("/"):
        raise rule("must be a relative path (not starting with '/')")
    if ".." in value.split("/"):
        raise rule("must not contain '..' as a path element (it would leave the volume)")


def _item_path(value: str) -> None:
    """``validateLocalNonReservedPath``: a relative path below the volume, not starting with ``..``."""
    if not value:
        raise rule("must not be empty")
    _relative_path(value)
    if value.startswith(".."):
        raise rule("must not start with '..' (reserved for the volume's own files)")


def _ip(value: str) -> None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise rule("must be a valid IP address (e.g. 10.9.8.7)") from None


def _one_line(value: str) -> None:
    if any(ch in value for ch in "\n\r\0") or not value.strip() == value or " " in value or "\t" in value:
        raise rule("must be one word, without spaces or line breaks")


def _quantity(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise rule("must be a quantity: a string like '500m', '2', '512Mi' or a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise rule("must be a finite quantity")
    if (value.strip().startswith("-") if isinstance(value, str) else value < 0):
        raise rule("must not be negative (resource quantities cannot be)")
    try:
        parsed = parse_quantity(value)
    except (ValueError, ArithmeticError):
        raise rule("is not a Kubernetes quantity: a number with an optional suffix (m, k, M, G, T, P, E, "
                   "Ki, Mi, Gi, Ti, Pi, Ei) or exponent", "e.g. '500m', '2', '512Mi', '1Gi', '1e3'") from None
    if parsed > MAX_QUANTITY:
        raise rule("is too large for a quantity")
    return value


Text = Annotated[str, checked(_text)]
Label = Annotated[str, checked(_dns_label)]
Subdomain = Annotated[str, checked(_dns_subdomain)]
PortName = Annotated[str, checked(_port_name)]
ConfigKey = Annotated[str, checked(_config_key)]
EnvName = Annotated[str, checked(_env_name)]
AbsolutePath = Annotated[str, checked(_text), checked(_absolute_path)]
RelativePath = Annotated[str, checked(_text), checked(_relative_path)]
ItemPath = Annotated[str, checked(_text), checked(_item_path)]
IP = Annotated[str, checked(_ip)]
Word = Annotated[str, checked(_one_line)]
#: A quantity as written (string or number); checked against the grammar, never negative.
Quantity = Annotated[Any, BeforeValidator(_quantity)]
Mode = Annotated[int, Field(ge=0, le=0o777)]


class K8sModel(BaseModel):
    """Kubernetes' JSON: camelCase names, unknown fields kept (and ignored), modelled ones strict."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=to_camel, strict=True,
                              frozen=True)

"""Name rules of k8s.io/apimachinery/pkg/util/validation, with the real messages.

A name the real server refuses must be refused here too, or a kubelet/scheduler that works only
with the stand-in's laxness would ship.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from .errors import FieldError

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(rf"^{_LABEL}$")
DNS1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
MSG_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
MSG_1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
            "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
            "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
MSG_QUALIFIED = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                 "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                 "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                   "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")

# utilrand.String: consonants and digits that cannot spell words
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(n: int = 5) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(n))


def check(value: Any, field: str, rule: str) -> list[FieldError]:
    """``rule``: subdomain, label, 1035, path; the value must be a non-empty string."""
    if not isinstance(value, str) or not value:
        return [FieldError("FieldValueRequired", field, "name or generateName is required"
                           if field == "metadata.name" else "")]
    if rule == "path":  # path.ValidatePathSegmentName (RBAC objects: "system:coredns" is valid)
        if value in (".", ".."):
            return [FieldError("FieldValueInvalid", field, f"may not be '{value}'", value)]
        return [FieldError("FieldValueInvalid", field, f"may not contain '{c}'", value) for c in "/%" if c in value]
    limit, rx, msg = {"subdomain": (253, DNS1123_SUBDOMAIN, MSG_SUBDOMAIN),
                      "label": (63, DNS1123_LABEL, MSG_LABEL),
                      "1035": (63, DNS1035_LABEL, MSG_1035)}[rule]
    out = []
    if len(value) > limit:
        out.append(FieldError("FieldValueInvalid", field, f"must be no more than {limit} characters", value))
    if not rx.match(value):
        out.append(FieldError("FieldValueInvalid", field, msg, value))
    return out


def check_labels(labels: Any, field: str) -> list[FieldError]:
    out: list[FieldError] = []
    for k, v in (labels or {}).items():
        out += check_qualified(k, field)
        if not isinstance(v, str) or len(v) > 63 or (v and not QUALIFIED.match(v)):
            out.append(FieldError("FieldValueInvalid", field, MSG_LABEL_VALUE, v))
    return out


def check_qualified(key: str, field: str) -> list[FieldError]:
    prefix, _, name = key.rpartition("/")
    out = []
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        out.append(FieldError("FieldValueInvalid", field, "prefix part " + MSG_SUBDOMAIN, key))
    if not name or len(name) > 63 or not QUALIFIED.match(name):
        out.append(FieldError("FieldValueInvalid", field, MSG_QUALIFIED, key))
    return out


def check_owner_references(refs: Any) -> list[FieldError]:
    """ValidateOwnerReferences: apiVersion, kind, name and uid set; at most one controller."""
    out: list[FieldError] = []
    for i, ref in enumerate(refs or []):
        f = f"metadata.ownerReferences[{i}]"
        for key in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(key):
                out.append(FieldError("FieldValueInvalid", f"{f}.{key}", f"{key} must not be empty", ref.get(key, "")))
    controllers = [r.get("name", "") for r in refs or [] if r.get("controller")]
    if len(controllers) > 1:
        out.append(FieldError("FieldValueInvalid", "metadata.ownerReferences", "Only one reference can have "
                              f"Controller set to true. Found \"true\" in references for {' and '.join(controllers)}",
                              refs))
    return out

"""``events.k8s.io/v1`` is a second view of the core/v1 Events storage (the scheduler writes
through it, ``kubectl describe`` reads core/v1): the field renames of pkg/apis/events/v1."""

from __future__ import annotations

from typing import Any

from .store import clone


# events.k8s.io/v1 field -> core/v1 field
RENAMES = {"regarding": "involvedObject", "note": "message", "reportingController": "reportingComponent",
           "deprecatedSource": "source", "deprecatedFirstTimestamp": "firstTimestamp",
           "deprecatedLastTimestamp": "lastTimestamp", "deprecatedCount": "count"}


def to_v1(core: dict[str, Any]) -> dict[str, Any]:
    out = clone(core)
    for new, old in RENAMES.items():
        if old in out:
            out[new] = out.pop(old)
    out["apiVersion"], out["kind"] = "events.k8s.io/v1", "Event"
    return out


def from_v1(obj: dict[str, Any]) -> dict[str, Any]:
    out = clone(obj)
    for new, old in RENAMES.items():
        if new in out:
            out[old] = out.pop(new)
    out["apiVersion"], out["kind"] = "v1", "Event"
    return out

"""What each client asked of the stand-in and what its watches were sent, for benchmarks.

``GET /standin/requests`` (like ``POST /standin/compact``, a hook no real kube-apiserver has) answers
``{"requests": {...}, "errors": {...}, "events": {...}}``: API requests as they arrive, keyed
``"<user> <verb> <resource>[/<sub>]"`` (the authorization verb: ``create pods/binding``, ``patch
pods/status``, ``watch pods``: a watch counts when it starts), those answered with an error, the
same key plus the code, and watch events sent, keyed ``"<user> <resource> <type>"``. A benchmark takes it before and after a
burst and divides the difference by the pods (bench/kubelet.py), so requests per pod by client and
kind are measured at the server, whatever the clients say about themselves.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class Counts:
    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.events: Counter[str] = Counter()

    @staticmethod
    def key(user: str, verb: str, resource: str, sub: str) -> str:
        return f"{user or '-'} {verb} {resource}{'/' + sub if sub else ''}"

    def request(self, key: str) -> None:
        self.requests[key] += 1

    def error(self, key: str, code: int) -> None:
        self.errors[f"{key} {code}"] += 1

    def event(self, user: str, resource: str, typ: str) -> None:
        self.events[f"{user or '-'} {resource} {typ}"] += 1

    def document(self) -> dict[str, Any]:
        return {"requests": dict(self.requests), "errors": dict(self.errors), "events": dict(self.events)}

"""Projected service-account tokens are refreshed while the pod runs, as the real kubelet does:
a token is re-requested once 80 % of its lifetime has passed and written in place of the old one
(a new file renamed over it, in the volume's directory that the container has bound, so a reader
sees the old token or the new one, never half of one)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from hpkctl.files import write_atomic

REFRESH_AT = 0.8
TOKEN_SECONDS = 3607  # what ServiceAccount admission asks for in kube-api-access-* (a real pod's dump)


class TokenSource(Protocol):
    """Where new tokens come from (the kubelet's ``ApiObjects``: a TokenRequest to the API server)."""

    def service_account_token(self, namespace: str, service_account: str, *, audience: str | None,
                              expiration_seconds: int | None) -> bytes | None: ...


def token_files(pod: Mapping[str, Any]) -> list[tuple[str, str | None, int]]:
    """(path relative to the pod directory, audience, expirationSeconds) of every projected token."""
    out = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        for src in ((vol.get("projected") or {}).get("sources") or []):
            tok = (src or {}).get("serviceAccountToken")
            if tok:
                rel = posixpath.normpath(posixpath.join("volumes", vol.get("name", ""), tok.get("path") or "token"))
                if rel.startswith("volumes/") and ".." not in rel.split("/"):
                    out.append((rel, tok.get("audience"), int(tok.get("expirationSeconds") or TOKEN_SECONDS)))
    return out


def refresh_after(pod: Mapping[str, Any]) -> float | None:
    """Seconds after issue at which the pod's tokens are due again (None: it has none)."""
    files = token_files(pod)
    return min(exp for _, _, exp in files) * REFRESH_AT if files else None


def refresh(objects: TokenSource, pod: Mapping[str, Any], pod_dir: Path) -> int:
    """Request each token again and replace its file; the number replaced. Raises the API's errors."""
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    done = 0
    for rel, audience, exp in token_files(pod):
        path = pod_dir / rel
        if not path.parent.is_dir():
            continue
        token = objects.service_account_token(ns, sa, audience=audience, expiration_seconds=exp)
        if token is None:
            continue
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        write_atomic(path, token, mode=mode, sync=False)  # a lost token is requested again
        done += 1
    return done

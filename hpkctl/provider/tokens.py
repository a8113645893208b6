"""Projected service-account tokens are refreshed while the pod runs, as the real kubelet does:
a token is re-requested once 80 % of its lifetime has passed and written in place of the old one
(a new file renamed over it, in the volume's directory that the container has bound, so a reader
sees the old token or the new one, never half of one).

A token's first write is one ``open`` of its name (``O_CREAT|O_EXCL``, no link followed; before the
TokenRequest, so a directory that is gone costs no request) and one ``write`` into the volume's
directory that ``write_pod_dir`` made, no temporary file, ``rename`` or
``stat``s (every one a metadata round trip on GPFS/Lustre): no older token is there for anyone to
read, and the job's ``hpk_wait_token`` waits for a non-empty file, which one ``write`` of at most a
page fills at once (a file system shows its size grow page by page); a longer token, and every
renewal (a container may be reading the token it replaces), is written beside and renamed over.

A job per pod is submitted before its tokens exist (:class:`DeferTokens`, issue 23.2): the TokenRequest
was an API round trip on every create's path, and in a burst it waited behind the scheduler's binds
and the other pods' requests. The job script waits for each token file (``hpk_wait_token``) before the
pod's first container, as a kubelet mounts every volume first; the kubelet writes the files right after
``sbatch`` returned (:func:`refresh`, the same write as a renewal)."""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hpkctl.files import write_atomic
from hpkctl.pod.objects import ObjectSource
from hpkctl.pod.poddir import create_new, fill_new, write_new

if TYPE_CHECKING:
    from hpkctl.provider.api import PodInputs

log = logging.getLogger(__name__)

REFRESH_AT = 0.8
#: A token up to this long is written by one ``write`` (a page: seen empty or whole by a reader).
ONE_WRITE = 4096
TOKEN_SECONDS = 3607  # what ServiceAccount admission asks for in kube-api-access-* (a real pod's dump)


class DeferTokens:
    """A pod's ConfigMaps and Secrets from ``objects``, its projected tokens left for later: the
    translation marks each token file ``deferred`` and the job script waits for it."""

    defers_tokens = True

    def __init__(self, objects: ObjectSource) -> None:
        self.objects = objects

    def configmap(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        return self.objects.configmap(namespace, name)

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        return self.objects.secret(namespace, name)


def defer_tokens(pod: Mapping[str, Any], inputs: PodInputs) -> tuple[PodInputs, bool]:
    """``inputs`` whose objects leave the pod's projected tokens for later, and True, when they could
    issue them (the kubelet's) and the pod has any; else ``inputs`` unchanged and False."""
    src = inputs.objects
    if src is None or not hasattr(src, "service_account_token") or not token_files(pod):
        return inputs, False
    return dataclasses.replace(inputs, objects=DeferTokens(src)), True


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


def _default_mode(pod: Mapping[str, Any], volume: str) -> int:
    """The projected volume's ``defaultMode`` (0644 without one): a token's mode when first written."""
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        if vol.get("name") == volume:
            mode = (vol.get("projected") or {}).get("defaultMode")
            return int(mode) & 0o777 if isinstance(mode, int) else 0o644
    return 0o644


def refresh(objects: TokenSource, pod: Mapping[str, Any], pod_dir: Path) -> int:
    """Request each token (again) and write its file: the first time right after sbatch (the job waits
    for it) created in place, then atomically in place of the old one; the number written. Raises the
    API's errors.

    The file is created (empty: the job waits for a non-empty one) BEFORE its TokenRequest, which is
    how a token whose directory is gone (the pod directory removed by hand) costs no request, and a
    first write is still its one ``open``; a renewal finds its file there. A file made for a request
    that failed, or gave no token, is removed again."""
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    done = 0
    for rel, audience, exp in token_files(pod):
        path, mode = pod_dir / rel, _default_mode(pod, rel.split("/")[1])
        try:
            new: int | None = create_new(str(path), mode)
        except FileExistsError:
            new = None  # a renewal
        except (FileNotFoundError, NotADirectoryError):
            _gone(pod_dir, path)
            continue
        token, written = None, False
        try:
            token = objects.service_account_token(ns, sa, audience=audience, expiration_seconds=exp)
        finally:
            if new is not None:  # one write of a short token; a longer one beside and renamed (write_token)
                short = token if token is not None and len(token) <= ONE_WRITE else None
                fill_new(str(path), new, short)
                written = short is not None
        if not written and token is not None:
            written = write_token(path, token, mode)
        done += written
    return done


_gone_said: set[str] = set()  # the pod directories whose missing tokens were logged (once each)
_gone_lock = threading.Lock()


def _gone(pod_dir: Path, path: Path) -> None:
    with _gone_lock:
        if str(pod_dir) in _gone_said:
            return
        _gone_said.add(str(pod_dir))
    log.warning("%s: not there (the pod directory was removed?): the pod's service account token is not "
                "requested while it is missing", path.parent)


def write_token(path: Path, token: bytes, mode: int) -> bool:
    """``token`` at ``path``: a new file created with ``mode`` (one ``open``; see the module's
    docstring), else written beside the one there and renamed over it, keeping that file's mode; False
    when the directory is not there (the pod directory removed)."""
    try:
        if len(token) <= ONE_WRITE:
            try:
                write_new(str(path), token, mode)
                return True
            except FileExistsError:
                pass
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                mode = stat.S_IMODE(st.st_mode)
        except FileNotFoundError:
            pass  # a long token's first write
        write_atomic(path, token, mode=mode, sync=False)  # a lost token is requested again
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False

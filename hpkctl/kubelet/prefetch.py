"""What a new pod's create reads from the API server, asked for as soon as the kubelet sees the pod
bound to its node, on threads of their own, so that the reconcile worker that creates it finds the
answers there (issue 23.2: the kubelet is never the bottleneck of a burst).

Why: every create used to wait, before its ``sbatch``, for two API round trips in a row: the GET of
each ConfigMap and Secret the pod names (``kube-root-ca.crt`` for every pod) and the TokenRequest
of its projected service-account token. In a burst both queue behind the API server's other work
(the scheduler's binds, status patches, events): profiled at 200 pods bound at once with 8 workers,
the token took 0.20 s and the GET 0.08 s of a 0.49 s create (render 0.01 s, the two record writes
0.04 s, ``sbatch`` 0.07 s). Now, when a pod without a job is first seen, its objects are read
through :class:`~hpkctl.kubelet.objects.FreshObjects` (one GET serves every pod registered before
it was sent, as the real kubelet's cache-based manager) and its tokens requested through the
kubelet's :class:`~hpkctl.kubelet.tokencache.TokenCache` (keyed by the pod: never shared), several
at once; the worker's own read later takes the answer, or joins the request still in flight. So the
API round trips of a backlog's pods overlap each other and the workers' renders and ``sbatch``
calls. Nothing changes in what a pod gets: the token is the pod's own, requested by the kubelet for
a pod bound to it, and present in the pod directory before ``sbatch``, as before.

With the kubelet's per-object watches on (:mod:`hpkctl.kubelet.objwatch`), only the tokens are
read ahead: the objects come from the watches, which start at a worker's first read.

A prefetch that fails (the pod was deleted meanwhile, the API server refused) is dropped without a
word: the worker reads again and reports the error as it always did.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hpkctl.kube import Kube
from hpkctl.kubelet.objects import ApiObjects, FreshObjects
from hpkctl.kubelet.tokencache import TokenCache
from hpkctl.pod.objects import referenced_objects
from hpkctl.provider.tokens import token_files

log = logging.getLogger("hpkctl.kubelet.prefetch")

THREADS = 4  # requests in flight at once (the workers' own reads come on top)


class Prefetch:
    """Reads ahead for new pods; ``kube``: a client of its own (``THREADS`` connections)."""

    def __init__(self, kube: Kube, tokens: TokenCache, *, threads: int = THREADS, objects: bool = True) -> None:
        self.kube = kube
        self.tokens = tokens
        self.read_objects = objects  # False: the kubelet's object watches serve them (a GET here would be one too many)
        self.objects = FreshObjects(kube)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="prefetch")

    def register(self, pod: Mapping[str, Any], *, since: float) -> None:
        """Read ahead for ``pod``, first seen at ``since`` (``time.monotonic()``)."""
        self._pool.submit(self._read, pod, since)

    def _read(self, pod: Mapping[str, Any], since: float) -> None:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        ns = str(meta.get("namespace") or "default")
        objects = ApiObjects(self.kube, pod=pod, tokens=self.tokens, fresh=self.objects, since=since)
        try:
            for plural, name in sorted(referenced_objects(pod)) if self.read_objects else ():
                (objects.configmap if plural == "configmaps" else objects.secret)(ns, name)
            sa = str(spec.get("serviceAccountName") or "default")
            for _path, audience, seconds in token_files(pod):
                objects.service_account_token(ns, sa, audience=audience, expiration_seconds=seconds)
        except Exception as exc:  # noqa: BLE001 - the worker reads again and reports what fails
            log.debug("prefetch for pod %s/%s: %s", ns, meta.get("name"), exc)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

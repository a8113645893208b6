"""The only package that imports the ``kubernetes`` client (an import-linter contract holds it).

:class:`Kube` speaks raw JSON to the API server (see :mod:`hpkctl.kube.client` for why); the
path helpers build the few URLs the kubelet and the scheduler use.
"""

from hpkctl.kube.client import (DEFAULT_TIMEOUT, MERGE, SMP, Kube, KubeError, KubeUnavailable, lease_path,
                                namespaced, node_path, pod_path)

__all__ = ["DEFAULT_TIMEOUT", "MERGE", "SMP", "Kube", "KubeError", "KubeUnavailable", "lease_path", "namespaced",
           "node_path", "pod_path"]

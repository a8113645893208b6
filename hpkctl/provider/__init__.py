"""Pod providers: how a pod runs on Slurm, behind one interface for every front end.

:mod:`hpkctl.provider.api` says what a provider promises (:class:`PodProvider`, virtual-kubelet's
``PodLifecycleHandler`` shape); :func:`delete_and_wait` is its blocking delete for one-thread front
ends. The kubelet, ``hpkctl run/status/logs/delete`` and ``hpkctl stop --all`` reach Slurm for a pod
only through a provider; the provider package sits below them and above ``jobs/`` and ``pod/``.
"""

from hpkctl.provider.api import (ContainerRun, Created, Deletion, ExecSession, Failure, ImagePullFailed, Leftover, Note,
                                 Outcome,
                                 PodInputs, PodProvider, PodRef, ProbeKill, StatusReport, Watched)
from hpkctl.provider.stopwait import delete_and_wait

__all__ = ["ContainerRun", "Created", "Deletion", "ExecSession", "Failure", "ImagePullFailed", "Leftover", "Note", "Outcome",
           "PodInputs", "PodProvider", "PodRef", "ProbeKill", "StatusReport", "Watched", "delete_and_wait"]

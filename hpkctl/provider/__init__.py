"""Pod providers: how a pod runs on Slurm, behind one interface for every front end.

:mod:`hpkctl.provider.api` says what a provider promises (:class:`PodProvider`, virtual-kubelet's
``PodLifecycleHandler`` shape); :func:`delete_and_wait` is its blocking delete for one-thread front
ends. The kubelet, ``hpkctl run/status/logs/delete`` and ``hpkctl stop --all`` reach Slurm for a pod
only through a provider; the provider package sits below them and above ``jobs/`` and ``pod/``.

The names below are imported when first read, not with the package: ``hpkctl run --detach`` imports
the package for its run records alone, and the interface's eleven dataclasses, protocols and enum
cost ~5 ms of its start (issue 23.2).
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpkctl.provider.api import (ContainerRun, Created, Deletion, ExecSession, Failure, ImagePullFailed, Leftover,
                                     Note, Outcome, PodInputs, PodProvider, PodRef, ProbeKill, StatusReport, Watched)
    from hpkctl.provider.stopwait import delete_and_wait

__all__ = ["ContainerRun", "Created", "Deletion", "ExecSession", "Failure", "ImagePullFailed", "Leftover", "Note", "Outcome",
           "PodInputs", "PodProvider", "PodRef", "ProbeKill", "StatusReport", "Watched", "delete_and_wait"]


if not TYPE_CHECKING:  # mypy sees the imports above, and a misspelt name stays an error for it

    def __getattr__(name: str) -> Any:
        if name not in __all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = _importlib.import_module("hpkctl.provider.stopwait" if name == "delete_and_wait"
                                          else "hpkctl.provider.api")
        value = getattr(module, name)
        globals()[name] = value  # read once: later reads find it without this function
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})

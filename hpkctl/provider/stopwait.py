"""Deleting pods and waiting for them: the blocking form of :meth:`PodProvider.delete` for front ends
that have one thread and nothing else to do meanwhile (``hpkctl delete``, an interrupted ``hpkctl run``,
``hpkctl stop --all``). Every pod's stop sequence advances together, so many pods cost their longest
grace period, not the sum; the kubelet calls ``delete`` itself from its work queue instead."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hpkctl.provider.api import Deletion, PodProvider, PodRef


def delete_and_wait(provider: PodProvider, pods: Sequence[tuple[PodRef, Mapping[str, Any]]], *,
                    grace: float | None = None, timeout: float = 3600.0,
                    sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> dict[str, Deletion]:
    """Run every pod's stop sequence to its end (``Deletion.done``); uid → its last answer.

    ``grace`` overrides each pod's own terminationGracePeriodSeconds (``None``: the pod's). The
    provider bounds each sequence by the grace plus a margin; ``timeout`` only guards against a
    provider that never says done (then the last answers are returned, some not done)."""
    last: dict[str, Deletion] = {}
    due: dict[str, float] = {ref.uid: 0.0 for ref, _ in pods}
    end = clock() + timeout
    while due:
        now = clock()
        for ref, pod in pods:
            if ref.uid in due and due[ref.uid] <= now:
                answer = provider.delete(ref, grace=grace, pod=pod, report=False)
                last[ref.uid] = answer
                if answer.done:
                    del due[ref.uid]
                else:
                    due[ref.uid] = now + max(answer.recheck_after, 0.05)
        if not due or clock() >= end:
            break
        sleep(max(0.0, min(due.values()) - clock()))
    return last


__all__ = ["delete_and_wait"]

"""Which runs ``hpkctl status`` lists without a name: those not finished, and finished ones that ended
within the last hour; ``--all`` lists every one.

A run stays on disk until ``hpkctl delete`` (its record, directory and logs), so a user's runs pile up:
after a month of work, or the test suite, ``hpkctl status`` listed thousands. As ``squeue`` beside
``sacct``, the listing shows what waits or runs and what just ended, and one last line says how many
older ones it left out and how to see them. The choice uses the statuses already read for the listing
(a container's ``finishedAt``, else the record's submission time): no file more is read.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any, TextIO

#: how long a finished run stays in the listing without ``--all``
RECENT_SECONDS = 3600.0


def _epoch(stamp: str | None) -> float:
    """An RFC 3339 time of a status (``2026-01-01T00:00:00Z``) in seconds; 0 when absent or unreadable."""
    if not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


def ended_at(status: object, submitted: float) -> float:
    """When a finished run ended: its last container's (a workload's: any pod's) ``finishedAt``; a run
    that ended before a container ran (refused, cancelled while queued) has none: its submission time."""
    pods = [i.pod for i in getattr(status, "indexes", [])] or [status]
    times = [_epoch(c.finished_at) for p in pods for c in getattr(p, "containers", [])]
    return max([*times, submitted])


def is_listed(status: object, submitted: float, now: float) -> bool:
    """A run ``hpkctl status`` lists without ``--all``: not finished, or finished within RECENT_SECONDS
    (a status without ``finished``, a pod whose job left no record, is listed)."""
    if not getattr(status, "finished", False):
        return True
    return ended_at(status, submitted) >= now - RECENT_SECONDS


def left_out_line(count: int, *, namespace: str | None) -> str:
    where = "" if namespace is None else f" in namespace {namespace}"
    runs = "run" if count == 1 else "runs"
    return (f"({count} finished {runs}{where} that ended over an hour ago not shown: "
            "'hpkctl status --all' lists them, 'hpkctl delete NAME' forgets one)")


def print_runs(rows: list[tuple[str, str, str, str, str, Any]], *, namespace: str | None, left_out: int,
               out: TextIO | None = None) -> None:
    """The table of ``hpkctl status``: rows of (namespace, name, job id, uid, pod directory, status);
    ``namespace`` None: every namespace (a NAMESPACE column); ``left_out``: finished runs not listed."""
    from hpkctl.local.arrays import ArrayStatus
    from hpkctl.pod.status import container_notes

    def say(line: str) -> None:
        print(line, file=out or sys.stdout)

    if not rows:
        say(("no runs that wait, run or just ended" if left_out else "no runs")
            + ("" if namespace is None else f" in namespace {namespace}"))
    else:
        head = f"{'NAMESPACE':16} " if namespace is None else ""
        say(f"{head}{'NAME':24} {'READY':5} {'JOB':>8} {'PHASE':10} {'REASON':18} {'NODE':10} MESSAGE")
    for ns, name, job, _, _, st in rows:
        col = f"{ns:16} " if namespace is None else ""
        if isinstance(st, ArrayStatus):
            msg = f"{st.kind}: {st.summary()}" + (f"; {st.message}" if st.message else "")
            say(f"{col}{name:24} {'-':5} {job or '-':>8} {st.phase:10} {st.reason or '-':18} {'-':10} {msg}")
            for i in st.indexes:
                p = i.pod
                pmsg = (p.message if p.phase != "Running" else "") + (f" ({i.attempts} runs)" if i.attempts > 1 else "")
                job_index = i.job_id.rsplit('_', 1)[-1] if i.job_id else '-'
                say(f"{col}  {i.name:22} {p.ready_count():5} {job_index:>8} {p.phase:10} "
                    f"{p.reason or '-':18} {p.node or '-':10} {pmsg.strip()}")
            continue
        msg = st.message if st.phase != "Running" else ""
        say(f"{col}{name:24} {st.ready_count():5} {job or '-':>8} {st.phase:10} {st.reason or '-':18} "
            f"{st.node or '-':10} {msg}")
        for line in container_notes(st):
            say(line)
    if left_out:
        say(left_out_line(left_out, namespace=namespace))

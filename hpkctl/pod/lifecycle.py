"""Lifecycle hooks, the grace period and termination messages: what the job's stop sequence needs.

``postStart`` and ``preStop`` become the script functions ``<function>_post_start`` and
``<function>_pre_stop`` (run by ``hpk_hook`` in ``sbatch/runtime.sh``): ``exec`` through
``<function>_exec``, ``httpGet`` through ``hpk_hook_http`` towards the pod's address, ``sleep`` as
``sleep N``. Hook commands are not expanded (``$(VAR)`` stays as written), as in Kubernetes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hpkctl.errors import PodError
from hpkctl.pod.shell import Shell, quote
from hpkctl.sites.schema import seconds_to_slurm_time, slurm_time_to_seconds

DEFAULT_GRACE = 30  # spec.terminationGracePeriodSeconds
#: Seconds before the time limit at which Slurm sends the batch shell SIGTERM (--signal=B:TERM@N),
#: beyond the grace period: the kubelet's 2 s preStop extension plus recording the exit codes.
SIGNAL_MARGIN = 10
#: The largest sig_time sbatch's --signal accepts (Slurm: "an integer between 0 and 65535").
MAX_SIGNAL_TIME = 65535
#: The least time before the time limit's stop sequence begins (Slurm may signal up to 60 s early).
MIN_RUN = 120
DEFAULT_MESSAGE_PATH = "/dev/termination-log"
HOOKS = (("post_start", "postStart"), ("pre_stop", "preStop"))


@dataclass(frozen=True)
class HookPlan:
    """One hook: ``kind`` exec | http | sleep | tcp, and its words (exec: the command; http: host
    ('' for the pod's address), port, path, scheme, headers as 'Name: value'; sleep: seconds)."""

    kind: str
    args: tuple[str, ...]


def grace_period(spec: Mapping[str, Any]) -> int:
    value = spec.get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE if value is None else int(value)


def stop_wait(spec: Mapping[str, Any], *, grace: float | None = None, margin: float = SIGNAL_MARGIN) -> float:
    """How long a pod's stop sequence may take: the grace period (``grace``, else the pod's; at least
    2 s, as the kubelet) for the main containers and once more for each sidecar, stopped after them
    one by one, plus ``margin``."""
    base = max(grace_period(spec) if grace is None else grace, 2)
    sidecars = sum(1 for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always")
    return base * (1 + sidecars) + margin


def checked_grace(spec: Mapping[str, Any]) -> int:
    """The pod's grace period, refused (``PodError``) when Slurm cannot signal the job that early:
    sbatch refuses a ``--signal`` time over 65535 s, so a grace period over 65525 s cannot be kept."""
    grace = grace_period(spec)
    if grace + SIGNAL_MARGIN > MAX_SIGNAL_TIME:
        raise PodError("GracePeriodTooLong",
                       f"spec.terminationGracePeriodSeconds: {grace}s is longer than Slurm can give a job to stop "
                       f"(its --signal time is at most {MAX_SIGNAL_TIME}s, and hpkctl adds {SIGNAL_MARGIN}s)",
                       hint=f"lower spec.terminationGracePeriodSeconds to at most {MAX_SIGNAL_TIME - SIGNAL_MARGIN}")
    return grace


def time_limit_floor(spec: Mapping[str, Any]) -> int:
    """The shortest time limit that leaves the pod ``MIN_RUN`` seconds of running before the time
    limit's SIGTERM (``--signal=B:TERM@grace+margin``): a shorter one would stop the pod as it starts."""
    return grace_period(spec) + SIGNAL_MARGIN + MIN_RUN


def room_for_grace(spec: Mapping[str, Any], limit: int, *, max_time: str) -> tuple[int, str]:
    """The time limit (seconds), raised so that the time limit's SIGTERM (``--signal``, the grace
    period plus a margin before it) does not come as the pod starts, and a warning when it was;
    refused (``PodError``) when the site's ``max_time`` is too short for that."""
    floor, grace = time_limit_floor(spec), grace_period(spec)
    if limit >= floor:
        return limit, ""
    if max_time and slurm_time_to_seconds(max_time) < floor:
        raise PodError("GracePeriodTooLong",
                       f"spec.terminationGracePeriodSeconds: {grace}s leaves no time to run within this site's "
                       f"maximum time limit {max_time}: the job is told to stop {grace + SIGNAL_MARGIN}s before its limit",
                       hint=f"lower spec.terminationGracePeriodSeconds to at most "
                            f"{slurm_time_to_seconds(max_time) - SIGNAL_MARGIN - MIN_RUN}")
    return floor, (f"spec.terminationGracePeriodSeconds: {grace}s does not fit in the time limit "
                   f"{seconds_to_slurm_time(limit)}; the job gets {seconds_to_slurm_time(floor)} so that it runs "
                   "before its stop sequence begins")


def signal_option(grace: int) -> str:
    """The sbatch ``--signal`` value: only the batch shell gets SIGTERM, ``grace`` + a margin
    seconds before the time limit, and runs the stop sequence."""
    return f"B:TERM@{grace + SIGNAL_MARGIN}"


def _port(value: Any, container: Mapping[str, Any]) -> str:
    if isinstance(value, int):
        return str(value)
    for p in container.get("ports") or []:
        if p.get("name") == value:
            return str(p["containerPort"])
    raise ValueError(f"port {value!r} names no port of the container")  # validation refuses it first


def plan_hooks(container: Mapping[str, Any]) -> dict[str, HookPlan]:
    """``{"post_start": ..., "pre_stop": ...}`` for the hooks the (validated) container has."""
    lifecycle = container.get("lifecycle") or {}
    out: dict[str, HookPlan] = {}
    for key, field in HOOKS:
        h = lifecycle.get(field)
        if not isinstance(h, Mapping):
            continue
        if h.get("exec") is not None:
            out[key] = HookPlan("exec", tuple(str(a) for a in h["exec"].get("command") or []))
        elif h.get("httpGet") is not None:
            g = h["httpGet"]
            path = str(g.get("path") or "/")
            path = (path if path.startswith("/") else "/" + path).replace(" ", "%20")
            headers = tuple(f"{x['name']}: {x['value']}" for x in g.get("httpHeaders") or [])
            out[key] = HookPlan("http", (str(g.get("host") or ""), _port(g["port"], container), path,
                                         str(g.get("scheme") or "HTTP"), *headers))
        elif h.get("sleep") is not None:
            out[key] = HookPlan("sleep", (str(int(h["sleep"]["seconds"])),))
        elif h.get("tcpSocket") is not None:
            out[key] = HookPlan("tcp", ())
    return out


def hook_command(function: str, hook: HookPlan) -> Shell:
    """The body of ``<function>_post_start`` / ``<function>_pre_stop``."""
    if hook.kind == "exec":
        return Shell(" ".join([f"{function}_exec", *(quote(a) for a in hook.args)]))
    if hook.kind == "http":
        host, *rest = hook.args
        return Shell(" ".join(["hpk_hook_http", quote(host) if host else '"$HPK_POD_IP"', *(quote(a) for a in rest)]))
    if hook.kind == "sleep":
        return Shell(f"sleep {int(hook.args[0])}")
    # The API server accepts tcpSocket in a hook for compatibility; the kubelet fails such a hook.
    return Shell("echo 'tcpSocket is not supported as a lifecycle hook' >&2; return 1")


def message_path(container: Mapping[str, Any]) -> str:
    return str(container.get("terminationMessagePath") or DEFAULT_MESSAGE_PATH)


def log_fallback(container: Mapping[str, Any]) -> bool:
    return container.get("terminationMessagePolicy") == "FallbackToLogsOnError"


def message_bound(path: str, binds: Iterable[str] = ()) -> bool:
    """Whether the job binds a file at this terminationMessagePath. Outside /dev always. Under /dev
    (the default /dev/termination-log included) only at a host path the site profile's
    [apptainer] binds name alone: Apptainer adds such a path to its minimal /dev (addUserbindsMount,
    addSessionDev), so a file can be bound over it. Any other destination under /dev fails:
    Apptainer creates a missing mount point in the image's layer, which its /dev covers."""
    if not (path == "/dev" or path.startswith("/dev/")):
        return True
    return path != "/dev" and path in device_binds(binds)


def device_binds(binds: Iterable[str]) -> set[str]:
    """The host paths under /dev that bind specs (src[:dst[:opts]]) add to Apptainer's minimal
    /dev: source and destination the same path under /dev."""
    out = set()
    for spec in binds:
        src, _, rest = spec.partition(":")
        dst = rest.partition(":")[0] or src
        if src == dst and src.startswith("/dev/"):
            out.add(posixpath.normpath(src))
    return out


def message_file(name: str) -> str:
    """The host file (relative to the pod directory) bound at the container's terminationMessagePath."""
    return f"run/{name}.termination-log"

"""A pod's status from its control files and Slurm's view of the job.

The job's own status files are the ground truth for containers (Slurm knows nothing of them) and
survive the job leaving ``squeue``. Slurm is the ground truth for what happened *to* the job:
a time limit, the OOM killer, a node failure, preemption or ``scancel`` override whatever the
script managed to record, because the script may have been killed before it could.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpkctl.pod import paths as f
from hpkctl.pod.outcome import STEP_ID, PodOutcome, SlurmFacts, allocation_ended, pod_outcome
from hpkctl.pod.paths import ListedPodDir, PodDir, read_int
from hpkctl.pod.phase import init_summary, live_phase, main_summary

# Slurm outcomes that explain the end of the pod better than the script could.
_SLURM_WINS = {"DeadlineExceeded", "Terminated", "OOMKilled", "NodeLost", "Preempted", "BootFailure", "Cancelled", "Revoked"}
#: a CANCELLED job whose pod was deleted through hpkctl (it wrote pod.deleting before its TERM and scancel)
DELETED = ("the pod was deleted through hpkctl (hpkctl delete, an interrupted hpkctl run, the kubelet or hpkctl "
           "stop --all): its containers were stopped with their grace period, then its Slurm job was cancelled")
#: a container whose files say it runs when its pod ended without its script's last word (the job or
#: step was killed, vanished, or its node failed): the real kubelet's words for a container it cannot
#: find once the pod is terminal (kubelet_pods.go convertToAPIContainerStatuses), never running nor ready
LOST = ("ContainerStatusUnknown", "The container could not be located when the pod was terminated", 137)
@dataclass
class ContainerStatus:
    name: str
    init: bool
    state: str  # "waiting" | "running" | "terminated"
    reason: str = ""
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    restart_count: int = 0
    last_exit_code: int | None = None
    last_finished_at: str | None = None
    message: str = ""  # the terminated state's message (terminationMessagePath, log fallback, hook failure)
    last_message: str = ""
    last_reason: str = ""  # the previous run's reason when not its exit code's (FailedPostStartHook, OOMKilled...)
    hook_failure: str = ""  # "FailedPreStopHook: message" of the current run, shown by hpkctl status
    ready: bool = False  # running and NAME.ready is 1 (readiness passed; no probe: once running)
    started: bool = False  # running and the startup probe passed (no startup probe: once running)
    sidecar: bool = False  # an init container with restartPolicy Always
    probe_kill: str = ""  # why a probe stopped the current run, else the run before (NAME[.last].probe-kill)

    def as_k8s(self) -> dict[str, Any]:
        if self.state == "running":
            state: dict[str, Any] = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {"terminated": {"exitCode": self.exit_code, "reason": self.reason,
                                    "startedAt": self.started_at, "finishedAt": self.finished_at}}
            if self.message:
                state["terminated"]["message"] = self.message
        else:
            state = {"waiting": {"reason": self.reason} | ({"message": self.message} if self.message else {})}
        out: dict[str, Any] = {"name": self.name, "state": state, "restartCount": self.restart_count,
                               "ready": self.ready, "started": self.started}
        if self.last_exit_code is not None:
            out["lastState"] = {"terminated": {"exitCode": self.last_exit_code, "finishedAt": self.last_finished_at,
                                               "reason": self.last_reason or (
                                                   "Completed" if self.last_exit_code == 0 else "Error")}}
            if self.last_message:
                out["lastState"]["terminated"]["message"] = self.last_message
        return out


@dataclass
class PodStatus:
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    reason: str
    message: str
    exit_code: int | None
    pod_ip: str | None
    node: str | None
    started_at: str | None
    containers: list[ContainerStatus] = field(default_factory=list)
    job: SlurmFacts | None = None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def as_k8s(self) -> dict[str, Any]:
        status: dict[str, Any] = {"phase": self.phase}
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        if self.pod_ip:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.started_at:
            status["startTime"] = self.started_at
        status["conditions"] = self.conditions()
        status["initContainerStatuses"] = [c.as_k8s() for c in self.containers if c.init]
        status["containerStatuses"] = [c.as_k8s() for c in self.containers if not c.init]
        return status


    def conditions(self) -> list[dict[str, str]]:
        """Kubernetes' pod conditions from the containers' status (no readiness gates)."""
        def cond(kind: str, ok: bool, reason: str = "", message: str = "") -> dict[str, str]:
            out = {"type": kind, "status": "True" if ok else "False"}
            return out | ({"reason": reason} if reason and not ok else {}) | ({"message": message} if message and not ok else {})

        scheduled = bool(self.started_at or self.node)
        inits = [c for c in self.containers if c.init and not c.sidecar]
        waiting = [c.name for c in inits if not (c.state == "terminated" and c.exit_code == 0)]
        served = [c for c in self.containers if not c.init or c.sidecar]
        unready = [c.name for c in served if not c.ready]
        if self.phase == "Succeeded":
            ready = cond("Ready", False, "PodCompleted")
        else:
            ready = cond("Ready", not unready, "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]")
        return [
            cond("PodReadyToStartContainers", bool(self.pod_ip)),
            cond("Initialized", not waiting or self.phase == "Succeeded", "ContainersNotInitialized",
                 f"containers with incomplete status: [{' '.join(waiting)}]"),
            ready,
            {**ready, "type": "ContainersReady"},
            cond("PodScheduled", scheduled, self.reason if self.phase == "Pending" else "", self.message),
        ]

    def ready_count(self) -> str:
        """READY as kubectl shows it: ready/all of the main containers and sidecars."""
        served = [c for c in self.containers if not c.init or c.sidecar]
        return f"{sum(c.ready for c in served)}/{len(served)}"


def _submitted(pd: PodDir) -> dict[str, Any]:
    """The pod as submitted (job/pod.json); empty when it cannot be read."""
    try:
        pod = json.loads(pd.pod_json.read_text())
    except (OSError, ValueError):
        return {}
    return pod if isinstance(pod, dict) else {}


def _part(pod: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = pod.get(key)
    return value if isinstance(value, dict) else {}


def _probe_spec(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """(containers with a startup probe, sidecars) from the pod as submitted."""
    spec = _part(pod, "spec")
    every = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    return ({c.get("name", "") for c in every if isinstance(c, dict) and c.get("startupProbe")},
            {c.get("name", "") for c in spec.get("initContainers") or []
             if isinstance(c, dict) and c.get("restartPolicy") == "Always"})


def _probe_state(pd: PodDir, cs: ContainerStatus, *, startup: set[str], sidecars: set[str]) -> None:
    """ready, started and the probe-kill message of one container (sbatch/runtime.sh, "probes")."""
    name = cs.name
    cs.sidecar = name in sidecars
    cs.probe_kill = pd.read_container(name, f.PROBE_KILL) or pd.read_container(name, f.LAST_PROBE_KILL) or ""
    if cs.state == "terminated" and cs.init and not cs.sidecar:
        cs.ready = cs.exit_code == 0  # a completed init container, as the kubelet reports it
    if cs.state != "running":
        return
    passed = pd.read_container(name, f.STARTED_PROBE)  # the time it passed; older than started: stale
    cs.started = name not in startup or (passed is not None and passed >= (cs.started_at or ""))
    cs.ready = cs.started and pd.read_container(name, f.READY) == "1"


def _log_tail(pd: PodDir, name: str) -> str:
    try:
        with open(pd.log(name), "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(pd: PodDir, name: str) -> str:
    lines = [ln for ln in _log_tail(pd, name).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def apptainer_fatal(pd: PodDir, name: str) -> tuple[int, str] | None:
    """(127, reason) or (126, reason) when the container's log ends with Apptainer's FATAL for a command
    it could not start (not found / permission denied); Apptainer itself exits 255 for both."""
    last = _last_line(pd, name).lower()
    if "fatal:" not in last:
        return None
    if "executable file not found" in last or "no such file or directory" in last:
        return 127, "ContainerCannotRun"
    if "permission denied" in last:
        return 126, "ContainerCannotRun"
    return None


def _go_duration(seconds: int) -> str:
    """Go's time.Duration text of whole seconds (10s, 1m20s, 5m0s), as the kubelet's messages show it."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{hours}h{minutes}m{secs}s" if hours else f"{minutes}m{secs}s" if minutes else f"{secs}s")


def _back_off(cs: ContainerStatus, seconds: int, pod: Mapping[str, Any]) -> None:
    """The run that ended becomes ``lastState``; the container waits (CrashLoopBackOff) with the
    kubelet's message, whose pod is format.Pod's ``name_namespace(uid)``."""
    meta = _part(pod, "metadata")
    who = f"{meta.get('name', '')}_{meta.get('namespace') or 'default'}({meta.get('uid', '')})"
    cs.last_exit_code, cs.last_finished_at, cs.last_reason, cs.last_message = (
        cs.exit_code, cs.finished_at, cs.reason, cs.message)
    cs.state, cs.exit_code, cs.finished_at, cs.reason = "waiting", None, None, "CrashLoopBackOff"
    cs.message = f"back-off {_go_duration(seconds)} restarting failed container={cs.name} pod={who}"


def container_statuses(pd: PodDir, containers: Sequence[tuple[str, bool]], *, oom: bool,
                       pod_finished: bool, pod: Mapping[str, Any] | None = None,
                       lost: bool = False) -> list[ContainerStatus]:
    """The containers' statuses from their files; ``lost``: the pod ended without its script saying how
    (no ``pod.done``), so a container its files still show running is terminated ``LOST``."""
    out = []
    pod = _submitted(pd) if pod is None else pod
    startup, sidecars = _probe_spec(pod)
    stopping = pod_finished or pd.exists(f.POD_TERMINATING)
    for name, init in containers:
        started = pd.read_container(name, f.STARTED)
        code = read_int(pd.read_container(name, f.EXITCODE))
        cs = ContainerStatus(name=name, init=init, state="waiting", started_at=started,
                             restart_count=read_int(pd.read_container(name, f.RESTARTS)) or 0,
                             last_exit_code=read_int(pd.read_container(name, f.LAST_EXITCODE)),
                             last_finished_at=pd.read_container(name, f.LAST_FINISHED))
        hook_reason, _, hook_message = (pd.read_container(name, f.HOOK_FAILED) or "").partition("\n")
        last_hook = (pd.read_container(name, f.LAST_HOOK_FAILED) or "").partition("\n")
        cs.last_message = pd.read_message(name, f.LAST_MESSAGE) or (last_hook[2] if last_hook[0] else "")
        cs.last_reason = pd.read_container(name, f.LAST_REASON) or (
            last_hook[0] if last_hook[0] == "FailedPostStartHook" else "")
        if hook_reason:
            cs.hook_failure = f"{hook_reason}: {hook_message}"
        if code is not None:
            cs.state, cs.exit_code = "terminated", code
            cs.finished_at = pd.read_container(name, f.FINISHED)
            cs.reason = "Completed" if code == 0 else ("OOMKilled" if oom and code in (137, 9) else "Error")
            cs.reason = pd.read_container(name, f.REASON) or cs.reason  # the job knew better (OOMKilled)
            cs.message = pd.read_message(name) or ""
            fatal = apptainer_fatal(pd, name) if code == 255 else None
            if fatal is not None:  # Apptainer could not start the command: say so as a shell would
                cs.exit_code, cs.reason = fatal
                cs.message = cs.message or _last_line(pd, name)
            if hook_reason == "FailedPostStartHook":  # killed because its postStart hook failed
                cs.reason, cs.message = hook_reason, cs.message or hook_message
            backoff = read_int(pd.read_container(name, f.BACKOFF))
            if backoff is not None and not stopping:  # to be restarted after this back-off
                _back_off(cs, backoff, pod)
        elif started is not None and pd.exists(f"{name}.{f.POST_START}"):
            cs.reason = "ContainerCreating"  # not Running until postStart returns
        elif started is not None and lost:
            cs.state, (cs.reason, cs.message, cs.exit_code) = "terminated", LOST
        elif started is not None:
            cs.state = "running"
        else:
            cs.reason = "PodInitializing" if not init else "Waiting"
            if pod_finished:
                cs.reason = "NotStarted"
        _probe_state(pd, cs, startup=startup, sidecars=sidecars)
        out.append(cs)
    return out


def read_pod_status(pod_dir: Path, containers: Sequence[tuple[str, bool]], job: SlurmFacts | None, *,
                    job_known: bool = True) -> PodStatus:
    """Combine the status files of ``pod_dir`` with Slurm's ``job`` info.

    ``containers`` lists (name, is_init) in spec order. ``job`` is Slurm's latest view (``None``
    when Slurm has no record); ``job_known=False`` means Slurm was not asked (files only).
    """
    pd = ListedPodDir.of(pod_dir)  # status/ listed once: names not in it are not opened
    outcome: PodOutcome | None = pod_outcome(job) if job_known else None
    done = read_int(pd.read(f.POD_DONE))
    failed = pd.read(f.POD_FAILED)
    started_at = pd.read(f.JOB_STARTED)
    # Slurm's verdict wins over what the script wrote, except a jobcomp record's: any user can forge
    # lines in that world-readable file (issue 20.4), so it never overrides the pod's own pod.done.
    forgeable = getattr(job, "source", "") == "jobcomp" and done is not None
    oom = outcome is not None and outcome.reason == "OOMKilled" and not forgeable
    finished = done is not None or (outcome is not None and outcome.phase in ("Succeeded", "Failed"))
    pod = _submitted(pd)
    if outcome is not None and outcome.reason == "DeadlineExceeded" and STEP_ID.match((pd.read(f.JOB_ID) or "").strip()):
        # a pilot pod's job is its allocation: its time limit ended the pod only when the pod's script
        # did not finish first (the time limit's TERM: Terminated without a delete's pod.deleting)
        cut = done is None or ((failed or "").partition("\n")[0] in ("Terminated", "Cancelled")
                               and not pd.exists(f.POD_DELETING))
        outcome = allocation_ended(outcome, job, _part(pod, "spec")) if cut else None
    cs = container_statuses(pd, containers, oom=oom, pod_finished=finished, pod=pod, lost=finished and done is None)
    ip = pd.read(f.POD_IP)
    node = pd.read(f.JOB_NODE) or (job.nodes if job else None)

    def make(phase: str, reason: str, message: str, code: int | None) -> PodStatus:
        return PodStatus(phase, reason, message, code, ip, node, started_at, cs, job)

    def live(message: str) -> PodStatus:  # the job runs the pod: Pending until its containers have started
        policy = str(_part(pod, "spec").get("restartPolicy") or "Always")
        if live_phase(cs, restart_policy=policy) == "Pending":
            return make("Pending", init_summary(cs), "", None)
        return make("Running", main_summary(cs), message, None)  # the API gets no reason (api_status)

    # Slurm's OUT_OF_MEMORY marks the whole job for any OOM kill in it; when the job finished the pod
    # and knows which container's run the kernel killed (NAME.reason), its record is the better one
    # (that container may have been restarted and succeeded since, as in Kubernetes).
    contained = done is not None and any(
        pd.read_container(c.name, f.REASON) == "OOMKilled" or c.last_reason == "OOMKilled" for c in cs)
    if (outcome is not None and outcome.phase == "Failed" and outcome.reason in _SLURM_WINS and not forgeable
            and not (outcome.reason == "OOMKilled" and contained)):
        deleted = outcome.reason == "Cancelled" and pd.exists(f.POD_DELETING)  # hpkctl's own scancel
        return make("Failed", outcome.reason, DELETED if deleted else outcome.message, outcome.exit_code)
    if done is not None:
        if failed:
            reason, _, message = failed.partition("\n")
            return make("Failed", reason, message, done)
        if done == 0:
            return make("Succeeded", "Completed", "all containers exited with code 0", 0)
        bad = [c for c in cs if c.state == "terminated" and c.exit_code]
        msg = ", ".join(f"container {c.name} exited with code {c.exit_code}" for c in bad) or f"exit code {done}"
        return make("Failed", "OOMKilled" if any(c.reason == "OOMKilled" for c in bad) else "Error", msg, done)
    if outcome is None:
        if started_at:
            return live("the job is running (Slurm not asked)")
        return make("Pending", "Submitted", "waiting for the job to start", None)
    if outcome.phase in ("Succeeded", "Failed"):
        # The job ended but its script never wrote pod.done: it died before or outside the script.
        if failed:
            reason, _, message = failed.partition("\n")
            return make("Failed", reason, message, outcome.exit_code)
        if outcome.phase == "Succeeded":
            return make("Failed", "JobFailed", "the job ended without writing the pod's status; see logs/slurm.out "
                        "(a pod submitted as element A_i of a job array: Slurm's own notices are in "
                        f"{f.NOTICES_DIR}/A_i.out beside the pod directories)", outcome.exit_code)
        return make("Failed", outcome.reason, outcome.message, outcome.exit_code)
    if outcome.phase == "Pending" and not started_at:
        return make("Pending", outcome.reason, outcome.message, None)
    if started_at:
        return live(f"running on {node}" if node else "running")
    if outcome.phase == "Running":  # Slurm's RUNNING from the allocation on, before the script began (its
        # prolog, a loaded node): no container has started, so Pending as getPhase says, never Running
        # before the init containers ran (issue 22.2)
        if outcome.reason:  # CONFIGURING, SUSPENDED...: Slurm says better
            return make("Pending", outcome.reason, outcome.message, None)
        return make("Pending", "ContainerCreating", "the job started; its script has not started the pod yet", None)
    return make(outcome.phase, outcome.reason, outcome.message, None)


def container_notes(st: PodStatus) -> list[str]:
    """One line per container with a termination message, a hook failure or the last probe kill
    (``hpkctl status``)."""
    out = []
    for c in st.containers:
        for what, text in (("message", c.message), ("hook", c.hook_failure), ("probe", c.probe_kill)):
            if text and not (what == "hook" and c.reason == "FailedPostStartHook"):
                one = " ".join(text.split())
                out.append(f"  container {c.name} {what}: {one[:200] + ('...' if len(one) > 200 else '')}")
    return out


def containers_of(pod: Mapping[str, Any]) -> list[tuple[str, bool]]:
    spec = pod.get("spec") or {}
    return [(c.get("name", ""), True) for c in spec.get("initContainers") or []] + [
        (c.get("name", ""), False) for c in spec.get("containers") or []]


def restart_policies(pod: Mapping[str, Any]) -> dict[str, str]:
    """Each container's effective restart policy (init containers of ``Always`` pods retry on failure)."""
    spec = pod.get("spec") or {}
    pod_policy = spec.get("restartPolicy") or "Always"
    out = {c.get("name", ""): ("Always" if c.get("restartPolicy") == "Always"  # a sidecar
                               else "OnFailure" if pod_policy == "Always" else pod_policy)
           for c in spec.get("initContainers") or []}
    out.update({c.get("name", ""): pod_policy for c in spec.get("containers") or []})
    return out


def container_done(pd: PodDir, name: str, *, policy: str) -> bool:
    """Whether the container ended and will not run again, so its log is complete.

    An exit code alone is not enough: under ``Always`` (or ``OnFailure`` after a failure) the job
    restarts the container after a back-off, and ``logs -f`` must keep following across it.
    """
    if pd.exists(f.POD_DONE):
        return True
    code = read_int(pd.read_container(name, f.EXITCODE))
    if code is None:
        return False
    if pd.exists(f.POD_TERMINATING):
        return True
    return policy == "Never" or (policy == "OnFailure" and code == 0)

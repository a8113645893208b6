"""The Job controller's pod side (pkg/controller/job): pods with the job-tracking finalizer, counted
through status.uncountedTerminatedPods before the finalizer goes, backoffLimit with the exponential
pod re-creation delay, activeDeadlineSeconds, Indexed Jobs (index annotation and label,
JOB_COMPLETION_INDEX, hostname), and the conditions SuccessCriteriaMet/Complete and
FailureTarget/Failed with the real reasons."""

from __future__ import annotations

import time
from typing import Any

from . import pods
from .client import Kube, Obj, now, parse_time, path_of, say

TRACKING = "batch.kubernetes.io/job-tracking"
INDEX = "batch.kubernetes.io/job-completion-index"
BACKOFF_BASE, BACKOFF_MAX = 10.0, 360.0


def failed(pod: Obj, job: Obj) -> bool:
    """isPodFailed: Failed, or (pods replaced once terminating, the default) deleted before succeeding."""
    if pods.phase(pod) == "Failed":
        return True
    if (job["spec"].get("podReplacementPolicy") or "TerminatingOrFailed") == "Failed":
        return False
    return pods.deleting(pod) and pods.phase(pod) != "Succeeded"


def finished(pod: Obj, job: Obj) -> bool:
    return pods.phase(pod) == "Succeeded" or failed(pod, job)


def index_of(pod: Obj) -> int | None:
    v = (pod["metadata"].get("annotations") or {}).get(INDEX)
    return int(v) if v is not None and str(v).isdigit() else None


def parse_indexes(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, (text or "").split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def format_indexes(ix: set[int]) -> str:
    """"1,3-5,7": ranges of consecutive indexes, as completedIndexes is written."""
    out, run = [], []
    for i in sorted(ix):
        if run and i != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(i)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


class Jobs:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.backoff: dict[str, tuple[int, float]] = {}  # job uid → (failed count seen, when it grew)

    def _pod(self, job: Obj, index: int | None) -> Obj:
        name = job["metadata"]["name"]
        template = job["spec"].get("template") or {}
        if index is None:
            return pods.from_template(job, "Job", template, generate_name=f"{name}-", finalizers=(TRACKING,))
        pod = pods.from_template(job, "Job", template, generate_name=f"{name}-{index}-"[:58],
                                 labels={INDEX: str(index)}, annotations={INDEX: str(index)}, finalizers=(TRACKING,))
        spec = pod["spec"]
        if not spec.get("hostname"):
            spec["hostname"] = f"{name}-{index}"
        env = {"name": "JOB_COMPLETION_INDEX",
               "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}}}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in c.get("env") or []):
                c["env"] = [*(c.get("env") or []), env]
        return pod

    def _delay(self, uid: str, failures: int) -> float:
        seen, when = self.backoff.get(uid, (0, 0.0))
        if failures != seen:
            self.backoff[uid] = (failures, time.monotonic())
            seen, when = failures, time.monotonic()
        if failures == 0:
            return 0.0
        return max(0.0, when + min(BACKOFF_BASE * 2 ** (failures - 1), BACKOFF_MAX) - time.monotonic())

    async def sync(self, job: Obj, owned: list[Obj]) -> None:
        spec, meta = job["spec"], job["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        st: dict[str, Any] = dict(job.get("status") or {})
        before = dict(st)
        when = now()
        st.setdefault("startTime", when)
        unc = st.get("uncountedTerminatedPods") or {}
        unc_ok, unc_bad = list(unc.get("succeeded") or []), list(unc.get("failed") or [])
        by_uid = {p["metadata"]["uid"]: p for p in owned}
        indexed = spec.get("completionMode") == "Indexed"
        done_ix = parse_indexes(st.get("completedIndexes", ""))
        # 1. finished pods still holding the finalizer are recorded as uncounted before it goes
        for p in owned:
            puid = p["metadata"]["uid"]
            if TRACKING in (p["metadata"].get("finalizers") or []) and finished(p, job) \
                    and puid not in unc_ok and puid not in unc_bad:
                (unc_ok if pods.phase(p) == "Succeeded" else unc_bad).append(puid)
        if unc_ok or unc_bad:
            st["uncountedTerminatedPods"] = {"succeeded": unc_ok, "failed": unc_bad}
            if st != before and not await self._write(job, st):
                return
            # 2. the finalizers go, 3. the pods are counted
            for puid in [*unc_ok, *unc_bad]:
                p = by_uid.get(puid)
                if p is not None:
                    if not await pods.remove_finalizer(self.kube, p, TRACKING):
                        return
                    p["metadata"]["finalizers"] = [f for f in p["metadata"]["finalizers"] if f != TRACKING]
            st["succeeded"] = st.get("succeeded", 0) + len(unc_ok)
            st["failed"] = st.get("failed", 0) + len(unc_bad)
            for puid in unc_ok:
                ix = index_of(by_uid[puid]) if puid in by_uid else None
                if indexed and ix is not None:
                    done_ix.add(ix)
            if indexed:
                st["completedIndexes"] = format_indexes(done_ix)
            st["uncountedTerminatedPods"] = {}
        st.setdefault("succeeded", 0)
        st.setdefault("failed", 0)
        live = [p for p in owned if pods.active(p)]
        terminating = [p for p in owned if pods.deleting(p) and pods.phase(p) not in pods.TERMINAL]
        conds = list(st.get("conditions") or [])
        types = {c["type"] for c in conds if c.get("status") == "True"}
        completions, parallelism = spec.get("completions"), int(spec.get("parallelism", 1))
        if not types & {"SuccessCriteriaMet", "FailureTarget", "Complete", "Failed"}:
            deadline = spec.get("activeDeadlineSeconds")
            if st["failed"] > int(spec.get("backoffLimit", 6)):
                conds.append(pods.condition("FailureTarget", "BackoffLimitExceeded",
                                            "Job has reached the specified backoff limit", when))
            elif deadline is not None and time.time() - parse_time(st["startTime"]) >= int(deadline):
                conds.append(pods.condition("FailureTarget", "DeadlineExceeded",
                                            "Job was active longer than specified deadline", when))
            elif (len(done_ix) >= int(completions) if indexed and completions is not None else
                  st["succeeded"] >= int(completions) if completions is not None else
                  st["succeeded"] > 0 and not live):
                conds.append(pods.condition("SuccessCriteriaMet", "CompletionsReached",
                                            "Reached expected number of succeeded pods", when))
            types = {c["type"] for c in conds if c.get("status") == "True"}
        if types & {"FailureTarget", "SuccessCriteriaMet"}:
            for p in live:  # the Job is decided: its remaining pods are stopped
                await pods.delete(self.kube, p)
            live = []
            if not terminating and not types & {"Complete", "Failed"}:
                target = next(c for c in conds if c["type"] in ("FailureTarget", "SuccessCriteriaMet"))
                final = "Failed" if target["type"] == "FailureTarget" else "Complete"
                conds.append(pods.condition(final, target["reason"], target["message"], when))
                if final == "Complete":
                    st["completionTime"] = when
                say(f"job {ns}/{name}: {final} ({target['reason']})")
        elif not spec.get("suspend"):
            live = await self._scale(job, owned, live, st, done_ix, completions, parallelism)
        st["conditions"] = conds
        st["active"] = len(live)
        st["ready"] = sum(1 for p in live if pods.ready(p))
        st["terminating"] = len(terminating)
        for k in ("conditions", "active", "succeeded", "failed"):  # omitempty
            if not st[k]:
                del st[k]
        if st != before:
            await self._write(job, st)

    async def _scale(self, job: Obj, owned: list[Obj], live: list[Obj], st: Obj, done_ix: set[int],
                     completions: Any, parallelism: int) -> list[Obj]:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        succeeded_now = st["succeeded"] + sum(1 for p in owned if pods.phase(p) == "Succeeded"
                                              and TRACKING in (p["metadata"].get("finalizers") or []))
        if self._delay(job["metadata"]["uid"], st["failed"]) > 0:
            return live
        new: list[Obj] = []
        # podReplacementPolicy Failed: a terminating pod is replaced only once it is terminal
        waiting = [p for p in owned if job["spec"].get("podReplacementPolicy") == "Failed" and pods.deleting(p)
                   and pods.phase(p) not in pods.TERMINAL]
        if job["spec"].get("completionMode") == "Indexed":
            busy = {index_of(p) for p in [*live, *waiting]} | \
                {index_of(p) for p in owned if pods.phase(p) == "Succeeded"}
            todo = [i for i in range(int(completions or 0)) if i not in done_ix and i not in busy]
            new = [self._pod(job, i) for i in todo[:max(0, parallelism - len(live) - len(waiting))]]
        else:
            want = parallelism if completions is None and succeeded_now == 0 else \
                len(live) if completions is None else min(int(completions) - succeeded_now, parallelism)
            new = [self._pod(job, None) for _ in range(max(0, want - len(live) - len(waiting)))]
            for p in sorted(live, key=lambda p: p["metadata"]["creationTimestamp"], reverse=True)[:max(0, len(live) - want)]:
                await pods.delete(self.kube, p)
                live = [q for q in live if q is not p]
        for pod in new:
            made = await pods.create(self.kube, ns, pod, f"job {ns}/{name}")
            if made is not None:
                live.append(made)
        return live

    async def _write(self, job: Obj, status: Obj) -> bool:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        body = {**job, "apiVersion": "batch/v1", "kind": "Job", "status": status}
        out = await self.kube.write(f"status of job {ns}/{name}", "PUT", path_of("Job", ns, name) + "/status", body)
        if out is not None:
            job["metadata"]["resourceVersion"] = out["metadata"]["resourceVersion"]
            job["status"] = out.get("status") or {}
        return out is not None

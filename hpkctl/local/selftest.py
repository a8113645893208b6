"""``hpkctl selftest --site NAME``: a battery of small pods through the real site, one table.

So an admin proves a new site in minutes: each case is an ordinary ``hpkctl run`` (the same
``submit_pod`` and ``follow_run``, no twin), all submitted at once and followed concurrently, in the
namespace ``hpk-selftest``; a run of the battery replaces the previous one's pods (their logs stay
until then, so the table's log paths can be read). Cases: hello; env and args byte for byte;
ConfigMap, Secret and emptyDir volumes; init containers in order; a liveness probe that restarts its
container; a delete that runs the stop sequence (the container's TERM trap); an MPI-style step on two
nodes where the partition has them; the message a container writes to Kubernetes' default
terminationMessagePath, where the profile binds the node's /dev/termination-log (else SKIP). Exec
and logs go through a kubelet's API: the caller's ``exec_and_logs`` row
(:mod:`hpkctl.controlplane.selftestexec`, run alongside the battery), SKIP without.
"""

from __future__ import annotations

import base64
import io
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from hpkctl.errors import HpkError
from hpkctl.jobs import Slurm, SlurmError
from hpkctl.local.follow import follow_run
from hpkctl.provider.runrecords import RunRecord
from hpkctl.local.runs import NeverStarts, stop_run
from hpkctl.local.submit import submit_pod
from hpkctl.pod.lifecycle import DEFAULT_MESSAGE_PATH, device_binds
from hpkctl.provider import PodRef
from hpkctl.provider.pilotpod import run_provider
from hpkctl.pod.status import PodStatus
from hpkctl.sites.schema import SiteProfile

NS = "hpk-selftest"
IMAGE = "busybox:1.36"
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
ENV_VALUE = "a 'single' \"double\" $HOME `tick` \\back ünïcödé\ttab  two  spaces"
ARGS = ["one two", "'three'", "$notexpanded", "back\\slash", "ünïcödé", ""]


@dataclass
class Case:
    name: str
    docs: list[dict[str, Any]]  # the pod last
    check: Callable[[PodStatus, str], str]  # (final status, main container's log) -> "" or what is wrong
    container: str = "c"
    delete: bool = False  # delete it once its container runs (the stop sequence), instead of waiting


@dataclass
class Result:
    case: str
    result: str
    detail: str = ""
    log: str = ""
    seconds: float = 0.0
    rec: RunRecord | None = field(default=None, repr=False)


def _pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if "annotations" in spec:
        meta["annotations"] = spec.pop("annotations")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "containers": containers, **spec}}


def _c(script: str, name: str = "c", **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "command": ["sh", "-c", script], **kw}


def _expect(want: str) -> Callable[[PodStatus, str], str]:
    def check(st: PodStatus, log: str) -> str:
        if st.phase != "Succeeded":
            return f"{st.phase} ({st.reason}): {st.message}"
        return "" if log == want else f"log {log!r}, expected {want!r}"
    return check


def cases(*, multi_node: bool, dev_message: bool = False) -> list[Case]:
    """The battery; ``dev_message``: the profile binds the node's /dev/termination-log."""
    env_args = _c('printf "[%s]\\n" "$V"; for a in "$@"; do printf "<%s>\\n" "$a"; done', env=[{"name": "V",
                  "value": ENV_VALUE}])
    env_args["command"] = env_args["command"] + ["sh"]
    env_args["args"] = ARGS
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "selftest-cm", "namespace": NS},
          "data": {"k": "config-value"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "selftest-secret", "namespace": NS},
              "data": {"s": base64.b64encode(b"secret-value").decode()}}
    scratch = {"name": "scratch", "emptyDir": {}}
    # the first run makes its liveness probe fail (/scratch/sick) and is killed; the second heals and ends
    probe = _c("if [ -e /scratch/ran ]; then rm /scratch/sick; echo second run; exit 0; fi; "
               "touch /scratch/ran /scratch/sick; sleep 60", volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
               livenessProbe={"exec": {"command": ["sh", "-c", "! test -e /scratch/sick"]}, "initialDelaySeconds": 2,
                              "periodSeconds": 1, "failureThreshold": 1})

    def restarted(st: PodStatus, log: str) -> str:
        bad = _expect("second run\n")(st, log)
        restarts = next((c.restart_count for c in st.containers if c.name == "c"), 0)
        return bad or ("" if restarts >= 1 else "the container was not restarted by its liveness probe")

    def stopped(st: PodStatus, log: str) -> str:
        return "" if "got TERM" in log else f"no 'got TERM' in the log ({log!r}): the stop sequence did not reach it"

    out = [
        Case("hello", [_pod("hello", [_c("echo hello world")])], _expect("hello world\n")),
        Case("env and args", [_pod("env-args", [env_args])],
             _expect(f"[{ENV_VALUE}]\n" + "".join(f"<{a}>\n" for a in ARGS))),
        Case("volumes", [cm, secret, _pod("volumes", [_c(
            "cat /cm/k; echo; cat /sec/s; echo; cat /scratch/f", volumeMounts=[
                {"name": "cm", "mountPath": "/cm"}, {"name": "sec", "mountPath": "/sec"},
                {"name": "scratch", "mountPath": "/scratch"}])],
            initContainers=[_c("echo from-init > /scratch/f", "init", volumeMounts=[
                {"name": "scratch", "mountPath": "/scratch"}])],
            volumes=[{"name": "cm", "configMap": {"name": "selftest-cm"}},
                     {"name": "sec", "secret": {"secretName": "selftest-secret"}}, scratch])],
             _expect("config-value\nsecret-value\nfrom-init\n")),
        Case("init order", [_pod("init-order", [_c("cat /scratch/order; echo", volumeMounts=[
            {"name": "scratch", "mountPath": "/scratch"}])], initContainers=[
                _c(f"printf {i} >> /scratch/order", f"init{i}", volumeMounts=[
                    {"name": "scratch", "mountPath": "/scratch"}]) for i in (1, 2, 3)], volumes=[scratch])],
             _expect("123\n")),
        Case("probe", [_pod("probe", [probe], restartPolicy="OnFailure", volumes=[scratch])], restarted),
        Case("delete with grace", [_pod("delete", [_c("trap 'echo got TERM; exit 0' TERM; echo up; "
                                                       "while :; do sleep 1; done")])], stopped, delete=True),
    ]
    if dev_message:
        def message(st: PodStatus, log: str) -> str:
            bad = _expect("written\n")(st, log)
            got = next((c.message for c in st.containers if c.name == "c"), "")
            return bad or ("" if got == "Sleep expired\n" else f"terminated message {got!r}, not 'Sleep expired\\n'")
        out.append(Case("termination message", [_pod("termination-message", [_c(
            f"echo Sleep expired > {DEFAULT_MESSAGE_PATH} && echo written")])], message))
    if multi_node:
        def two_nodes(st: PodStatus, log: str) -> str:
            bad = "" if st.phase == "Succeeded" else f"{st.phase} ({st.reason}): {st.message}"
            nodes = {line.split()[1] for line in log.splitlines() if line.startswith("rank=")}
            return bad or ("" if len(nodes) == 2 else f"ranks ran on {sorted(nodes) or 'no node'}, not two nodes")
        out.append(Case("mpi on two nodes", [_pod("mpi", [_c('echo "rank=$SLURM_PROCID $SLURMD_NODENAME"')],
                                                   annotations={"slurm-job.hpk.io/flags": "--nodes=2 --ntasks=2"})],
                        two_nodes))
    return out


def _run_one(slurm: Slurm, profile: SiteProfile, case: Case, rec: RunRecord, res: Result, *, timeout: float) -> None:
    """One case, through the provider as ``hpkctl run`` and ``delete`` are: its status, its log's file."""
    started = time.monotonic()
    provider = run_provider(slurm, profile, pilot=False)
    provider.know(rec)
    ref = PodRef(rec.uid, rec.namespace, rec.name)
    try:
        if case.delete:
            while not (run := provider.container_run(rec.uid, case.container)).running and run.exit_code is None:
                if time.monotonic() - started > timeout or provider.pod_statuses([ref], fresh=False)[rec.uid].finished:
                    res.result, res.detail = FAIL, "the container never ran (see the job's logs/slurm.out)"
                    return
                time.sleep(0.5)
            time.sleep(1)  # the trap is set by the container's first line
            stop_run(slurm, profile, rec, out=io.StringIO())
            st = PodStatus("Succeeded", "", "", None, None, None, None)
        else:
            st = follow_run(provider, rec, out=io.StringIO(), log_out=io.StringIO(), quiet=True)
        path = provider.log_file(rec.uid, case.container)
        res.log = str(path) if path is not None else res.log
        try:
            log = path.read_text(errors="replace") if path is not None else ""
        except OSError:
            log = ""
        problem = case.check(st, log)
        res.result, res.detail = (FAIL, problem) if problem else (PASS, "")
    except NeverStarts as e:
        res.result, res.detail = FAIL, e.message
    except (HpkError, OSError) as e:
        res.result, res.detail = FAIL, str(e)
    finally:
        res.seconds = time.monotonic() - started


def run_selftest(profile: SiteProfile, slurm: Slurm, *, work_dir: Path, timeout: float = 600.0,
                 out: TextIO, exec_and_logs: Callable[[], Result] | None = None) -> list[Result]:
    """Submit every case, follow them concurrently, return one result per case (in order); the
    ``exec_and_logs`` row (through a running cluster) runs at the same time, in a thread of its own."""
    cluster_row: list[Result] = [Result("exec and logs", SKIP, "through a kubelet: hpkctl start, then kubectl "
                                                                "exec/logs")]
    cluster_thread = None
    if exec_and_logs is not None:
        def row() -> None:
            cluster_row[0] = exec_and_logs()
        cluster_row[0] = Result("exec and logs", FAIL, f"not finished after {timeout:g} s")
        cluster_thread = threading.Thread(target=row, name="selftest-exec-and-logs", daemon=True)
        cluster_thread.start()
    try:
        multi = len([n for n in slurm.nodes(partition=profile.slurm.partition)]) >= 2
    except SlurmError:
        multi = False
    dev_message = DEFAULT_MESSAGE_PATH in device_binds(profile.apptainer.binds)
    battery = cases(multi_node=multi, dev_message=dev_message)
    results: list[Result] = []
    threads: list[tuple[threading.Thread, Result]] = []
    work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for case in battery:
        res = Result(case.name, FAIL)
        results.append(res)
        manifest = work_dir / f"{case.docs[-1]['metadata']['name']}.json"
        manifest.write_text("\n---\n".join(json.dumps(d) for d in case.docs))  # JSON documents are YAML
        try:
            rec, _ = submit_pod(profile, str(manifest), namespace=NS, replace=True, out=io.StringIO())
        except HpkError as e:
            res.detail = f"not submitted: {e.message}" + (f" (fix: {e.hint})" if e.hint else "")
            continue
        res.rec = rec
        t = threading.Thread(target=_run_one, args=(slurm, profile, case, rec, res), kwargs={"timeout": timeout},
                             name=f"selftest-{case.name}", daemon=True)
        t.start()
        threads.append((t, res))
        print(f"selftest: {case.name}: submitted as Slurm job {rec.job_id}", file=out, flush=True)
    deadline = time.monotonic() + timeout
    for t, res in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            res.result, res.detail = FAIL, f"not finished after {timeout:g} s"
    if not multi:
        results.append(Result("mpi on two nodes", SKIP, f"partition {profile.slurm.partition or '(default)'} has "
                                                        "fewer than 2 nodes"))
    if not dev_message:
        results.append(Result("termination message", SKIP, f"the profile's [apptainer] binds do not name the node's "
                                                           f"{DEFAULT_MESSAGE_PATH} (README, \"Stopping a pod\")"))
    if cluster_thread is not None:
        cluster_thread.join(max(0.0, deadline - time.monotonic()))
    results.append(cluster_row[0])
    return results


def table(results: list[Result]) -> str:
    width = max(len(r.case) for r in results)
    lines = [f"{'TEST':{width}}  RESULT  SECONDS  LOG / DETAIL"]
    for r in results:
        secs = f"{r.seconds:7.1f}" if r.seconds else f"{'-':>7}"
        lines.append(f"{r.case:{width}}  {r.result:6}  {secs}  {r.log or '-'}")
        if r.detail:
            lines.append(f"{'':{width}}  {'':6}  {'':7}  {r.detail}")
    passed = sum(r.result == PASS for r in results)
    failed = sum(r.result == FAIL for r in results)
    lines.append(f"{passed} passed, {failed} failed, {len(results) - passed - failed} skipped")
    return "\n".join(lines)


def work_dir_for(profile: SiteProfile) -> Path:
    return Path(os.path.expanduser(profile.pods.state_dir)) / "selftest"


__all__ = ["FAIL", "NS", "PASS", "SKIP", "Case", "Result", "cases", "run_selftest", "table", "work_dir_for"]

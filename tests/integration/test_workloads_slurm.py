"""Workloads as Slurm job arrays on the real local Slurm, as user hpk (issue 9): an Indexed Job of
20 completions at parallelism 4, backoffLimit, a StatefulSet's stable names and claims, CronJob.

Each pod leaves evidence in a hostPath directory the test owns (real files written from inside the
containers), so "each index ran once" is counted, not inferred from hpkctl's own status.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.ci import HPK_USER
from tests.support.hpk import Hpk, unique

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
BUSYBOX = "busybox:1.36"
FAST_SITE = "ci-fast-workloads"


@pytest.fixture
def fast(hpk: Hpk) -> Hpk:
    """The ci profile with a 1 s back-off between a failed pod and its next run (a user profile)."""
    sites = hpk.home / ".config" / "hpk" / "sites"
    path = sites / f"{FAST_SITE}.toml"
    if not path.exists():
        uid, gid = pwd.getpwnam(HPK_USER).pw_uid, pwd.getpwnam(HPK_USER).pw_gid
        for d in (hpk.home / ".config", hpk.home / ".config" / "hpk", sites):
            d.mkdir(exist_ok=True)
            os.chown(d, uid, gid)
        path.write_text('extends = "ci"\n\n[pods]\nrestart_backoff = 1\nrestart_backoff_max = 1\n')
        os.chown(path, uid, gid)
    return hpk


def _out(hpk: Hpk) -> Path:
    out = hpk.workdir / "out"
    out.mkdir()
    out.chmod(0o777)
    return out


def job(name: str, script: str, out: Path, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {**spec, "template": {"spec": {
                "restartPolicy": "Never",
                "volumes": [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}],
                "containers": [{"name": "work", "image": BUSYBOX, "command": ["sh", "-c", script],
                                "volumeMounts": [{"name": "out", "mountPath": "/out"}]}]}}}}


def _status(hpk: Hpk, name: str, site: str = FAST_SITE) -> dict[str, Any]:
    return hpk.status(name, site=site)


def test_indexed_job_of_20_at_parallelism_4_runs_each_index_once(fast: Hpk) -> None:
    out = _out(fast)
    name = unique("idx")
    script = ('mkdir "/out/$JOB_COMPLETION_INDEX" || exit 1; cut -d" " -f1 /proc/uptime >"/out/$JOB_COMPLETION_INDEX/start"; '
              'echo "$HOSTNAME" >"/out/$JOB_COMPLETION_INDEX/host"; sleep 1; '
              'cut -d" " -f1 /proc/uptime >"/out/$JOB_COMPLETION_INDEX/end"; echo "done $JOB_COMPLETION_INDEX"')
    r = fast.run(job(name, script, out, completions=20, parallelism=4, completionMode="Indexed"), site=FAST_SITE)
    assert r.rc == 0, r.output
    assert "Complete (CompletionsReached); 0 active, 20/20 succeeded, 0 failed" in r.stderr
    # issue 22.12: the pods' logs beside the progress, prefixed as kubectl logs -f --prefix does
    assert sorted(r.stdout.splitlines()) == sorted(f"[pod/{name}-{i}/work] done {i}" for i in range(20)), r.output
    assert sorted(os.listdir(out), key=int) == [str(i) for i in range(20)]  # each index, once (mkdir)
    for i in range(20):
        assert (out / str(i) / "host").read_text() == f"{name}-{i}\n"  # an Indexed Job pod's hostname
    spans = [(float((out / str(i) / "start").read_text()), float((out / str(i) / "end").read_text()))
             for i in range(20)]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert 1 <= most <= 4, spans  # never more than parallelism at once
    st = _status(fast, name)
    assert st["kind"] == "Job"
    status = st["status"]
    assert (status["succeeded"], status["failed"], status["active"], status["completedIndexes"]) == (20, 0, 0, "0-19")
    assert "failedIndexes" not in status  # only with backoffLimitPerIndex
    assert status["conditions"] == [{"type": "Complete", "status": "True", "reason": "CompletionsReached",
                                     "message": ""}]
    assert [p["name"] for p in status["pods"]] == [f"{name}-{i}" for i in range(20)]
    assert {p["jobId"].split("_")[0] for p in status["pods"]} == {st["jobId"]}  # one array
    assert all(p["attempts"] == 1 and p["status"]["phase"] == "Succeeded" for p in status["pods"])
    script_text = (Path(st["podDir"]) / "job" / "job.sh").read_text()
    assert "#SBATCH --array=0-19%4\n" in script_text
    logs = fast.hpkctl("logs", f"{name}-7", "--site", FAST_SITE)
    assert logs.rc == 0 and logs.stdout == "done 7\n", logs.output
    assert fast.hpkctl("delete", name, "--site", FAST_SITE).rc == 0
    assert not Path(st["podDir"]).exists()
    assert not any(Path(p["status"].get("podDir", st["podDir"])).exists() for p in status["pods"])


def test_backoff_limit_two_with_one_failing_index_gives_three_runs_then_failed(fast: Hpk) -> None:
    out = _out(fast)
    name = unique("bo")
    script = 'echo run >>"/out/runs-$JOB_COMPLETION_INDEX"; echo "log of $JOB_COMPLETION_INDEX"; ' \
             '[ "$JOB_COMPLETION_INDEX" != 1 ]'
    r = fast.run(job(name, script, out, completions=3, parallelism=3, completionMode="Indexed", backoffLimit=2),
                 site=FAST_SITE)
    assert r.rc == 1, r.output
    assert "Failed (BackoffLimitExceeded): Job has reached the specified backoff limit" in r.stderr
    assert (out / "runs-1").read_text() == "run\n" * 3  # exactly three runs of the failing index
    assert (out / "runs-0").read_text() == "run\n" and (out / "runs-2").read_text() == "run\n"
    lines = r.stdout.splitlines()
    assert lines.count(f"[pod/{name}-0/work] log of 0") == 1 and lines.count(f"[pod/{name}-2/work] log of 2") == 1
    assert 1 <= lines.count(f"[pod/{name}-1/work] log of 1") <= 3, r.output  # its runs, each as it was followed
    status = _status(fast, name)["status"]
    assert (status["succeeded"], status["failed"]) == (2, 3)
    assert status["conditions"][0]["type"] == "Failed" and status["conditions"][0]["reason"] == "BackoffLimitExceeded"
    pod1 = status["pods"][1]
    assert (pod1["attempts"], pod1["result"], pod1["status"]["phase"]) == (3, "Failed", "Failed")
    assert pod1["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    podroot = Path(_status(fast, name)["podDir"]).parent
    logs = fast.hpkctl("logs", f"{name}-1", "--site", FAST_SITE)
    assert logs.stdout == "log of 1\n", logs.output
    fast.hpkctl("delete", name, "--site", FAST_SITE)
    assert podroot.is_dir()


def test_failed_job_with_elements_that_never_ran_ends_with_its_result_and_status_shows_them(fast: Hpk) -> None:
    """Issue 22.1: at backoffLimit the pending elements are cancelled and never get a Slurm record
    ('Job A_3 not found'); run exits with the Job's result and status shows them as never ran."""
    out = _out(fast)
    name = unique("never")
    r = fast.run(job(name, 'echo run >>"/out/runs"; exit 42', out, completions=12, parallelism=3, backoffLimit=1),
                 site=FAST_SITE)
    assert r.rc == 1, r.output  # the Job failed: not 125 (hpkctl's own error)
    assert "Failed (BackoffLimitExceeded)" in r.stderr, r.output
    assert "NeverRan: never ran" in r.stderr, r.output
    runs = (out / "runs").read_text().count("run\n")
    assert 2 <= runs < 12, runs  # the Job stopped at its limit: most pods never ran
    st = _status(fast, name)
    pods = st["status"]["pods"]
    never = [p for p in pods if p["status"].get("reason") == "NeverRan"]
    assert never and all(p["attempts"] == 0 and p["result"] is None for p in never), pods
    assert st["status"]["conditions"][0]["reason"] == "BackoffLimitExceeded"
    for args in (("status", "-A", "--json"), ("status",)):  # every run of the user, this one among them
        listing = fast.hpkctl(*args, "--site", FAST_SITE)
        assert listing.rc == 0 and name in listing.stdout, listing.output
    assert fast.hpkctl("delete", name, "--site", FAST_SITE).rc == 0


def test_backoff_limit_per_index_reports_failed_indexes(fast: Hpk) -> None:
    """Issue 22.14: an Indexed Job with backoffLimitPerIndex 1 whose index 1 always fails: that index
    runs twice, the others once; status --json has failedIndexes "1" beside completedIndexes "0,2",
    as the Job API has them (a Job without backoffLimitPerIndex has no failedIndexes)."""
    out = _out(fast)
    name = unique("pidx")
    script = 'echo run >>"/out/runs-$JOB_COMPLETION_INDEX"; [ "$JOB_COMPLETION_INDEX" != 1 ]'
    r = fast.run(job(name, script, out, completions=3, parallelism=3, completionMode="Indexed",
                     backoffLimitPerIndex=1), site=FAST_SITE)
    assert r.rc == 1, r.output
    assert (out / "runs-1").read_text() == "run\n" * 2 and (out / "runs-0").read_text() == "run\n", r.output
    status = _status(fast, name)["status"]
    assert (status["completedIndexes"], status["failedIndexes"]) == ("0,2", "1"), status
    assert status["conditions"][0]["type"] == "Failed", status
    assert fast.hpkctl("delete", name, "--site", FAST_SITE).rc == 0


def test_statefulset_pods_have_stable_names_and_their_own_claims(fast: Hpk) -> None:
    name = unique("db")
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
           "spec": {"replicas": 2, "serviceName": "dbs", "selector": {"matchLabels": {"app": name}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                              "spec": {"accessModes": ["ReadWriteOnce"],
                                                       "resources": {"requests": {"storage": "1Gi"}}}}],
                    "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{
                        "name": "db", "image": BUSYBOX,
                        "command": ["sh", "-c", 'echo "$HOSTNAME" >/data/host; hostname -f >/data/fqdn; sleep 300'],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}}
    r = fast.run(sts, site=FAST_SITE, extra=("--detach",))
    assert r.rc == 0, r.output
    claims = fast.home / ".hpk" / "pvc" / "default"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if all((claims / f"data-{name}-{i}" / "host").is_file() for i in range(2)):
                break
            time.sleep(0.5)
        for i in range(2):
            assert (claims / f"data-{name}-{i}" / "host").read_text() == f"{name}-{i}\n"
        st = _status(fast, name)
        assert st["kind"] == "StatefulSet"
        assert [p["name"] for p in st["status"]["pods"]] == [f"{name}-0", f"{name}-1"]
        assert st["status"]["readyReplicas"] == 2, st
        text = fast.hpkctl("status", "--site", FAST_SITE).stdout
        assert f"  {name}-1 " in text and "Running" in text
    finally:
        d = fast.hpkctl("delete", name, "--site", FAST_SITE)
    assert d.rc == 0, d.output
    assert "cancelled Slurm job array" in d.stderr
    q = subprocess.run(["squeue", "--noheader", "--array", "--jobs", st["jobId"], "--format=%T"],
                       capture_output=True, text=True, check=False)
    assert all(s in ("", "CANCELLED", "COMPLETING") for s in q.stdout.split()), q.stdout


def test_deleting_a_workload_runs_its_pods_stop_sequence(fast: Hpk) -> None:
    """``hpkctl delete`` of a workload goes through the provider as a pod's does (issue 21.1): its running
    pods are marked deleted and their containers get SIGTERM from the job (their trap runs, their
    grace period is kept), then the whole array is cancelled, the pending element with it."""
    out = _out(fast)
    name = unique("wdel")
    script = ("trap 'echo got TERM >\"/out/term-$JOB_COMPLETION_INDEX\"; exit 0' TERM; "
              "echo up >\"/out/up-$JOB_COMPLETION_INDEX\"; while :; do sleep 0.2; done")
    r = fast.run(job(name, script, out, completions=2, parallelism=1, completionMode="Indexed"), site=FAST_SITE,
                 extra=("--detach",))
    assert r.rc == 0, r.output
    array = r.stdout.strip()
    deadline = time.monotonic() + 120
    while not (out / "up-0").exists():  # the trap is set before "up" is written
        assert time.monotonic() < deadline, fast.hpkctl("status", name, "--site", FAST_SITE).output
        time.sleep(0.5)
    d = fast.hpkctl("delete", name, "--site", FAST_SITE)
    assert d.rc == 0, d.output
    assert f"job default/{name}: stopping its running pods" in d.stderr, d.output
    assert f"cancelled Slurm job array {array}" in d.stderr, d.output
    assert (out / "term-0").read_text() == "got TERM\n"  # the stop sequence reached the container
    assert not (out / "up-1").exists()  # index 1 (parallelism 1) never started: cancelled with the array
    q = subprocess.run(["squeue", "--noheader", "--array", "--jobs", array, "--format=%T"],
                       capture_output=True, text=True, check=False)
    assert all(x in ("", "CANCELLED", "COMPLETING") for x in q.stdout.split()), q.stdout


def test_a_workload_deleted_as_its_element_starts_ends_cancelled_not_failed(fast: Hpk) -> None:
    """A delete at once after the submit: Slurm may call the element RUNNING before its script set its
    TERM trap, so its TERM waits for index.0.attempts (a TERM before killed bash: FAILED, ExitCode
    0:15); the element ends CANCELLED, as any deleted one."""
    out = _out(fast)
    name = unique("wnow")
    r = fast.run(job(name, "while :; do sleep 0.2; done", out, completions=1, parallelism=1), site=FAST_SITE,
                 extra=("--detach",))
    assert r.rc == 0, r.output
    array = r.stdout.strip()
    d = fast.hpkctl("delete", name, "--site", FAST_SITE)
    assert d.rc == 0, d.output
    q = subprocess.run(["squeue", "--noheader", "--array", "--states=all", "--jobs", array, "--format=%T"],
                       capture_output=True, text=True, check=False)
    assert q.stdout.split() and all(x in ("CANCELLED", "COMPLETING") for x in q.stdout.split()), q.stdout


def test_cronjob_is_refused_with_scrontab_and_runs_once_with_now(fast: Hpk) -> None:
    out = _out(fast)
    name = unique("cj")
    inner = job(name, 'echo ran >>/out/cron', out)
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": inner["spec"]}}}
    path = fast.manifest(cron)
    refused = fast.hpkctl("run", "-f", str(path), "--site", FAST_SITE)
    assert refused.rc == 125, refused.output
    assert "a CronJob runs on a schedule ('*/5 * * * *'); hpkctl runs no schedules" in refused.stderr
    assert f"'*/5 * * * * hpkctl run --now -f {path}'" in refused.stderr and "scrontab -e" in refused.stderr
    assert not (out / "cron").exists()
    ran = fast.hpkctl("run", "--now", "-f", str(path), "--site", FAST_SITE)
    assert ran.rc == 0, ran.output
    assert (out / "cron").read_text() == "ran\n"
    assert json.loads(fast.hpkctl("status", name, "--site", FAST_SITE, "--json").stdout)[0]["status"]["succeeded"] == 1
    fast.hpkctl("delete", name, "--site", FAST_SITE)

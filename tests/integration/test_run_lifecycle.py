"""A run's life on the real local Slurm, as user hpk: one name, one job; signals cancel exactly once;
``--replace``; namespaces; a vanished pod directory; a request Slurm can never start; exit statuses.

Real processes throughout (``hpkctl`` as hpk via ``runuser``, ``timeout``, kill), real ``sbatch``.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.ci import HPK_USER
from tests.support.hpk import STANDIN, VENV_BIN, Hpk, hpkctl_pid, pod, unique
from tests.support.launch import jobcomp_states

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
BUSYBOX = "busybox:1.36"


def c(name: str, script: str, **kw) -> dict:  # type: ignore[no-untyped-def]
    return {"name": name, "image": BUSYBOX, "command": ["sh", "-c", script], **kw}


def argv_as_hpk(hpk: Hpk, *args: str, wrapper: tuple[str, ...] = ()) -> list[str]:
    """``[runuser -u hpk --] [wrapper...] env -i ... hpkctl args`` (env execs: the last process is hpkctl)."""
    env = {"PATH": f"{STANDIN}:{VENV_BIN}:/usr/bin:/bin", "HOME": str(hpk.home), "LANG": "C.UTF-8",
           "https_proxy": "http://127.0.0.1:9"}
    argv = [*wrapper, "env", "-i", *(f"{k}={v}" for k, v in env.items()), str(VENV_BIN / "hpkctl"), *args]
    return ["runuser", "-u", HPK_USER, "--", *argv] if os.geteuid() == 0 else argv


def start(hpk: Hpk, *args: str, wrapper: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen(argv_as_hpk(hpk, *args, wrapper=wrapper), cwd=hpk.workdir, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def jobs_of(name: str) -> list[str]:
    """Ids of the jobs (any state squeue still knows) whose name or comment names pod ``name``."""
    q = subprocess.run(["squeue", "--noheader", "--all", "--states=all", "--format=%i|%j|%k"],
                       capture_output=True, text=True, check=True)
    return [ln.split("|")[0] for ln in q.stdout.splitlines()
            if any(part == name or part.endswith(f"_{name}") or f"/{name} " in part
                   for part in ln.split("|")[1:])]


def wait_running(hpk: Hpk, name: str, *extra: str) -> dict:  # type: ignore[type-arg]
    for _ in range(150):
        r = hpk.hpkctl("status", name, "--site", "ci", "--json", *extra)
        assert r.rc == 0, r.output
        st = json.loads(r.stdout)[0]
        cs = st["status"].get("containerStatuses") or [{}]
        if st["status"]["phase"] == "Running" and cs[0].get("state", {}).get("running"):
            return st  # type: ignore[no-any-return]
        time.sleep(0.2)
    pytest.fail(f"pod {name} never ran")


# ---------------------------------------------------------------------------- one name, one job


def test_two_concurrent_runs_of_one_name_give_one_job_and_one_already_exists(hpk: Hpk) -> None:
    name = unique("twice")
    manifest = str(hpk.manifest(pod(name, [c("main", "echo ran; sleep 1")])))
    procs = [start(hpk, "run", "-f", manifest, "--site", "ci") for _ in range(2)]
    results = [(p.wait(timeout=180), *p.communicate()) for p in procs]
    rcs = sorted(rc for rc, _, _ in results)
    assert rcs == [0, 125], results
    loser = next(err for rc, _, err in results if rc == 125)
    assert f"pod '{name}' already exists in namespace default; delete it first" in loser, loser
    assert "Traceback" not in loser
    assert len(jobs_of(name)) == 1, jobs_of(name)


def test_rerun_is_refused_until_deleted_or_replaced(hpk: Hpk) -> None:
    name = unique("rerun")
    first = hpk.run(pod(name, [c("main", "echo first")]))
    assert first.rc == 0 and first.stdout == "first\n", first.output
    again = hpk.run(pod(name, [c("main", "echo second")]))
    assert again.rc == 125 and "already exists in namespace default; delete it first" in again.stderr, again.output
    assert hpk.hpkctl("logs", name, "--site", "ci").stdout == "first\n"  # the first run's logs are kept
    # --replace on a running pod: its job is cancelled, then the new one runs
    slow = hpk.run(pod(name, [c("main", "echo slow; sleep 300")]), extra=("--replace", "--detach"))
    assert slow.rc == 0, slow.output
    old_job = slow.stdout.strip()
    wait_running(hpk, name)
    new = hpk.run(pod(name, [c("main", "echo third")]), extra=("--replace",))
    assert new.rc == 0 and new.stdout == "third\n", new.output
    assert f"cancelled Slurm job {old_job}" in new.stderr and "deleted the previous run (--replace)" in new.stderr
    assert jobcomp_states(old_job) == ["CANCELLED"]


# ---------------------------------------------------------------------------- signals


def _sleeper(hpk: Hpk) -> tuple[str, str]:
    name = unique("sig")
    return name, str(hpk.manifest(pod(name, [c("sleeper", "echo up; sleep 300")])))


def _assert_cancelled_once(err: str) -> str:
    assert err.count("cancelling Slurm job") == 1, err
    assert "Traceback" not in err, err
    job_id = err.split("cancelling Slurm job ")[1].split()[0]
    assert jobcomp_states(job_id) == ["CANCELLED"], err
    return job_id


def test_timeout_sigterm_cancels_the_job_exactly_once(hpk: Hpk) -> None:
    """``timeout -s TERM`` signals hpkctl, then its whole process group: hpkctl gets SIGTERM twice."""
    name, manifest = _sleeper(hpk)
    proc = start(hpk, "run", "-f", manifest, "--site", "ci", wrapper=("timeout", "--preserve-status", "-s", "TERM",
                                                                      "12"))
    assert proc.stdout is not None
    assert proc.stdout.readline() == "up\n"  # the container runs before the time is up
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    _assert_cancelled_once(err)
    assert hpk.status(name)["status"]["phase"] == "Failed"


def test_sigterm_to_runuser_cancels_the_job(hpk: Hpk) -> None:
    """``runuser`` passes SIGTERM on, and SIGKILLs its child two seconds later: the cancel comes first."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run runuser")
    name, manifest = _sleeper(hpk)
    proc = start(hpk, "run", "-f", manifest, "--site", "ci")
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    proc.send_signal(signal.SIGTERM)  # to runuser itself
    _, err = proc.communicate(timeout=120)
    _assert_cancelled_once(err)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_sighup_and_sigint_cancel_the_job_and_a_second_signal_does_not_stop_the_cancel(hpk: Hpk,
                                                                                      sig: signal.Signals) -> None:
    name, manifest = _sleeper(hpk)
    proc = start(hpk, "run", "-f", manifest, "--site", "ci")
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    pid = hpkctl_pid(proc)
    os.kill(pid, sig)
    os.kill(pid, signal.SIGTERM)  # while it cancels
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    _assert_cancelled_once(err)


def test_signal_during_submission_still_cancels_the_job(hpk: Hpk) -> None:
    """SIGTERM right after start: wherever it lands, no job is left running and none is invisible."""
    name, manifest = _sleeper(hpk)
    for delay in (0.4, 0.8, 1.2):
        n = f"{name}-{int(delay * 10)}"
        m = hpk.manifest(pod(n, [c("sleeper", "sleep 300")]))
        proc = start(hpk, "run", "-f", str(m), "--site", "ci")
        time.sleep(delay)
        os.kill(hpkctl_pid(proc), signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
        for job_id in jobs_of(n):
            assert jobcomp_states(job_id) == ["CANCELLED"], (delay, err)
        st = hpk.hpkctl("status", n, "--site", "ci")
        assert ("not found" in st.stderr) == (not jobs_of(n)), (delay, err, st.output)


# ---------------------------------------------------------------------------- namespaces


def test_namespaces_as_kubectl_has_them(hpk: Hpk) -> None:
    name = unique("ns")
    r = hpk.run(pod(name, [c("main", "echo in team")]), extra=("-n", "team"))
    assert r.rc == 0 and f"pod team/{name}" in r.stderr, r.output
    assert hpk.hpkctl("status", name, "--site", "ci").rc == 125  # not in default
    st = hpk.hpkctl("status", name, "-n", "team", "--site", "ci")
    assert st.rc == 0 and name in st.stdout, st.output
    # the runs table; a CLUSTER table comes first where the profile's control plane has a state directory
    everything = hpk.hpkctl("status", "-A", "--site", "ci")
    lines = everything.stdout.splitlines()
    assert any(ln.startswith("NAMESPACE") for ln in lines) and any(
        ln.split()[:2] == ["team", name] for ln in lines), everything.output
    assert hpk.hpkctl("logs", name, "-n", "team", "--site", "ci").stdout == "in team\n"
    # the manifest's own namespace is used; a different -n is an error, as with kubectl
    doc = pod(unique("ownns"), [c("main", "echo own")])
    doc["metadata"]["namespace"] = "team"
    clash = hpk.run(doc, extra=("-n", "other"))
    assert clash.rc == 125 and "does not match the namespace 'other'" in clash.stderr, clash.output
    own = hpk.run(doc)
    assert own.rc == 0 and f"pod team/{doc['metadata']['name']}" in own.stderr, own.output
    d = hpk.hpkctl("delete", name, "-n", "team", "--site", "ci")
    assert d.rc == 0 and f"pod team/{name} deleted" in d.stdout, d.output


# ---------------------------------------------------------------------------- odd states


def test_vanished_pod_directory_is_a_status_not_a_traceback(hpk: Hpk) -> None:
    name = unique("vanish")
    r = hpk.run(pod(name, [c("main", "echo hi; sleep 300")]), extra=("--detach",))
    assert r.rc == 0, r.output
    job_id = r.stdout.strip()
    st = wait_running(hpk, name)
    shutil.rmtree(st["podDir"])
    status = hpk.hpkctl("status", name, "--site", "ci")
    assert status.rc == 0 and "PodDirectoryMissing" in status.stdout, status.output
    logs = hpk.hpkctl("logs", name, "--site", "ci")
    assert logs.rc == 125 and "PodDirectoryMissing" in logs.stderr and "Traceback" not in logs.stderr, logs.output
    d = hpk.hpkctl("delete", name, "--site", "ci")
    assert d.rc == 0 and f"cancelled Slurm job {job_id}" in d.stderr, d.output
    assert jobcomp_states(job_id) == ["CANCELLED"]


def test_request_no_node_can_hold_fails_at_once(hpk: Hpk) -> None:
    """16 CPUs per node here: 64 CPUs stay PENDING (PartitionConfig) for ever under EnforcePartLimits=NO."""
    name = unique("huge")
    t0 = time.monotonic()
    r = hpk.run(pod(name, [c("main", "echo never", resources={"requests": {"cpu": "64"}})]), timeout=120)
    assert r.rc == 125, r.output
    assert "Slurm will never start job" in r.stderr and "PartitionConfig" in r.stderr, r.output
    assert time.monotonic() - t0 < 60
    job_id = r.stderr.split("Slurm will never start job ")[1].split()[0]
    assert jobcomp_states(job_id) == ["CANCELLED"]
    assert hpk.hpkctl("status", name, "--site", "ci").rc == 125  # forgotten: nothing ran, nothing to keep
    # more memory than any node has: sbatch itself refuses
    mem = hpk.run(pod(unique("hugemem"), [c("main", "echo never", resources={"limits": {"memory": "900Gi"}})]))
    assert mem.rc == 125 and "sbatch refused the job" in mem.stderr, mem.output


# ---------------------------------------------------------------------------- exit statuses, privacy


def test_exit_statuses_cannot_be_confused(hpk: Hpk) -> None:
    r = hpk.run(pod(unique("code"), [c("main", "exit 7")]))
    assert r.rc == 7, r.output
    r = hpk.run(pod(unique("notfound"), [{"name": "main", "image": BUSYBOX, "command": ["/no/such/program"]}]))
    assert r.rc == 127, r.output
    bad = hpk.manifest({"kind": "Pod", "metadata": {"name": "x"}, "spec": {}})
    r = hpk.hpkctl("run", "-f", str(bad), "--site", "ci")
    assert r.rc == 125 and "spec" in r.stderr, r.output
    r = hpk.hpkctl("run", "--site", "ci")
    assert r.rc == 125 and "usage:" in r.stderr, r.output
    gone = [{"name": "d", "hostPath": {"path": str(hpk.workdir / "nope"), "type": "Directory"}}]
    r = hpk.run(pod(unique("nohost"), [c("main", "true", volumeMounts=[{"name": "d", "mountPath": "/d"}])],
                    volumes=gone))
    assert r.rc == 125 and "HostPathCheckFailed" in r.stderr, r.output


def test_state_directories_and_records_are_private(hpk: Hpk) -> None:
    name = unique("private")
    assert hpk.run(pod(name, [c("main", "true")])).rc == 0
    state = Path(pwd.getpwnam(HPK_USER).pw_dir) / ".hpk"
    for d in (state, state / "runs", state / "runs" / "default", state / "pods"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    record = state / "runs" / "default" / f"{name}.json"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600


def test_a_job_whose_record_is_gone_is_shown_and_can_be_deleted(hpk: Hpk) -> None:
    name = unique("orphan")
    r = hpk.run(pod(name, [c("main", "sleep 300")]), extra=("--detach",))
    assert r.rc == 0, r.output
    job_id = r.stdout.strip()
    wait_running(hpk, name)  # a running job's delete (its stop sequence); one still pending is only cancelled
    (hpk.home / ".hpk" / "runs" / "default" / f"{name}.json").unlink()  # lost, however that happened
    table = hpk.hpkctl("status", "--site", "ci")
    row = next((ln for ln in table.stdout.splitlines() if ln.split()[:1] == [name]), "")
    assert job_id in row and "RecordMissing" in row, table.output
    one = hpk.hpkctl("status", name, "--site", "ci", "--json")
    assert one.rc == 0 and json.loads(one.stdout)[0]["jobId"] == job_id, one.output
    d = hpk.hpkctl("delete", name, "--site", "ci")
    # deleted through the provider as a recorded run is (issue 21.1): marker, TERM, grace, scancel
    assert d.rc == 0 and f"Slurm job {job_id} carries its uid" in d.stderr and "had no run record" in d.stderr, d.output
    assert "stopping its containers (grace period" in d.stderr and f"cancelled Slurm job {job_id}" in d.stderr, d.output
    assert jobcomp_states(job_id) == ["CANCELLED"]
    assert not (hpk.home / ".hpk" / "runs" / "default" / f"{name}.json").exists()  # nothing left behind
    assert hpk.hpkctl("status", name, "--site", "ci").rc == 125


def test_closed_output_cancels_the_job(hpk: Hpk) -> None:
    """``hpkctl run ... | head -1``: once nobody reads the logs, the job is cancelled, not left running."""
    name = unique("pipe")
    manifest = str(hpk.manifest(pod(name, [c("main", "while true; do echo line; sleep 0.2; done")])))
    proc = start(hpk, "run", "-f", manifest, "--site", "ci")
    assert proc.stdout is not None and proc.stdout.readline() == "line\n"
    proc.stdout.close()
    proc.wait(timeout=120)
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.returncode == 128 + signal.SIGPIPE and "Traceback" not in err, err
    _assert_cancelled_once(err)

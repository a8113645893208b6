"""``hpkctl run`` end to end on the real local Slurm, as user hpk, with the Apptainer stand-in.

Each test is one pod manifest; the assertions are on what a user sees: exit code, logs, reasons.
"""

from __future__ import annotations

import base64
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.ci import missing
from tests.support.hpk import STANDIN, VENV_BIN, Hpk, pod, unique
from tests.support.pods import PODS
from tests.support.slurm import MULTI_CONF, as_hpk, require_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.standin]
BUSYBOX = "busybox:1.36"


def c(name: str, script: str, image: str = BUSYBOX, **kw) -> dict:  # type: ignore[no-untyped-def]
    return {"name": name, "image": image, "command": ["sh", "-c", script], **kw}


def test_hello_world(hpk: Hpk) -> None:
    r = hpk.run(pod(unique("hello"), [c("hello", "echo hello world")]))
    assert r.rc == 0, r.output
    assert r.stdout == "hello world\n"
    assert "Succeeded" in r.stderr


def test_scripting_quotes_and_heredocs(hpk: Hpk) -> None:
    script = (
        "cat <<'EOF' > /tmp/script.sh\n"
        "echo \"single 'quotes', \\\"double\\\", `backticks`, $(dollar) and \\\\backslash\"\n"
        "EOF\n"
        "cat /tmp/script.sh\n"
        "echo 'it'\"'\"'s done' \"$0\" \"$1\"\n"
    )
    spec = {"name": "quotes", "image": BUSYBOX, "command": ["/bin/sh", "-c"],
            "args": [script, "arg0 with spaces", "$(not expanded) `nor this` ${HOME}"]}
    r = hpk.run(pod(unique("quotes"), [spec]))
    assert r.rc == 0, r.output
    assert r.stdout.splitlines() == [
        "echo \"single 'quotes', \\\"double\\\", `backticks`, $(dollar) and \\\\backslash\"",
        "it's done arg0 with spaces $(not expanded) `nor this` ${HOME}",
    ]


def test_env_from_values_configmaps_and_secrets(hpk: Hpk) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
          "data": {"LEVEL": "debug", "MULTI": "line one\nline 'two'"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
              "data": {"TOKEN": base64.b64encode(b"s3cr$t `x`").decode()}}
    env = [{"name": "PLAIN", "value": "a \"b\" 'c'"},
           {"name": "LVL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LEVEL"}}},
           {"name": "TOK", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}},
           {"name": "COMBINED", "value": "$(LVL)-$(PLAIN)"}]
    main = c("env", 'printf "%s|" "$PLAIN" "$LVL" "$TOK" "$COMBINED" "$CFG_MULTI"; echo; '
                    'env | grep -c -e SLURM_ -e HPK_ || true', env=env,
             envFrom=[{"prefix": "CFG_", "configMapRef": {"name": "settings"}}])
    r = hpk.run(cm, secret, pod(unique("env"), [main]))
    assert r.rc == 0, r.output
    first, second = r.stdout.splitlines()[0], r.stdout.splitlines()[-1]
    assert r.stdout.startswith("a \"b\" 'c'|debug|s3cr$t `x`|debug-a \"b\" 'c'|line one\nline 'two'|")
    assert second == "0", "host or Slurm variables leaked into the container"
    assert first


def test_init_containers_pass_data_through_an_empty_dir(hpk: Hpk) -> None:
    mounts = [{"name": "work", "mountPath": "/work"}]
    p = pod(unique("init"), [c("main", "cat /work/a /work/b", volumeMounts=mounts)],
            initContainers=[c("first", "echo one > /work/a", volumeMounts=mounts),
                            c("second", "test -s /work/a && echo two > /work/b", volumeMounts=mounts)],
            volumes=[{"name": "work", "emptyDir": {}}])
    r = hpk.run(p)
    assert r.rc == 0, r.output
    assert r.stdout == "one\ntwo\n"


def test_failed_init_container_fails_the_pod(hpk: Hpk) -> None:
    name = unique("initfail")
    r = hpk.run(pod(name, [c("main", "echo must not run")], initContainers=[c("broken", "exit 4")]))
    assert r.rc != 0
    assert "must not run" not in r.stdout
    assert "InitContainerFailed" in r.stderr and "code 4" in r.stderr


def test_two_containers_talk_over_localhost_and_share_dev_shm(hpk: Hpk) -> None:
    port = random.randint(20000, 40000)
    tag = unique("shm")
    server = c("server", f"echo shared-{tag} > /dev/shm/{tag}; echo pong | nc -l -p {port} 127.0.0.1")
    client = c("client", f"for i in $(seq 100); do out=$(echo ping | nc 127.0.0.1 {port} 2>/dev/null) "
                         f"&& [ -n \"$out\" ] && break; sleep 0.1; done; echo \"got $out\"; cat /dev/shm/{tag}; "
                         f"rm -f /dev/shm/{tag}")
    r = hpk.run(pod(unique("pair"), [server, client]))
    assert r.rc == 0, r.output
    assert "[client] got pong" in r.stdout
    assert f"[client] shared-{tag}" in r.stdout


def test_host_path_and_missing_host_path(hpk: Hpk) -> None:
    data = hpk.workdir / "data"
    data.mkdir()
    (data / "input.txt").write_text("from the host\n")
    data.chmod(0o755)
    (data / "input.txt").chmod(0o644)
    vol = [{"name": "d", "hostPath": {"path": str(data), "type": "Directory"}}]
    r = hpk.run(pod(unique("hostpath"), [c("main", "cat /data/input.txt",
                                           volumeMounts=[{"name": "d", "mountPath": "/data"}])], volumes=vol))
    assert r.rc == 0, r.output
    assert r.stdout == "from the host\n"

    gone = [{"name": "d", "hostPath": {"path": str(hpk.workdir / "nope"), "type": "Directory"}}]
    r = hpk.run(pod(unique("nohost"), [c("main", "echo must not run",
                                         volumeMounts=[{"name": "d", "mountPath": "/data"}])], volumes=gone))
    assert r.rc != 0
    assert "HostPathCheckFailed" in r.stderr and "nope" in r.stderr
    assert "must not run" not in r.stdout


def test_failing_container_gives_its_exit_code_and_reason(hpk: Hpk) -> None:
    name = unique("fail")
    r = hpk.run(pod(name, [c("main", "echo about to fail; exit 3")]))
    assert r.rc == 3, r.output
    assert "about to fail" in r.stdout
    assert "Failed (Error)" in r.stderr and "exited with code 3" in r.stderr
    st = hpk.status(name)
    [cs] = st["status"]["containerStatuses"]
    assert cs["state"]["terminated"]["exitCode"] == 3


def test_restart_policy_on_failure_restarts_until_success(hpk: Hpk) -> None:
    name = unique("onfailure")
    script = "if [ -e /state/once ]; then echo second run; else touch /state/once; echo first run; exit 1; fi"
    p = pod(name, [c("main", script, volumeMounts=[{"name": "s", "mountPath": "/state"}])],
            restartPolicy="OnFailure", volumes=[{"name": "s", "emptyDir": {}}])
    r = hpk.run(p)
    assert r.rc == 0, r.output
    assert "second run" in r.stdout
    st = hpk.status(name)
    [cs] = st["status"]["containerStatuses"]
    assert cs["restartCount"] == 1
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    prev = hpk.hpkctl("logs", name, "--site", "ci", "--previous")
    assert prev.stdout == "first run\n"


def test_memory_over_the_limit_is_oom_killed(hpk: Hpk) -> None:
    main = c("hog", "exec dd if=/dev/zero of=/dev/null bs=300M count=1",
             resources={"limits": {"memory": "64Mi"}})
    r = hpk.run(pod(unique("oom"), [main]))
    assert r.rc != 0, r.output
    assert "OOMKilled" in r.stderr


def test_time_limit_is_deadline_exceeded(hpk: Hpk) -> None:
    r = hpk.run(pod(unique("deadline"), [c("sleeper", "echo started; sleep 600")], activeDeadlineSeconds=5),
                timeout=300)
    assert r.rc != 0, r.output
    assert "DeadlineExceeded" in r.stderr and "longer than the specified deadline" in r.stderr
    assert "started" in r.stdout


def test_a_deadline_at_the_partition_limit_still_runs(hpk: Hpk) -> None:
    """activeDeadlineSeconds near the partition's MaxTime: the job's limit (the deadline plus the
    backstop for the stop sequence) is above it and Slurm keeps the job pending (PartitionTimeLimit);
    hpkctl lowers the limit to the partition's MaxTime (scontrol update) and the pod runs. A partition
    of its own (MaxTime=3 minutes: the stop sequence's TERM cannot come before 80 s), made and removed
    here."""
    if os.geteuid() != 0:
        missing("making a Slurm partition needs root", fix="run the tests as root, as .ci/run does")
    part = unique("short").replace("-", "")
    subprocess.run(["scontrol", "create", f"PartitionName={part}", "Nodes=ALL", "MaxTime=3", "State=UP"],
                   check=True, capture_output=True, timeout=30)
    try:
        profile = hpk.workdir / f"{part}.toml"
        profile.write_text(f'extends = "ci"\n[slurm]\npartition = "{part}"\n')
        profile.chmod(0o644)
        r = hpk.run(pod(unique("atlimit"), [c("c", "echo ran within the limit")], activeDeadlineSeconds=100),
                    site=str(profile), timeout=400)
        assert r.rc == 0, r.output
        assert "is above the partition's MaxTime: lowered to 180 s" in r.stderr
        assert "ran within the limit" in r.stdout
    finally:
        subprocess.run(["scontrol", "delete", f"PartitionName={part}"], capture_output=True, timeout=30, check=False)


def test_delete_while_running_cancels_the_job(hpk: Hpk) -> None:
    name = unique("delete")
    r = hpk.run(pod(name, [c("sleeper", "echo up; sleep 300")]), extra=("--detach",))
    assert r.rc == 0, r.output
    job_id = r.stdout.strip()
    for _ in range(100):
        st = hpk.status(name)["status"]
        if st["phase"] == "Running" and st["containerStatuses"][0]["state"].get("running"):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"pod never ran: {st}")
    d = hpk.hpkctl("delete", name, "--site", "ci")
    assert d.rc == 0, d.output
    q = subprocess.run(["squeue", "--noheader", "--jobs", job_id, "--states=all", "--format=%T"],
                       capture_output=True, text=True, check=False)
    assert q.stdout.strip() in ("", "CANCELLED"), q.stdout
    with open("/var/log/slurm/jobcomp.log") as fh:
        lines = [ln for ln in fh if f"JobId={job_id} " in ln]
    assert lines and "JobState=CANCELLED" in lines[-1]
    assert hpk.hpkctl("status", name, "--site", "ci").rc != 0  # forgotten


def test_mpi_style_pod_runs_ranks_on_two_nodes(hpk_multi: Hpk) -> None:
    """The ranks run in Apptainer's minimal /dev (--contain, issue 20.2) with the pod's own /dev/shm,
    which the ranks of a node share: not the node's, where the pods' memory directories (hpk-<uid>) lie."""
    shm = '$( [ -e /dev/shm/hpk-$(id -u) ] && echo node || echo pod )'
    devs = '$(ls /dev | grep -c -v -x -E "shm|pts|ptmx|tty|null|zero|random|urandom|fd|stdin|stdout|stderr|console|full|core")'
    p = pod(unique("mpi"), [c("ranks", f'echo "rank=$SLURM_PROCID node=$SLURMD_NODENAME shm={shm} other-devices={devs}"')],
            annotations={"slurm-job.hpk.io/flags": "--nodes=2 --ntasks=4"})
    r = hpk_multi.run(p, site="ci-multi")
    assert r.rc == 0, r.output
    lines = sorted(ln for ln in r.stdout.splitlines() if ln.startswith("rank="))
    assert [ln.split()[0] for ln in lines] == ["rank=0", "rank=1", "rank=2", "rank=3"]
    assert {ln.split(" ", 2)[2] for ln in lines} == {"shm=pod other-devices=0"}, lines
    nodes = {ln.split()[1].removeprefix("node=") for ln in lines}
    assert len(nodes) == 2, lines
    multi = as_hpk(["sinfo", "--noheader", "--Node", "--format=%N"], slurm_conf=MULTI_CONF, timeout=30)
    assert nodes <= set(multi.stdout.split()), (lines, multi.stdout)  # the ci-multi profile's cluster


def test_own_network_namespace_mode(hpk: Hpk) -> None:
    port = random.randint(20000, 40000)
    server = c("server", f"echo pong | nc -l -p {port} 127.0.0.1")
    client = c("client", f"for i in $(seq 100); do out=$(nc 127.0.0.1 {port} </dev/null 2>/dev/null) "
                         f"&& [ -n \"$out\" ] && break; sleep 0.1; done; echo \"got $out\"; "
                         "echo links=$(ip -o link | wc -l)")
    r = hpk.run(pod(unique("netns"), [server, client]), site="ci-cni")
    assert r.rc == 0, r.output
    assert "[client] got pong" in r.stdout
    assert "[client] links=1" in r.stdout  # only loopback: the pod has its own network namespace


def test_interrupting_hpkctl_run_cancels_the_job(hpk: Hpk) -> None:
    name = unique("interrupt")
    manifest = hpk.manifest(pod(name, [c("sleeper", "echo up; sleep 300")]))
    env = {"PATH": f"{STANDIN}:{VENV_BIN}:/usr/bin:/bin", "HOME": str(hpk.home)}
    proc = subprocess.Popen(["runuser", "-u", "hpk", "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                             str(VENV_BIN / "python"), "-m", "hpkctl", "run", "-f", str(manifest), "--site", "ci"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "up\n"  # the container is running
    os.kill(_hpkctl_process(proc.pid), signal.SIGINT)  # as Ctrl-C would: hpkctl itself, not a Slurm command it runs
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "cancelling Slurm job" in err and "Cancelled" in err
    # deleted through the provider (marker, TERM, grace, scancel): hpkctl's own doing, not "from outside"
    assert "stopping its containers (grace period" in err and "the pod was deleted through hpkctl" in err, err
    assert "from outside hpkctl" not in err, err
    job_id = err.split("cancelling Slurm job ")[1].split()[0]
    q = subprocess.run(["squeue", "--noheader", "--jobs", job_id, "--format=%T"], capture_output=True, text=True)
    assert q.stdout.strip() in ("", "CANCELLED", "COMPLETING")
    assert _jobcomp_state(job_id) == "CANCELLED"  # cancelled, not left to finish or time out


def _hpkctl_process(root: int) -> int:
    """The python process running hpkctl under ``root`` (runuser), never one of its children
    (a squeue it is running at that moment)."""
    todo = [root]
    while todo:
        pid = todo.pop(0)
        if Path(f"/proc/{pid}/comm").read_text().strip().startswith("python"):
            return pid
        todo += [int(c) for c in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                                text=True).stdout.split()]
    raise AssertionError(f"no hpkctl process under {root}")


def _jobcomp_state(job_id: str, timeout: float = 30) -> str | None:
    """The job's final state in the jobcomp log, once Slurm has written it (None at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        with open("/var/log/slurm/jobcomp.log") as fh:
            lines = [ln for ln in fh if f"JobId={job_id} " in ln]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return lines[-1].split("JobState=")[1].split()[0] if lines else None


def test_detached_run_status_and_logs_follow(hpk: Hpk) -> None:
    name = unique("follow")
    r = hpk.run(pod(name, [c("counter", "for i in 1 2 3; do echo line $i; sleep 0.3; done")]), extra=("--detach",))
    assert r.rc == 0, r.output
    logs = hpk.hpkctl("logs", name, "--site", "ci", "-f")
    assert logs.rc == 0 and logs.stdout == "line 1\nline 2\nline 3\n", logs.output
    table = hpk.hpkctl("status", "--site", "ci")
    assert table.rc == 0 and name in table.stdout
    st = hpk.status(name)
    assert st["status"]["phase"] == "Succeeded" and st["jobId"] == r.stdout.strip()


def test_pull_before_submit_with_a_user_profile(hpk: Hpk) -> None:
    """A user profile (key-by-key over the built-in) for offline compute nodes: hpkctl pulls first."""
    import pwd

    cfg = hpk.home / ".config" / "hpk" / "sites"
    cache = hpk.workdir / "cache"
    script = (f"mkdir -p {cfg} && printf '%s\\n' 'extends = \"ci\"' '[apptainer]' 'pull = \"submit\"' "
              f"'image_cache = \"{cache}\"' > {cfg}/ci-offline.toml")
    subprocess.run(["runuser", "-u", "hpk", "--", "sh", "-c", script], check=True)
    try:
        r = hpk.run(pod(unique("offline"), [c("main", "echo pulled at submit")]), site="ci-offline")
        assert r.rc == 0, r.output
        assert "pulling docker://docker.io/library/busybox:1.36" in r.stderr
        assert r.stdout == "pulled at submit\n"
        assert list(cache.glob("*.sif")) and cache.stat().st_uid == pwd.getpwnam("hpk").pw_uid
    finally:
        (cfg / "ci-offline.toml").unlink(missing_ok=True)


@pytest.mark.parametrize("site", ["ci", "ci-multi"])
def test_pod_from_kubectl_get_yaml_runs_on_one_and_several_nodes(hpk: Hpk, site: str) -> None:
    """A pod as the API server returns it (uid, defaults, kube-api-access volume, status) runs as is."""
    import yaml as _yaml

    doc = _yaml.safe_load((PODS / "api-server-shape.yaml").read_text())
    doc["metadata"]["name"] = unique("apishape")
    doc["spec"]["restartPolicy"] = "Never"
    doc["spec"]["containers"][0].update(image=BUSYBOX, command=["sh", "-c", "cat $SA/namespace; echo; ls $SA"],
                                        env=[{"name": "SA", "value": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    if site == "ci-multi":
        require_cluster(MULTI_CONF, 2)
    r = hpk.run(doc, site=site)
    assert r.rc == 0, r.output
    assert r.stdout.split() == ["default", "ca.crt", "namespace", "token"]
    assert "no control plane" in r.stderr


def test_generate_name_as_the_api_server_and_a_suspended_job_is_refused(hpk: Hpk) -> None:
    """Issue 22.7: metadata.generateName gets the prefix plus 5 characters of the API server's
    alphabet (a Pod, and a Job whose pods are then named after it); a Job with spec.suspend: true is
    refused before anything is submitted, saying how to run it; a pod without any name says so."""
    import re

    prefix = unique("gen") + "-"
    p = pod("", [c("c", "echo generated")])
    p["metadata"] = {"generateName": prefix}
    r = hpk.run(p)
    assert r.rc == 0 and r.stdout == "generated\n", r.output
    (name,) = set(re.findall(rf"pod default/({re.escape(prefix)}[a-z0-9]+)", r.stderr))
    assert re.fullmatch(rf"{re.escape(prefix)}[bcdfghjklmnpqrstvwxz2456789]{{5}}", name), name
    assert hpk.status(name)["status"]["phase"] == "Succeeded"
    assert hpk.hpkctl("delete", name, "--site", "ci").rc == 0
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": prefix},
           "spec": {"completions": 2, "template": {"spec": {"restartPolicy": "Never",
                                                             "containers": [c("w", "true")]}}}}
    r = hpk.run(job)
    assert r.rc == 0, r.output
    (jname,) = set(re.findall(rf"job default/({re.escape(prefix)}[a-z0-9]+)", r.stderr))
    assert [x["name"] for x in hpk.status(jname)["status"]["pods"]] == [f"{jname}-0", f"{jname}-1"]
    assert hpk.hpkctl("delete", jname, "--site", "ci").rc == 0
    job["metadata"] = {"name": unique("held")}
    job["spec"]["suspend"] = True
    r = hpk.run(job)
    assert r.rc == 125, r.output
    assert "spec.suspend: true" in r.stderr and "remove spec.suspend (or set it to false)" in r.stderr, r.output
    assert "submitted" not in r.stderr, r.output
    nameless = pod("", [c("c", "true")])
    nameless["metadata"] = {}
    r = hpk.run(nameless)
    assert r.rc == 125 and "metadata.name is missing or empty" in r.stderr and "generateName" in r.stderr, r.output


def test_a_container_naming_kubernetes_service_variables_is_warned_about(hpk: Hpk) -> None:
    """Issue 22.13: without a control plane there are no KUBERNETES_SERVICE_* variables; a container
    whose command names one gets a warning at submission (one the pod sets itself does not)."""
    r = hpk.run(pod(unique("k8senv"), [
        c("client", 'echo "${KUBERNETES_SERVICE_HOST:-unset}"'),
        c("own", 'echo "$KUBERNETES_PORT"', env=[{"name": "KUBERNETES_PORT", "value": "tcp://10.0.0.1:443"}])]))
    assert r.rc == 0, r.output
    assert sorted(r.stdout.splitlines()) == ["[client] unset", "[own] tcp://10.0.0.1:443"]
    warned = [line for line in r.stderr.splitlines() if "KUBERNETES_" in line and "warning" in line]
    assert len(warned) == 1 and "'client' uses KUBERNETES_SERVICE_HOST" in warned[0], r.stderr
    assert "no KUBERNETES_SERVICE_* variables are set" in warned[0]

"""interLink's vk-test-set (``../shared/notes/kubelet-api.md`` §5.1) as our own tests, through the
kubelet: the API stand-in + ``hpkctl scheduler`` + ``hpkctl kubelet`` as user hpk + the real local Slurm
+ the Apptainer stand-in. Each case asserts what the API server holds (phase, reasons, exit codes,
conditions, events) and what ``kubectl logs`` shows, exactly.

Every pod of the module is created at once before the first test (``tests.support.launch``), so
they run concurrently; each test then checks only its own pods (names ``vkNNN-*``). Pods that keep
running (probes) are deleted by their test.
"""

from __future__ import annotations

import random
import re
import textwrap
from collections.abc import Iterator

import pytest

from tests.support.cluster import Cluster
from tests.support.launch import (
    DEBIAN,
    Env,
    Launched,
    conditions,
    configmap,
    container,
    events,
    finished,
    host_volume,
    jobcomp_states,
    launch,
    launch_selected,
    logs,
    node_capacity,
    outdir,
    pod,
    secret,
    sh,
    terminated,
    wait_status,
)
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.standin, pytest.mark.whole_node]  # pods at once: xdistgroups


@pytest.fixture(scope="module")
def launched(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[Launched]:
    yield from launch_selected(request, cluster)


def _ready_condition(st: dict) -> dict:  # type: ignore[type-arg]
    return next(c for c in st["conditions"] if c["type"] == "Ready")


# ---------------------------------------------------------------------------- 000 hello world


@launch(lambda env: [pod("vk000-hello", [sh("hello", 'echo "hello world"')])])
def test_000_hello_world(launched: Launched) -> None:
    """Succeeded, the container terminated Completed with exit code 0 and no restart, Ready False
    with reason PodCompleted (as the real kubelet reports a finished pod), no pod-level reason, the
    log through the API server is exactly the echo, events Scheduled and Started and no Warning."""
    c = launched.cluster
    st = finished(c, "vk000-hello")["status"]
    assert st["phase"] == "Succeeded" and "reason" not in st, st
    term = terminated(st, "hello")
    assert (term["exitCode"], term["reason"]) == (0, "Completed"), st
    assert container(st, "hello")["restartCount"] == 0
    assert (_ready_condition(st)["status"], _ready_condition(st)["reason"]) == ("False", "PodCompleted")
    assert logs(c, "vk000-hello") == "hello world\n"
    evs = events(c, "vk000-hello", launched.uid("vk000-hello"))
    assert {"Scheduled", "Started"} <= {r for _, r, _ in evs}, evs
    assert not [e for e in evs if e[0] == "Warning"], evs


# ---------------------------------------------------------------------------- 010 multi-line args


PY_SHOW_ARGS = textwrap.dedent("""\
    import sys

    def show(i, arg):
        print(i, repr(arg))

    for i, arg in enumerate(sys.argv[1:]):
        show(i, arg)
    print("done")
""")
ARGS_010 = ["a b", "it's \"q\"", "$HOME `x` \\n", "multi\nline\n", "ünï ☃", "$(NOT_DEFINED)", "$$(ESCAPED)",
            "--flag=1", ""]


@launch(lambda env: [pod("vk010-python", [{"name": "py", "image": DEBIAN, "command": ["python3", "-c", PY_SHOW_ARGS],
                                          "args": ARGS_010}])])
def test_010_multiline_script_and_args_keep_their_bytes(launched: Launched) -> None:
    """A multi-line Python program (indentation, blank lines) as ``command``, and ``args`` with quotes,
    shell syntax, newlines, unicode and an empty one reach the process exactly; only Kubernetes'
    own ``$(VAR)`` expansion applies (an undefined reference stays, ``$$`` is one ``$``)."""
    c = launched.cluster
    st = finished(c, "vk010-python")["status"]
    assert st["phase"] == "Succeeded", st
    seen = [a.replace("$$(ESCAPED)", "$(ESCAPED)") for a in ARGS_010]
    assert logs(c, "vk010-python") == "".join(f"{i} {a!r}\n" for i, a in enumerate(seen)) + "done\n"


# ---------------------------------------------------------------------------- 020 env


PY_ENV_020 = "import os\nfor k in ('PLAIN', 'GREETING', 'PASSWORD'):\n    print(k + '=' + os.environ[k])"


@launch(lambda env: [
    configmap("vk020-cm", {"greeting": "hello from a ConfigMap"}),
    secret("vk020-secret", {"password": b"s3cr3t 'p@ss' \"x\""}),
    pod("vk020-env", [{"name": "py", "image": DEBIAN, "command": ["python3", "-c", PY_ENV_020],
                       "env": [{"name": "PLAIN", "value": "plain value"},
                               {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "vk020-cm",
                                                                                      "key": "greeting"}}},
                               {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "vk020-secret",
                                                                                   "key": "password"}}}]}])])
def test_020_env_by_value_configmap_and_secret(launched: Launched) -> None:
    c = launched.cluster
    st = finished(c, "vk020-env")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "vk020-env") == ("PLAIN=plain value\nGREETING=hello from a ConfigMap\n"
                                    "PASSWORD=s3cr3t 'p@ss' \"x\"\n")


# ---------------------------------------------------------------------------- 030 shared emptyDir


@launch(lambda env: [pod("vk030-shared", [
    sh("writer", 'echo "written by writer" > /shared/data && echo writer done',
       volumeMounts=[{"name": "shared", "mountPath": "/shared"}]),
    sh("reader", 'while [ ! -s /shared/data ]; do sleep 0.1; done; cat /shared/data; '
                 'touch /shared/other; echo "touch rc=$?"; ls /shared',
       volumeMounts=[{"name": "shared", "mountPath": "/shared", "readOnly": True}])],
    volumes=[{"name": "shared", "emptyDir": {}}])])
def test_030_emptydir_shared_by_two_containers_one_read_only(launched: Launched) -> None:
    """What one container writes the other reads; the read-only mount refuses a write (EROFS)."""
    c = launched.cluster
    st = finished(c, "vk030-shared")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "vk030-shared", "-c", "writer") == "writer done\n"
    assert logs(c, "vk030-shared", "-c", "reader") == ("written by writer\n"
                                                       "touch: /shared/other: Read-only file system\n"
                                                       "touch rc=1\ndata\n")


# ---------------------------------------------------------------------------- 040 config volumes


VOLUMES_040 = r"""
ls /cm; ls /sec; ls -R /items
stat -Lc '%a %n' /cm/app.properties /cm/k1 /cm/bin /sec/user /sec/pass /items/conf/app.conf
cat /items/conf/app.conf
od -An -tx1 /cm/bin
printf '%s|' "$(cat /sec/user)"; cat /sec/pass
echo scratch > /scratch/f && cat /scratch/f
echo in memory > /mem/f && cat /mem/f
touch /cm/new; echo "configMap write rc=$?"
"""


@launch(lambda env: [
    configmap("vk040-cm", {"app.properties": "color=blue\nsize=2\n", "k1": "v1"}, binaryData={"bin": "AAH/"}),
    secret("vk040-sec", {"user": b"admin", "pass": b"p@ss\n"}),
    pod("vk040-volumes", [sh("c", VOLUMES_040, volumeMounts=[
        {"name": "cm", "mountPath": "/cm"}, {"name": "sec", "mountPath": "/sec"},
        {"name": "items", "mountPath": "/items"}, {"name": "scratch", "mountPath": "/scratch"},
        {"name": "mem", "mountPath": "/mem"}])],
        volumes=[{"name": "cm", "configMap": {"name": "vk040-cm", "defaultMode": 0o640}},
                 {"name": "sec", "secret": {"secretName": "vk040-sec", "defaultMode": 0o400}},
                 {"name": "items", "configMap": {"name": "vk040-cm", "items": [
                     {"key": "app.properties", "path": "conf/app.conf", "mode": 0o600}]}},
                 {"name": "scratch", "emptyDir": {}},
                 {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}])])
def test_040_configmap_and_secret_volumes_with_items_modes_and_emptydirs(launched: Launched) -> None:
    """Every key as a file (binaryData byte-exact), ``items`` renaming into a subdirectory with its
    own mode, ``defaultMode`` as the files' permission bits, emptyDirs (disk and memory) writable,
    the ConfigMap volume read-only (as the kubelet mounts them)."""
    c = launched.cluster
    st = finished(c, "vk040-volumes")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "vk040-volumes") == (
        "app.properties\nbin\nk1\n"
        "pass\nuser\n"
        "/items:\nconf\n\n/items/conf:\napp.conf\n"
        "640 /cm/app.properties\n640 /cm/k1\n640 /cm/bin\n400 /sec/user\n400 /sec/pass\n600 /items/conf/app.conf\n"
        "color=blue\nsize=2\n"
        " 00 01 ff\n"
        "admin|p@ss\n"
        "scratch\n"
        "in memory\n"
        "touch: /cm/new: Read-only file system\nconfigMap write rc=1\n")


@launch(lambda env: [pod("vk040-optional", [sh("c", "ls -A /opt-cm | wc -l",
                                               volumeMounts=[{"name": "o", "mountPath": "/opt-cm"}])],
                         volumes=[{"name": "o", "configMap": {"name": "vk040-absent", "optional": True}}])])
def test_040_optional_missing_configmap_volume_is_an_empty_directory(launched: Launched) -> None:
    c = launched.cluster
    st = finished(c, "vk040-optional")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "vk040-optional") == "0\n"


# ---------------------------------------------------------------------------- 050 limits


def _over(env: Env) -> tuple[str, str]:
    cpus, mem_mib = node_capacity()
    return str(cpus * 4), f"{mem_mib * 50}Mi"


@launch(lambda env: [pod("vk050-cpu-msg", [sh("c", "echo never", resources={"limits": {"cpu": _over(env)[0]}})])])
def test_050_more_cpus_than_any_node_is_not_silent(launched: Launched) -> None:
    """A pod asking 4x the CPUs of the biggest Slurm node (sinfo) never runs; its status says why:
    Slurm's pending reason PartitionConfig (no node of the partition can ever hold it)."""
    c = launched.cluster
    st = wait_status(c, "vk050-cpu-msg", "a status message naming PartitionConfig",
                     lambda s: "PartitionConfig" in (s.get("reason", "") + s.get("message", "")), timeout=60)
    assert st["phase"] in ("Pending", "Failed"), st
    assert not terminated(st, "c") and "running" not in container(st, "c").get("state", {}), st


@launch(lambda env: [pod("vk050-cpu", [sh("c", "echo never", resources={"limits": {"cpu": _over(env)[0]}})])])
def test_050_more_cpus_than_any_node_fails(launched: Launched) -> None:
    c = launched.cluster
    wait_status(c, "vk050-cpu", "Slurm's verdict in the status", lambda s: "PartitionConfig" in s.get("message", "")
                or s.get("phase") == "Failed", timeout=60)
    st = wait_status(c, "vk050-cpu", "Failed", lambda s: s.get("phase") == "Failed", timeout=10)
    assert re.search("PartitionConfig|OutOfcpu|cpu", st.get("reason", "") + st.get("message", "")), st
    assert jobcomp_states(c.job_id("vk050-cpu")) == ["CANCELLED"]


@launch(lambda env: [pod("vk050-mem", [sh("c", "echo never", resources={"limits": {"memory": _over(env)[1]}})])])
def test_050_more_memory_than_any_node_fails_with_slurms_reason(launched: Launched) -> None:
    """50x the memory of the biggest node: sbatch refuses the job; the pod is Failed (SlurmRejected)
    with Slurm's words, its container waiting with the same reason, a Warning event."""
    c = launched.cluster
    st = c.wait_phase("vk050-mem", "Failed", timeout=60)["status"]
    assert st["reason"] == "SlurmRejected", st
    assert "Memory specification can not be satisfied" in st["message"], st
    assert container(st, "c")["state"]["waiting"]["reason"] == "SlurmRejected"
    assert not c.job_id("vk050-mem")
    evs = events(c, "vk050-mem", launched.uid("vk050-mem"))
    assert any(t == "Warning" and r == "Failed" and "SlurmRejected" in m for t, r, m in evs), evs


# ---------------------------------------------------------------------------- 060/065 init containers


@launch(lambda env: [pod("vk060-init", [sh("main", "cat /data/input", volumeMounts=[{"name": "d", "mountPath": "/data"}])],
                         initContainers=[sh("fill", 'echo "prepared by init" > /data/input; echo filled',
                                            volumeMounts=[{"name": "d", "mountPath": "/data"}])],
                         volumes=[{"name": "d", "emptyDir": {}}])])
def test_060_init_container_fills_a_volume(launched: Launched) -> None:
    c = launched.cluster
    st = finished(c, "vk060-init")["status"]
    assert st["phase"] == "Succeeded", st
    init = terminated(st, "fill", init=True)
    assert (init["exitCode"], init["reason"]) == (0, "Completed"), st
    assert conditions(st)["Initialized"] == "True"
    assert logs(c, "vk060-init", "-c", "fill") == "filled\n"
    assert logs(c, "vk060-init", "-c", "main") == "prepared by init\n"


def _step(name: str, delay: str) -> dict:  # type: ignore[type-arg]
    # a later init sleeping less would come first if they ran together
    return sh(name, f"sleep {delay}; echo {name} >> /work/order", volumeMounts=[{"name": "w", "mountPath": "/work"}])


@launch(lambda env: [pod("vk065-inits", [sh("main", "cat /work/order", volumeMounts=[{"name": "w", "mountPath": "/work"}])],
                         initContainers=[_step("first", "1"), _step("second", "0.5"), _step("third", "0")],
                         volumes=[{"name": "w", "emptyDir": {}}])])
def test_065_init_containers_run_one_after_another(launched: Launched) -> None:
    """Three init containers, each sleeping less than the one before: the file shows them in spec
    order, so each started after the previous one ended."""
    c = launched.cluster
    st = finished(c, "vk065-inits")["status"]
    assert st["phase"] == "Succeeded", st
    assert [(s["name"], s["state"]["terminated"]["exitCode"]) for s in st["initContainerStatuses"]] == [
        ("first", 0), ("second", 0), ("third", 0)]
    assert logs(c, "vk065-inits", "-c", "main") == "first\nsecond\nthird\n"


# ---------------------------------------------------------------------------- 080/085/086 env from objects


@launch(lambda env: [
    configmap("vk080-cm", {"app.mode": "production", "multi": "line 1\nline 2"}),
    secret("vk080-sec", {"api-token": b"t0k3n==", "db.password": b"pa$$(word)"}),
    pod("vk080-keyrefs", [sh("c", 'printf "%s\\n" "$MODE" "$MULTI" "$TOKEN" "$DBPASS" "${OPT-unset}" "$URL"', env=[
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "vk080-cm", "key": "app.mode"}}},
        {"name": "MULTI", "valueFrom": {"configMapKeyRef": {"name": "vk080-cm", "key": "multi"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "vk080-sec", "key": "api-token"}}},
        {"name": "DBPASS", "valueFrom": {"secretKeyRef": {"name": "vk080-sec", "key": "db.password"}}},
        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "vk080-cm", "key": "absent", "optional": True}}},
        {"name": "URL", "value": "https://$(TOKEN)@host/$(MODE)"}])])])
def test_080_configmap_and_secret_key_refs(launched: Launched) -> None:
    """Keys with dots and dashes, a multi-line value, an optional missing key (unset), a later
    variable composed from earlier ones with ``$(VAR)``; a value read from a Secret is not expanded."""
    c = launched.cluster
    st = finished(c, "vk080-keyrefs")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "vk080-keyrefs") == ("production\nline 1\nline 2\nt0k3n==\npa$$(word)\nunset\n"
                                        "https://t0k3n==@host/production\n")


@launch(lambda env: [
    secret("vk085-sec", {"DB_USER": b"admin", "DB_PASS": b"it's \"quoted\" $x `y`", "MULTI": b"a\nb"}),
    pod("vk085-envfrom", [sh("c", 'printf "%s\\n" "$DB_USER" "$DB_PASS" "$MULTI" "$S_DB_USER"',
                             envFrom=[{"secretRef": {"name": "vk085-sec"}},
                                      {"prefix": "S_", "secretRef": {"name": "vk085-sec"}},
                                      {"secretRef": {"name": "vk085-absent", "optional": True}}],
                             env=[{"name": "DB_USER", "value": "overridden"}])])])
def test_085_secret_envfrom(launched: Launched) -> None:
    """Every key of a Secret as a variable, again with a prefix; ``env`` wins over ``envFrom``; a
    missing optional Secret is skipped with an OptionalSecretNotFound event (virtual-kubelet's)."""
    c = launched.cluster
    st = finished(c, "vk085-envfrom")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "vk085-envfrom") == "overridden\nit's \"quoted\" $x `y`\na\nb\nadmin\n"
    assert "OptionalSecretNotFound" in {r for _, r, _ in events(c, "vk085-envfrom", launched.uid("vk085-envfrom"))}


@launch(lambda env: [
    secret("vk086-sec", {"original-key": b"renamed value"}),
    pod("vk086-renamed", [sh("c", 'printf "%s|%s\\n" "$MY_VAR" "$(env | grep -c original)"', env=[
        {"name": "MY_VAR", "valueFrom": {"secretKeyRef": {"name": "vk086-sec", "key": "original-key"}}}])])])
def test_086_secret_key_ref_under_another_name(launched: Launched) -> None:
    """interLink #438: the variable gets the name of ``env[].name``, not of the key."""
    c = launched.cluster
    st = finished(c, "vk086-renamed")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "vk086-renamed") == "renamed value|0\n"


# ---------------------------------------------------------------------------- 090 probes


def _port() -> int:
    return random.randint(20000, 40000)


def _web_ready(env: Env) -> list[dict]:  # type: ignore[type-arg]
    port = _port()
    server = sh("web", f"mkdir -p /tmp/www && echo ok > /tmp/www/ok && sleep 10 && exec httpd -f -p {port} -h /tmp/www",
                startupProbe={"httpGet": {"port": port, "path": "/ok"}, "periodSeconds": 1, "failureThreshold": 60,
                              "timeoutSeconds": 5},
                readinessProbe={"httpGet": {"port": port, "path": "/ok"}, "periodSeconds": 1, "timeoutSeconds": 5})
    return [pod("vk090-ready", [server], restartPolicy="Always", terminationGracePeriodSeconds=2)]


@launch(_web_ready)
def test_090_http_startup_and_readiness_make_the_pod_ready(launched: Launched) -> None:
    """While the server is not up the container runs but is neither started nor ready (Ready False);
    once the HTTP startup and readiness probes pass: started, ready, conditions Ready and
    ContainersReady True in the API, no restart."""
    c = launched.cluster
    try:
        st = wait_status(c, "vk090-ready", "Ready", lambda s: conditions(s).get("Ready") == "True")
        assert conditions(st)["ContainersReady"] == "True", st
        web = container(st, "web")
        assert (web["started"], web["ready"], web["restartCount"]) == (True, True, 0), st
        assert "running" in web["state"]
        before = [s for s in launched.history.statuses("vk090-ready", uid=launched.uid("vk090-ready"))
                  if "running" in container(s, "web").get("state", {})]
        first = container(before[0], "web")
        assert (first["started"], first["ready"]) == (False, False), before[0]
        assert conditions(before[0])["Ready"] == "False"
    finally:
        c.kubectl("delete", "pod", "vk090-ready", "--wait=false", check=False)


def _web_liveness(env: Env, name: str, *, pre_stop: bool = False) -> dict:  # type: ignore[type-arg]
    """httpd serving a hostPath directory: the test takes ``healthz`` away when it wants the probe to
    fail (no background process in the container, no timing guess); each run puts it back."""
    port, d = _port(), outdir(env.cluster, name)
    script = f"echo serving; echo ok > /www/healthz; exec httpd -f -p {port} -h /www"
    extra = {"lifecycle": {"preStop": {"exec": {"command": ["sleep", "2"]}}}} if pre_stop else {}
    return pod(name, [sh("web", script, volumeMounts=[{"name": "www", "mountPath": "/www"}],
                         livenessProbe={"httpGet": {"port": port, "path": "/healthz"}, "periodSeconds": 1,
                                        "failureThreshold": 2, "timeoutSeconds": 5}, **extra)],
               volumes=[host_volume(d, "www")], restartPolicy="Always", terminationGracePeriodSeconds=5)


def _break_liveness(c: Cluster, name: str) -> dict:  # type: ignore[type-arg]
    """Once the first run serves ``healthz``, remove it; the status once the container restarted."""
    healthz = outdir(c, name) / "healthz"
    wait_status(c, name, "serving", lambda s: "running" in container(s, "web").get("state", {}) and healthz.exists())
    healthz.unlink()
    return wait_status(c, name, "restarted", lambda s: container(s, "web").get("restartCount", 0) >= 1)


@launch(lambda env: [_web_liveness(env, "vk090-live")])
def test_090_failing_http_liveness_restarts_the_container(launched: Launched) -> None:
    """The liveness URL 404s: the container is killed (SIGTERM: exit 143) and started again;
    restartCount >= 1 and lastState in the API; ``kubectl logs --previous`` has the first run."""
    c = launched.cluster
    try:
        st = _break_liveness(c, "vk090-live")
        last = container(st, "web")["lastState"]["terminated"]
        assert (last["exitCode"], last["reason"]) == (143, "Error"), st
        assert st["phase"] == "Running"
        assert logs(c, "vk090-live", "--previous") == "serving\n"
    finally:
        c.kubectl("delete", "pod", "vk090-live", "--wait=false", check=False)


@launch(lambda env: [_web_liveness(env, "vk090-unhealthy", pre_stop=True)])
def test_090_liveness_kill_is_an_unhealthy_event(launched: Launched) -> None:
    """A preStop hook of 2 s keeps the container alive after the kill decision, long enough for
    the kubelet to read the status in between (as any slow-to-stop container does)."""
    c = launched.cluster
    try:
        _break_liveness(c, "vk090-unhealthy")
        unhealthy = ("Warning", "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 404")
        uid = launched.uid("vk090-unhealthy")
        # events are posted on a thread of their own, after the status that shows the restart
        try:
            wait_for("the Unhealthy event", lambda: unhealthy in events(c, "vk090-unhealthy", uid), timeout=30, every=0.5)
        except AssertionError:  # every event, whole (pytest would shorten the list)
            raise AssertionError("\n".join(map(repr, events(c, "vk090-unhealthy", uid)))) from None
    finally:
        c.kubectl("delete", "pod", "vk090-unhealthy", "--wait=false", check=False)


# ---------------------------------------------------------------------------- 095 default entrypoint


@launch(lambda env: [
    pod("vk095-busybox", [{"name": "c", "image": "busybox"}]),
    pod("vk095-debian", [{"name": "c", "image": DEBIAN}]),
    pod("vk095-args", [{"name": "c", "image": "busybox", "args": ["echo", "$HOME `id` $(date) it's"]}]),
    pod("vk095-args-replace-cmd", [{"name": "c", "image": "busybox", "args": ["-c", "echo x"]}])])
def test_095_image_entrypoint_and_cmd(launched: Launched) -> None:
    """The stand-in images have no ENTRYPOINT and CMD ``sh`` (busybox) / ``bash`` (debian). No
    command and no args: the CMD runs (a shell with no input: exit 0, nothing logged). ``args`` alone
    replace the CMD and are the command line, verbatim (no shell evaluation). So ``args: [-c, ...]``
    is not appended to CMD ``sh``: it is run as a program and fails."""
    c = launched.cluster
    for name in ("vk095-busybox", "vk095-debian"):
        st = finished(c, name)["status"]
        assert st["phase"] == "Succeeded" and terminated(st, "c")["exitCode"] == 0, st
        assert logs(c, name) == ""
    st = finished(c, "vk095-args")["status"]
    assert st["phase"] == "Succeeded", st
    assert logs(c, "vk095-args") == "$HOME `id` $(date) it's\n"
    st = finished(c, "vk095-args-replace-cmd")["status"]
    assert st["phase"] == "Failed" and terminated(st, "c")["exitCode"] == 2, st
    assert "illegal option -c" in logs(c, "vk095-args-replace-cmd")


# ---------------------------------------------------------------------------- 100 failing containers


FAILING = {"exit3": (["sh", "-c", "echo about to fail; exit 3"], 3, "about to fail\n"),
           # $$$$: Kubernetes turns $$ into $, so the shell sees $$ (its pid)
           "segv": (["sh", "-c", "echo before; kill -SEGV $$$$"], 139, "before\n")}


@pytest.mark.parametrize("case", sorted(FAILING))
@launch(lambda env: [pod(f"vk100-{env.params['case']}", [{"name": "c", "image": "busybox",
                                                          "command": FAILING[env.params["case"]][0]}])])
def test_100_failing_container_fails_the_pod_with_its_exit_code(launched: Launched, case: str) -> None:
    """Non-zero exit and death by SIGSEGV (128+11): Failed, reason Error, the exit code in the
    container's terminated state and in the pod message, a Failed Warning event."""
    c, name = launched.cluster, f"vk100-{case}"
    _, code, text = FAILING[case]
    st = finished(c, name)["status"]
    assert (st["phase"], st["reason"], st["message"]) == ("Failed", "Error", f"container c exited with code {code}"), st
    term = terminated(st, "c")
    assert (term["exitCode"], term["reason"]) == (code, "Error"), st
    assert logs(c, name) == text
    assert ("Warning", "Failed", f"Error: container c exited with code {code}") in events(c, name, launched.uid(name))


@launch(lambda env: [pod("vk100-notfound", [{"name": "c", "image": "busybox", "command": ["/no/such/program"]}])])
def test_100_command_not_found_fails_the_pod(launched: Launched) -> None:
    c = launched.cluster
    st = finished(c, "vk100-notfound")["status"]
    assert st["phase"] == "Failed", st
    assert terminated(st, "c")["exitCode"] != 0
    assert logs(c, "vk100-notfound") == 'FATAL:   "/no/such/program": executable file not found in $PATH\n'


@launch(lambda env: [pod("vk100-notfound-127", [{"name": "c", "image": "busybox", "command": ["nosuchcommand"]}])])
def test_100_command_not_found_is_exit_code_127(launched: Launched) -> None:
    c = launched.cluster
    st = finished(c, "vk100-notfound-127")["status"]
    assert terminated(st, "c")["exitCode"] == 127, st


# ---------------------------------------------------------------------------- 105 env quoting


VALUES_105 = {
    "QUOTES": "single ' double \" mixed '\"'",
    "SHELL": "$(date) `id` $HOME ${HOME} $((1+1)) ; | & > < * ?",
    "LINES": "line 1\nline 2\n\nlast\n",
    "SPACES": "  leading and trailing  \t",
    "UNICODE": "ünïcödé ☃ 日本語 \u200b",
    "BACKSLASH": "back\\slash \\n \\\\ end\\",
    "DASH": "-n -e --",
}


@launch(lambda env: [pod("vk105-quotes", [sh("c", 'for v in "$QUOTES" "$SHELL" "$LINES" "$SPACES" "$UNICODE" '
                                                  '"$BACKSLASH" "$DASH" "$ESCAPED" "$REF" "$UNDEF"; do '
                                                  'printf "%s" "$v" | od -An -tx1 | tr -d " \\n"; echo; done',
                                                  env=[*({"name": k, "value": v} for k, v in VALUES_105.items()),
                                                       {"name": "ESCAPED", "value": "$$(QUOTES) $$HOME"},
                                                       {"name": "REF", "value": "[$(DASH)]"},
                                                       {"name": "UNDEF", "value": "$(NO_SUCH_VAR)"}])])])
def test_105_env_values_are_byte_exact(launched: Launched) -> None:
    """Each value as hex bytes: quotes, shell syntax, newlines (trailing ones too), tabs and spaces,
    multi-byte UTF-8, backslashes; Kubernetes' expansion only: ``$$`` → ``$``, a defined
    ``$(VAR)`` replaced, an undefined one kept."""
    c = launched.cluster
    st = finished(c, "vk105-quotes")["status"]
    assert st["phase"] == "Succeeded", st
    want = [*VALUES_105.values(), "$(QUOTES) $HOME", "[-n -e --]", "$(NO_SUCH_VAR)"]
    assert logs(c, "vk105-quotes").splitlines() == [v.encode().hex() for v in want]


# ---------------------------------------------------------------------------- 110 failed job


def _job_110(env: Env) -> list:  # type: ignore[type-arg]
    template = {"spec": {"restartPolicy": "Never", "containers": [sh("c", "echo attempt; exit 1")]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "vk110-job"},
           "spec": {"backoffLimit": 0, "template": template}}

    def job_pod(created: dict) -> dict:  # type: ignore[type-arg]
        owner = created[("Job", "default", "vk110-job")]["metadata"]["uid"]
        p = pod("vk110-job-x7k2q", template["spec"]["containers"],
                labels={"batch.kubernetes.io/job-name": "vk110-job", "job-name": "vk110-job"})
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "vk110-job",
                                             "uid": owner, "controller": True, "blockOwnerDeletion": True}]
        return p
    return [job, job_pod]


@launch(_job_110)
def test_110_failing_job_pod_fails_once(launched: Launched) -> None:
    """The pod a Job (backoffLimit 0; the stand-in has no Job controller, so the test creates the pod
    as it would) makes, failing: Failed, exit code 1, never restarted (one run in the log, one
    Slurm job, FAILED in Slurm's accounting)."""
    c = launched.cluster
    st = finished(c, "vk110-job-x7k2q")["status"]
    assert (st["phase"], st["reason"]) == ("Failed", "Error"), st
    assert terminated(st, "c")["exitCode"] == 1 and container(st, "c")["restartCount"] == 0
    assert logs(c, "vk110-job-x7k2q") == "attempt\n"
    assert jobcomp_states(c.job_id("vk110-job-x7k2q")) == ["FAILED"]


# ---------------------------------------------------------------------------- 115 lifecycle hooks


def _hooks(env: Env) -> list:  # type: ignore[type-arg]
    out = []
    for name in ("vk115-delete", "vk115-natural"):
        d = outdir(env.cluster, name)
        mounts = [{"name": "out", "mountPath": "/out"}]
        main = ("trap 'echo term >> /out/events; exit 0' TERM; echo main >> /out/events; "
                + ("while :; do sleep 0.1; done" if name == "vk115-delete" else "sleep 1; echo exiting >> /out/events"))
        hooks = {"postStart": {"exec": {"command": ["sh", "-c", "echo poststart >> /out/events"]}},
                 "preStop": {"exec": {"command": ["sh", "-c", "echo prestop >> /out/events"]}}}
        out.append(pod(name, [sh("c", main, volumeMounts=mounts, lifecycle=hooks)], volumes=[host_volume(d)],
                       terminationGracePeriodSeconds=5))
    return out


@launch(_hooks)
def test_115_post_start_and_pre_stop_hooks(launched: Launched) -> None:
    """postStart runs as the container starts (Running only once it returned); on delete preStop
    runs, then SIGTERM; a container that ends by itself gets no preStop (Kubernetes runs it only
    when it stops a container)."""
    c = launched.cluster
    d = outdir(c, "vk115-delete")
    wait_status(c, "vk115-delete", "running", lambda s: "running" in container(s, "c").get("state", {}))
    assert "poststart" in (d / "events").read_text()  # not Running before postStart returned
    c.kubectl("delete", "pod", "vk115-delete", "--wait", "--timeout=60s", timeout=70)
    lines = (d / "events").read_text().splitlines()
    assert sorted(lines[:2]) == ["main", "poststart"] and lines[2:] == ["prestop", "term"], lines

    st = finished(c, "vk115-natural")["status"]
    assert st["phase"] == "Succeeded", st
    lines = (outdir(c, "vk115-natural") / "events").read_text().splitlines()
    assert sorted(lines[:2]) == ["main", "poststart"] and lines[2:] == ["exiting"], lines


# ---------------------------------------------------------------------------- 120 projected volume


PROJECTED_120 = ("find /p ! -path '*/..*' | sort; echo; cat /p/labels; echo; cat /p/meta/name; echo; cat /p/cfg/greeting; echo; "
                 "cat /p/ca.crt; stat -Lc '%a' /p/meta/name /p/cfg/greeting")


@launch(lambda env: [
    configmap("vk120-cm", {"greeting": "hi", "other": "not projected"}),
    pod("vk120-projected", [sh("c", PROJECTED_120, volumeMounts=[{"name": "p", "mountPath": "/p"}])],
        labels={"app": "vk", "tier": "test"},
        volumes=[{"name": "p", "projected": {"defaultMode": 0o440, "sources": [
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"configMap": {"name": "vk120-cm", "items": [{"key": "greeting", "path": "cfg/greeting"}]}},
            {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                                       {"path": "meta/name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}}])])
def test_120_projected_volume_with_root_ca_configmap_and_downward_api(launched: Launched) -> None:
    """One directory from three sources: the cluster CA of ``kube-root-ca.crt`` (byte-identical to the
    API server's CA), one key of a ConfigMap under a subdirectory, the pod's labels (``key="value"``
    lines, sorted) and name from the downward API; the projected ``defaultMode`` on the files."""
    c = launched.cluster
    st = finished(c, "vk120-projected")["status"]
    assert st["phase"] == "Succeeded", st
    ca = (c.api.pki / "ca.crt").read_text()
    assert logs(c, "vk120-projected") == (
        "/p\n/p/ca.crt\n/p/cfg\n/p/cfg/greeting\n/p/labels\n/p/meta\n/p/meta/name\n\n"
        'app="vk"\ntier="test"\nvk120-projected\nhi\n' + ca + "440\n440\n")

"""Lifecycle hooks, the grace period and termination messages in the plan and the script (issue 9).

Unit tests of translate/render/validation; a property test that a hook's exec command and an
httpGet hook's path and headers reach the container (and the wire) byte for byte. The behaviour on
the real Slurm: tests/integration/test_lifecycle.py.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpkctl.errors import PodError
from hpkctl.pod import render_pod, write_pod_dir
from hpkctl.pod.lifecycle import hook_command, plan_hooks, signal_option
from hpkctl.pod.translate import plan_pod
from tests.support.pods import make_profile, make_stub, pod_doc, records, run_script

PROFILE = make_profile()
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
NASTY = st.sampled_from(["'", '"', "\\", "$(touch CANARY)", "`touch CANARY`", "\n", "${HOME}", "$(VAR)", ";", " "])
ARB = st.lists(st.one_of(TEXT, NASTY), max_size=4).map("".join)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _container(**kw: Any) -> dict[str, Any]:
    return {"name": "app", "image": "busybox:1.36", "command": ["true"], **kw}


def _plan(spec: dict[str, Any], **kw: Any):  # type: ignore[no-untyped-def]
    return plan_pod(pod_doc(spec, **kw), PROFILE)


def test_grace_period_becomes_hpk_grace_and_the_batch_shell_signal() -> None:
    plan = _plan({"terminationGracePeriodSeconds": 7, "containers": [_container()]})
    assert plan.grace == 7
    assert [o.value for o in plan.options if o.name == "--signal"] == ["B:TERM@17"]
    script = render_pod(pod_doc({"containers": [_container()]}), PROFILE).script
    assert "HPK_GRACE=30\n" in script and "#SBATCH --signal=B:TERM@40\n" in script
    assert signal_option(0) == "B:TERM@10"


def test_a_users_own_signal_option_wins() -> None:
    plan = _plan({"containers": [_container()]}, annotations={"slurm-job.hpk.io/flags": "--signal=USR1@120"})
    assert [o.value for o in plan.options if o.name == "--signal"] == ["USR1@120"]


def test_hooks_are_planned_and_rendered_per_handler() -> None:
    c = _container(ports=[{"name": "admin", "containerPort": 9090}], lifecycle={
        "postStart": {"httpGet": {"port": "admin", "path": "drain me", "host": "10.0.0.9", "scheme": "HTTPS",
                                  "httpHeaders": [{"name": "X-A", "value": "b"}]}},
        "preStop": {"sleep": {"seconds": 4}}})
    hooks = plan_hooks(c)
    assert hook_command("f", hooks["post_start"]) == "hpk_hook_http 10.0.0.9 9090 /drain%20me HTTPS 'X-A: b'"
    assert hook_command("f", hooks["pre_stop"]) == "sleep 4"
    exec_hook = plan_hooks(_container(lifecycle={"preStop": {"exec": {"command": ["sh", "-c", "echo $(X)"]}}}))
    assert hook_command("hpk_main_0", exec_hook["pre_stop"]) == "hpk_main_0_exec sh -c 'echo $(X)'"  # not expanded
    tcp = plan_hooks(_container(lifecycle={"preStop": {"tcpSocket": {"port": 80}}}))
    assert "return 1" in hook_command("f", tcp["pre_stop"])


def test_sidecar_keeps_restart_policy_always_and_messages_are_bound() -> None:
    spec = {"restartPolicy": "Never", "initContainers": [_container(name="side", restartPolicy="Always"),
                                                          _container(name="init")],
            "containers": [_container(terminationMessagePath="/var/msg", terminationMessagePolicy="FallbackToLogsOnError")]}
    script = render_pod(pod_doc(spec), PROFILE).script
    assert "HPK_INIT=(side Always hpk_init_0 init Never hpk_init_1)" in script
    assert 'run/app.termination-log:/var/msg \\' in script and "HPK_LOG_FALLBACK=(app)" in script
    assert "termination-log:/dev/termination-log" not in script  # Apptainer's /dev is the node's: not bound


@pytest.mark.parametrize("lifecycle, grace, problem", [
    ({"preStop": {}}, 30, "lifecycle.preStop: must specify a handler type"),
    ({"preStop": {"exec": {"command": ["x"]}, "sleep": {"seconds": 1}}}, 30, "may not specify more than 1 handler"),
    ({"postStart": {"exec": {"command": []}}}, 30, "postStart.exec.command: required"),
    ({"preStop": {"httpGet": {"port": "nope"}}}, 30, "the name of one of the container's ports"),
    ({"preStop": {"httpGet": {"port": 0}}}, 30, "httpGet.port"),
    ({"preStop": {"sleep": {"seconds": 40}}}, 30, "no more than terminationGracePeriodSeconds (30)"),
    ({"preStop": {"sleep": {"seconds": 6}}}, 5, "no more than terminationGracePeriodSeconds (5)"),
    ({"preStop": {"httpGet": {"port": 80, "httpHeaders": [{"name": "Bad Name", "value": "v"}]}}}, 30, "header name"),
    ({"preStop": {"httpGet": {"port": 80, "path": "/a\r\nX: y"}}}, 30, "line break"),
])
def test_hook_rules(lifecycle: dict[str, Any], grace: int, problem: str) -> None:
    spec = {"terminationGracePeriodSeconds": grace, "containers": [_container(lifecycle=lifecycle)]}
    with pytest.raises(PodError) as err:
        render_pod(pod_doc(spec), PROFILE)
    assert problem in str(err.value), str(err.value)


@pytest.mark.parametrize("path", ["relative", "/a:b", "/a,b"])
def test_termination_message_path_must_be_absolute_and_bindable(path: str) -> None:
    with pytest.raises(PodError):
        render_pod(pod_doc({"containers": [_container(terminationMessagePath=path)]}), PROFILE)


def test_termination_message_path_under_dev_warns_unless_default() -> None:
    warn = render_pod(pod_doc({"containers": [_container(terminationMessagePath="/dev/msg")]}), PROFILE).warnings
    assert any("terminationMessagePath" in w for w in warn)
    quiet = render_pod(pod_doc({"containers": [_container(terminationMessagePath="/dev/termination-log")]}),
                       PROFILE).warnings
    assert not any("terminationMessagePath" in w for w in quiet)


def test_a_message_path_under_dev_is_bound_where_the_profile_binds_that_host_path() -> None:
    """Issue 22.8: a bind naming one host path under /dev adds it to Apptainer's minimal /dev, so the
    job can bind the container's message file over it; the cni parent does not bind it (it has the
    node's /dev), so it never reaches the containers again through APPTAINER_BIND."""
    pod = pod_doc({"containers": [_container(), _container(name="b", terminationMessagePath="/dev/msg")]})
    plain = render_pod(pod, PROFILE)
    assert ":/dev/termination-log" not in plain.script and ":/dev/msg" not in plain.script
    assert any("/dev/msg is not honoured" in w for w in plain.warnings)
    binds = ["/dev/termination-log", "/dev/msg:/dev/msg:ro", "/srv/data:/data"]
    for network in ("host", "cni"):
        cni = {"cni_network": "none", "parent_image": "docker://hpk-parent"} if network == "cni" else {}
        site = make_profile(apptainer={"binds": binds, "network": network, **cni})
        rendered = render_pod(pod, site)
        assert '"$HPK_POD_DIR"/run/app.termination-log:/dev/termination-log' in rendered.script, network
        assert '"$HPK_POD_DIR"/run/b.termination-log:/dev/msg' in rendered.script, network
        assert not any("terminationMessagePath" in w for w in rendered.warnings), rendered.warnings
    parent = rendered.script.split("--fakeroot", 1)[1].split("job.sh pod-part", 1)[0]
    assert "--bind /srv/data" in parent and "/dev/" not in parent, parent


@SETTINGS
@given(command=st.lists(ARB, min_size=1, max_size=3))
def test_an_exec_hook_reaches_the_container_exactly(tmp_path_factory, command) -> None:  # type: ignore[no-untyped-def]
    stub = make_stub(tmp_path_factory.mktemp("hook"))
    spec = {"restartPolicy": "Never", "containers": [_container(lifecycle={"postStart": {"exec": {"command": command}}})]}
    root = write_pod_dir(render_pod(pod_doc(spec), stub["profile"]))
    record = stub["tmp"] / "record.jsonl"
    r = run_script(root / "job" / "job.sh", stub=stub, record=record)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    got = sorted((rec["args"] for rec in records(record)), key=repr)  # the hook runs beside the container
    assert got == sorted([["true"], command], key=repr)
    assert not list(stub["tmp"].rglob("CANARY"))


def _serve_once(lines: list[bytes]) -> tuple[int, threading.Thread]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        lines.extend(data.split(b"\r\n"))
        conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
        conn.close()
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv.getsockname()[1], t


HEADER_VALUE = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20).map(str.strip)


@SETTINGS
@given(path=st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=20), value=HEADER_VALUE)
def test_an_http_hook_sends_path_and_header_exactly(tmp_path: Path, path: str, value: str) -> None:
    lines: list[bytes] = []
    port, t = _serve_once(lines)
    hook = plan_hooks(_container(lifecycle={"preStop": {"httpGet": {
        "port": port, "host": "127.0.0.1", "path": path, "httpHeaders": [{"name": "X-V", "value": value}]}}}))
    runtime = (Path(__file__).parents[2] / "sbatch" / "runtime.sh").read_text()
    script = tmp_path / "h.sh"
    script.write_text(f"HPK_GRACE=5\n{runtime}\nf() {{\n  {hook_command('f', hook['pre_stop'])}\n}}\nf\n")
    import subprocess

    r = subprocess.run(["bash", str(script)], capture_output=True, timeout=20)
    t.join(5)
    assert r.returncode == 0, r.stderr
    want = path if path.startswith("/") else "/" + path
    assert lines[0] == f"GET {want} HTTP/1.1".encode()
    assert f"X-V: {value}".encode() in lines

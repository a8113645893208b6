"""Property tests: whatever a user writes reaches the container byte for byte, and executes nothing.

Each example renders a pod holding arbitrary text (any unicode but NUL and surrogates: quotes,
``$()``, backticks, newlines, ``'"\\``) in command, args, env values, configMap data and annotation
flag values, runs the rendered script with bash and the recording ``apptainer``/``srun`` stubs,
and compares what the container would get with the input. A canary file proves nothing ran.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpkctl.pod import render_pod, write_pod_dir
from hpkctl.pod.flags import control_character
from hpkctl.pod.objects import StaticObjects
from tests.support.pods import make_stub, pod_doc, records, run_script

# Text a manifest can hold: YAML/JSON strings are unicode without NUL; surrogates cannot be encoded.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
NASTY = st.sampled_from(["'", '"', "\\", "$(touch CANARY)", "`touch CANARY`", "\n", "${HOME}", "$HPK_POD_DIR",
                         "'\"'\"'", "\\'", "%s%n", "--bind", ";", "|", "&", "#", "!", "\t", " ", "é", "😀", "$((1+1))"])
ARB = st.lists(st.one_of(TEXT, NASTY), max_size=4).map("".join)

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _run(stub: dict[str, Any], pod: dict[str, Any], objects: StaticObjects | None = None
         ) -> tuple[list[dict[str, Any]], Path]:
    rendered = render_pod(pod, stub["profile"], objects=objects)
    root = write_pod_dir(rendered)
    record = stub["tmp"] / "record.jsonl"
    r = run_script(root / "job" / "job.sh", stub=stub, record=record)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return records(record), root


def _fresh(tmp_path_factory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return make_stub(tmp_path_factory.mktemp("byte"))


@SETTINGS
@given(command=st.lists(ARB, min_size=1, max_size=4), args=st.lists(ARB, max_size=4))
def test_command_and_args_reach_the_container_exactly(tmp_path_factory, command, args) -> None:  # type: ignore[no-untyped-def]
    stub = _fresh(tmp_path_factory)
    tmp = stub["tmp"]
    pod = pod_doc({"restartPolicy": "Never",
                   "containers": [{"name": "c", "image": "busybox:1.36", "command": command, "args": args}]})
    # Kubernetes expands $(VAR) and $$ in command/args; compare with that expansion applied.
    from hpkctl.pod.expansion import expand
    from hpkctl.pod.shell import static_text

    expected = [static_text(expand(a, {})) for a in command + args]
    recs, _ = _run(stub, pod)
    assert [r["args"] for r in recs] == [expected]
    assert not list(tmp.rglob("CANARY"))


# Names the shell itself manages (_, PWD, SHLVL) are left out: every shell-read env file owns them.
NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True).filter(lambda n: n not in ("_", "PWD", "SHLVL"))


@SETTINGS
@given(values=st.dictionaries(NAMES, ARB, min_size=1, max_size=4),
       data=ARB)
def test_env_values_and_configmap_data_reach_the_container_exactly(tmp_path_factory, values, data) -> None:  # type: ignore[no-untyped-def]
    stub = _fresh(tmp_path_factory)
    tmp = stub["tmp"]
    env = [{"name": k, "value": v.replace("$", "$$")} for k, v in values.items()]  # $$ = literal $
    env.append({"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}})
    env.append({"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
    env.append({"name": "WITH_IP", "value": "$(POD_IP_X)" + data.replace("$", "$$")})
    env.insert(0, {"name": "POD_IP_X", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    objects = StaticObjects.of([
        {"kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": data, "file": data}},
        {"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": base64.b64encode(data.encode()).decode()}},
    ])
    pod = pod_doc({"restartPolicy": "Never", "containers": [{
        "name": "c", "image": "busybox:1.36", "command": ["true"], "env": env,
        "volumeMounts": [{"name": "v", "mountPath": "/cfg"}]}],
        "volumes": [{"name": "v", "configMap": {"name": "cm"}}]})
    recs, root = _run(stub, pod, objects)
    [rec] = recs
    for k, v in values.items():
        if k not in ("POD_IP_X", "FROM_CM", "FROM_SECRET", "WITH_IP"):
            assert rec["env"][k] == v
    assert rec["env"]["FROM_CM"] == data
    assert rec["env"]["FROM_SECRET"] == data
    ip = (root / "status" / "pod.ip").read_text().strip()
    assert rec["env"]["WITH_IP"] == ip + data
    assert rec["files"][str(root / "volumes" / "v" / "file")] == data
    assert not list(tmp.rglob("CANARY"))


@SETTINGS
@given(comment=ARB.filter(lambda s: control_character(s) is None),
       mpi_value=ARB.filter(lambda s: control_character(s) is None))
def test_annotation_flag_values_are_data(tmp_path_factory, comment, mpi_value) -> None:  # type: ignore[no-untyped-def]
    """sbatch directives read back exactly (sbatch's parser), MPI flags reach srun exactly."""
    import shlex

    from tests.support.sbatch import parse_sbatch_directive

    stub = _fresh(tmp_path_factory)
    tmp = stub["tmp"]
    annotations = {
        "slurm-job.hpk.io/flags": f"--ntasks=2 --comment={shlex.quote(comment)}",
        "slurm-job.hpk.io/mpi-flags": f"--label --comment={shlex.quote(mpi_value)}",
    }
    pod = pod_doc({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36",
                                                              "command": ["true"]}]}, annotations=annotations)
    recs, root = _run(stub, pod)
    script = (root / "job" / "job.sh").read_text()
    # bash and sbatch split lines on "\n" only (not on U+0085 and friends, as str.splitlines does)
    directives = [parse_sbatch_directive(line) for line in script.split("\n") if line.startswith("#SBATCH ")]
    assert [f"--comment=hpk-uid={pod['metadata']['uid']} hpk-pod=default/{pod['metadata']['name']}"
            + (f" {comment}" if comment else "")] in directives
    assert json.loads(recs[0]["srun"])[:2] == ["--label", f"--comment={mpi_value}"]
    assert not list(tmp.rglob("CANARY"))


@SETTINGS
@given(name=st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True), label=ARB, annotation=ARB)
def test_metadata_cannot_inject_shell(tmp_path_factory, name, label, annotation) -> None:  # type: ignore[no-untyped-def]
    stub = _fresh(tmp_path_factory)
    tmp = stub["tmp"]
    pod = pod_doc({"restartPolicy": "Never", "hostname": name, "containers": [{
        "name": "c", "image": "busybox:1.36", "command": ["true"],
        "env": [{"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['a']"}}}],
        "volumeMounts": [{"name": "info", "mountPath": "/info"}]}],
        "volumes": [{"name": "info", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}, name=name,
        annotations={"a": annotation})
    pod["metadata"]["labels"] = {"l": label}
    recs, root = _run(stub, pod)
    assert recs[0]["env"]["L"] == annotation
    assert not list(tmp.rglob("CANARY"))

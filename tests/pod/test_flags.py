"""The Slurm flags annotations: read with sbatch's/srun's grammar, refused options with reasons, and a
property test that no annotation ever adds a script line outside ``#SBATCH`` or makes anything run."""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hpkctl.errors import HpkError, PodError
from hpkctl.pod import render_pod
from hpkctl.pod.flags import job_comment, parse_options, parse_srun_options, uid_from_comment
from hpkctl.pod.sbatch_options import PATTERNS, SBATCH, Spec, shorts
from hpkctl.pod.srun_options import SRUN
from hpkctl.pod.translate import plan_pod
from tests.support.pods import make_profile, pod_doc
from tests.support.sbatch import parse_sbatch_directive

PROFILE = make_profile()
FLAGS = "slurm-job.hpk.io/flags"
MPI = "slurm-job.hpk.io/mpi-flags"


def _pod(annotations: dict[str, str]) -> dict[str, Any]:
    return pod_doc({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36",
                                                              "command": ["true"]}]}, annotations=annotations)


def _pairs(text: str, command: str = "sbatch") -> list[tuple[str, str | None]]:
    return [(o.name, o.value) for o in parse_options(text, source="t", command=command)]


def _refusal(text: str, *, annotation: str = FLAGS) -> PodError:
    with pytest.raises(PodError) as err:
        plan_pod(_pod({annotation: text}), PROFILE)
    assert err.value.reason == "InvalidSlurmFlags"
    assert f"metadata.annotations[{annotation}]" in err.value.message and err.value.hint
    return err.value


# --- the tables ---------------------------------------------------------------------------------
@pytest.mark.parametrize("table", [SBATCH, SRUN], ids=["sbatch", "srun"])
def test_tables_are_consistent(table: dict[str, Spec]) -> None:
    short = [s.short for s in table.values() if s.short]
    assert len(short) == len(set(short))
    for name, spec in table.items():
        assert name == spec.name and name.startswith("--") and spec.kind in PATTERNS
        assert not spec.alias_of or (spec.alias_of in table and not table[spec.alias_of].alias_of)
        assert not spec.short or (len(spec.short) == 2 and spec.short[0] == "-")


def test_sbatch_table_has_the_options_of_this_machines_sbatch() -> None:
    """Every option `sbatch --help` of the installed Slurm prints is in the table (long and short)."""
    helptext = subprocess.run(["sbatch", "--help"], capture_output=True, text=True, check=False).stdout
    if not helptext:
        pytest.skip("sbatch is not installed here")
    longs = {w.split("=")[0].split("[")[0] for w in helptext.split() if w.startswith("--") and len(w) > 3}
    longs = {w.rstrip(",") for w in longs}
    assert longs - set(SBATCH) == set()
    helped_shorts = {w.rstrip(",") for w in helptext.split() if len(w.rstrip(",")) == 2 and w[0] == "-"
                     and w[1].isalpha()}
    assert helped_shorts - set(shorts(SBATCH)) == set()


# --- grammar ------------------------------------------------------------------------------------
def test_each_word_is_one_option_in_any_of_sbatchs_spellings() -> None:
    text = "-N 2 -n4 --ntasks-per-node 2 -p=big --time=1-00:00 --exclusive --nice --nice=-5 -k --mem=2G -O"
    assert _pairs(text) == [("--nodes", "2"), ("--ntasks", "4"), ("--ntasks-per-node", "2"), ("--partition", "big"),
                            ("--time", "1-00:00"), ("--exclusive", None), ("--nice", None), ("--nice", "-5"),
                            ("--no-kill", None), ("--mem", "2G"), ("--overcommit", None)]
    assert _pairs("--tasks-per-node=2") == [("--ntasks-per-node", "2")]  # another spelling, the same option


@pytest.mark.parametrize("text, rule", [
    ("'--time=1 --output=/x'", "is not a valid value of --time"),  # one word packing two options
    ("--time=1 --output=/x", "--output is not allowed"),
    ("'--partition=a --chdir=/'", "is not a valid value of --partition"),
    ("--nodes=2;touch x", "is not a valid value of --nodes"),
    ("--out=/x", "--out is not an option of sbatch"),  # getopt would take the abbreviation: not here
    ("--outputs=/x", "did you mean --output"),
    ("nodes=2", "not an option"),
    ("--exclusive --mem", "--mem needs a value"),
    ("--time --output=/x", "--time needs a value"),
    ("--contiguous=yes", "takes no value"),
    ("-Ov", "takes no value (and one word is one option)"),
    ("-Z", "not a short option of sbatch"),
    ("--comment='a\nb'", "control character U+000A"),
    ("--comment='a\x1b[2J'", "control character U+001B"),
    ("--comment='a\u2028b'", "U+2028"),
    ("--comment='\u202egnp.exe'", "U+202E"),
    ("--nodelist=/etc/hosts", "is not a valid value of --nodelist"),
    ("--comment='unclosed", "cannot split"),
])
def test_malformed_words_are_refused_with_the_rule(text: str, rule: str) -> None:
    err = _refusal(text)
    assert rule in f"{err.message} {err.hint}", err


def test_a_packed_comment_is_one_value_and_one_directive_line() -> None:
    plan = plan_pod(_pod({FLAGS: "--comment='x --output=/tmp/evil'"}), PROFILE)
    [comment] = [o.value for o in plan.options if o.name == "--comment"]
    assert comment == f"hpk-uid={plan.uid} hpk-pod=default/{plan.name} x --output=/tmp/evil"
    assert [o.value for o in plan.options if o.name == "--output"] == [f"{plan.pod_dir}/logs/slurm.out"]


REFUSED_SBATCH = sorted((s.name, s.short) for s in SBATCH.values() if s.refused)


@pytest.mark.parametrize("name, short", REFUSED_SBATCH)
def test_refused_sbatch_options_say_why(name: str, short: str) -> None:
    reason = SBATCH[name].refused
    for word in [f"{name}=x" if SBATCH[name].arg != "none" else name] + ([f"{short} x"] if short else []):
        if short and word.startswith(short) and SBATCH[name].arg == "none":
            word = short
        err = _refusal(word)
        assert f"{name} is not allowed: {reason}" in err.message and f"remove {name}" in err.hint


def test_the_refusals_the_issue_names() -> None:
    refused = {n for n, s in SBATCH.items() if s.refused}
    assert {"--output", "--error", "--input", "--chdir", "--wrap", "--export", "--export-file", "--get-user-env",
            "--uid", "--gid", "--parsable", "--wait", "--array", "--job-name", "--open-mode", "--test-only",
            "--quiet", "--help", "--usage", "--version", "--hold", "--clusters", "--container"} <= refused
    assert not {"--comment", "--nice", "--nodes", "--batch", "--propagate", "--kill-on-invalid-dep",
                "--dependency", "--signal"} & refused
    assert _refusal("--cluster=x").message.endswith("--clusters is not allowed: " + SBATCH["--clusters"].refused)


def test_pods_are_never_requeued_by_slurm() -> None:
    """Issue 20.6: a requeued job runs the containers again behind a final status. Every pod is
    submitted with --no-requeue, and an annotation cannot ask for --requeue."""
    plan = plan_pod(_pod({}), PROFILE)
    assert ("--no-requeue", None) in [(o.name, o.value) for o in plan.options]
    assert "--requeue is not allowed" in _refusal("--requeue").message


def test_user_option_wins_short_and_long_are_one_option() -> None:
    plan = plan_pod(_pod({FLAGS: "-p big -t 5 -c 3"}), PROFILE)
    opts = [(o.name, o.value) for o in plan.options]
    assert ("--partition", "big") in opts and ("--time", "5") in opts and ("--cpus-per-task", "3") in opts
    assert [n for n, _ in opts].count("--partition") == 1 and [n for n, _ in opts].count("--time") == 1


def test_job_name_is_the_pods_name_and_the_comment_carries_its_uid() -> None:
    pod = _pod({FLAGS: "--comment='my run'"})
    pod["metadata"]["namespace"] = "team"
    plan = plan_pod(pod, PROFILE)
    got = {o.name: o.value for o in plan.options}
    assert got["--job-name"] == plan.name
    assert got["--comment"] == f"hpk-uid={plan.uid} hpk-pod=team/{plan.name} my run"
    assert uid_from_comment(got["--comment"] or "") == plan.uid
    assert uid_from_comment(job_comment("u-1", namespace="d", name="n")) == "u-1"
    assert uid_from_comment("my own job") is None and uid_from_comment("") is None


# --- mpi-flags: srun options only -------------------------------------------------------------------
@pytest.mark.parametrize("text, rule", [
    ("true", "a program or its arguments cannot be given here"),
    ("--label /bin/sh -c 'touch x'", "a program or its arguments cannot be given here"),
    ("--output=/tmp/x", "--output is not allowed"),
    ("--multi-prog", "--multi-prog is not allowed"),
    ("--help", "--help is not allowed"),
    ("--task-prolog=/tmp/x", "--task-prolog is not allowed"),
    ("--export=ALL", "--export is not allowed"),
    ("--bcast=/tmp/x", "--bcast is not allowed"),
    ("--jobid=1", "--jobid is not allowed"),
    ("--pty", "--pty is not allowed"),
    ("--chdir=/", "--chdir is not allowed"),
    ("--no-such-opt", "is not an option of srun"),
])
def test_mpi_flags_take_srun_options_only(text: str, rule: str) -> None:
    err = _refusal(text, annotation=MPI)
    assert rule in err.message, err.message


def test_mpi_flags_reach_srun_in_canonical_form() -> None:
    assert [o.word for o in parse_srun_options("--mpi=pmix -l -K1 --cpu_bind=cores", source="t")] == [
        "--mpi=pmix", "--label", "--kill-on-bad-exit=1", "--cpu-bind=cores"]
    plan = plan_pod(_pod({MPI: "--mpi pmix --label"}), PROFILE)
    assert plan.mpi_flags == ["--mpi=pmix", "--label"]


# --- property: no annotation ever adds a script line outside #SBATCH or makes anything run ------------
NASTY = st.sampled_from([
    "$(touch CANARY)", "`touch CANARY`", "\n#SBATCH --output=/tmp/x", "\ntouch CANARY", "; touch CANARY",
    "&& touch CANARY", "| touch CANARY", "'", '"', "\\", "\r", "\x00", "\x85", "\u2028", "\u202e", "é", "#", " ",
    "=", "-", "--output=/x", "${IFS}", "*", "~", "%j", "\t",
])
VALUE = st.lists(st.one_of(st.text(max_size=6), NASTY, st.sampled_from(["1", "2", "00:10:00", "4G", "n1"])),
                 max_size=4).map("".join)


def _word(names: list[str]) -> st.SearchStrategy[str]:
    name = st.one_of(st.sampled_from(names), st.text(max_size=8), NASTY)
    return st.one_of(
        name,
        st.tuples(name, VALUE).map(lambda t: f"{t[0]}={t[1]}"),
        st.tuples(name, VALUE).map(lambda t: f"{t[0]} {t[1]}"),
        st.tuples(name, VALUE).map(lambda t: shlex.quote(f"{t[0]}={t[1]}")),
        st.tuples(name, VALUE).map(lambda t: f"{t[0]} {shlex.quote(t[1])}"),
    )


SAMPLE = {"count": "2", "int": "-5", "nodes": "1-2", "time": "00:10:00", "memory": "4G", "hosts": "n[1-2]"}
WORDLIKE = st.sampled_from(["$(touch${IFS}CANARY)", "`touch${IFS}CANARY`", ";touch${IFS}CANARY", "'", '"', "\\",
                            "#x", "é", "a&&b", "x|y", "%j", "~", "*", "--output=/x", "debug"])


@st.composite
def _good_word(draw: st.DrawFn, table: dict[str, Spec]) -> str:
    """A word the table accepts, with a value as hostile as the option's kind of value allows."""
    spec = draw(st.sampled_from([s for s in table.values() if not s.refused and not s.alias_of]))
    if spec.arg == "none":
        return spec.short if spec.short and draw(st.booleans()) else spec.name
    if spec.kind == "text":
        value = draw(VALUE)
    elif spec.kind == "word":
        value = draw(WORDLIKE)
    else:
        value = SAMPLE[spec.kind]
    forms = [shlex.quote(f"{spec.name}={value}")]
    if spec.arg == "required":
        forms.append(f"{spec.name} {shlex.quote(value)}")
        if spec.short:
            forms += [f"{spec.short} {shlex.quote(value)}", shlex.quote(f"{spec.short}{value}")]
    return draw(st.sampled_from(forms))


def _annotation(table: dict[str, Spec]) -> st.SearchStrategy[str]:
    names = sorted(table) + sorted(shorts(table))
    good = _good_word(table)
    # words the grammar accepts (with values as hostile as their kind allows), or arbitrary words too
    words = st.one_of(st.lists(good, max_size=4), st.lists(st.one_of(good, _word(names)), max_size=4))
    return words.map(" ".join)


BASE_MPI = "--label"  # both renders launch through srun, so the only srun line is compared word by word


def _split(script: str) -> tuple[list[str], list[str]]:
    lines = script.split("\n")  # bash and sbatch split lines on "\n" only
    directives = [ln for ln in lines if ln.startswith("#SBATCH")]
    return directives, [ln for ln in lines if not ln.startswith("#SBATCH")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flags=_annotation(SBATCH), mpi=_annotation(SRUN))
def test_no_annotation_adds_a_line_outside_sbatch_or_runs_anything(flags: str, mpi: str) -> None:
    base = render_pod(_pod({FLAGS: "--nodes=2", MPI: BASE_MPI}), PROFILE, strict=False)
    try:
        rendered = render_pod(_pod({FLAGS: "--nodes=2 " + flags, MPI: mpi or BASE_MPI}), PROFILE, strict=False)
    except HpkError:
        event("refused")
        return  # refused, with a message: nothing reaches a script
    event(f"rendered with {'some' if flags or mpi else 'no'} annotation words")
    plan = rendered.plan
    directives, rest = _split(rendered.script)
    base_directives, base_rest = _split(base.script)
    # 1. #SBATCH lines: a block right after the shebang, each read back by sbatch as exactly one pair.
    assert rendered.script.split("\n")[1:len(directives) + 1] == directives
    assert [parse_sbatch_directive(d) for d in directives] == [[o.word] for o in plan.options]
    # 2. Every other line is the one of the same pod without the annotations, except the srun line,
    #    whose words are exactly srun, the parsed srun options and what hpkctl launches.
    assert len(rest) == len(base_rest)
    for line, base_line in zip(rest, base_rest):
        if base_line.lstrip().startswith("exec setsid srun "):
            words = shlex.split(line.rstrip("\\").strip())
            assert words == ["exec", "setsid", "srun", *plan.mpi_flags, "/bin/bash", "-c", "$HPK_MPI_ENV", "hpk-mpi"]
            assert all(w.startswith("-") for w in plan.mpi_flags)
        else:
            assert line == base_line
    # 3. bash accepts the script.
    check = subprocess.run(["bash", "-n"], input=rendered.script.encode(), capture_output=True, check=False)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize(("request_tmp", "directive"), [(True, "#SBATCH --tmp=2048M"), (False, None)])
def test_ephemeral_storage_asks_for_tmp_only_where_the_profile_says_nodes_have_it(
        request_tmp: bool, directive: str | None) -> None:
    """[slurm] request_tmp: nodes with TmpDisk=0 (the CI clusters) make sbatch refuse any --tmp, so
    such a profile passes none; the job still enforces the limit (the eviction test, real Slurm)."""
    doc = pod_doc({"restartPolicy": "Never", "containers": [{
        "name": "c", "image": "busybox:1.36", "command": ["true"],
        "resources": {"requests": {"ephemeral-storage": "2Gi"}, "limits": {"ephemeral-storage": "2Gi"}}}]})
    script = render_pod(doc, make_profile(slurm={"request_tmp": request_tmp})).script
    found = [line for line in script.splitlines() if line.startswith("#SBATCH --tmp")]
    assert found == ([directive] if directive else [])
    assert "hpk_size_limit 2097152 " in script  # the limit is watched either way

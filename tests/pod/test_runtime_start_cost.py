"""How many processes the job script starts before its first container runs (strace on the real
bash): each one costs 1-2 ms on an idle node and 10-15 ms on a loaded one (bench/run pilot's "job
script started -> c.started"), so the way to the container is kept to what needs one: the runtime's
checksum, one mkdir, one write of the job's status files, the node's address, the memory
directory's check, mkdir and link, the runner's and the container's forks, and c.started's write.
Subshells count as processes too (a fork each)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hpkctl.pod import render_pod, write_pod_dir
from hpkctl.sites import SiteProfile
from tests.support.pods import pod_doc, stub_environment

# Processes started up to the write of c.started, the container's own excluded; the launch wait's
# `sleep 0.1` polls beside it (how many depends on the machine's pace) are not counted either.
BUDGET = 9

SPEC = {"restartPolicy": "Never",
        "containers": [{"name": "app", "image": "busybox:1.36", "command": ["true"]}]}
_EVENT = re.compile(r"^(\d+) ([\d.]+) (clone3?|fork|vfork|execve)\((.*)$")


def _pilot(profile: SiteProfile) -> SiteProfile:
    return profile.model_copy(update={"pilot": profile.pilot.model_copy(update={"enabled": True})})


def merged(trace_dir: Path, prefix: str) -> str:
    """``strace -ff -ttt -o DIR/PREFIX`` writes a file per process: their lines as ``PID TIME CALL``,
    in time order."""
    lines = []
    for f in trace_dir.glob(f"{prefix}.*"):
        pid = f.name.rsplit(".", 1)[1]
        lines += [(float(line.split(" ", 1)[0]), f"{pid} {line}") for line in f.read_text().splitlines()
                  if line[:1].isdigit()]
    return "\n".join(line for _, line in sorted(lines))


def started_before_container(trace: str) -> list[str]:
    """The process creations (forks, and execs of a program) in :func:`merged` strace output, in
    order, up to the ``mv`` that writes app.started (the container's start); the container (the fork
    that runs ``setsid``) and its descendants, and the ``sleep`` polls, are left out, judged on the
    whole trace (a poll forked before the ``mv`` may exec after it)."""
    events: list[tuple[str, str, str]] = []  # (pid, "fork"/"exec", child pid or program)
    for line in trace.splitlines():
        m = _EVENT.match(line)
        if not m:
            continue
        pid, _, call, rest = m.groups()
        if call == "execve":
            events.append((pid, "exec", rest.split('"')[1].rsplit("/", 1)[-1]))
        elif (ret := re.search(r"= (\d+)\s*$", rest)) is not None:
            events.append((pid, "fork", ret.group(1)))  # a fork's return value: the child's pid
    excluded = {pid for pid, kind, what in events if kind == "exec" and what in ("setsid", "sleep")}
    for pid, kind, what in events:  # in time order: a child is forked after its parent exists
        if kind == "fork" and pid in excluded:
            excluded.add(what)
    out, marker = [], _marker_pids(trace)
    for pid, kind, what in events:
        if kind == "exec" and what == "mv" and pid in marker:
            break
        if pid in excluded or (kind == "fork" and what in excluded):
            continue
        out.append(f"{kind} {what}")
    return out


def _marker_pids(trace: str) -> set[str]:
    """The pid that ran the mv of app.started."""
    return {m.group(1) for line in trace.splitlines()
            if (m := _EVENT.match(line)) and m.group(3) == "execve" and '/app.started"' in line
            and m.group(4).split('"')[1].endswith("/mv")}


def traced_run(stub_env: dict[str, Any], mode: str) -> tuple[Path, str]:
    """SPEC's pod rendered for ``mode`` (job or pilot), its job script run under strace: (its pod
    directory, :func:`merged` trace)."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is not installed (apt-get install strace)")
    profile = stub_env["profile"] if mode == "job" else _pilot(stub_env["profile"])
    rendered = render_pod(pod_doc(SPEC), profile)
    root = write_pod_dir(rendered)
    for sif in re.findall(r"^  hpk_image (\S+) ", rendered.script, re.M):  # cached: no pull on the way
        Path(sif).parent.mkdir(parents=True, exist_ok=True)
        Path(sif).write_text("sif")
    traces = stub_env["tmp"] / "traces"
    traces.mkdir()
    record = stub_env["tmp"] / "record.jsonl"
    env = stub_environment(stub_env, record)
    r = subprocess.run([strace, "-ff", "-qq", "-z", "-ttt", "-s", "256", "-e", "trace=process", "-o",
                        str(traces / "t"), "bash", str(root / "job" / "job.sh")],
                       env=env, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert (root / "status" / "app.started").exists() and (root / "status" / "pod.done").read_text() == "0\n"
    return root, merged(traces, "t")


@pytest.mark.parametrize("mode", ["job", "pilot"])
def test_the_way_to_the_first_container_starts_few_processes(stub_env: dict[str, Any], mode: str) -> None:
    _, trace = traced_run(stub_env, mode)
    started = started_before_container(trace)
    assert any(e == "exec mv" for e in started), started  # the job's status files were written on the way
    forks = sum(1 for e in started if e.startswith("fork "))
    assert forks <= BUDGET, f"{forks} processes before the first container (the programs they ran):\n" + "\n".join(started)


def status_moves(trace: str) -> list[list[str]]:
    """The status files each ``mv`` of :func:`merged` strace output wrote, in order (their names)."""
    out = []
    for line in trace.splitlines():
        m = _EVENT.match(line)
        if m and m.group(3) == "execve" and m.group(4).split('"')[1].endswith("/mv"):
            args = re.findall(r'"([^"]*)"', m.group(4).split("]", 1)[0])[1:]
            names = [a.rsplit("/", 1)[-1] for a in args if "/status/" in a]
            out.append([n for n in names if n and not n.startswith(".")])  # not the staged or .tmp source
    return out


@pytest.mark.parametrize("mode", ["job", "pilot"])
def test_a_container_and_a_pod_end_in_one_write_each(stub_env: dict[str, Any], mode: str) -> None:
    """From the container's start, three writes (processes) to the pod's end: its start with its
    readiness (no postStart hook, no probe between them: started, then ready), its end (ready 0,
    finished, then the exit code, which says it terminated), the pod's end (no sidecars:
    pod.completing, then pod.done); and the single main container is not polled for its launch (a
    ``sleep`` each): nothing starts after it (bench/run pilot's backlog: a `true` pod's CPU)."""
    root, trace = traced_run(stub_env, mode)
    moves = status_moves(trace)
    after = moves[next(i for i, m in enumerate(moves) if "app.started" in m):]
    assert after == [["app.started", "app.ready"], ["app.ready", "app.finished", "app.exitcode"],
                     ["pod.completing", "pod.done"]]
    assert not re.search(r'execve\("[^"]*/sleep"', trace)
    st = root / "status"
    assert (st / "app.ready").read_text() == "0\n" and (st / "app.exitcode").read_text() == "0\n"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n", (st / "app.finished").read_text())
    assert (st / "pod.completing").exists()


def test_the_count_sees_forks_execs_and_leaves_out_the_container() -> None:
    trace = "\n".join([
        '10 1.0 execve("/bin/bash", ["bash", "job.sh"], 0x1 /* 3 vars */) = 0',
        '10 1.1 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x1) = 11',
        '11 1.2 execve("/usr/bin/sha256sum", ["sha256sum"], 0x1 /* 3 vars */) = 0',
        '10 1.3 clone(child_stack=NULL, flags=SIGCHLD, child_tidptr=0x1) = 12',
        '12 1.4 clone(child_stack=NULL, flags=SIGCHLD) = 13',
        '13 1.5 execve("/usr/bin/setsid", ["setsid", "apptainer"], 0x1 /* 3 vars */) = 0',
        '13 1.6 clone(child_stack=NULL, flags=SIGCHLD) = 14',
        '14 1.7 execve("/usr/bin/true", ["true"], 0x1 /* 3 vars */) = 0',
        '10 1.8 clone(child_stack=NULL, flags=SIGCHLD) = 15',
        '15 1.9 execve("/usr/bin/sleep", ["sleep", "0.1"], 0x1 /* 3 vars */) = 0',
        '12 2.0 clone(child_stack=NULL, flags=SIGCHLD) = 16',
        '16 2.1 execve("/usr/bin/mv", ["mv", "-f", "x", "status/app.started"], 0x1 /* 3 vars */) = 0',
        '10 2.2 clone(child_stack=NULL, flags=SIGCHLD) = 17',
    ])
    assert started_before_container(trace) == ["exec bash", "fork 11", "exec sha256sum", "fork 12", "fork 16"]


def test_timestamps_worked_out_in_bash_agree_with_date() -> None:
    """hpk_iso (what every status file's time is, now without `date`) against GNU date, around leap
    days, centuries, the epoch and now."""
    text = (Path(__file__).resolve().parents[2] / "sbatch" / "runtime.sh").read_text()
    funcs = "".join(m.group(0) for f in ("hpk_iso", "hpk_clock", "hpk_now")
                    if (m := re.search(rf"^{f}\(\) \{{\n.*?^\}}\n", text, re.S | re.M)))
    epochs = [0, 59, 86399, 86400, 951782400, 951868799, 951868800, 978307199, 1709164800, 1709251199,
              4107542400, 4107628800, 2147483647, 253402300799, -1, -86400]
    script = funcs + "for e in " + " ".join(map(str, epochs)) + '; do hpk_iso t "$e"; printf "%s\\n" "$t"; done; hpk_now'
    got = subprocess.run(["bash", "-c", "set -u\n" + script], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "TZ": "Europe/Berlin"}).stdout.split()
    want = subprocess.run(["date", "-u", "-f", "-", "+%Y-%m-%dT%H:%M:%SZ"], input="".join(f"@{e}\n" for e in epochs),
                          capture_output=True, text=True, check=True).stdout.split()
    assert got[:-1] == want
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", got[-1])  # now, in UTC whatever TZ says

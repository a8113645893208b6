"""How Slurm commands are run: the scrubbed per-call environment, finding binaries, the timeout.

Most tests here start real processes (tiny fake ``squeue``/``sbatch``/``scancel`` scripts in a tmp
``bin_dir`` that dump their environment), because the claim is about what reaches an exec, not
about the arguments handed to ``Popen``.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest
from plumbum import local

from hpkctl.jobs import Slurm, SlurmTimeout, SlurmUnavailable
from hpkctl.jobs import command as command_module
from hpkctl.jobs.command import SCRUBBED_PREFIXES, Commands

# Variables /bin/sh (dash) adds by itself when it runs the fake command.
_SHELL_VARS = {"PWD", "OLDPWD", "SHLVL", "_"}


def cmd(fp, name: str):  # noqa: ANN001, ANN201 - pytest-subprocess matcher
    return [fp.program(name), fp.any()]


def _fake_bin(tmp_path: Path, name: str, body: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _running(pid: int) -> bool:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def _dumped(path: Path) -> dict[str, str]:
    env = dict(ln.split("=", 1) for ln in path.read_text().splitlines() if "=" in ln)
    return {k: v for k, v in env.items() if k not in _SHELL_VARS}


# ---------------------------------------------------------------------------- the environment, computed


def test_environment_is_scrubbed(fp, section, tmp_path) -> None:
    rec = fp.register(cmd(fp, "sbatch"), stdout="1\n")
    env = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "SLURM_JOB_ID": "99",
        "SLURM_CONF": "/other/slurm.conf",
        "SLURMD_NODENAME": "n1",
        "SBATCH_PARTITION": "wrong",
        "SALLOC_ACCOUNT": "x",
        "SQUEUE_FORMAT": "%i",
        "SACCT_FORMAT": "x",
        "SCANCEL_USER": "x",
        "SRUN_CPUS_PER_TASK": "4",
        "MY_SLURM_NOTE": "kept: prefix only",
    }
    Slurm(section(conf_file="/etc/slurm-x/slurm.conf"), env=env).submit(tmp_path / "j.sh")
    got = rec.calls[0].kwargs["env"]
    assert got == {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "MY_SLURM_NOTE": "kept: prefix only",
        "SLURM_CONF": "/etc/slurm-x/slurm.conf",
    }


def test_no_slurm_conf_without_conf_file(section) -> None:
    env = Commands(section(), env={"SLURM_CONF": "/x", "PATH": "/bin"}).env()
    assert env == {"PATH": "/bin"}


def test_environment_defaults_to_the_process_environment_at_call_time(section, monkeypatch) -> None:
    commands = Commands(section())
    monkeypatch.setenv("HPK_TEST_MARK", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    env = commands.env()
    assert env["HPK_TEST_MARK"] == "1" and "SLURM_JOB_ID" not in env


# ---------------------------------------------------------------------------- the environment, as exec'd


def test_process_environment_does_not_reach_the_command(section, tmp_path, monkeypatch) -> None:
    # (a) SLURM_JOB_ID set in this process (os.environ and plumbum's import-time copy local.env,
    # which plumbum's LocalMachine merges into every command) must not reach a real exec.
    bin_dir = _fake_bin(tmp_path, "squeue", 'env > "$ENV_DUMP"\n')
    dump = tmp_path / "env.txt"
    for name, value in {"SLURM_JOB_ID": "99", "SBATCH_PARTITION": "wrong", "HPK_NOT_IN_BASE": "1"}.items():
        monkeypatch.setenv(name, value)
        monkeypatch.setitem(local.env, name, value)
    before = dict(os.environ), local.env.getdict()
    base = {"PATH": "/usr/bin:/bin", "ENV_DUMP": str(dump), "SQUEUE_USERS": "x", "SLURM_JOBID": "9"}
    Slurm(section(bin_dir=str(bin_dir), conf_file="/c/slurm.conf"), env=base).query(["1"])
    # Exactly the scrubbed base: nothing from os.environ / local.env, not even a harmless variable.
    assert _dumped(dump) == {"PATH": "/usr/bin:/bin", "ENV_DUMP": str(dump), "SLURM_CONF": "/c/slurm.conf"}
    assert (dict(os.environ), local.env.getdict()) == before  # nothing process-wide was touched


def test_process_environment_is_the_default_base_but_scrubbed(section, tmp_path, monkeypatch) -> None:
    bin_dir = _fake_bin(tmp_path, "squeue", 'env > "$ENV_DUMP"\n')
    dump = tmp_path / "env.txt"
    monkeypatch.setenv("ENV_DUMP", str(dump))
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SQUEUE_FORMAT", "%i")
    monkeypatch.setenv("HPK_SLURM_JOB", "7_1")  # a batch element's identity: not a job submitted from it
    Slurm(section(bin_dir=str(bin_dir))).query(["1"])
    got = _dumped(dump)
    assert not [k for k in got if k.startswith(SCRUBBED_PREFIXES)] and "HPK_SLURM_JOB" not in got
    assert got["ENV_DUMP"] == str(dump) and got.get("PATH") == os.environ.get("PATH")


def test_concurrent_commands_each_get_their_own_environment(section, tmp_path) -> None:
    # (b) Many threads, sbatch and squeue alike, each with its own base env and conf file: every
    # process sees exactly its own caller's scrubbed environment.
    _fake_bin(tmp_path, "sbatch", 'env > "$ENV_DUMP"\necho 42\n')
    bin_dir = _fake_bin(tmp_path, "squeue", 'env > "$ENV_DUMP"\n')
    errors: list[BaseException] = []
    start = threading.Barrier(12)

    def worker(i: int) -> None:
        try:
            start.wait()
            for k in range(8):
                dump = tmp_path / f"env-{i}-{k}.txt"
                base = {"PATH": "/usr/bin:/bin", "ENV_DUMP": str(dump), f"ONLY_{i}": str(k), "SLURM_JOB_ID": str(i)}
                slurm = Slurm(section(bin_dir=str(bin_dir), conf_file=f"/conf/{i}"), env=base)
                if k % 2:
                    assert slurm.submit(tmp_path / "job.sh") == "42"
                else:
                    slurm.query(["1"])
                expected = {**base, "SLURM_CONF": f"/conf/{i}"}
                del expected["SLURM_JOB_ID"]
                assert _dumped(dump) == expected
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_one_slurm_shared_by_threads(section, tmp_path) -> None:
    # The kubelet shares one Slurm object between threads: no call sees another's output or env.
    bin_dir = _fake_bin(tmp_path, "squeue", 'for a; do case $a in --jobs=*) id=${a#--jobs=} ;; esac; done\n'
                                            'echo "$id|RUNNING|n1|N/A|N/A|None"\n')
    slurm = Slurm(section(bin_dir=str(bin_dir)), env={"PATH": "/usr/bin:/bin"})
    results: dict[int, list[str]] = {}

    def worker(i: int) -> None:
        results[i] = [next(iter(slurm.query([str(i * 100 + k)]))) for k in range(5)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: [str(i * 100 + k) for k in range(5)] for i in range(1, 9)}


def test_scrubbed_machine_environment_stays_empty_and_read_only(section, tmp_path) -> None:
    from hpkctl.jobs.scrubbed import SCRUBBED

    bin_dir = _fake_bin(tmp_path, "squeue", "exit 0\n")
    Slurm(section(bin_dir=str(bin_dir)), env={"PATH": "/bin", "X": "1"}).query(["1"])
    assert len(SCRUBBED.env) == 0 and SCRUBBED.env.getdict() == {}
    with pytest.raises(TypeError, match="read-only"):
        SCRUBBED.env["SLURM_JOB_ID"] = "1"
    with pytest.raises(TypeError):
        SCRUBBED.env.update({"A": "1"})
    assert len(SCRUBBED.env) == 0


#: Where hpkctl/jobs may start a process other than through plumbum's scrubbed machine: the
#: long-running srun of a pilot step (steps.py, a child in its own session that outlives the call)
#: and of exec (step.py, asyncio streams). A short command (sbatch, squeue, scancel, scontrol,
#: sacct...) goes through Commands.run, so it gets the scrubbed environment, the timeout and the
#: process-group kill in one place.
_OTHER_STARTS = {"steps.py": {"subprocess.Popen"}, "step.py": {"asyncio.create_subprocess_exec"}}
_STARTS = {"subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_call",
           "subprocess.check_output", "subprocess.getoutput", "subprocess.getstatusoutput",
           "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell", "os.posix_spawn",
           "os.posix_spawnp", "os.fork"}


def _starts(source: str) -> set[str]:
    """``module.function`` of each process-starting call in ``source`` (attribute calls, as written)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            value = node.func.value
            if isinstance(value, ast.Name) and f"{value.id}.{node.func.attr}" in _STARTS:
                found.add(f"{value.id}.{node.func.attr}")
        if isinstance(node, ast.ImportFrom) and node.module in ("subprocess", "asyncio", "os"):
            found |= {f"{node.module}.{a.name}" for a in node.names} & _STARTS
    return found


def test_short_slurm_commands_start_only_through_the_scrubbed_plumbum_machine() -> None:
    """Slurm's short commands run through plumbum (jobs/scrubbed.py), as the layer promises; a
    ``subprocess.Popen`` beside Commands.run would bypass the timeout and the group kill."""
    jobs_dir = Path(command_module.__file__).parent
    got = {p.name: s for p in sorted(jobs_dir.glob("*.py")) if (s := _starts(p.read_text()))}
    assert got == _OTHER_STARTS, (
        f"process starts in hpkctl/jobs outside Commands.run: {got}; run a short Slurm command with "
        "Commands.run (plumbum's scrubbed machine), or add a long-running child to _OTHER_STARTS with why")
    assert _starts("import subprocess\nsubprocess.run(['squeue'])\n") == {"subprocess.run"}  # the scan sees one


def test_commands_run_starts_its_process_on_the_scrubbed_machine(section, tmp_path, monkeypatch) -> None:
    from hpkctl.jobs import scrubbed

    started: list[tuple[str, list[str]]] = []
    real = scrubbed.popen

    def recording(exe: str, args: list[str], *, env: dict[str, str]) -> scrubbed.Proc:
        started.append((Path(exe).name, list(args)))
        return real(exe, args, env=env)

    monkeypatch.setattr(scrubbed, "popen", recording)
    bin_dir = _fake_bin(tmp_path, "squeue", "exit 0\n")
    Slurm(section(bin_dir=str(bin_dir)), env={"PATH": "/bin"}).query(["1"])
    assert [name for name, _ in started] == ["squeue"]


# ---------------------------------------------------------------------------- finding and running commands


def test_missing_binary_in_bin_dir(section, tmp_path) -> None:
    with pytest.raises(SlurmUnavailable) as exc:
        Slurm(section(bin_dir=str(tmp_path))).query(["1"])
    assert "slurm.bin_dir" in exc.value.hint and str(tmp_path / "squeue") in exc.value.message


def test_missing_binary_on_path_is_found_lazily(section, tmp_path) -> None:
    slurm = Slurm(section(bin_dir=""), env={"PATH": str(tmp_path)})  # constructing never looks
    with pytest.raises(SlurmUnavailable, match="squeue not found on PATH") as exc:
        slurm.query(["1"])
    assert "slurm.bin_dir" in exc.value.hint
    _fake_bin(tmp_path, "squeue", "exit 0\n")  # installed later: found at the next call
    assert Slurm(section(bin_dir=""), env={"PATH": str(tmp_path / "bin")}).query(["1"]) == {}


def test_timeout_kills_and_names_the_command(section, tmp_path) -> None:
    # (c) a hung command is killed after slurm.command_timeout, with a SlurmTimeout.
    pid_file = tmp_path / "pid"
    bin_dir = _fake_bin(tmp_path, "scancel", f'echo $$ > "{pid_file}"\nexec sleep infinity\n')
    with pytest.raises(SlurmTimeout) as exc:  # returns at all: the command never ends on its own
        Slurm(section(bin_dir=str(bin_dir), command_timeout=0.3)).cancel("12")
    assert "scancel" in exc.value.message and "0.3 s" in exc.value.message
    assert "slurm.command_timeout" in exc.value.hint
    assert isinstance(exc.value, SlurmUnavailable)
    assert not _running(int(pid_file.read_text()))  # killed, not left behind


def test_timeout_kills_what_a_wrapper_script_started(section, tmp_path) -> None:
    # A site's sbatch wrapper that runs the real one as a child (no exec): killing only the wrapper
    # would leave the child holding the output pipes, and the caller waiting until it ends.
    pid_file = tmp_path / "child"
    bin_dir = _fake_bin(tmp_path, "sbatch", f'sleep infinity &\necho $! > "{pid_file}"\nwait\n')
    with pytest.raises(SlurmTimeout, match="sbatch did not finish within 0.5 s"):  # the child never ends
        Slurm(section(bin_dir=str(bin_dir), command_timeout=0.5)).submit(tmp_path / "job.sh")
    child = int(pid_file.read_text())
    for _ in range(50):  # SIGKILLed (a zombie until init reaps the orphan counts as dead)
        if not _running(child):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the wrapper's child {child} survived the timeout")


def test_a_hung_command_in_one_thread_does_not_hold_up_others(section, tmp_path) -> None:
    # the other thread's scancel hangs until the test releases it (its timeout is only a safety net)
    release = tmp_path / "release"
    bin_dir = _fake_bin(tmp_path, "scancel", f'while [ ! -e "{release}" ]; do sleep 0.05; done\n')
    _fake_bin(tmp_path, "squeue", "exit 0\n")
    slurm = Slurm(section(bin_dir=str(bin_dir), command_timeout=120.0), env={"PATH": "/usr/bin:/bin"})
    outcome: list[str] = []

    def hung() -> None:
        slurm.cancel("7")
        outcome.append("ended")

    t = threading.Thread(target=hung)
    t.start()
    assert slurm.query(["1"]) == {}  # runs while the other thread's command hangs
    assert t.is_alive() and outcome == []  # ... which still hangs: the query did not wait for it
    release.touch()
    t.join(60)
    assert outcome == ["ended"]


def test_every_command_gets_the_timeout(fp, section, monkeypatch) -> None:
    seen: list[float] = []
    real = command_module._finish

    def spy(proc, *, timeout):  # noqa: ANN001, ANN202
        seen.append(timeout)
        return real(proc, timeout=timeout)

    monkeypatch.setattr(command_module, "_finish", spy)
    errors = Path(__file__).parent / "fixtures" / "errors"
    fp.register(cmd(fp, "squeue"), stdout="")
    fp.register(cmd(fp, "scancel"))
    fp.register(cmd(fp, "scontrol"), stderr=(errors / "scontrol_invalid_job_id.txt").read_text(), returncode=1)
    fp.register(cmd(fp, "sacct"), stderr=(errors / "sacct_disabled.txt").read_text(), returncode=1)
    fp.register(cmd(fp, "sbatch"), stdout="3\n")
    slurm = Slurm(section(command_timeout=7.5))
    slurm.query(["1"])
    slurm.cancel("1")
    slurm.final("1")
    slurm.submit(Path("/x.sh"))
    assert seen == [7.5] * 5


def test_local_env_untouched_by_faked_runs(fp, section) -> None:
    before = dict(os.environ), local.env.getdict()
    fp.register(cmd(fp, "squeue"), stdout="")
    Slurm(section(conf_file="/x")).query(["1"])
    assert (dict(os.environ), local.env.getdict()) == before

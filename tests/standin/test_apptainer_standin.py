"""The Apptainer stand-in (ci/standin/apptainer) against Apptainer 1.3's documented behaviour.

Citations: "docs FILE:LINE" are lines of apptainer/apptainer-userdocs (branch 1.3); "src FILE"
are files of apptainer/apptainer at tag v1.3.0 where the docs are silent. Deliberate deviations
are listed in ci/standin/README.md and tested as such.
"""

from __future__ import annotations

import os
import signal
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.standin import APPTAINER, STORE, Standin

pytestmark = pytest.mark.standin


def env_of(out: str) -> dict[str, str]:
    """Parse `cat /proc/self/environ` output."""
    return dict(item.split("=", 1) for item in out.split("\0") if item)


def kubelet_env_file(values: dict[str, str]) -> str:
    """The env file the job writes (sbatch/pod.sh.j2 hpk_env_add): NAME='value', ' as '\\''."""
    return "".join("%s='%s'\n" % (k, v.replace("'", "'\\''")) for k, v in values.items())


# ---------------------------------------------------------------- version, command line errors
def test_version(standin: Standin) -> None:
    # src cmd/internal/cli/apptainer.go: --version prints "apptainer version X", `version` X
    r = standin.run("--version")
    assert (r.rc, r.out) == (0, "apptainer version 1.3.0-standin\n")
    r = standin.run("version")
    assert (r.rc, r.out) == (0, "1.3.0-standin\n")


@pytest.mark.parametrize("args, message", [
    (["exec", "--foo", "IMG", "true"], 'Error for command "exec": unknown flag: --foo'),
    (["exec", "--bind"], 'Error for command "exec": flag needs an argument: --bind'),
    (["run", "-Z", "IMG"], "Error for command \"run\": unknown shorthand flag: 'Z' in -Z"),
    (["exec", "--cleanenv=maybe", "IMG", "true"], 'invalid argument "maybe" for "-e, --cleanenv" flag'),
    (["exec", "IMG"], 'Error for command "exec": requires at least 2 arg(s), only received 1'),
    (["pull", "a", "b", "c"], 'Error for command "pull": accepts between 1 and 2 arg(s), received 3'),
    (["frobnicate"], 'Error: unknown command "frobnicate" for "apptainer"'),
])
def test_command_line_errors_exit_1_like_cobra(standin: Standin, args: list[str], message: str) -> None:
    # src cmd/internal/cli/apptainer.go ExecuteApptainer: flag and argument errors print
    # 'Error for command "x": ...' with the usage and call os.Exit(1) (not sylog.Fatalf/255)
    r = standin.run(*args)
    assert r.rc == 1, r.both
    assert message in r.err


def test_both_flag_forms_and_unimplemented_real_flags(standin: Standin, busybox_sif: Path) -> None:
    r = standin.run("exec", "--pwd=/etc", "--hostname", "h1", str(busybox_sif), "sh", "-c", "pwd; hostname")
    assert (r.rc, r.out) == (0, "/etc\nh1\n"), r.both
    # a real Apptainer flag the stand-in does not implement: a clear FATAL, never silently ignored
    r = standin.run("exec", "--containall", str(busybox_sif), "true")
    assert r.rc == 255 and r.err.startswith("FATAL:   the stand-in does not implement --containall")


def test_missing_image(standin: Standin) -> None:
    # src internal/pkg/runtime/launch/launcher_linux.go checkEncryptionKey -> sylog.Fatalf (255)
    r = standin.run("exec", str(standin.workdir / "nope.sif"), "true")
    assert r.rc == 255
    assert r.err.startswith("FATAL:   While checking container encryption: could not open image ")
    assert "no such file or directory" in r.err


def test_command_not_found(standin: Standin, busybox_sif: Path) -> None:
    # src internal/pkg/runtime/engine/apptainer/process_linux.go: LookPath error is fatal
    r = standin.run("exec", str(busybox_sif), "no-such-command")
    assert r.rc == 255
    assert r.err == 'FATAL:   "no-such-command": executable file not found in $PATH\n'


# ---------------------------------------------------------------- exit codes and signals
def test_exit_code_propagates(standin: Standin, busybox_sif: Path) -> None:
    r = standin.run("exec", str(busybox_sif), "sh", "-c", "echo out; echo err >&2; exit 42")
    assert (r.rc, r.out, r.err) == (42, "out\n", "err\n")


def test_sigterm_reaches_the_container_process(standin: Standin, busybox_sif: Path) -> None:
    # src internal/pkg/runtime/engine/apptainer/process_linux.go: the starter forwards every
    # signal to the container process and exits with its status
    script = "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done"
    p = standin.popen("exec", str(busybox_sif), "sh", "-c", script)
    assert p.stdout is not None
    assert p.stdout.readline() == b"ready\n"
    _signal_standin(p, signal.SIGTERM)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 7, err
    assert out == b"got-term\n"


def test_sigterm_kills_the_container_and_standin_dies_of_it(standin: Standin, busybox_sif: Path) -> None:
    # src internal/app/starter/master_linux.go: a container killed by a signal makes the
    # starter raise the same signal on itself
    marker = standin.workdir / "still-running"
    p = standin.popen("exec", str(busybox_sif), "sh", "-c",
                      f"echo $$; sleep 5; touch {marker}")
    assert p.stdout is not None
    shell = _Process(int(p.stdout.readline()))  # no PID namespace: $$ is the host's pid
    assert shell.alive()
    _signal_standin(p, signal.SIGTERM)
    p.wait(timeout=20)  # not communicate(): the orphaned `sleep` holds the pipes for 5 s
    p.stdout.close()
    assert p.stderr is not None
    p.stderr.close()
    # via runuser the stand-in's death by SIGTERM shows as 128+15
    assert p.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)
    # the container's shell goes with the stand-in; a survivor would touch the marker after 5 s
    deadline = time.monotonic() + 3
    while shell.alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not shell.alive(), "the container outlived the stand-in"
    assert not marker.exists()


class _Process:
    """A process seen in /proc, identified by pid and start time (so a reused pid is not it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start = self._stat()[19]

    def _stat(self) -> list[str]:
        # fields after "comm)": state is [0], starttime (field 22 of proc(5)) is [19]
        return Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()

    def alive(self) -> bool:
        try:
            fields = self._stat()
        except OSError:
            return False
        return fields[19] == self.start and fields[0] not in ("Z", "X")


def _signal_standin(p: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the stand-in process itself (below runuser/env when the tests run as root)."""
    target = p.pid
    if os.geteuid() == 0:
        deadline = time.time() + 10
        while time.time() < deadline:
            found = _descendant_running(p.pid, str(APPTAINER))
            if found:
                target = found
                break
            time.sleep(0.05)
    os.kill(target, sig)


def _descendant_running(root: int, needle: str) -> int | None:
    children: dict[int, list[int]] = {}
    cmd: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd[int(d)] = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    todo = [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            if needle in cmd.get(c, "") and "runuser" not in cmd[c] and not cmd[c].startswith("env "):
                return c
            todo.append(c)
    return None


# ---------------------------------------------------------------- environment
@given(values=st.dictionaries(
    keys=st.from_regex(r"\A[A-Z][A-Z0-9_]{0,12}\Z"),
    values=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
                   max_size=40),
    min_size=1, max_size=6))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_env_file_round_trip(standin: Standin, busybox_sif: Path, values: dict[str, str]) -> None:
    # docs environment_and_metadata.rst:273-284 (--env-file holds NAME=VALUE in shell syntax) and
    # :371-410: with --no-eval values are not evaluated again in the container, so quotes,
    # newlines, $(...), backticks and any unicode survive exactly
    values = {k: v for k, v in values.items()
              if k not in ("HOME", "PWD", "UID", "GID", "EUID", "IFS", "OPTIND", "PATH",
                           "LD_LIBRARY_PATH", "PS1", "PROMPT_COMMAND")}
    envfile = standin.file("vars.env", kubelet_env_file(values), 0o600)
    r = standin.run("exec", "--cleanenv", "--no-eval", "--env-file", str(envfile), str(busybox_sif),
                    "cat", "/proc/self/environ")
    assert r.rc == 0, r.both
    got = env_of(r.out)
    for k, v in values.items():
        if v == "":
            # the action script's restore_env would unset it only if it came from the host
            assert got.get(k) == "", k
        else:
            assert got.get(k) == v, k


def test_env_file_tricky_values(standin: Standin, busybox_sif: Path) -> None:
    values = {"Q": "it's \"quoted\"", "NL": "a\nb\n", "CMD": "$(id) `id` ${HOME}",
              "BS": "back\\slash\\", "U": "ünï©ødé ✓", "EQ": "a=b=c", "SP": "  lead and trail  "}
    envfile = standin.file("vars.env", kubelet_env_file(values), 0o600)
    r = standin.run("exec", "--cleanenv", "--no-eval", "--env-file", str(envfile), str(busybox_sif),
                    "cat", "/proc/self/environ")
    assert r.rc == 0, r.both
    got = env_of(r.out)
    assert {k: got.get(k) for k in values} == values
    # bytes that are not UTF-8 pass too (the file is read as bytes)
    envfile.write_bytes(b"RAW='\xff\xfe x'\n")
    r = standin.run("exec", "--cleanenv", "--no-eval", "--env-file", str(envfile), str(busybox_sif),
                    "cat", "/proc/self/environ")
    assert b"RAW=\xff\xfe x\0" in r.out.encode(errors="surrogateescape")


def test_env_file_values_are_evaluated_again_without_no_eval(standin: Standin, busybox_sif: Path) -> None:
    # docs environment_and_metadata.rst:373-404: "by default a single step of shell evaluation
    # happens in the container context" -- MYVAR='$(date)' becomes the output of date
    envfile = standin.file("vars.env", kubelet_env_file({"A": "$(echo evaluated)", "B": "$HOME/x",
                                                         "C": "plain"}))
    r = standin.run("exec", "--cleanenv", "--env-file", str(envfile), str(busybox_sif),
                    "cat", "/proc/self/environ")
    assert r.rc == 0, r.both
    got = env_of(r.out)
    assert (got["A"], got["B"], got["C"]) == ("evaluated", f"{standin.home}/x", "plain")


def test_env_file_never_executes_commands_while_parsing(standin: Standin, busybox_sif: Path) -> None:
    # src internal/pkg/util/shell/interpreter/interpreter.go EvaluateEnv: command execution
    # is disabled while the file is evaluated
    marker = standin.workdir / "pwned"
    for text in (f"X=$(touch {marker})\n", f"touch {marker}\n", f"X=`touch {marker}`\n"):
        envfile = standin.file("bad.env", text)
        r = standin.run("exec", "--env-file", str(envfile), str(busybox_sif), "true")
        assert r.rc == 255, r.both
        assert "execution is disabled" in r.err
        assert not marker.exists()


def test_env_file_shell_syntax(standin: Standin, busybox_sif: Path) -> None:
    # shell syntax: comments, double quotes with $NAME from the host environment, export,
    # several assignments on a line; HOME cannot be overridden (src .../env/env.go ReadOnlyVars)
    text = '# comment\nA="x $GREETING" B=2; export C=3\nHOME=/nope\nPATH=/custom:/bin\n'
    envfile = standin.file("vars.env", text)
    r = standin.run("exec", "--cleanenv", "--no-eval", "--env-file", str(envfile), str(busybox_sif),
                    "/bin/cat", "/proc/self/environ", env={"GREETING": "hello"})
    assert r.rc == 0, r.both
    got = env_of(r.out)
    assert (got["A"], got["B"], got["C"]) == ("x hello", "2", "3")
    assert got["HOME"] == standin.home
    assert got["PATH"] == "/custom:/bin"     # PATH from the env file replaces the image's


def test_cleanenv(standin: Standin, busybox_sif: Path) -> None:
    # docs environment_and_metadata.rst:187-206 and src internal/pkg/util/env/create.go:
    # --cleanenv keeps only TERM and the proxy variables, sets LANG=C, HOME and PATH
    host = {"FOO": "bar", "http_proxy": "http://proxy:3128", "PATH": "/host/only:/usr/bin:/bin"}
    r = standin.run("exec", str(busybox_sif), "cat", "/proc/self/environ", env=host)
    dirty = env_of(r.out)
    assert dirty["FOO"] == "bar"
    assert dirty["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    r = standin.run("exec", "--cleanenv", str(busybox_sif), "cat", "/proc/self/environ", env=host)
    clean = env_of(r.out)
    assert "FOO" not in clean
    assert clean["http_proxy"] == "http://proxy:3128" and clean["TERM"] == "xterm"
    assert clean["LANG"] == "C" and clean["HOME"] == standin.home
    assert clean["APPTAINER_COMMAND"] == "exec" and clean["APPTAINER_NAME"] == busybox_sif.name
    assert clean["LD_LIBRARY_PATH"] == "/.singularity.d/libs"
    assert set(clean) <= {"LANG", "TERM", "http_proxy", "HOME", "PATH", "PWD", "LD_LIBRARY_PATH", "PS1",
                          "PROMPT_COMMAND", "APPTAINER_COMMAND", "APPTAINER_CONTAINER", "APPTAINER_NAME",
                          "APPTAINER_ENVIRONMENT", "SINGULARITY_CONTAINER", "SINGULARITY_NAME",
                          "SINGULARITY_ENVIRONMENT", "https_proxy"}


# ---------------------------------------------------------------- filesystem
def test_root_is_read_only_without_writable_tmpfs(standin: Standin, busybox_sif: Path) -> None:
    # src action_flags.go --writable-tmpfs: "makes the file system accessible as read-write
    # with non persistent data"; without it a SIF's root file system is read-only
    r = standin.run("exec", str(busybox_sif), "touch", "/newfile")
    assert r.rc == 1 and "Read-only file system" in r.err
    r = standin.run("exec", "--writable-tmpfs", str(busybox_sif), "sh", "-c",
                    "touch /newfile /tmp/../etc/x && echo ok")
    assert (r.rc, r.out) == (0, "ok\n"), r.both
    r = standin.run("exec", str(busybox_sif), "ls", "/newfile")     # not persistent
    assert r.rc != 0


def test_bind_rw_and_ro(standin: Standin, busybox_sif: Path) -> None:
    # docs bind_paths_and_mounts.rst:107-118: src[:dest[:opts]], opts ro or rw (default)
    data = standin.dir("data")
    (data / "in.txt").write_text("from host\n")
    r = standin.run("exec", "--bind", f"{data}:/data", "--bind", f"{data}:/ro:ro", str(busybox_sif),
                    "sh", "-c", "cat /data/in.txt; echo w > /data/out.txt; echo w > /ro/x; echo rc=$?")
    assert r.out == "from host\nrc=1\n", r.both
    assert "Read-only file system" in r.err
    assert (data / "out.txt").read_text() == "w\n"
    # dest defaults to src; several specs in one value; APPTAINER_BIND lists the destinations
    r = standin.run("exec", "--bind", f"{data},{data}:/other:rw", str(busybox_sif), "sh", "-c",
                    'cat "$0/in.txt" /other/in.txt; echo "$APPTAINER_BIND"', str(data))
    assert r.out == f"from host\nfrom host\n{data},/other\n", r.both


@pytest.mark.parametrize("spec, message", [
    ("{d}:/x:rx", "While setting bind mount configuration: while parsing bind path: while getting "
                  "bind path: rx is not a valid bind option"),
    (":/x", 'empty bind source for bind path ":/x"'),
    ("{d}:/x:ro:extra", "wrong bind syntax"),
    ("{d}/missing:/x", "mount source {d}/missing doesn't exist"),
    ("{d}:relative", "destination must be an absolute path"),
])
def test_bad_bind_spec(standin: Standin, busybox_sif: Path, spec: str, message: str) -> None:
    # src pkg/runtime/engine/apptainer/config/bind.go (parsing), container_linux.go (mounting)
    d = standin.workdir
    r = standin.run("exec", "--bind", spec.format(d=d), str(busybox_sif), "true")
    assert r.rc == 255, r.both
    assert r.err.startswith("FATAL:   ") and message.format(d=d) in r.err


def test_default_mounts_and_no_mount(standin: Standin, busybox_sif: Path) -> None:
    # docs bind_paths_and_mounts.rst:35-49 (home, cwd, /dev, /etc/hosts, /etc/localtime, /proc,
    # /sys, /tmp, /var/tmp) and :56-74 (--no-mount)
    marker = f"standin-{os.getpid()}-{time.time_ns()}"
    Path("/tmp", marker).write_text("x")
    try:
        script = f'test -e /tmp/{marker} && echo tmp; test -d "$HOME" && echo home; pwd; echo HOME=$HOME'
        r = standin.run("exec", str(busybox_sif), "sh", "-c", script)
        assert r.out == f"tmp\nhome\n{standin.workdir}\nHOME={standin.home}\n", r.both
        r = standin.run("exec", "--no-mount", "home,cwd,tmp", str(busybox_sif), "sh", "-c", script)
        # cwd and $HOME are gone, so the process starts in /
        assert r.out == f"/\nHOME={standin.home}\n", r.both
        # /tmp is the image's: read-only unless --writable-tmpfs
        r = standin.run("exec", "--no-mount", "tmp", str(busybox_sif), "touch", "/tmp/x")
        assert "Read-only file system" in r.err
        r = standin.run("exec", "--no-mount", "tmp", "--writable-tmpfs", str(busybox_sif), "sh", "-c",
                        f"touch /tmp/x && ! test -e /tmp/{marker} && echo image-tmp")
        assert r.out == "image-tmp\n", r.both
    finally:
        Path("/tmp", marker).unlink()
    # an unknown mount type is ignored with a warning (src launcher_linux.go setNoMountFlags)
    r = standin.run("exec", "--no-mount", "bogus", str(busybox_sif), "true")
    assert r.rc == 0 and "WARNING: Ignoring unknown mount type 'bogus'" in r.err


def test_dev_shm_is_shared_between_containers(standin: Standin, busybox_sif: Path) -> None:
    # 'mount dev = yes' (the default): the host's /dev, so containers of a pod share /dev/shm
    name = f"standin-shm-{os.getpid()}"
    r = standin.run("exec", str(busybox_sif), "sh", "-c", f"echo shared > /dev/shm/{name}")
    assert r.rc == 0, r.both
    r = standin.run("exec", str(busybox_sif), "cat", f"/dev/shm/{name}")
    Path("/dev/shm", name).unlink()
    assert r.out == "shared\n"



def test_no_mount_dev_leaves_no_usable_device(standin: Standin, busybox_sif: Path) -> None:
    # Why `--no-mount dev` cannot give a container /dev/termination-log (issue 22.8). Apptainer
    # v1.3.0-v1.5.3 internal/pkg/runtime/engine/apptainer/container_linux.go: addDevMount mounts
    # no /dev at all ("disallowed by configuration"; /dev is the image's, where the underlay creates
    # a missing bind destination: underlay_linux.go createLayer), addUserbindsMount skips every bind
    # whose source and destination start with /dev ("Skipping ... disallowed by configuration"),
    # and mounts every other bind MS_NODEV (its defaultFlags): a device node reached through a
    # source outside /dev (a symlink) is there but cannot be opened.
    (standin.workdir / "null").symlink_to("/dev/null")
    msg = standin.file("termination-log", "")
    r = standin.run("exec", "--contain", "--no-mount", "dev", "--bind", "/dev/zero",
                    "--bind", f"{standin.workdir}/null:/dev/null", "--bind", f"{msg}:/dev/termination-log",
                    str(busybox_sif), "sh", "-c",
                    "test -e /dev/zero || echo no-zero; echo x > /dev/null || echo no-null; "
                    "echo Sleep expired > /dev/termination-log && echo written")
    assert "WARNING: Skipping /dev/zero bind mount: disallowed by configuration" in r.err, r.both
    assert r.out == "no-zero\nno-null\nwritten\n", r.both
    assert "Permission denied" in r.err
    assert msg.read_text() == "Sleep expired\n"


def test_a_file_is_bound_over_a_device_a_bind_adds_to_the_minimal_dev(standin: Standin, busybox_sif: Path) -> None:
    # container_linux.go addUserbindsMount: under --contain a bind naming one host path under /dev
    # adds it to the staged /dev (addSessionDev, a DevTag mount); a second one is "already mounted".
    # DevTag mounts precede every user bind (mount_linux.go authorizedTags order), so a file bound
    # at that path lands over the device whatever the order of the --binds (how a site's
    # [apptainer] binds make a terminationMessagePath under /dev work, issue 22.8).
    msg = standin.file("termination-log", "")
    r = standin.run("exec", "--contain", "--bind", f"{msg}:/dev/full", "--bind", "/dev/full", "--bind", "/dev/full",
                    str(busybox_sif), "sh", "-c", "echo Sleep expired > /dev/full && echo written")
    assert r.out == "written\n", r.both
    assert r.err.count("WARNING: Skipping /dev/full bind mount: already mounted") == 1, r.both
    assert msg.read_text() == "Sleep expired\n"
    # without the device bind the destination is not in the staged /dev
    r = standin.run("exec", "--contain", "--bind", f"{msg}:/dev/termination-log", str(busybox_sif), "true")
    assert r.rc == 255 and "destination /dev/termination-log doesn't exist in container" in r.err, r.both


def test_no_bind_puts_a_file_of_the_user_into_the_minimal_dev(standin: Standin, busybox_sif: Path) -> None:
    # Why only a host path the site creates can hold /dev/termination-log (issue 22.8). Apptainer
    # v1.1.0-v1.5.3 container_linux.go addUserbindsMount: a bind whose source (filepath.Abs, not
    # resolved) and destination both start with "/dev" must name one path, else it is skipped with a
    # warning, so a file the user can create under the host's /dev (its /dev/shm) never reaches
    # /dev/termination-log; under --contain such a path goes into the staged /dev by addSessionDevAt,
    # whose os.Lstat of a missing one is a warning, not an error. The container's own write lands in
    # the staged /dev, which goes with the container.
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        shm.chmod(0o755)
        msg = shm / "termination-log"
        msg.write_text("")
        msg.chmod(0o666)
        r = standin.run("exec", "--contain", "--bind", f"{msg}:/dev/termination-log", "--bind", "/dev/hpk-absent",
                        str(busybox_sif), "sh", "-c", "echo Sleep expired > /dev/termination-log && echo written")
        assert r.out == "written\n", r.both
        assert (f"WARNING: Skipping {msg} bind mount: source and destination must be identical when binding "
                "to /dev") in r.err, r.both
        assert ("WARNING: Skipping /dev/hpk-absent bind mount: lstat /dev/hpk-absent: no such file or "
                "directory") in r.err, r.both
        assert msg.read_text() == ""
    finally:
        shutil.rmtree(shm)


def test_pwd_and_hostname(standin: Standin, busybox_sif: Path) -> None:
    # src action_flags.go: --pwd/--cwd "initial working directory", --hostname "set container
    # hostname"; a --pwd that does not exist is an error (process_linux.go)
    r = standin.run("exec", "--pwd", "/etc", "--hostname", "pod-a", str(busybox_sif), "sh", "-c",
                    "pwd; hostname; echo $PWD")
    assert r.out == "/etc\npod-a\n/etc\n", r.both
    # launcher_linux.go: a hostname turns the UTS namespace on (no network namespace needed);
    # container_linux.go addHostnameMount binds a session /etc/hostname; files.Hostname refuses
    # a name that is no hostname; --uts alone keeps the host's name in a namespace of its own
    r = standin.run("exec", "--hostname", "web-0.nginx", str(busybox_sif), "sh", "-c",
                    "hostname; cat /etc/hostname; ip -o link | wc -l")
    assert r.out.splitlines()[:2] == ["web-0.nginx", "web-0.nginx"], r.both
    assert int(r.out.splitlines()[2]) > 1, "--hostname must not take the host's network away"
    r = standin.run("exec", "--hostname", "bad_name", str(busybox_sif), "true")
    assert r.rc == 255 and "bad_name is not a valid hostname" in r.err, r.both
    r = standin.run("exec", "--uts", str(busybox_sif), "sh", "-c", "hostname; readlink /proc/self/ns/uts")
    assert r.out.splitlines()[0] == os.uname().nodename, r.both
    assert r.out.splitlines()[1] != os.readlink("/proc/self/ns/uts"), r.both
    r = standin.run("exec", "--pwd", "/does/not/exist", str(busybox_sif), "true")
    assert r.rc == 255 and "failed to set working directory" in r.err


# ---------------------------------------------------------------- identities
def test_fakeroot_security_userns(standin: Standin, busybox_sif: Path) -> None:
    # docs fakeroot.rst: --fakeroot runs as uid 0 in a user namespace, HOME=/root
    r = standin.run("exec", "--fakeroot", str(busybox_sif), "sh", "-c", 'id -u; id -g; echo $HOME')
    assert r.out == "0\n0\n/root\n", r.both
    # docs security_options.rst:195-205 (--security uid:U); in an unprivileged installation the
    # target ids apply in the user namespace (src launcher_linux.go setTargetIDs)
    r = standin.run("exec", "--security", "uid:1234,gid:5678", str(busybox_sif), "sh", "-c", "id -u; id -g")
    assert r.out == "1234\n5678\n", r.both
    r = standin.run("exec", "--security", "uid:abc", str(busybox_sif), "true")
    assert r.rc == 255 and "failed to parse provided UID" in r.err
    r = standin.run("exec", "--userns", str(busybox_sif), "id", "-un")
    assert r.out == f"{standin.user.pw_name}\n", r.both       # the user's passwd entry is added


def test_nv_warns_without_gpus(standin: Standin, busybox_sif: Path) -> None:
    # src launcher_linux.go addGPUBinds: no driver files/libraries -> warnings, the run goes on
    r = standin.run("exec", "--nv", str(busybox_sif), "true")
    assert r.rc == 0
    assert "WARNING: Could not find any nv files on this host!" in r.err


# ---------------------------------------------------------------- network
def test_network_none_and_unprivileged_bridge(standin: Standin, busybox_sif: Path) -> None:
    # docs networking.rst:108-112: "none" is the network non-privileged users may request; it
    # "isolates the container network from the host network with a loopback interface"
    r = standin.run("exec", "--net", "--network", "none", str(busybox_sif), "sh", "-c",
                    "ip -o link | cut -d: -f2")
    assert (r.rc, r.out) == (0, " lo\n"), r.both
    # --net alone means bridge: refused for unprivileged users (container_linux.go)
    r = standin.run("exec", "--net", str(busybox_sif), "true")
    assert r.rc == 255 and "non-root users can only use --network=none" in r.err
    # unprivileged --fakeroot falls back to none with a warning (launcher_linux.go setNamespaces)
    r = standin.run("exec", "--fakeroot", "--net", str(busybox_sif), "sh", "-c", "ip -o link | wc -l")
    assert (r.rc, r.out.strip()) == (0, "1"), r.both
    assert "fallback to 'none' network" in r.err


def test_nested_pod_two_children_over_loopback(standin: Standin, busybox_sif: Path) -> None:
    # The pod model: a parent container with its own network namespace (--net --network none,
    # --fakeroot) runs the stand-in again; its children share that namespace and talk over
    # 127.0.0.1, invisible from the host.
    port = 20000 + os.getpid() % 20000
    script = standin.file("pod.sh", f"""#!/bin/bash
set -u
A={APPTAINER}
echo "parent uid=$(id -u) links=$(ip -o link 2>/dev/null | wc -l || grep -c : /proc/net/dev)"
"$A" exec --cleanenv --no-eval --writable-tmpfs {busybox_sif} \\
  sh -c 'echo hello-over-loopback | nc -l -p {port} 127.0.0.1' &
server=$!
for i in $(seq 50); do
  out=$("$A" -s exec --cleanenv --no-eval docker://busybox \\
        sh -c 'nc 127.0.0.1 {port} </dev/null' 2>/dev/null) && [ -n "$out" ] && break
  sleep 0.1
done
echo "client got: $out"
wait $server
echo "server rc=$?"
""", 0o755)
    r = standin.run("exec", "--cleanenv", "--no-eval", "--net", "--network", "none", "--fakeroot",
                    "--bind", str(standin.workdir), "--bind", str(busybox_sif.parent),
                    "docker://hpk-parent", "/bin/bash", str(script), timeout=60)
    assert r.rc == 0, r.both
    assert "parent uid=0" in r.out
    assert "client got: hello-over-loopback" in r.out, r.both
    assert "server rc=0" in r.out
    # nothing listens on the host side
    assert f":{port:04X} " not in Path("/proc/net/tcp").read_text()


def test_parent_image_is_the_host_root_read_only(standin: Standin) -> None:
    r = standin.run("exec", "docker://hpk-parent", "sh", "-c",
                    f"test -x {APPTAINER} && command -v bwrap python3 >/dev/null && echo tools; "
                    "touch /usr/standin-x 2>/dev/null || echo read-only")
    assert r.out == "tools\nread-only\n", r.both


# ---------------------------------------------------------------- run vs exec
def test_run_uses_the_runscript_and_args_replace_cmd(standin: Standin, busybox_sif: Path) -> None:
    # docs docker_and_oci.rst / src conveyorPacker_oci.go: the runscript runs CMD; arguments to
    # `run` replace CMD (no ENTRYPOINT); by default they get one shell evaluation, not with --no-eval
    r = standin.run("run", str(busybox_sif), input=b"echo from-stdin $((6*7))\n")
    assert (r.rc, r.out) == (0, "from-stdin 42\n"), r.both       # CMD ["sh"] reads stdin
    r = standin.run("run", str(busybox_sif), "echo", "a  b", "$HOME")
    assert r.out == f"a  b {standin.home}\n", r.both
    r = standin.run("run", "--no-eval", str(busybox_sif), "echo", "a  b", "$HOME")
    assert r.out == "a  b $HOME\n", r.both
    r = standin.run("exec", str(busybox_sif), "echo", "$HOME")    # exec never evaluates
    assert r.out == "$HOME\n"
    r = standin.run("run", str(busybox_sif), "sh", "-c", "exit 3")
    assert r.rc == 3


def test_debian_image(standin: Standin, debian_ready: None) -> None:
    r = standin.run("exec", "docker://debian:12", "bash", "-c",
                    'echo "$BASH_VERSION" | cut -d. -f1; cat /etc/debian_version | cut -d. -f1; date +%Z')
    assert (r.rc, r.out) == (0, "5\n12\nUTC\n"), r.both
    r = standin.run("run", "docker://docker.io/library/debian:bookworm", input=b"echo $0\n")
    assert r.out == "bash\n", r.both
    # fakeroot may change the image's own files under --writable-tmpfs, as in Apptainer
    r = standin.run("exec", "--fakeroot", "--writable-tmpfs", "docker://debian", "sh", "-c",
                    "echo x >> /etc/profile && stat -c %U /etc/profile")
    assert r.out == "root\n", r.both


# ---------------------------------------------------------------- pull and images
def test_pull_and_force(standin: Standin) -> None:
    # src cmd/internal/cli/pull.go: an existing file is not overwritten without --force
    dest = standin.workdir / "bb.sif"
    r = standin.run("pull", str(dest), "docker://docker.io/library/busybox:1.36")
    assert r.rc == 0, r.both
    assert dest.read_bytes()[32:41] == b"SIF_MAGIC"
    r = standin.run("pull", str(dest), "docker://busybox")
    assert r.rc == 255
    assert r.err == f'FATAL:   Image file already exists: "{dest}" - will not overwrite\n'
    r = standin.run("pull", "--force", str(dest), "docker://busybox@sha256:" + "0" * 64)
    assert r.rc == 0, r.both
    r = standin.run("pull", str(standin.workdir / "x.sif"), "docker://no-such-image:1")
    assert r.rc == 255 and "While making image from oci registry" in r.err
    assert not (standin.workdir / "x.sif").exists()
    r = standin.run("pull", str(standin.workdir / "y.sif"), "library://busybox")
    assert r.rc == 255
    r = standin.run("exec", str(dest), "true")
    assert r.rc == 0, r.both


def test_exec_docker_ref_directly(standin: Standin) -> None:
    r = standin.run("exec", "docker://busybox:latest", "echo", "ok")
    assert (r.rc, r.out) == (0, "ok\n"), r.both
    assert "INFO:    Using cached SIF image" in r.err
    r = standin.run("-q", "exec", "docker://busybox", "true")
    assert r.err == ""


def test_foreign_sif_is_unpacked_once_into_the_user_cache(standin: Standin) -> None:
    rootfs = STORE / "busybox" / "rootfs"
    sqfs, sif = standin.workdir / "x.sqfs", standin.workdir / "foreign.sif"
    subprocess.run(["mksquashfs", str(rootfs), str(sqfs), "-quiet", "-no-progress", "-all-root"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["siftool", "new", str(sif)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["siftool", "add", str(sif), str(sqfs), "--datatype", "4", "--parttype", "2",
                    "--partfs", "1", "--partarch", "2"], check=True, stdout=subprocess.DEVNULL)
    sif.chmod(0o644)
    cache = standin.workdir / "cache"
    env = {"HPK_STANDIN_CACHE": str(cache)}
    r = standin.run("exec", str(sif), "echo", "first", env=env)
    assert (r.rc, r.out) == (0, "first\n"), r.both
    assert "Converting SIF file to temporary sandbox" in r.err
    r = standin.run("exec", str(sif), "echo", "second", env=env)
    assert (r.out, "Converting" in r.err) == ("second\n", False), r.both
    entries = [p.name for p in cache.iterdir() if not p.name.startswith(".") and not p.name.endswith(".lock")]
    assert len(entries) == 1


def test_sandbox_directory_image(standin: Standin) -> None:
    r = standin.run("exec", str(STORE / "busybox" / "rootfs"), "cat", "/etc/passwd")
    assert r.rc == 0 and r.out.startswith("root:x:0:0:"), r.both


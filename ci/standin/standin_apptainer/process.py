"""exec/run's process: its environment and argv, bubblewrap's command line, and running it with
signals passed on and its exit status turned into Apptainer's.

Part of the Apptainer stand-in (see __init__.py).
"""

import _signal as signal
import os
import sys

from .common import Fatal, info, log
from .environment import EVAL_WRAPPER, build_environment, finish_environment, needs_eval
from .overlay import prepare_overlay, set_pdeathsig
from .options import namespace_args


# ---------------------------------------------------------------- exec/run: process
def container_environment(command, image, opts, *, bind_dests, workdir):
    """(env before injection, injected, original): see build_environment."""
    runtime = {
        "APPTAINER_CONTAINER": image.path, "SINGULARITY_CONTAINER": image.path,
        "APPTAINER_NAME": image.name, "SINGULARITY_NAME": image.name,
        "APPTAINER_COMMAND": command,
    }
    if bind_dests:
        runtime["APPTAINER_BIND"] = runtime["SINGULARITY_BIND"] = ",".join(bind_dests)
    if opts.no_eval:
        runtime["APPTAINER_NO_EVAL"] = runtime["SINGULARITY_NO_EVAL"] = "1"
    env, injected, original = build_environment(
        host=dict(os.environ), cleanenv=opts.cleanenv, file_vars=opts.file_vars, image=image,
        home_dest=opts.home_dest, runtime=runtime)
    env["PWD"] = workdir
    return env, injected, original


def container_argv(command, args, image, view):
    """What the container runs: exec's command, else run's runscript, the image's
    ENTRYPOINT/CMD, or /bin/sh. None (after Apptainer's error message) when there is nothing."""
    if command == "exec":
        return list(args)
    if image.kind != "host-rootfs" and view.executable("/.singularity.d/runscript"):
        return ["/.singularity.d/runscript"] + list(args)
    if image.values("cmd") or image.values("entrypoint"):
        return image.values("entrypoint") + (list(args) or image.values("cmd"))
    if view.executable("/bin/sh"):
        info("No runscript found in container, executing /bin/sh")
        return ["/bin/sh"] + list(args)
    log(-3, "ERROR", "No runscript and no /bin/sh executable found in container, aborting")
    return None


def apply_evaluation(command, argv, env, injected, original, *, no_eval, view):
    """(argv, env) for bwrap. Apptainer's default: injected values get one shell evaluation in
    the container (EVAL_WRAPPER, which also finishes the environment and checks the command);
    otherwise the environment is finished here and exec's command looked up on PATH."""
    if needs_eval(injected) and not no_eval:
        script = "".join('export %s="%s"\n' % (k, v.replace('"', '\\"')) for k, v in injected)
        argv = ["/bin/sh", "-c", EVAL_WRAPPER, "apptainer", script, str(len(original))] + \
            [x for kv in original for x in kv] + \
            (["--standin-check"] if command == "exec" else []) + argv
        return argv, env
    final_env = finish_environment(env, injected, original)
    if command == "exec" and not view.lookpath(argv[0], final_env.get("PATH", "")):
        raise Fatal('"%s": executable file not found in $PATH' % argv[0])
    return argv, final_env


def bwrap_argv(opts, mounts, files, *, host_mode, workdir, argv):
    """bwrap's command line; @MERGED@, @FILE:<dst>@ and @INFO@ are filled in by the child."""
    bw = ["bwrap"] + (["--ro-bind", "/", "/"] if host_mode else ["--bind", "@MERGED@", "/"])
    for opt, src, dst in mounts:
        bw += [opt, dst] if src is None else [opt, src, dst]
    for dst in files:
        bw += ["--ro-bind-data", "@FILE:%s@" % dst, dst]
    if not host_mode and not opts.writable:
        bw += ["--remount-ro", "/"]
    bw += namespace_args(opts)
    return bw + ["--chdir", workdir, "--die-with-parent", "--info-fd", "@INFO@", "--"] + argv


# ---------------------------------------------------------------- exec/run: running bwrap
FORWARDED = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2, signal.SIGALRM, signal.SIGWINCH, signal.SIGCONT]


class SignalForwarder:
    """Forwards FORWARDED signals to the container process (like Apptainer's starter); the ones
    that arrive before its pid is known are sent once it is."""

    def __init__(self):
        self.pid = None
        self.pending = []
        self.got = set()
        for s in FORWARDED:
            signal.signal(s, self.on_signal)

    def on_signal(self, signum, _frame):
        self.got.add(signum)
        if self.pid:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass
        else:
            self.pending.append(signum)

    def start(self, pid):
        self.pid = pid
        for s in self.pending:
            try:
                os.kill(pid, s)
            except ProcessLookupError:
                pass


def run_bwrap(bw, env, *, rootfs, files, real_ids, dests, writable_dirs=()):
    """Fork; the child prepares the overlay and execs bwrap; the parent forwards signals to the
    container process (like Apptainer's starter) and returns its exit status."""
    info_r, info_w = os.pipe()
    err_r, err_w = os.pipe()
    forwarder = SignalForwarder()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        exec_bwrap(bw, env, pipes=(info_r, info_w, err_r, err_w), rootfs=rootfs, files=files,
                   real_ids=real_ids, dests=dests, writable_dirs=writable_dirs)
    os.close(info_w)
    os.close(err_w)
    err = read_all(err_r)
    if err:
        os.waitpid(pid, 0)
        raise Fatal("container creation failed: %s" % err.decode(errors="replace"))
    forwarder.start(container_pid(info_r) or pid)
    _, status = os.waitpid(pid, 0)
    return exit_code(status, forwarded=forwarder.got)


def exec_bwrap(bw, env, *, pipes, rootfs, files, real_ids, dests, writable_dirs):
    """In the forked child: set up the overlay and the files, exec bwrap; never returns. A
    failure is written to the error pipe for the parent."""
    info_r, info_w, err_r, err_w = pipes
    try:
        os.close(info_r)
        os.close(err_r)
        for s in FORWARDED:
            signal.signal(s, signal.SIG_DFL)
        set_pdeathsig()
        merged = None
        if rootfs:
            st = os.stat(rootfs)
            merged = prepare_overlay(rootfs, uid=real_ids[0], gid=real_ids[1], dests=dests,
                                     writable_dirs=writable_dirs,
                                     owned_by_root=st.st_uid != real_ids[0])
        fds = memfd_files(files)
        fds["@MERGED@"] = merged
        fds["@INFO@"] = str(info_w)
        os.set_inheritable(info_w, True)
        os.execvpe("bwrap", [fds.get(a, a) for a in bw], env)
    except OSError as e:
        os.write(err_w, str(e.strerror or e).encode())
    except BaseException as e:          # noqa: BLE001 - report anything to the parent
        os.write(err_w, repr(e).encode())
    os._exit(255)


def memfd_files(files):
    """{"@FILE:<dst>@": fd} of inheritable memory files holding the contents for --ro-bind-data."""
    fds = {}
    for dst, text in files.items():
        fd = os.memfd_create("standin" + dst.replace("/", "-"), 0)
        os.write(fd, text.encode("utf-8", errors="surrogateescape"))
        os.lseek(fd, 0, os.SEEK_SET)
        os.set_inheritable(fd, True)
        fds["@FILE:%s@" % dst] = str(fd)
    return fds


def read_all(fd):
    data = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    os.close(fd)
    return data


def container_pid(info_fd):
    """The container process's pid from bwrap's --info-fd JSON (`"child-pid": N`), or None."""
    data = b""
    while b"}" not in data:
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
    os.close(info_fd)
    text = data.decode(errors="replace")
    marker = text.find('"child-pid"')
    digits = ""
    if marker >= 0:
        digits = "".join(c for c in text[marker + 11:].split(",")[0].split("}")[0] if c.isdigit())
    return int(digits) if digits else None


def exit_code(status, *, forwarded):
    """The container's exit code (128+N for signal N). If it died of a signal we forwarded, die
    of it too (starter master_linux.go)."""
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    if code > 128 and (code - 128) in forwarded:
        sig = code - 128
        signal.signal(sig, signal.SIG_DFL)
        sys.stdout.flush()
        os.kill(os.getpid(), sig)
    return code

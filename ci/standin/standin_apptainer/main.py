"""``apptainer`` itself: the global flags, the commands, and exec/run's order of checks (``action``).

Part of the Apptainer stand-in (see __init__.py).
"""

import os
import sys

from . import common
from .common import CommandLineError, Fatal, VERSION, debug, log
from .flags import (
    ACTION_FLAGS, GLOBAL_FLAGS, KNOWN_COMMANDS, PULL_FLAGS, UNIMPLEMENTED_ACTION_FLAGS,
    UNIMPLEMENTED_PULL_FLAGS, UNIMPLEMENTED_SHORT, parse_flags)
from .view import View
from .overlay import passwd_files
from .options import read_options
from .mounts import plan_mounts, working_dir
from .process import apply_evaluation, bwrap_argv, container_argv, container_environment, run_bwrap
from .pull import pull


def action(command, values, positional):
    """exec/run, in the order Apptainer checks things (actions.go, launcher_linux.go Exec)."""
    image_arg, args = positional[0], positional[1:]
    image, opts = read_options(image_arg, values)
    host_mode = image.kind == "host-rootfs"
    cwd_host = os.getcwd() if os.path.exists(".") else "/"
    mounts, bind_dests = plan_mounts(opts, image, cwd_host=cwd_host)
    view = View("/" if host_mode else image.rootfs,
                [(dst, src) for _, src, dst in mounts if src])
    workdir = working_dir(view, opts.pwd, cwd_host=cwd_host, home_dest=opts.home_dest)
    env, injected, original = container_environment(command, image, opts, bind_dests=bind_dests,
                                                    workdir=workdir)
    argv = container_argv(command, args, image, view)
    if argv is None:
        return 1
    argv, final_env = apply_evaluation(command, argv, env, injected, original,
                                       no_eval=opts.no_eval, view=view)
    files = {} if host_mode else passwd_files(image.rootfs, opts.uid, opts.gid, opts.home_dest)
    if opts.hostname:   # addHostnameMount: a session file with the name, bound at /etc/hostname
        files["/etc/hostname"] = opts.hostname + "\n"
    bw = bwrap_argv(opts, mounts, files, host_mode=host_mode, workdir=workdir, argv=argv)
    debug("bwrap command line: %r" % (bw,))
    return run_bwrap(bw, final_env, rootfs=None if host_mode else image.rootfs, files=files,
                     real_ids=opts.real_ids, dests=[dst for _, _, dst in mounts],
                     writable_dirs=image.values("writable_dir") if opts.writable else ())


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------
USAGE = """Usage:
  apptainer [global options...] <command>

Available Commands (stand-in subset, see ci/standin/README.md):
  exec        Run a command within a container
  pull        Pull an image from a URI
  run         Run the user-defined default command within a container
  version     Show the version for Apptainer

Run 'apptainer --help' for more detailed usage information.
"""


def main(argv):
    try:
        gvals, rest = parse_flags("apptainer", argv, GLOBAL_FLAGS, interspersed=False,
                                  unimplemented={"config", "build-config", "c"})
        if gvals.get("debug"):
            common.LEVEL = 5
        elif gvals.get("verbose"):
            common.LEVEL = 4
        elif gvals.get("quiet"):
            common.LEVEL = -1
        elif gvals.get("silent"):
            common.LEVEL = -3
        if gvals.get("version"):
            print("apptainer version " + VERSION)
            return 0
        if not rest:
            if gvals.get("help"):
                sys.stdout.write(USAGE)
                return 0
            sys.stderr.write(USAGE)
            return 1
        command, cargs = rest[0], rest[1:]
        if command == "version":
            print(VERSION)
            return 0
        if command in ("exec", "run"):
            values, positional = parse_flags(
                command, cargs, ACTION_FLAGS, interspersed=False,
                unimplemented=UNIMPLEMENTED_ACTION_FLAGS, unimpl_short=UNIMPLEMENTED_SHORT)
            need = 2 if command == "exec" else 1
            if len(positional) < need:
                raise CommandLineError(command, "requires at least %d arg(s), only received %d"
                                       % (need, len(positional)))
            return action(command, values, positional)
        if command == "pull":
            values, positional = parse_flags(command, cargs, PULL_FLAGS, interspersed=True,
                                             unimplemented=UNIMPLEMENTED_PULL_FLAGS)
            if not 1 <= len(positional) <= 2:
                raise CommandLineError(command, "accepts between 1 and 2 arg(s), received %d"
                                       % len(positional))
            return pull(values, positional)
        if command in KNOWN_COMMANDS:
            raise Fatal("the stand-in does not implement 'apptainer %s' (see "
                        "ci/standin/README.md)" % command)
        sys.stderr.write('Error: unknown command "%s" for "apptainer"\n\n' % command)
        sys.stderr.write("Run 'apptainer --help' for usage.\n")
        return 1
    except CommandLineError as e:
        sys.stderr.write('Error for command "%s": %s\n\n' % (e.command, e))
        sys.stderr.write("Run 'apptainer --help' for more detailed usage information.\n")
        return 1
    except Fatal as e:
        log(-4, "FATAL", str(e))
        return 255

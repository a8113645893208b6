"""Shared by every part of the stand-in: its version and image store, Apptainer's log levels
(sylog) and the two ways a command fails (FATAL, a command-line error).

Part of the Apptainer stand-in (see __init__.py).
"""

import os
import sys


VERSION = "1.3.0-standin"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STORE = os.environ.get("HPK_STANDIN_STORE") or "/srv/hpk-images/standin"
META_IN_ROOTFS = "/.singularity.d/standin-image.conf"

# sylog levels (pkg/sylog): fatal -4, error -3, warning -2, log -1, info 1, verbose 4, debug 5
LEVEL = 1


def log(level, label, msg):
    if LEVEL >= level:
        sys.stderr.write("%-8s %s\n" % (label + ":", msg))


def warn(msg):
    log(-2, "WARNING", msg)


def info(msg):
    log(1, "INFO", msg)


def debug(msg):
    log(5, "DEBUG", msg)


class Fatal(Exception):
    """sylog.Fatalf: `FATAL:   msg` on stderr, exit 255."""


class CommandLineError(Exception):
    """A cobra/pflag error: Apptainer prints `Error for command "x": ...` and exits 1."""

    def __init__(self, command, message):
        super().__init__(message)
        self.command = command

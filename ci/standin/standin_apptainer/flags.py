"""The command line, read by cobra/pflag's rules as Apptainer 1.3 reads it.

Part of the Apptainer stand-in (see __init__.py).
"""

from .common import CommandLineError, Fatal


# --------------------------------------------------------------------------------------------
# Command line (cobra/pflag rules: `--flag value` and `--flag=value`, bool flags take no next
# word, flags of exec/run stop at the image argument, `--` ends flags)
# --------------------------------------------------------------------------------------------
# name: (shorthand, kind) with kind "bool", "str" (last wins), "array" (repeatable, kept as is),
# "slice" (repeatable, each value split on commas like pflag's StringSlice)
ACTION_FLAGS = {
    "bind": ("B", "array"),
    "cleanenv": ("e", "bool"),
    "no-mount": (None, "slice"),
    "writable-tmpfs": (None, "bool"),
    "env-file": (None, "str"),
    "pwd": (None, "str"),
    "cwd": (None, "str"),
    "hostname": (None, "str"),
    "uts": (None, "bool"),
    "nv": (None, "bool"),
    "contain": ("c", "bool"),
    "fakeroot": ("f", "bool"),
    "security": (None, "slice"),
    "userns": ("u", "bool"),
    "net": ("n", "bool"),
    "network": (None, "str"),
    "no-eval": (None, "bool"),
}
# Flags real Apptainer 1.3 accepts on exec/run that the stand-in does not implement: a clear
# FATAL instead of pretending (cmd/internal/cli/action_flags.go).
UNIMPLEMENTED_ACTION_FLAGS = {
    "app", "mount", "home", "overlay", "scratch", "workdir", "disable-cache", "shell",
    "network-args", "dns", "apply-cgroups", "containlibs", "fusemount", "tmpdir", "boot",
    "compat", "containall", "nvccli", "rocm", "writable", "no-home", "no-init",
    "no-nv", "no-rocm", "pid", "no-pid", "ipc", "keep-privs", "no-privs", "add-caps",
    "drop-caps", "allow-setuid", "env", "no-umask", "dmtcp-launch", "dmtcp-restart",
    "blkio-weight", "blkio-weight-device", "cpu-shares", "cpus", "cpuset-cpus", "cpuset-mems",
    "memory", "memory-reservation", "memory-swap", "oom-kill-disable", "pids-limit", "unsquash",
    "ignore-subuid", "ignore-fakeroot-command", "ignore-userns", "underlay", "sharens",
}
UNIMPLEMENTED_SHORT = {"H": "home", "o": "overlay", "S": "scratch", "W": "workdir", "s": "shell",
                       "C": "containall", "w": "writable", "p": "pid", "i": "ipc"}
PULL_FLAGS = {"force": ("F", "bool"), "arch": (None, "str")}
UNIMPLEMENTED_PULL_FLAGS = {"name", "dir", "disable-cache", "library", "arch-variant",
                            "platform", "docker-login", "docker-username", "docker-password",
                            "docker-host", "nohttps", "no-https", "authfile", "no-cleanup",
                            "tmpdir", "keyring", "allow-unsigned", "allow-unauthenticated",
                            "sandbox", "oci", "mksquashfs-args"}
GLOBAL_FLAGS = {"debug": ("d", "bool"), "quiet": ("q", "bool"), "silent": ("s", "bool"),
                "verbose": ("v", "bool"), "nocolor": (None, "bool"), "version": (None, "bool"),
                "help": ("h", "bool")}
BOOL_WORDS = {"1": True, "t": True, "T": True, "true": True, "TRUE": True, "True": True,
              "0": False, "f": False, "F": False, "false": False, "FALSE": False, "False": False}
KNOWN_COMMANDS = {"exec", "run", "pull", "version", "shell", "build", "inspect", "instance",
                  "test", "cache", "remote", "key", "sign", "verify", "push", "search",
                  "overlay", "plugin", "oci", "config", "capability", "delete", "help",
                  "registry", "siftool", "keyserver", "completion", "checkpoint"}


def split_slice(value):
    """pflag StringSlice reads its value as one CSV record. Without a quote or a line break a record
    is its fields split at commas, which str.split gives without importing csv (and with it re and
    enum: 9 ms of every container start here, for --no-mount home,cwd,tmp)."""
    if not value:
        return []
    if '"' not in value and "\n" not in value and "\r" not in value:
        return value.split(",")
    import csv
    return next(csv.reader([value]))


def parse_flags(command, argv, table, *, interspersed, unimplemented=(), unimpl_short=None):
    """Return (values, positional). Raises CommandLineError or Fatal like Apptainer would."""
    return _FlagParser(command, table, unimplemented, unimpl_short or {}).parse(argv, interspersed)


class _FlagParser:
    """pflag's rules for one command's flag table (see ACTION_FLAGS for the kinds)."""

    def __init__(self, command, table, unimplemented, unimpl_short):
        self.command = command
        self.table = table
        self.shorts = {spec[0]: name for name, spec in table.items() if spec[0]}
        self.unimplemented = unimplemented
        self.unimpl_short = unimpl_short
        self.values = {}

    def parse(self, argv, interspersed):
        positional = []
        i = 0
        while i < len(argv):
            arg = argv[i]
            i += 1
            if arg == "--":
                positional.extend(argv[i:])
                break
            if arg.startswith("--") and len(arg) > 2:
                i = self.long_flag(arg, argv, i)
            elif arg.startswith("-") and len(arg) > 1:
                i = self.short_flags(arg, argv, i)
            else:
                positional.append(arg)
                if not interspersed:
                    positional.extend(argv[i:])
                    break
        return self.values, positional

    def long_flag(self, arg, argv, i):
        """`--name`, `--name=value` or `--name value` (argv[i]); returns the next index."""
        name, eq, raw = arg[2:].partition("=")
        if name not in self.table:
            if name in self.unimplemented:
                raise Fatal("the stand-in does not implement --%s (see ci/standin/README.md)"
                            % name)
            raise CommandLineError(self.command, "unknown flag: --%s" % name)
        if not eq:
            raw = None
            if self.table[name][1] != "bool":
                if i >= len(argv):
                    raise CommandLineError(self.command, "flag needs an argument: --%s" % name)
                raw = argv[i]
                i += 1
        self.store(name, raw)
        return i

    def short_flags(self, arg, argv, i):
        """`-abc`, `-Bvalue`, `-B=value`, `-B value` (argv[i]); returns the next index."""
        j = 1
        while j < len(arg):
            c = arg[j]
            j += 1
            if c not in self.shorts:
                if c in self.unimpl_short:
                    raise Fatal("the stand-in does not implement -%s/--%s (see "
                                "ci/standin/README.md)" % (c, self.unimpl_short[c]))
                raise CommandLineError(self.command, "unknown shorthand flag: '%s' in %s"
                                       % (c, arg))
            name = self.shorts[c]
            if self.table[name][1] == "bool":
                raw = None
                if j < len(arg) and arg[j] == "=":
                    raw, j = arg[j + 1:], len(arg)
                self.store(name, raw)
                continue
            if j < len(arg):
                raw = arg[j + 1:] if arg[j] == "=" else arg[j:]
                j = len(arg)
            elif i < len(argv):
                raw = argv[i]
                i += 1
            else:
                raise CommandLineError(self.command, "flag needs an argument: '%s' in -%s"
                                       % (c, c))
            self.store(name, raw)
        return i

    def store(self, name, raw):
        kind = self.table[name][1]
        if kind == "bool":
            if raw is None:
                self.values[name] = True
            elif raw in BOOL_WORDS:
                self.values[name] = BOOL_WORDS[raw]
            else:
                short = self.table[name][0]
                label = ("-%s, --%s" % (short, name)) if short else "--" + name
                raise CommandLineError(self.command, 'invalid argument "%s" for "%s" flag: '
                                       'strconv.ParseBool: parsing "%s": invalid syntax'
                                       % (raw, label, raw))
        elif kind == "str":
            self.values[name] = raw
        elif kind == "array":
            self.values.setdefault(name, []).append(raw)
        else:
            self.values.setdefault(name, []).extend(split_slice(raw))

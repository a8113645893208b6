"""apptainer stand-in: the subset of Apptainer 1.3's CLI that hpkctl emits, on bubblewrap.

This is the module; ci/standin/apptainer is the executable.

Test and demo use only (Apptainer cannot be installed on the CI machines). Semantics follow
Apptainer 1.3 in its unprivileged (non-setuid) installation; every deviation is listed in
ci/standin/README.md. Standard library only: it runs as a normal user inside Slurm jobs where the
project's virtualenv is not on PATH. Start-up time matters (benchmarks compare against bare
sbatch): imports are kept minimal and lazy (`_signal` instead of `signal`, which pulls in enum).

Images come from the store built by ci/standin/build-images ($HPK_STANDIN_STORE, default
/srv/hpk-images/standin): one directory per image with `rootfs/`, `image.sif` and `image.conf`.
"""

import _signal as signal
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
    """pflag StringSlice reads its value as one CSV record."""
    import csv
    return next(csv.reader([value])) if value else []


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


# --------------------------------------------------------------------------------------------
# Bind specs (pkg/runtime/engine/apptainer/config/bind.go semantics, own implementation):
# `src[:dst[:opts]]`, several per value separated by commas, `\,` and `\:` escape,
# options ro, rw (image-src=, id= are image binds: not implemented)
# --------------------------------------------------------------------------------------------
BIND_OPTIONS = ("ro", "rw")
BIND_VALUE_OPTIONS = ("image-src=", "id=")


def _split_unescaped(text, sep):
    parts, cur, k = [], "", 0
    while k < len(text):
        ch = text[k]
        if ch == "\\" and k + 1 < len(text) and text[k + 1] == sep:
            cur += "\\" + sep
            k += 2
            continue
        if ch == sep:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
        k += 1
    parts.append(cur)
    return parts


def _is_bind_option(tok):
    return tok in BIND_OPTIONS or tok.startswith(BIND_VALUE_OPTIONS)


def parse_binds(values):
    """Return [(src, dst, opts)] or raise Fatal with Apptainer's message."""
    prefix = "While setting bind mount configuration: while parsing bind path: "
    binds = []
    for value in values:
        groups = []
        for tok in _split_unescaped(value, ","):
            tok = tok.strip().replace("\\,", ",")
            if not tok:
                continue
            if groups and len(_split_unescaped(groups[-1][0], ":")) >= 2 and _is_bind_option(tok):
                groups[-1][1].append(tok)
            else:
                groups.append([tok, []])
        for spec, extra in groups:
            parts = _split_unescaped(spec, ":")
            if len(parts) > 3:
                raise Fatal(prefix + "wrong bind syntax: %s" % spec)
            src = parts[0].replace("\\:", ":")
            if not src:
                raise Fatal(prefix + 'while getting bind path: empty bind source for bind path '
                            '"%s"' % spec)
            dst = parts[1].replace("\\:", ":") if len(parts) > 1 else src
            opts = (parts[2].split(",") if len(parts) > 2 and parts[2] else []) + extra
            if len(parts) > 2 and not parts[2] and not extra:
                opts = [""]
            for opt in opts:
                if opt.startswith(BIND_VALUE_OPTIONS):
                    raise Fatal("the stand-in does not implement image binds (%s)" % opt)
                if opt not in BIND_OPTIONS:
                    raise Fatal(prefix + "while getting bind path: %s is not a valid bind option"
                                % opt)
            binds.append((src, dst, "ro" in opts))
    return binds


# --------------------------------------------------------------------------------------------
# --env-file: Apptainer evaluates the file with an embedded shell interpreter, command execution
# and redirections disabled, every assignment exported (internal/pkg/util/shell/interpreter,
# EvaluateEnv). The stand-in implements the shell subset a generated env file needs: words with
# '...', "..." and \ quoting, $NAME / ${NAME} expansion, comments, `;`/newline separators and
# `export`. Anything else is refused with a FATAL instead of being guessed at.
# --------------------------------------------------------------------------------------------
class EnvFileError(Exception):
    pass


def _is_name(s):
    return bool(s) and (s[0].isalpha() or s[0] == "_") and s.isascii() and \
        all(c.isalnum() or c == "_" for c in s)


def evaluate_env_file(text, env):
    """Return [(name, value)] assigned by `text`; `env` supplies $NAME expansions."""
    return _EnvFile(text, env).evaluate()


class _EnvFile:
    """One evaluation: a word reader, `$` expansion, and the simple commands the words form."""

    META = set(";&|<>()")

    def __init__(self, text, env):
        self.text, self.n = text, len(text)
        self.scope = dict(env)
        self.out = {}
        self.words = []     # the current simple command: [(raw text, value)]

    def evaluate(self):
        text, n, pos = self.text, self.n, 0
        while pos < n:
            ch = text[pos]
            if ch in " \t":
                pos += 1
            elif ch == "\n" or ch == ";":
                self.finish_command()
                pos += 1
            elif ch == "#":
                end = text.find("\n", pos)
                pos = n if end < 0 else end
            elif ch == "\\" and pos + 1 < n and text[pos + 1] == "\n":
                pos += 2
            elif ch in self.META:
                if ch in "<>":
                    raise EnvFileError("could not open/create/modify file: file feature is "
                                       "disabled")
                raise EnvFileError("the stand-in does not implement %r in env files" % ch)
            else:
                start = pos
                value, pos = self.read_word(pos)
                self.words.append((text[start:pos], value))
        self.finish_command()
        return list(self.out.items())

    def expand_dollar(self, k):
        """text[k] == "$": (expansion, next index)."""
        text, n = self.text, self.n
        if k + 1 >= n:
            return "$", k + 1
        c = text[k + 1]
        if c == "(":
            end = text.find(")", k)
            shown = text[k + 2:end] if end > 0 else text[k + 2:]
            raise EnvFileError('could not execute "%s": execution is disabled' % shown.strip())
        if c == "{":
            end = text.find("}", k)
            if end < 0:
                raise EnvFileError("reached EOF without matching ${ with }")
            name = text[k + 2:end]
            if not _is_name(name):
                raise EnvFileError("the stand-in does not implement ${%s} in env files" % name)
            return self.scope.get(name, ""), end + 1
        if c.isalpha() or c == "_":
            e = k + 1
            while e < n and (text[e].isalnum() or text[e] == "_") and text[e].isascii():
                e += 1
            return self.scope.get(text[k + 1:e], ""), e
        if c.isdigit() or c in "@*#?$!-":
            raise EnvFileError("the stand-in does not implement $%s in env files" % c)
        return "$", k + 1

    def read_word(self, k):
        """One shell word from k: (value, next index)."""
        text, n = self.text, self.n
        val = ""
        while k < n:
            ch = text[k]
            if ch in " \t\n" or ch in self.META:
                break
            if ch == "'":
                end = text.find("'", k + 1)
                if end < 0:
                    raise EnvFileError("reached EOF without closing quote '")
                val += text[k + 1:end]
                k = end + 1
            elif ch == '"':
                part, k = self.double_quoted(k + 1)
                val += part
            elif ch == "\\":
                if k + 1 < n:
                    if text[k + 1] != "\n":
                        val += text[k + 1]
                    k += 2
                else:
                    k += 1
            elif ch == "$":
                exp, k = self.expand_dollar(k)
                if exp and any(c in " \t\n" for c in exp):
                    raise EnvFileError("the stand-in does not implement field splitting of "
                                       "unquoted expansions")
                val += exp
            elif ch == "`":
                raise EnvFileError("could not execute command substitution: execution is disabled")
            else:
                val += ch
                k += 1
        return val, k

    def double_quoted(self, k):
        """The inside of "..." from k (after the opening quote): (value, index after the closing)."""
        text, n = self.text, self.n
        val = ""
        while True:
            if k >= n:
                raise EnvFileError('reached EOF without closing quote "')
            c = text[k]
            if c == '"':
                return val, k + 1
            if c == "\\" and k + 1 < n and text[k + 1] in '$`"\\\n':
                if text[k + 1] != "\n":
                    val += text[k + 1]
                k += 2
            elif c == "$":
                exp, k = self.expand_dollar(k)
                val += exp
            elif c == "`":
                raise EnvFileError("could not execute command substitution: execution is disabled")
            else:
                val += c
                k += 1

    def finish_command(self):
        """The words so far form a simple command: assignments, `export`, or a refused command."""
        if not self.words:
            return
        assigns, rest = [], []
        for raw, value in self.words:
            if not rest:
                name, eq, _ = raw.partition("=")
                if eq and _is_name(name):
                    assigns.append((name, value.split("=", 1)[1]))
                    continue
            rest.append((raw, value))
        if rest and rest[0][1] == "export":
            for raw, value in rest[1:]:
                name, eq, _ = raw.partition("=")
                if eq and _is_name(name):
                    assigns.append((name, value.split("=", 1)[1]))
                elif _is_name(value):
                    if value in self.scope:
                        self.out[value] = self.scope[value]
                else:
                    raise EnvFileError("export: invalid variable name %r" % value)
            rest = []
        if rest:
            raise EnvFileError('could not execute "%s": execution is disabled'
                               % " ".join(v for _, v in rest))
        for name, value in assigns:
            self.scope[name] = value
            self.out[name] = value
        self.words.clear()


# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------
def read_image_conf(path):
    """Parse an image.conf: `key=value` lines, repeated keys form lists, values escaped with
    \\n and \\\\. Returns a dict of lists (missing file: None)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    conf = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        value = value.replace("\\\\", "\0").replace("\\n", "\n").replace("\0", "\\")
        conf.setdefault(key, []).append(value)
    return conf


class Image:
    def __init__(self, *, kind, rootfs, conf, path, name, sif=None):
        self.sif = sif              # SIF the rootfs was unpacked from (store images)
        self.kind = kind            # "rootfs" or "host-rootfs"
        self.rootfs = rootfs        # directory (None for host-rootfs)
        self.conf = conf or {}
        self.path = path            # APPTAINER_CONTAINER
        self.name = name            # APPTAINER_NAME

    def values(self, key):
        return list(self.conf.get(key, []))


def split_ref(ref):
    """docker://[registry[:port]/][path/]NAME[:tag][@digest] -> (repository, tag)."""
    repo = ref.split("@", 1)[0]
    head, sep, last = repo.rpartition("/")
    name, _, tag = last.partition(":")
    return head + sep + name, tag or "latest"


def ref_name(ref):
    """The store entry of a reference: the last path component without tag or digest."""
    return split_ref(ref)[0].rsplit("/", 1)[-1]


def store_entry(ref, *, for_pull):
    name = ref_name(ref)
    entry = os.path.join(STORE, name)
    conf = read_image_conf(os.path.join(entry, "image.conf")) if _safe_name(name) else None
    if conf is None:
        repo, tag = split_ref(ref)
        if "/" not in repo:
            repo = "docker.io/library/" + repo
        msg = ("failed to get checksum for docker://%s: reading manifest %s in %s: manifest "
               "unknown (stand-in: no image %r in store %s; run ci/standin/build-images)"
               % (ref, tag, repo, name, STORE))
        if for_pull:
            raise Fatal("While making image from oci registry: error fetching image to cache: "
                        + msg)
        raise Fatal("Unable to handle docker://%s uri: %s" % (ref, msg))
    return entry, conf


def _safe_name(name):
    return bool(name) and name not in (".", "..") and "/" not in name and not name.startswith(".")


def image_from_store(entry, conf, *, path, name):
    kind = conf.get("kind", ["rootfs"])[0]
    rootfs = None if kind == "host-rootfs" else os.path.join(entry, "rootfs")
    sif = os.path.join(entry, "image.sif")
    return Image(kind=kind, rootfs=rootfs, conf=conf, path=path, name=name,
                 sif=sif if os.path.isfile(sif) else None)


def sif_key(path):
    """Identify a SIF without hashing it: its random ID, modification time and data size from
    the global header (copies of one SIF share them). Returns (key, partition offset) or None."""
    import struct
    with open(path, "rb") as f:
        head = f.read(128)
        if len(head) < 128 or head[32:41] != b"SIF_MAGIC":
            f.seek(0)
            if f.read(4) == b"hsqs":
                st = os.fstat(f.fileno())
                return ("sqfs-%x-%x-%x" % (st.st_ino, st.st_size, st.st_mtime_ns), 0)
            return None
        sif_id = head[48:64].hex()
        (_created, modified, _free, total, desc_off, _desc_size, _data_off,
         data_size) = struct.unpack_from("<8q", head, 64)
        offset = None
        for k in range(total):
            f.seek(desc_off + k * 585)
            d = f.read(585)
            dtype, used = struct.unpack_from("<i?", d, 0)
            if not used or dtype != 0x4004:         # DataPartition
                continue
            d_off, = struct.unpack_from("<q", d, 17)
            fstype, parttype = struct.unpack_from("<ii", d, 201)
            if parttype == 2 and fstype == 1:       # primary system partition, squashfs
                offset = d_off
                break
        if offset is None:
            raise Fatal("While checking container encryption: while getting root filesystem in "
                        "%s: no primary partition found" % path)
        return ("%s-%x-%x" % (sif_id, modified, data_size), offset)


def user_cache_dir():
    base = os.environ.get("HPK_STANDIN_CACHE")
    if base:
        return base
    home = os.environ.get("HOME")
    if not home:
        import pwd
        home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"),
                        "hpk-standin")


def unpack_cached(path, key, offset):
    """Unpack the squashfs at `offset` of `path` once into the per-user cache; return rootfs."""
    import fcntl
    import subprocess
    cache = user_cache_dir()
    final = os.path.join(cache, key)
    rootfs = os.path.join(final, "rootfs")
    if os.path.isdir(rootfs):
        return rootfs
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, key + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isdir(rootfs):
            return rootfs
        tmp = "%s.tmp.%d" % (final, os.getpid())
        subprocess.run(["rm", "-rf", tmp], check=False)
        os.makedirs(tmp)
        info("Converting SIF file to temporary sandbox...")
        cmd = ["unsquashfs", "-no-progress", "-quiet", "-no-xattrs", "-user-xattrs", "-d",
               os.path.join(tmp, "rootfs")]
        if offset:
            cmd[1:1] = ["-o", str(offset)]
        r = subprocess.run(cmd + [path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0 and not os.path.isdir(os.path.join(tmp, "rootfs")):
            subprocess.run(["rm", "-rf", tmp], check=False)
            raise Fatal("while extracting %s: unsquashfs failed: %s"
                        % (path, r.stderr.decode(errors="replace").strip()))
        os.rename(tmp, final)
    return rootfs


def store_index():
    keys = {}
    try:
        with open(os.path.join(STORE, "index")) as f:
            for line in f:
                k, _, name = line.strip().partition(" ")
                if k and name:
                    keys[k] = name
    except FileNotFoundError:
        pass
    return keys


def resolve_image(arg):
    if "://" in arg:
        transport, _, ref = arg.partition("://")
        if transport == "docker":
            if not ref:
                raise Fatal("Bad URI %s" % arg)
            entry, conf = store_entry(ref, for_pull=False)
            info("Using cached SIF image")
            sif = os.path.join(entry, "image.sif")
            return image_from_store(entry, conf, path=sif, name=os.path.basename(sif))
        if transport in ("library", "shub", "oras", "http", "https", "instance", "oci-archive",
                         "docker-archive", "docker-daemon", "oci"):
            raise Fatal("the stand-in does not implement %s:// images" % transport)
        raise Fatal("Unsupported transport type: %s" % transport)
    path = os.path.abspath(arg)
    try:
        st = os.stat(path)
    except OSError as e:
        raise Fatal("While checking container encryption: could not open image %s: failed to "
                    "retrieve path for %s: lstat %s: %s" % (path, path, path,
                                                             os.strerror(e.errno).lower())) from None
    name = os.path.basename(path)
    import stat as stmod
    if stmod.S_ISDIR(st.st_mode):
        conf = read_image_conf(os.path.join(path, META_IN_ROOTFS.lstrip("/")))
        kind = (conf or {}).get("kind", ["rootfs"])[0]
        return Image(kind=kind, rootfs=None if kind == "host-rootfs" else path, conf=conf,
                     path=path, name=name)
    try:
        found = sif_key(path)
    except OSError as e:
        raise Fatal("While checking container encryption: could not open image %s: %s"
                    % (path, os.strerror(e.errno))) from None
    if found is None:
        raise Fatal("While checking container encryption: could not open image %s: image "
                    "format not recognized" % path)
    key, offset = found
    stored = store_index().get(key)
    if stored:
        entry = os.path.join(STORE, stored)
        conf = read_image_conf(os.path.join(entry, "image.conf"))
        if conf is not None:
            return image_from_store(entry, conf, path=path, name=name)
    rootfs = unpack_cached(path, key, offset)
    conf = read_image_conf(os.path.join(rootfs, META_IN_ROOTFS.lstrip("/")))
    kind = (conf or {}).get("kind", ["rootfs"])[0]
    return Image(kind=kind, rootfs=None if kind == "host-rootfs" else rootfs, conf=conf,
                 path=path, name=name)


# --------------------------------------------------------------------------------------------
# Paths inside the container, for the checks Apptainer makes (cwd, command lookup)
# --------------------------------------------------------------------------------------------
class View:
    """Maps a container path to a host path: the last mount whose destination contains it wins,
    else the image rootfs; symbolic links are resolved inside the container."""

    def __init__(self, root, mounts):
        self.root = root            # host path of the container's / ("/" for host-rootfs)
        self.mounts = mounts        # [(dst, src)] in mount order

    def _host(self, cpath):
        for dst, src in reversed(self.mounts):
            if cpath == dst or cpath.startswith(dst.rstrip("/") + "/"):
                return src + cpath[len(dst.rstrip("/")):], True
        return os.path.join(self.root, cpath.lstrip("/")), False

    def resolve(self, cpath, *, container=False):
        """Host path of `cpath` (container=True: the container path with the image's symbolic
        links resolved, what bwrap must be given since it resolves absolute links against its
        own root); None on a symlink loop."""
        parts = [p for p in cpath.split("/") if p]
        done = "/"
        hops = 0
        while parts:
            p = parts.pop(0)
            if p == ".":
                continue
            if p == "..":
                done = os.path.dirname(done.rstrip("/")) or "/"
                continue
            nxt = done.rstrip("/") + "/" + p
            host, mounted = self._host(nxt)
            if mounted:
                # below a bind mount: the host resolves the rest
                if container:
                    return "/".join([nxt.rstrip("/")] + parts)
                return os.path.join(host, *parts) if parts else host
            try:
                target = os.readlink(host)
            except OSError:
                done = nxt
                continue
            hops += 1
            if hops > 40:
                return None
            parts = [q for q in target.split("/") if q] + parts
            if target.startswith("/"):
                done = "/"
        return done if container else self._host(done)[0]

    def isdir(self, cpath):
        h = self.resolve(cpath)
        return h is not None and os.path.isdir(h)

    def executable(self, cpath):
        h = self.resolve(cpath)
        return h is not None and os.path.isfile(h) and os.stat(h).st_mode & 0o111 != 0

    def lookpath(self, cmd, path_var):
        if "/" in cmd:
            return self.executable(cmd if cmd.startswith("/") else "/" + cmd)
        for d in path_var.split(":"):
            if d and self.executable(d.rstrip("/") + "/" + cmd):
                return True
        return False


# --------------------------------------------------------------------------------------------
# Environment (internal/pkg/util/env/create.go + the action script's clear/restore order;
# docs environment_and_metadata.rst "Environment Variable Precedence")
# --------------------------------------------------------------------------------------------
ALWAYS_PASS = {"TERM", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy",
               "NO_PROXY", "all_proxy", "ALL_PROXY", "ftp_proxy", "FTP_PROXY"}
ALWAYS_OMIT = {"HOME": False, "PATH": False, "APPTAINER_SHELL": False, "APPTAINER_APPNAME": False,
               "SINGULARITY_SHELL": False, "SINGULARITY_APPNAME": False, "LD_LIBRARY_PATH": True}
READONLY_VARS = {"EUID", "GID", "HOME", "IFS", "OPTIND", "PWD", "UID"}
CLEAR_KEEP = {"PWD", "HOME", "OPTIND", "UID", "GID", "SINGULARITY_APPNAME", "SINGULARITY_SHELL"}


def build_environment(*, host, cleanenv, file_vars, image, home_dest, runtime):
    """Return (env before injection, injected [(k, v)], original process env [(k, v)]).

    Mirrors Apptainer: the host environment (or with --cleanenv only TERM/proxies + LANG=C)
    forms the process environment; the action script clears it, applies the image ENV,
    injects APPTAINERENV_/--env-file variables, then restores host variables not yet set."""
    overrides = _overrides(host, file_vars)
    process = _process_environment(host, overrides, cleanenv=cleanenv)
    process.update(runtime)
    process["HOME"] = home_dest
    process["PATH"] = DEFAULT_PATH
    env = _image_environment(process, image)
    injected = []
    for k, v in overrides.items():
        if k in ("UID", "GID"):
            continue
        if k == "LD_LIBRARY_PATH" and v:
            v += ":/.singularity.d/libs"
        injected.append((k, v))
    # getallenv only reports names matching ^[a-zA-Z_]+[a-zA-Z0-9_]*$
    original = [(k, v) for k, v in process.items() if _is_name(k)]
    return env, injected, original


def _overrides(host, file_vars):
    """{name: value} to inject: the host's APPTAINERENV_/SINGULARITYENV_ values and --env-file's."""
    overrides = {}
    for prefix in ("APPTAINERENV_", "SINGULARITYENV_"):
        for k, v in host.items():
            if k.startswith(prefix) and len(k) > len(prefix):
                key = k[len(prefix):]
                if prefix == "APPTAINERENV_" and key in file_vars:
                    continue            # --env-file sets APPTAINERENV_<key> over the host's
                overrides_add(overrides, prefix + key, key, v)
    for key, value in file_vars.items():
        overrides_add(overrides, "APPTAINERENV_" + key, key, value, from_file=True)
    return overrides


def _process_environment(host, overrides, *, cleanenv):
    """The host variables the container process starts with (before the action script)."""
    process = {}
    if cleanenv:
        process["LANG"] = "C"
    for k, v in host.items():
        if k.startswith(("APPTAINER_", "SINGULARITY_", "APPTAINERENV_", "SINGULARITYENV_")):
            continue
        if k in ALWAYS_PASS or (k not in ALWAYS_OMIT and not cleanenv):
            if k in overrides:
                if overrides[k] != v:
                    warn("Environment variable %s already has value [%s], will not forward new "
                         "value [%s] from parent process environment" % (k, overrides[k], v))
                continue
            process[k] = v
    return process


def _image_environment(process, image):
    """clear_env, then the image's environment scripts."""
    env = {k: v for k, v in process.items() if k in CLEAR_KEEP or k in
           ("APPTAINER_NAME", "APPTAINER_CONTAINER")}
    for item in image.values("env"):
        k, eq, v = item.partition("=")
        if not eq:
            env.setdefault(k, "")
        elif k == "PATH":
            env[k] = v
        elif not env.get(k):
            env[k] = v
    parts = env.get("PATH", "").split(":") if env.get("PATH") else []
    for p in DEFAULT_PATH.split(":"):
        if p not in parts:
            parts.append(p)
    env["PATH"] = ":".join(parts)
    env["LD_LIBRARY_PATH"] = (env["LD_LIBRARY_PATH"] + ":/.singularity.d/libs"
                              if env.get("LD_LIBRARY_PATH") else "/.singularity.d/libs")
    if not env.get("PS1"):
        env["PS1"] = "Apptainer> "
    return env


def overrides_add(overrides, shown, key, value, from_file=False):
    special = {"PREPEND_PATH": "SING_USER_DEFINED_PREPEND_PATH",
               "APPEND_PATH": "SING_USER_DEFINED_APPEND_PATH",
               "PATH": "SING_USER_DEFINED_PATH"}
    if from_file and key in READONLY_VARS:
        return
    if key in special:
        key = special[key]
    elif key in ALWAYS_OMIT and not ALWAYS_OMIT[key]:
        warn("Overriding %s environment variable with %s is not permitted" % (key, shown))
        return
    if key in overrides:
        if overrides[key] != value:
            warn("Skipping environment variable [%s=%s], %s is already overridden with "
                 "different value [%s]" % (shown, value, key, overrides[key]))
        return
    overrides[key] = value


def finish_environment(env, injected, original):
    """The part of the action script after injection, for values that need no evaluation."""
    env = dict(env)
    for k, v in injected:
        env[k] = v
    pre = env.pop("SING_USER_DEFINED_PREPEND_PATH", "")
    app = env.pop("SING_USER_DEFINED_APPEND_PATH", "")
    user = env.pop("SING_USER_DEFINED_PATH", "")
    if pre:
        env["PATH"] = pre + ":" + env.get("PATH", "")
    if app:
        env["PATH"] = env.get("PATH", "") + ":" + app
    if user:
        env["PATH"] = user
    for k, v in original:           # restore_env
        if k not in env:
            env[k] = v
        elif env[k] == "":
            del env[k]
    if not env.get("PS1"):
        env["PS1"] = "Apptainer> "
    if not env.get("PROMPT_COMMAND"):
        env["PROMPT_COMMAND"] = 'PS1="%s"; unset PROMPT_COMMAND' % env["PS1"]
    else:
        env["PROMPT_COMMAND"] = ('%s; PROMPT_COMMAND="${PROMPT_COMMAND%%%%; PROMPT_COMMAND=*}"; '
                                 'PS1="%s"' % (env["PROMPT_COMMAND"], env["PS1"]))
    env.setdefault("APPTAINER_ENVIRONMENT", "/.singularity.d/env/91-environment.sh")
    env["SINGULARITY_ENVIRONMENT"] = env["APPTAINER_ENVIRONMENT"]
    return env


# Evaluation in the container (Apptainer's default, see docs "Escaping and Evaluation of
# Environment Variables"): the injected values are exported as `export K="v"` (only `"`
# escaped) and evaluated by a shell in the container context, then the action script goes on.
# $1: injection script, $2: number of restore pairs, then pairs, then the command.
EVAL_WRAPPER = r'''
eval "$1" || exit 255
__n=$2; shift 2
if [ -n "${SING_USER_DEFINED_PREPEND_PATH:-}" ]; then PATH="$SING_USER_DEFINED_PREPEND_PATH:$PATH"; fi
if [ -n "${SING_USER_DEFINED_APPEND_PATH:-}" ]; then PATH="$PATH:$SING_USER_DEFINED_APPEND_PATH"; fi
if [ -n "${SING_USER_DEFINED_PATH:-}" ]; then PATH="$SING_USER_DEFINED_PATH"; fi
unset SING_USER_DEFINED_PREPEND_PATH SING_USER_DEFINED_APPEND_PATH SING_USER_DEFINED_PATH
export PATH
while [ "$__n" -gt 0 ]; do
  eval "__set=\${$1+x} __val=\${$1-}"
  if [ -z "$__set" ]; then export "$1=$2"; elif [ -z "$__val" ]; then unset "$1"; fi
  shift 2; __n=$((__n - 1))
done
unset __n __set __val
[ -n "${PS1:-}" ] || export PS1="Apptainer> "
if [ -z "${PROMPT_COMMAND:-}" ]; then export PROMPT_COMMAND="PS1=\"${PS1}\"; unset PROMPT_COMMAND"; fi
export APPTAINER_ENVIRONMENT="${APPTAINER_ENVIRONMENT:-/.singularity.d/env/91-environment.sh}"
export SINGULARITY_ENVIRONMENT="$APPTAINER_ENVIRONMENT"
if [ "$1" = "--standin-check" ]; then
  shift
  case "$1" in
    */*) [ -x "$1" ] ;;
    *) command -v -- "$1" >/dev/null 2>&1 ;;
  esac || { printf 'FATAL:   "%s": executable file not found in $PATH\n' "$1" >&2; exit 255; }
fi
exec "$@"
'''


def needs_eval(injected):
    return any(("$" in v or "`" in v or "\\" in v) for _, v in injected)


# --------------------------------------------------------------------------------------------
# Launch
# --------------------------------------------------------------------------------------------
def _libc():
    import ctypes
    return ctypes, ctypes.CDLL(None, use_errno=True)


def _check(ctypes, rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def prepare_overlay(rootfs, *, uid, gid, dests, writable_dirs=(), owned_by_root=False):
    """In the forked child, before exec'ing bwrap: enter a new user+mount namespace (identity
    mapped) and mount overlay(rootfs, tmpfs) so bwrap can create bind mount points and
    --writable-tmpfs has somewhere to write (bubblewrap 0.8 has no overlay option)."""
    ctypes, libc = _libc()
    _check(ctypes, libc.unshare(0x10000000 | 0x00020000), "unshare")      # NEWUSER | NEWNS
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write("%d %d 1" % (uid, uid))
    with open("/proc/self/gid_map", "w") as f:
        f.write("%d %d 1" % (gid, gid))

    def mount(src, tgt, fstype, flags, data):
        _check(ctypes, libc.mount(src and src.encode(), tgt.encode(), fstype and fstype.encode(),
                                  ctypes.c_ulong(flags), data and data.encode()), "mount " + tgt)

    mount(None, "/", None, 16384 | (1 << 18), None)                       # MS_REC | MS_PRIVATE
    base = _overlay_base(mount)
    for d in ("upper", "work", "root"):
        os.mkdir(os.path.join(base, d))
    _lift_mount_points(rootfs, os.path.join(base, "upper"), dests=dests,
                       writable_dirs=writable_dirs if owned_by_root else ())
    mount("overlay", base + "/root", "overlay", 0,
          "lowerdir=%s,upperdir=%s/upper,workdir=%s/work" % (rootfs.replace(",", "\\,"),
                                                            base, base))
    return base + "/root"


def _overlay_base(mount):
    """A fresh tmpfs (in our mount namespace) for the overlay's upper, work and root dirs."""
    for cand in (os.path.join(user_cache_dir(), ".mnt"), os.path.join(STORE, ".mnt")):
        try:
            os.makedirs(cand, exist_ok=True)
            mount("tmpfs", cand, "tmpfs", 0, "mode=0755")
            return cand
        except OSError:
            continue
    raise OSError(0, "no directory to mount the overlay on (tried %s/.mnt)" % STORE)


def _lift_mount_points(rootfs, upper, *, dests, writable_dirs):
    """Image directories belong to the real root, which is not mapped in our namespace: bwrap
    could not create mount points in them. Give the directories leading to a missing mount
    point an upper-layer copy (same mode; owned by the caller inside the container). Also
    `writable_dirs`: overlayfs cannot copy up directories whose owner is not mapped in our
    namespace, so the image's world-writable directories (e.g. /tmp) get an upper copy up front."""
    lower_view = View(rootfs, [])
    prefix = rootfs.rstrip("/") + "/"
    for dst in dests:
        host = lower_view.resolve(dst)
        if host is None or os.path.lexists(host) or not host.startswith(prefix):
            continue
        _lift(rootfs, upper, host[len(prefix):].split("/")[:-1])
    for d in writable_dirs:
        rel = [c for c in d.split("/") if c]
        if rel and os.path.isdir(os.path.join(rootfs, *rel)):
            _lift(rootfs, upper, rel)


def _lift(rootfs, upper, rel):
    """Create upper/<rel...> level by level, modes copied from the image."""
    for k in range(1, len(rel) + 1):
        lower_dir = os.path.join(rootfs, *rel[:k])
        up = os.path.join(upper, *rel[:k])
        if os.path.islink(lower_dir) or (os.path.lexists(lower_dir) and
                                         not os.path.isdir(lower_dir)):
            return
        if not os.path.isdir(up):
            os.mkdir(up)
            if os.path.isdir(lower_dir):
                os.chmod(up, os.stat(lower_dir).st_mode & 0o7777)


def set_pdeathsig():
    ctypes, libc = _libc()
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)                                 # PR_SET_PDEATHSIG


def passwd_files(rootfs, uid, gid, home):
    """Apptainer adds the user's entry to the container's /etc/passwd and /etc/group ('config
    passwd/group = yes'). Returns {container path: new content} for entries it must add."""
    import pwd
    import grp
    out = {}
    for name in ("passwd", "group"):
        want = uid if name == "passwd" else gid
        try:
            with open(os.path.join(rootfs, "etc", name), encoding="utf-8",
                      errors="surrogateescape") as f:
                text = f.read()
        except OSError:
            continue
        ids = {line.split(":")[2] for line in text.splitlines() if line.count(":") >= 3}
        if str(want) in ids:
            continue
        try:
            if name == "passwd":
                pw = pwd.getpwuid(uid)
                line = "%s:x:%d:%d:%s:%s:%s" % (pw.pw_name, uid, pw.pw_gid, pw.pw_gecos, home,
                                               pw.pw_shell or "/bin/sh")
            else:
                line = "%s:x:%d:" % (grp.getgrgid(gid).gr_name, gid)
        except KeyError:
            continue
        out["/etc/" + name] = (text.rstrip("\n") + "\n" + line + "\n") if text.strip() else \
            line + "\n"
    return out


NO_MOUNT_TYPES = ("proc", "sys", "dev", "devpts", "home", "tmp", "hostfs", "cwd", "bind-paths")
BIND_ENV_VARS = ("APPTAINER_BIND", "APPTAINER_BINDPATH", "SINGULARITY_BIND", "SINGULARITY_BINDPATH")


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


# ---------------------------------------------------------------- exec/run: options
def valid_hostname(name):
    """internal/pkg/util/fs/files/hostname.go's hostRegex: dot-separated labels of ASCII letters,
    digits and inner hyphens."""
    alnum = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    return all(label and label[0] in alnum and label[-1] in alnum and set(label) <= alnum | {"-"}
               for label in name.split("."))


class Options:
    """exec/run's flags after validation (read_options fills in the rest in Apptainer's order)."""

    def __init__(self, values):
        self.cleanenv = values.get("cleanenv", False)
        self.writable = values.get("writable-tmpfs", False)
        self.fakeroot = values.get("fakeroot", False)
        self.no_eval = values.get("no-eval", False)
        self.contain = values.get("contain", False)
        self.hostname = values.get("hostname")
        # launcher_linux.go: "If user wants to set a hostname, it requires the UTS namespace"
        self.uts = values.get("uts", False) or bool(self.hostname)
        self.pwd = values.get("pwd") or values.get("cwd")
        self.real_ids = (os.getuid(), os.getgid())      # the caller
        self.uid, self.gid = (0, 0) if self.fakeroot else self.real_ids     # in the container
        self.binds = []                 # [(src, dst, read_only)]
        self.host_home = self.home_dest = "/"
        self.no_mount = set()
        self.net, self.network = False, ""
        self.file_vars = {}             # from --env-file


def read_options(image_arg, values):
    """Resolve the image and validate the flags; the first problem Apptainer would find is the
    one reported. Returns (image, Options)."""
    # actionPreRun: docker:// URIs are resolved (pulled) before anything else
    image = resolve_image(image_arg) if "://" in image_arg else None
    opts = Options(values)
    opts.uid, opts.gid = security_ids(values.get("security", []), default=(opts.uid, opts.gid))
    if image is None:
        image = resolve_image(image_arg)
    if opts.fakeroot and image.kind != "host-rootfs":
        use_caller_owned_rootfs(image, real_uid=opts.real_ids[0])
    opts.binds = parse_binds(values.get("bind", []) +
                             [os.environ[k] for k in BIND_ENV_VARS if os.environ.get(k)])
    opts.host_home = caller_home(opts.real_ids[0])
    opts.home_dest = "/root" if opts.fakeroot else opts.host_home
    opts.no_mount = no_mount_types(values.get("no-mount", []))
    if values.get("nv"):
        warn("Could not find any nv files on this host!")
        warn("Could not find any nv libraries on this host!")
    opts.net, opts.network = network_request(values, fakeroot=opts.fakeroot)
    opts.file_vars = env_file_vars(values.get("env-file"), image_path=image.path)
    # container creation starts with the network
    check_network(opts.net, opts.network, real_uid=opts.real_ids[0])
    if opts.hostname and not valid_hostname(opts.hostname):   # files.Hostname
        raise Fatal("container creation failed: unable to add %s to hostname file: %s is not a valid hostname"
                    % (opts.hostname, opts.hostname))
    return image, opts


def security_ids(items, *, default):
    """(uid, gid) from `--security uid:U,gid:G[:G2...]` (the first gid is the primary one)."""
    uid, gid = default
    sec = {}
    for item in items:
        k, _, v = item.partition(":")
        if k not in ("uid", "gid"):
            raise Fatal("the stand-in does not implement --security %s" % item)
        sec[k] = v
    if "uid" in sec:
        if not sec["uid"].isdigit() or int(sec["uid"]) > 0xFFFFFFFF:
            raise Fatal('Could not configure target UID/GID: failed to parse provided UID: '
                        'strconv.ParseUint: parsing "%s": invalid syntax' % sec["uid"])
        uid = int(sec["uid"])
    if "gid" in sec:
        for g in sec["gid"].split(":"):
            if not g.isdigit() or int(g) > 0xFFFFFFFF:
                raise Fatal('Could not configure target UID/GID: failed to parse provided GID: '
                            'strconv.ParseUint: parsing "%s": invalid syntax' % g)
        gid = int(sec["gid"].split(":")[0])
    return uid, gid


def use_caller_owned_rootfs(image, *, real_uid):
    """--fakeroot: Apptainer's root-mapped namespace shows the image's (root-owned) files as
    owned by the fake root, who may change them under --writable-tmpfs. Only the caller's own
    uid can be mapped here, so run from a copy of the image owned by the caller (per-user cache)."""
    if image.sif and os.stat(image.rootfs).st_uid != real_uid:
        key, offset = sif_key(image.sif)
        image.rootfs = unpack_cached(image.sif, key, offset)


def caller_home(real_uid):
    import pwd
    try:
        return pwd.getpwuid(real_uid).pw_dir
    except KeyError:
        return os.environ.get("HOME", "/")


def no_mount_types(items):
    no_mount = set()
    for v in items:
        v = v.strip()
        if v in NO_MOUNT_TYPES or v.startswith("/"):
            no_mount.add(v)
        else:
            warn("Ignoring unknown mount type '%s'" % v)
    return no_mount


def env_file_vars(env_file, *, image_path):
    """setEnvVars: the --env-file evaluated with the host environment (+ APPTAINER_IMAGE)."""
    if not env_file:
        return {}
    try:
        with open(env_file, "rb") as f:
            content = f.read().decode("utf-8", errors="surrogateescape")
    except OSError as e:
        raise Fatal('while setting environment: could not read "%s" environment file: open '
                    '%s: %s' % (env_file, env_file, os.strerror(e.errno).lower())) from None
    scope = dict(os.environ)
    scope["APPTAINER_IMAGE"] = image_path
    try:
        return {k: v for k, v in evaluate_env_file(content, scope) if k not in READONLY_VARS}
    except EnvFileError as e:
        raise Fatal("while setting environment: while processing %s: while evaluating "
                    "environment script: %s" % (env_file, e)) from None


# ---------------------------------------------------------------- exec/run: namespaces, network
def network_request(values, *, fakeroot):
    """launcher setNamespaces: (net, network); --network implies --net; unprivileged fakeroot
    falls back to the 'none' network."""
    net = values.get("net", False)
    network = values.get("network", "")
    if network and not net:
        info("Setting --net (required by --network)")
        net = True
    if net:
        network = network or "bridge"
        if fakeroot and network != "none":
            warn("fakeroot with unprivileged installation or 'allow setuid = no' could not use "
                 "'fakeroot' network, fallback to 'none' network")
            network = "none"
    return net, network


def check_network(net, network, *, real_uid):
    """Only --network none (a namespace with loopback only) exists here."""
    if not net or network == "none":
        return
    if real_uid != 0:
        for n in network.split(","):
            if n != "none":
                log(-3, "ERROR", "Network %s is not permitted for unprivileged users." % n)
                break
        raise Fatal("container creation failed: network requires root or a suid installation "
                    "with /etc/subuid --fakeroot; non-root users can only use --network=none "
                    "unless permitted by the administrator")
    raise Fatal("container creation failed: the stand-in has no CNI: only --network none "
                "(a namespace with loopback only) is available")


def namespace_args(opts):
    """bwrap's namespaces: user (ids, fakeroot's capabilities), uts (--uts, or --hostname, which
    implies it and needs no network namespace), network."""
    args = ["--unshare-user", "--uid", str(opts.uid), "--gid", str(opts.gid)]
    if opts.fakeroot:
        args += ["--cap-add", "ALL"]        # root-mapped namespace: root's capabilities in it
    if opts.uts:
        args += ["--unshare-uts"] + (["--hostname", opts.hostname] if opts.hostname else [])
    if opts.net:
        args += ["--unshare-net"]           # --network none: a namespace with loopback only
    return args


# ---------------------------------------------------------------- exec/run: mounts
def plan_mounts(opts, image, *, cwd_host):
    """bwrap's mounts [(option, src or None, dst)], later ones covering earlier ones, with the
    destinations as bwrap must get them; and the --bind destinations (for APPTAINER_BIND)."""
    host_mode = image.kind == "host-rootfs"
    mounts = default_mounts(opts.no_mount, host_mode=host_mode, host_home=opts.host_home,
                            home_dest=opts.home_dest, contain=opts.contain)
    user_mounts = dev_binds(bind_mounts(opts.binds), mounts, no_dev="dev" in opts.no_mount)
    # addCwdMount: the cwd is bound unless it is already visible at the same place (never with --contain)
    if "cwd" not in opts.no_mount and cwd_host != "/" and not host_mode and not opts.contain:
        covered = any(src == dst and (cwd_host == dst or cwd_host.startswith(dst + "/"))
                      for _, src, dst in mounts + user_mounts if src)
        if not covered:
            mounts.append(("--bind", cwd_host, cwd_host))
    mounts.extend(user_mounts)
    if host_mode:
        check_host_mount_points(mounts)
    else:
        mounts = resolve_mount_points(image.rootfs, mounts)
    return mounts, [dst for _, _, dst in user_mounts]


def default_mounts(no_mount, *, host_mode, host_home, home_dest, contain=False):
    """Apptainer's default mounts (apptainer.conf), less those --no-mount removes; --contain gives
    a minimal /dev and empty /tmp, /var/tmp and home (container_linux.go addDevMount, addTmpMount,
    addHomeStagingDir) and no cwd (createCwdDir)."""
    mounts = []
    if "dev" in no_mount:
        pass                                                # GetNoDev: no /dev at all, the image's
    elif contain:
        mounts.append(("--dev", None, "/dev"))              # staged /dev: null, zero, ..., shm, pts
    else:
        mounts.append(("--dev-bind", "/dev", "/dev"))       # 'mount dev = yes': host /dev
    for fs in ("proc", "sys"):
        if fs not in no_mount:
            mounts.append(("--bind", "/" + fs, "/" + fs))
        elif host_mode:
            mounts.append(("--tmpfs", None, "/" + fs))
    if not host_mode:
        if "bind-paths" not in no_mount:        # apptainer.conf's default 'bind path' entries
            for p in ("/etc/localtime", "/etc/hosts"):
                if os.path.exists(p) and p not in no_mount:
                    mounts.append(("--ro-bind", p, p))
        if os.path.exists("/etc/resolv.conf"):    # 'config resolv_conf = yes'
            mounts.append(("--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"))
    if "tmp" not in no_mount:                       # 'mount tmp = yes'
        for p in ("/tmp", "/var/tmp"):
            if contain:
                mounts.append(("--tmpfs", None, p))  # session directories (no --workdir)
            elif os.path.isdir(p):
                mounts.append(("--bind", p, p))
    if "home" not in no_mount and contain:
        mounts.append(("--tmpfs", None, home_dest))   # the session's home
    elif "home" not in no_mount and os.path.isdir(host_home):    # 'mount home = yes'
        mounts.append(("--bind", host_home, home_dest))
    return mounts


# the entries of Apptainer's staged /dev ('mount dev = minimal' or --contain; addDevMount)
MINIMAL_DEV = ("/dev", "/dev/shm", "/dev/pts", "/dev/ptmx", "/dev/tty", "/dev/null", "/dev/zero",
               "/dev/random", "/dev/urandom", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr",
               "/dev/console")


def dev_binds(user_mounts, mounts, *, no_dev):
    """addUserbindsMount's special case for /dev (container_linux.go): a bind whose source and
    destination both start with "/dev" must name the same path, and under a staged /dev it adds
    that host device to it (a bind of "/dev" itself brings the host's whole /dev back); any other
    bind onto the staged /dev needs its destination there already, since the layer that creates
    missing mount points lies under the /dev mount ("destination ... doesn't exist in container")."""
    staged = any(opt == "--dev" for opt, _, _ in mounts)
    out = []
    for opt, src, dst in user_mounts:
        if dst.startswith("/dev") and src.startswith("/dev"):
            if dst != src:
                warn("Skipping %s bind mount: source and destination must be identical when binding "
                     "to /dev" % src)
                continue
            if no_dev:
                warn("Skipping %s bind mount: disallowed by configuration" % src)
                continue
            if staged:
                if src == "/dev":
                    mounts[:] = [m for m in mounts if m[0] != "--dev"] + [("--dev-bind", "/dev", "/dev")]
                    staged = False
                elif src in MINIMAL_DEV:
                    warn("Skipping %s bind mount: already mounted" % src)
                else:
                    out.append(("--dev-bind", src, dst))
                continue
        elif dst.startswith("/dev/") and not no_dev and not _dev_mount_point(dst, staged, out):
            raise Fatal("container creation failed: mount hook function failure: mount %s->%s error: "
                        "while mounting %s: destination %s doesn't exist in container" % (src, dst, src, dst))
        out.append((opt, src, dst))
    return out


def _dev_mount_point(dst, staged, binds):
    """Whether a bind can land at dst under /dev: an entry of the staged /dev (or a path below one of
    its directories or below an earlier bind), or with the host's /dev an existing host path."""
    if not staged:
        return os.path.lexists(dst)
    under = [d for d in MINIMAL_DEV[1:]] + [d for _, _, d in binds]
    return any(dst == d or dst.startswith(d + "/") for d in under)


def bind_mounts(binds):
    """--bind specs as mounts; the destination must be absolute and the source must exist."""
    mounts = []
    for src, dst, ro in binds:
        src_abs = os.path.abspath(src)
        if not dst.startswith("/"):
            raise Fatal("container creation failed: unable to add %s to mount list: destination "
                        "must be an absolute path" % src_abs)
        if not os.path.exists(src_abs):
            raise Fatal("container creation failed: mount hook function failure: mount %s->%s "
                        "error: while mounting %s: mount source %s doesn't exist"
                        % (src_abs, dst, src_abs, src_abs))
        mounts.append(("--ro-bind" if ro else "--bind", src_abs, os.path.normpath(dst)))
    return mounts


def resolve_mount_points(rootfs, mounts):
    """bwrap resolves an absolute symlink in a destination against its own root, not the
    image's (debian's /etc/localtime -> /usr/share/zoneinfo/...): resolve them here."""
    canon = []
    for k, (opt, src, dst) in enumerate(mounts):
        before = View(rootfs, [(d, s) for _, s, d in mounts[:k] if s])
        real = before.resolve(dst, container=True)
        if real is None:
            raise Fatal("container creation failed: %s: too many levels of symbolic links" % dst)
        canon.append((opt, src, real))
    return canon


def check_host_mount_points(mounts):
    """host-rootfs: the host's / is bound read-only, so bwrap cannot create missing mount points."""
    for k, (_, _src, dst) in enumerate(mounts):
        before = View("/", [(d, s) for _, s, d in mounts[:k] if s])
        target = before.resolve(dst)
        if target is None or not os.path.lexists(target):
            raise Fatal("container creation failed: mount point %s does not exist and the "
                        "stand-in's host-rootfs image is read-only (create it on the host)" % dst)


def working_dir(view, pwd, *, cwd_host, home_dest):
    """process_linux.go: a --pwd that does not exist is an error; else the cwd, $HOME, then /."""
    if pwd:
        if not view.isdir(pwd):
            raise Fatal("failed to set working directory: chdir %s: no such file or directory"
                        % pwd)
        return pwd
    for d in (cwd_host, home_dest):
        if view.isdir(d):
            return d
    return "/"


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


# --------------------------------------------------------------------------------------------
# pull
# --------------------------------------------------------------------------------------------
def pull(values, positional):
    src = positional[-1]
    transport, sep, ref = src.partition("://")
    if not sep:
        raise Fatal("No transport type URI supplied")
    if not ref:
        raise Fatal("Bad URI %s" % src)
    if len(positional) == 2:
        dest = positional[0]
    else:
        dest = "%s_%s.sif" % (ref_name(ref), split_ref(ref)[1])
    if os.path.exists(dest) and not values.get("force"):
        raise Fatal('Image file already exists: "%s" - will not overwrite' % dest)
    arch = values.get("arch")
    if arch is not None:
        import platform
        known = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x", "386": "i686",
                 "arm": "armv7l"}
        if arch not in known:
            raise Fatal("arch %s is not supported (known: %s)" % (arch, ", ".join(sorted(known))))
        if known[arch] != platform.machine():
            raise Fatal("the stand-in's store holds %s images only; it cannot pull --arch %s"
                        % (platform.machine(), arch))
    if transport != "docker":
        if transport in ("library", "shub", "oras", "http", "https", "oci-archive",
                         "docker-archive", "docker-daemon", "oci"):
            raise Fatal("the stand-in does not implement %s:// pulls" % transport)
        raise Fatal("Unsupported transport type: %s" % transport)
    entry, _conf = store_entry(ref, for_pull=True)
    sif = os.path.join(entry, "image.sif")
    if not os.path.isfile(sif):
        raise Fatal("While making image from oci registry: stand-in store entry %s has no "
                    "image.sif; run ci/standin/build-images" % entry)
    info("Using cached SIF image")
    import shutil
    destdir = os.path.dirname(os.path.abspath(dest))
    tmp = os.path.join(destdir, ".%s.standin-pull.%d" % (os.path.basename(dest), os.getpid()))
    try:
        shutil.copyfile(sif, tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        os.replace(tmp, dest)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise Fatal("While making image from oci registry: while building SIF from layers: "
                    "%s" % e) from None
    return 0


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
    global LEVEL
    try:
        gvals, rest = parse_flags("apptainer", argv, GLOBAL_FLAGS, interspersed=False,
                                  unimplemented={"config", "build-config", "c"})
        if gvals.get("debug"):
            LEVEL = 5
        elif gvals.get("verbose"):
            LEVEL = 4
        elif gvals.get("quiet"):
            LEVEL = -1
        elif gvals.get("silent"):
            LEVEL = -3
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



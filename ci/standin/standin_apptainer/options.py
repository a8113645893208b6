"""exec/run's options checked as Apptainer checks them (image, identity, hostname, env file), and
the namespaces and network they ask for.

Part of the Apptainer stand-in (see __init__.py).
"""

import os

from .common import Fatal, info, log, warn
from .binds import parse_binds
from .envfile import EnvFileError, evaluate_env_file
from .images import resolve_image, sif_key, unpack_cached
from .environment import READONLY_VARS


NO_MOUNT_TYPES = ("proc", "sys", "dev", "devpts", "home", "tmp", "hostfs", "cwd", "bind-paths")
BIND_ENV_VARS = ("APPTAINER_BIND", "APPTAINER_BINDPATH", "SINGULARITY_BIND", "SINGULARITY_BINDPATH")


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

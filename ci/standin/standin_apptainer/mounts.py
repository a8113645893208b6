"""exec/run's mounts: Apptainer's default ones, the user's binds, the staged /dev.

Part of the Apptainer stand-in (see __init__.py).
"""

import os

from .common import Fatal, warn
from .view import View


# ---------------------------------------------------------------- exec/run: mounts
def plan_mounts(opts, image, *, cwd_host):
    """bwrap's mounts [(option, src or None, dst)], later ones covering earlier ones, with the
    destinations as bwrap must get them; and the --bind destinations (for APPTAINER_BIND)."""
    host_mode = image.kind == "host-rootfs"
    mounts = default_mounts(opts.no_mount, host_mode=host_mode, host_home=opts.host_home,
                            home_dest=opts.home_dest, contain=opts.contain)
    user_mounts = dev_binds(bind_specs(opts.binds), mounts, no_dev="dev" in opts.no_mount)
    check_sources(user_mounts)
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
    that host device to it once (again: "already mounted"; a bind of "/dev" itself brings the
    host's whole /dev back). These are DevTag mounts, made before every user bind (UserbindsTag)
    whatever the order of the --binds. Any other bind onto the staged /dev needs its destination
    there already, since the layer that creates missing mount points lies under the /dev mount
    ("destination ... doesn't exist in container")."""
    staged = any(opt == "--dev" for opt, _, _ in mounts)
    devices, out = [], []
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
                    devices.clear()                     # RemoveByTag(DevTag)
                elif src in MINIMAL_DEV or src in [d for _, _, d in devices]:
                    warn("Skipping %s bind mount: already mounted" % src)
                elif not os.path.lexists(src):               # addSessionDevAt's os.Lstat failed
                    warn("Skipping %s bind mount: lstat %s: no such file or directory" % (src, src))
                else:
                    devices.append(("--dev-bind", src, dst))
                continue
        out.append((opt, src, dst))
    for i, (_, src, dst) in enumerate(out):
        if dst.startswith("/dev/") and not no_dev and not _dev_mount_point(dst, staged, devices + out[:i]):
            raise Fatal("container creation failed: mount hook function failure: mount %s->%s error: "
                        "while mounting %s: destination %s doesn't exist in container" % (src, dst, src, dst))
    return devices + out


def _dev_mount_point(dst, staged, binds):
    """Whether a bind can land at dst under /dev: an entry of the staged /dev (or a path below one of
    its directories or below an earlier bind), or with the host's /dev an existing host path."""
    if not staged:
        return os.path.lexists(dst)
    under = [d for d in MINIMAL_DEV[1:]] + [d for _, _, d in binds]
    return any(dst == d or dst.startswith(d + "/") for d in under)


def bind_specs(binds):
    """--bind specs as mounts (source made absolute, not resolved: filepath.Abs); the destination
    must be absolute."""
    mounts = []
    for src, dst, ro in binds:
        src_abs = os.path.abspath(src)
        if not dst.startswith("/"):
            raise Fatal("container creation failed: unable to add %s to mount list: destination "
                        "must be an absolute path" % src_abs)
        mounts.append(("--ro-bind" if ro else "--bind", src_abs, os.path.normpath(dst)))
    return mounts


def check_sources(mounts):
    """A user bind's source must exist when it is mounted (mountGeneric's os.Stat); a device added
    to the staged /dev was checked (a warning) by dev_binds."""
    for opt, src, dst in mounts:
        if opt != "--dev-bind" and not os.path.exists(src):
            raise Fatal("container creation failed: mount hook function failure: mount %s->%s "
                        "error: while mounting %s: mount source %s doesn't exist" % (src, dst, src, src))


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

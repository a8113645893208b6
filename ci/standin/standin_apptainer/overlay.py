"""What the stand-in does before bubblewrap can run: an overlay over the image in a user and mount
namespace of its own (bubblewrap 0.8 has none), and the caller's passwd and group entries.

Part of the Apptainer stand-in (see __init__.py).
"""

import _signal as signal
import os

from .common import STORE
from .images import user_cache_dir
from .view import View


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

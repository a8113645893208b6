"""Images: references, the stand-in's store, SIF files unpacked into the user's cache.

Part of the Apptainer stand-in (see __init__.py).
"""

import os

from .common import Fatal, META_IN_ROOTFS, STORE, info


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

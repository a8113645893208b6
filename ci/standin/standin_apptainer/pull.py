"""``apptainer pull``: an image of the store copied to a SIF path.

Part of the Apptainer stand-in (see __init__.py).
"""

import os

from .common import Fatal, info
from .images import ref_name, split_ref, store_entry


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

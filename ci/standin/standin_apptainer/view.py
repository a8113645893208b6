"""Paths inside the container (the image plus its binds), for the checks Apptainer makes before
it starts anything: the working directory, the command's lookup.

Part of the Apptainer stand-in (see __init__.py).
"""

import os


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

"""Writing a pod directory before its job is submitted, in few file-system metadata calls.

Home and project file systems are GPFS or Lustre on most sites, where every ``mkdir``, ``stat``,
``open`` and ``rename`` is a round trip to a metadata server; the kubelet writes one directory per
pod on its submit path (README.md "Load on your site"). A NEW pod directory (the kubelet's first
create of a pod, ``hpkctl run``) costs one ``mkdir`` per directory and one ``open`` per file, nothing
else: files in a directory this call just created are created ``O_CREAT|O_EXCL`` under their own
names, no temporary file and ``rename`` (nobody reads them before ``sbatch``; a crash half-way leaves
a directory the next create rewrites as a resubmission, every file renamed over what is there), and
the new directory itself is not opened (its path is as safe as the directories below it, see
below). An ``fchmod`` follows only where the umask narrowed a mode. A directory that existed (a
resubmission) is written through one descriptor: it and every directory under it that existed are
opened without following a link and listed once: a name this call writes must not be a symlink there
(what an earlier job, or a container through a volume, may have left); each file is written beside
its name and renamed over it. Nothing resolves a path component by component. Directories it creates
are mode 0700.

Which directories: ``job/`` and ``env/`` (the script, pod.json, env files and credentials), those of
volumes of files (configMap, secret, downwardAPI, projected: an empty one is still mounted) and of a
projected token the kubelet writes after ``sbatch`` (``tokens.py``), and ``logs/``: Slurm opens
``logs/slurm.out`` (``--output``, and the pilot's ``srun --output``) before the script runs, and the
pilot provider's ``logs/srun.log`` is opened by the kubelet. ``status/`` and ``run/`` are the job's
(``hpk_host_part`` makes ``status/`` and ``logs/`` in its first ``mkdir``, the job script's refusals
and the array runtime make ``status/`` before they write there): every reader on the kubelet side
takes a missing ``status/`` for "nothing written yet" (``PodDir.read``, the status rounds' mtime of
``status/``, ``mark_deleting``, which writes only once ``job.started`` is there), and a job on
another node sees the directory its own job made. ``volumes/`` is made only with a volume in it
(emptyDir and PVC directories are the job's ``hpk_mkdir``).

What holds while something else writes into the pod directory at the same time (an earlier job's
step or a container still running): no name in a directory that existed is followed if it is a
symlink (checked against the listing, opened ``O_NOFOLLOW``), no file's own name is followed
(``O_CREAT|O_EXCL|O_NOFOLLOW``: beside it, then ``rename``, which replaces a link rather than writing
through it; in a new directory under its own name, which fails on any entry there, a link too), and
a job directory is renamed aside (left there until the next resubmission) before its fresh one is
made (refused if the name is back before the ``mkdir``). Directories this call creates, the pod directory itself when new, are NOT opened:
paths below them are resolved from the nearest opened directory (or from the pod directory's path),
so a process that swaps such a new directory for a symlink between its ``mkdir`` and the writes
below it redirects those writes; only the pod's own user can, and no job of a new pod exists yet.
Write a pod's directory only while no job of that pod runs (the kubelet writes it before ``sbatch``).
"""

from __future__ import annotations

import errno
import os
import posixpath
import secrets
from pathlib import Path

from hpkctl.errors import PodError
from hpkctl.pod.paths import JOB_DIRS
from hpkctl.pod.render import RenderedPod
from hpkctl.pod.runtimefile import install_runtime

#: Made for every pod (see the module's docstring for those left to the job).
_BASE_DIRS = ("job", "logs")
#: Volumes of files that may hold none (an optional ConfigMap that does not exist, an empty Secret):
#: still an empty directory in the container, as in Kubernetes.
_FILE_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: The names an earlier job's directories are renamed to (``_remove_job_dirs``).
_ASIDE = ".hpk-old-"
_HINT = "remove the symlink or the path from the pod directory, or delete and re-run the pod"
#: A file system's answers that retrying never changes: a directory where a file belongs, a name
#: longer than NAME_MAX (255 bytes on most) or a path longer than PATH_MAX.
_UNFIT = (errno.EISDIR, errno.ENAMETOOLONG)


def _umask() -> int | None:
    """The process's umask (``/proc/self/status``, Linux 4.7+; ``None`` elsewhere): a file created
    with a mode the umask leaves whole needs no ``fchmod``. Read once: umask only ever narrows what
    ``open`` gives, so a umask changed later can make a file stricter than asked, never wider."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return None


_UMASK = _umask()


def _narrowed(mode: int) -> bool:
    """Whether the umask may have taken bits of ``mode`` away (then it is set again)."""
    return _UMASK is None or bool(mode & _UMASK)


def write_new(path: str, data: bytes, mode: int, *, dir_fd: int | None = None) -> None:
    """Create the file ``path`` (``O_CREAT|O_EXCL|O_NOFOLLOW``: ``FileExistsError`` on any entry there,
    a symlink too) with ``data`` and ``mode``: one ``open``, and an ``fchmod`` only where the umask
    narrowed the mode. Not atomic: a reader may see it empty, then whole (one ``write`` of ``data``);
    a file a write failed half-way is removed again."""
    fill_new(path, create_new(path, mode, dir_fd=dir_fd), data, dir_fd=dir_fd)


def create_new(path: str, mode: int, *, dir_fd: int | None = None) -> int:
    """``path`` created empty with ``mode`` as :func:`write_new` does; its descriptor, for :func:`fill_new`."""
    out = os.open(path, _NEW_FILE, mode, dir_fd=dir_fd)
    if _narrowed(mode):
        try:
            os.fchmod(out, mode)  # the umask narrowed the mode os.open gave it
        except BaseException:
            fill_new(path, out, None, dir_fd=dir_fd)
            raise
    return out


def fill_new(path: str, out: int, data: bytes | None, *, dir_fd: int | None = None) -> None:
    """Write ``data`` into the file :func:`create_new` made and close it; with ``None``, or when the write
    fails, the file is removed again."""
    filled = False
    try:
        try:
            view = memoryview(data or b"")
            while view:
                view = view[os.write(out, view):]
        finally:
            os.close(out)
        filled = data is not None
    finally:
        if not filled:
            try:
                os.unlink(path, dir_fd=dir_fd)
            except OSError:
                pass


def _relative(root: Path, rel: str) -> tuple[str, ...]:
    """``rel``'s components after ``..`` is folded, refused unless they stay inside the pod directory."""
    norm = posixpath.normpath(rel)
    if posixpath.isabs(norm) or norm == "." or norm == ".." or norm.startswith("../"):
        raise PodError("CreateContainerConfigError", f"{rel} would be written outside the pod directory {root}",
                       hint=_HINT)
    return tuple(norm.split("/"))


class _Tree:
    """The pod directory as descriptors: ``at(parts)`` is (a descriptor, a path relative to it) for a
    directory created or checked in this call (``None`` and the path from the pod directory's own
    when that is new and so not opened). Existing directories are opened with ``O_NOFOLLOW`` and
    listed once (``listings``: each entry's name → its kind, ``_listing``); ``made`` holds the
    directories this call created (their files are created in place, ``write_new``)."""

    def __init__(self, root: Path, fd: int | None, listing: dict[str, str] | None) -> None:
        self.root = root
        self.fds: dict[tuple[str, ...], int] = {} if fd is None else {(): fd}
        # a directory that existed → {name: kind}; one this call created has no listing
        self.listings: dict[tuple[str, ...], dict[str, str]] = {} if listing is None else {(): listing}
        self.made: set[tuple[str, ...]] = {()} if fd is None else set()
        #: job directories renamed aside by ``_remove_job_dirs``: their name must not be back
        self.removed: set[tuple[str, ...]] = set()

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)

    def at(self, parts: tuple[str, ...]) -> tuple[int | None, str]:
        """The nearest opened ancestor's descriptor and the rest of the path (only created directories)."""
        for i in range(len(parts), -1, -1):
            fd = self.fds.get(parts[:i])
            if fd is not None:
                return fd, "/".join(parts[i:]) or "."
        return None, posixpath.join(str(self.root), *parts)  # a new pod directory: not opened

    def refuse(self, parts: tuple[str, ...], what: str) -> PodError:
        rel = "/".join(parts)
        return PodError("CreateContainerConfigError",
                        f"{rel} would be written outside the pod directory {self.root}: it is {what}", hint=_HINT)

    def unfit(self, parts: tuple[str, ...], e: OSError) -> PodError:
        """A pod error for what retrying cannot fix (``_UNFIT``), naming the path and the fix."""
        rel = "/".join(parts)
        if e.errno == errno.ENAMETOOLONG:
            return PodError("CreateContainerConfigError",
                            f"{rel} cannot be written in the pod directory {self.root}: a name in it is too long "
                            f"for the file system ({e.strerror})",
                            hint="shorten the volume name, key or path in the pod spec (255 bytes per name at most)")
        return PodError("CreateContainerConfigError",
                        f"{rel} cannot be written in the pod directory {self.root}: a directory is in its place",
                        hint=f"remove the directory {self.root}/{rel}, or delete and re-run the pod")

    def ensure(self, parts: tuple[str, ...], *, open_it: bool) -> None:
        """Make the directory ``parts`` (its parent is done already). In a directory that existed, a
        name that is a symlink (or a file) is refused; an existing directory is opened with
        ``O_NOFOLLOW`` and listed when something is written into it."""
        parent, name = parts[:-1], parts[-1]
        listing = self.listings.get(parent)
        if listing is None or name not in listing:
            fd, rel = self.at(parts)
            try:
                os.mkdir(rel, 0o700, dir_fd=fd)
                self.made.add(parts)
                return
            except FileExistsError:  # made meanwhile: checked as an existing one, opened even if empty
                if parts in self.removed:
                    raise PodError("CreateContainerConfigError",
                                   f"{'/'.join(parts)} in the pod directory {self.root} was made again after an "
                                   "earlier job's was moved aside: a job of this pod still writes there",
                                   hint="cancel the pod's earlier Slurm job (scancel), or delete and re-run the pod"
                                   ) from None
                open_it = True
            except OSError as e:
                if e.errno in _UNFIT:
                    raise self.unfit(parts, e) from None
                raise
        elif listing[name] != "dir":
            raise self.refuse(parts, "a symlink or a file")
        if not open_it:
            return  # an empty volume directory that was listed as one: nothing is written through it
        pfd, prel = self.at(parent)
        try:
            fd = os.open(name if prel == "." else f"{prel}/{name}", _DIR_FLAGS, dir_fd=pfd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise self.refuse(parts, "a symlink or a file") from None
            if e.errno in _UNFIT:
                raise self.unfit(parts, e) from None
            raise
        self.fds[parts] = fd
        self.listings[parts] = _listing(fd)

    def write(self, parts: tuple[str, ...], data: bytes, mode: int) -> None:
        """Write one file: in a directory this call made, created in place; else atomically (beside
        its name, renamed over it). No link followed."""
        parent, name = parts[:-1], parts[-1]
        listing = self.listings.get(parent)
        if listing is not None and listing.get(name) == "link":
            raise self.refuse(parts, "a symlink")
        fd, rel = self.at(parent)
        try:
            if parent in self.made:
                try:
                    write_new(posixpath.join(rel, name), data, mode, dir_fd=fd)
                    return
                except FileExistsError:  # put there meanwhile: replaced as in a directory that existed
                    pass
            _write_at(fd, rel, name, data, mode)
        except OSError as e:
            if e.errno in _UNFIT:
                raise self.unfit(parts, e) from None
            raise


def _write_at(fd: int | None, rel: str, name: str, data: bytes, mode: int) -> None:
    """``name`` in ``rel`` (from ``fd``) replaced atomically: written beside it, renamed over it."""
    tmp = posixpath.join(rel, f".hpk-tmp-{secrets.token_hex(8)}")
    write_new(tmp, data, mode, dir_fd=fd)  # removed again if the write fails
    try:
        os.rename(tmp, posixpath.join(rel, name), src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=fd)
        except FileNotFoundError:
            pass
        raise


def _listing(fd: int) -> dict[str, str]:
    """A directory's entries → ``"dir"``, ``"link"`` (a symlink) or ``"other"``, from ``d_type``: no
    ``stat`` per entry on file systems that fill it in (ext4, XFS, GPFS, Lustre)."""
    with os.scandir(fd) as it:
        return {e.name: "link" if e.is_symlink() else "dir" if e.is_dir(follow_symlinks=False) else "other"
                for e in it}


def _open_root(root: Path) -> int | None:
    """The pod directory's descriptor if it existed (set to 0700); ``None`` if this call created it
    (0700): it is not opened, its files are reached by path. The path to it is followed as given (a
    site's home may be a symlink); what lies inside is checked."""
    try:
        os.mkdir(root, 0o700)
    except FileExistsError:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fchmod(fd, 0o700)
        except BaseException:
            os.close(fd)
            raise
        return fd
    except FileNotFoundError:
        root.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(root, 0o700)
    if _narrowed(0o700):
        os.chmod(root, 0o700)
    return None


def write_pod_dir(rendered: RenderedPod, *, pod_json: bytes | None = None) -> Path:
    """Create the pod directory with every file the job expects (before submission).

    Status and logs of an earlier job in the same directory (a resubmission) are moved aside first
    (``_remove_job_dirs``): a new job must not inherit another's verdict. No name leaves the pod directory: relative names
    are checked before anything is written, and no symlink in it is followed.
    """
    root = Path(rendered.plan.pod_dir)
    files = dict(rendered.files)
    if pod_json is not None:
        files["job/pod.json"] = (pod_json, 0o600)
    targets = [(_relative(root, rel), data, mode) for rel, (data, mode) in files.items()]
    if rendered.runtime:
        install_runtime(Path(rendered.runtime))
    with_files = {parts[:i] for parts, _, _ in targets for i in range(1, len(parts))}
    dirs = {(d,) for d in _BASE_DIRS} | with_files
    prefix = str(root) + "/"
    for kind, path, _ro in rendered.plan.volumes.sources.values():
        if kind in _FILE_VOLUMES and path.startswith(prefix):
            parts = _relative(root, path[len(prefix):])
            dirs |= {parts[:i] for i in range(1, len(parts) + 1)}
    for p in rendered.plan.volumes.payloads:  # a token written after sbatch: its directory now
        if p.deferred and p.path.startswith(prefix):
            parts = _relative(root, p.path[len(prefix):])
            dirs |= {parts[:i] for i in range(1, len(parts))}
    written_into = with_files | {d[:-1] for d in dirs}
    fd = _open_root(root)
    tree = _Tree(root, fd, None if fd is None else _listing(fd))
    try:
        if fd is not None:
            _remove_job_dirs(tree)
        for parts in sorted(dirs, key=lambda p: (len(p), p)):  # parents first
            tree.ensure(parts, open_it=parts in written_into)
        for parts, data, mode in targets:
            tree.write(parts, data, mode)
    finally:
        tree.close()
    return root


def _remove_job_dirs(tree: _Tree) -> None:
    """Move what an earlier job wrote out of the way (only the names the listing has: one ``getdents``,
    not three failed renames): each is renamed aside (``rename`` moves a symlink itself, never what it
    points to), so its name is free: ``ensure`` makes it afresh and refuses it should it be back (a step
    of the earlier job still writing). A directory renamed aside is left there, not walked and emptied
    on the submit path (a ``getdents`` and an ``unlink`` per entry, each a metadata round trip on
    GPFS/Lustre): the pod's next resubmission removes it, or the removal of the pod directory, so at
    most one earlier job's files stay beside the pod's (and nobody reads them); an empty ``logs/`` goes
    at once. A symlink or file in a job directory's place is unlinked at once, never followed."""
    listing, fd = tree.listings[()], tree.fds[()]
    for left, what in [(n, k) for n, k in listing.items() if n.startswith(_ASIDE)]:  # an earlier resubmission's
        del listing[left]
        _discard(fd, left, what)
    for name in JOB_DIRS:
        kind = listing.pop(name, None)
        if kind is None:
            continue
        old = f"{_ASIDE}{secrets.token_hex(8)}"
        try:
            os.rename(name, old, src_dir_fd=fd, dst_dir_fd=fd)
        except FileNotFoundError:
            continue  # removed meanwhile
        tree.removed.add((name,))
        if kind != "dir":
            _discard(fd, old, kind)
        elif name == "logs":  # the one hpkctl makes: still empty after a create that failed before sbatch
            try:
                os.rmdir(old, dir_fd=fd)
            except OSError:
                pass  # an earlier job's output in it: left as the others


def _discard(fd: int, name: str, kind: str) -> None:
    """Remove the renamed-aside entry ``name`` (best effort: what stays is removed with the pod
    directory) as what the listing said it was; if it was swapped before the rename (a directory for a
    link or the reverse), as what it is. A directory is walked through descriptors: each opened
    ``O_NOFOLLOW`` and listed once (``d_type``), its entries unlinked, no ``stat`` per entry or per
    directory as ``shutil.rmtree`` makes (4 metadata calls fewer per directory)."""
    try:
        if kind == "dir":
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):  # a link or file in its place: unlinked below
                    raise
            else:
                try:
                    for entry, entry_kind in _listing(sub).items():
                        _discard(sub, entry, entry_kind)
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=fd)
                return
        try:
            os.unlink(name, dir_fd=fd)
        except IsADirectoryError:
            _discard(fd, name, "dir")
    except OSError:
        pass  # gone meanwhile, or not ours to remove: left for the pod directory's removal

"""Which host paths a pod may mount as ``hostPath`` volumes (issue 20, item 12).

The "node" of a pod is its owner's whole account, so a hostPath is allowed only at or below a prefix
the site profile lists (``[pods] hostpath_allow``; empty: no hostPath at all), and never where it
would reach hpkctl's own state: the pods' directories (other pods' Secrets), the control plane's
PKI and kubeconfigs, the image cache (images other pods run), ``~/.kube`` and ``~/.config/hpk`` (the
profiles). The same rules run again in the job on the resolved path, as each container starts
(``hpk_hostpath_bind`` in ``sbatch/runtime.sh``), so a symlink cannot lead a hostPath elsewhere.
"""

from __future__ import annotations

import posixpath

from hpkctl.errors import PodError
from hpkctl.sites.schema import SiteProfile


def within(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (both absolute and normalised)."""
    return root == "/" or path == root or path.startswith(root + "/")


def protected_paths(profile: SiteProfile) -> list[str]:
    """The paths no hostPath may be at, below or above, whatever the profile allows."""
    home = posixpath.expanduser("~")
    paths = [profile.pods.state_dir, profile.controlplane.state_dir, profile.apptainer.image_cache,
             posixpath.join(home, ".kube"), posixpath.join(home, ".config", "hpk")]
    return list(dict.fromkeys(posixpath.normpath(p) for p in paths if p.startswith("/")))


def allowed_root(profile: SiteProfile, path: str, *, where: str) -> str:
    """The allowed prefix ``path`` lies under (the root the job checks the resolved path against), or
    a ``PodError`` naming the field and the fix."""
    norm = posixpath.normpath(path)
    for p in protected_paths(profile):
        if within(norm, p) or within(p, norm):
            raise PodError("HostPathNotAllowed",
                           f"{where}: {path} reaches {p}, which holds hpkctl's state (pods' directories and "
                           "Secrets, PKI, kubeconfigs, images or profiles) and is never mountable",
                           hint="mount a directory of your data instead, or use an emptyDir or persistentVolumeClaim")
    for prefix in profile.pods.hostpath_allow:
        root = posixpath.normpath(prefix)
        if within(norm, root):
            return root
    allowed = ", ".join(profile.pods.hostpath_allow) or "none"
    raise PodError("HostPathNotAllowed",
                   f"{where}: {path} is not below a prefix this site allows for hostPath volumes ({allowed})",
                   hint=f"use an emptyDir or persistentVolumeClaim, or add a prefix to [pods] hostpath_allow in "
                        f"profile {profile.name!r} (site admins: only directories no other pod's data lives in)")

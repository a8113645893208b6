"""``apptainer pull`` on the submit host, with the job script's protocol and a timeout.

The protocol is the same as the job's ``hpk_image`` (``sbatch/runtime.sh.j2``), so a login-node
pull and a job pull of the same image can run side by side:

* one ``flock`` per image (``<sif>.lock``), checked again once the lock is held;
* the pull lands under a temporary name and is renamed into place, so no reader ever sees half a SIF;
* ``Never`` never pulls; ``IfNotPresent`` pulls when missing; ``Always`` pulls unless the cached copy
  is younger than ``[apptainer] always_pull_window`` seconds (Apptainer has no cheap digest check).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


from hpkctl.errors import PodError


@dataclass(frozen=True)
class ImageToPull:
    source: str  # docker://...
    sif: str  # cache path
    policy: str  # Always | IfNotPresent | Never
    credentials: tuple[str, str] | None = None  # (user, password) from imagePullSecrets


def is_fresh(sif: str, *, policy: str, window: float, now: float | None = None) -> bool:
    """Whether the cached ``sif`` may be used as it is under ``policy``."""
    try:
        mtime = os.stat(sif).st_mtime
    except FileNotFoundError:
        return False
    if policy != "Always":
        return True
    return ((time.time() if now is None else now) - mtime) < window


def pull_images(images: Iterable[ImageToPull], *, apptainer: str, window: float, timeout: float,
                out: TextIO, env: Mapping[str, str] | None = None, arch: str = "") -> list[ImageToPull]:
    """Pull every image that is missing (or stale under ``Always``); the ones this call pulled (the
    others were fresh in the cache). Raises ``PodError`` on failure. ``arch`` (``amd64``,
    ``arm64``): another architecture than this host's, for compute nodes that differ from the login
    node that pulls."""
    pulled = []
    for image in images:
        if is_fresh(image.sif, policy=image.policy, window=window):
            continue
        if image.policy == "Never":
            raise PodError("ErrImageNeverPull", f"image {image.source} is not cached and imagePullPolicy is Never",
                           hint=f"put the image at {image.sif}, or set imagePullPolicy to IfNotPresent")
        if _pull_one(image, apptainer=apptainer, window=window, timeout=timeout, out=out, env=env, arch=arch):
            pulled.append(image)
    return pulled


def _pull_one(image: ImageToPull, *, apptainer: str, window: float, timeout: float, out: TextIO,
              env: Mapping[str, str] | None, arch: str = "") -> bool:
    """Pull one image under its lock; False when another pull finished it meanwhile."""
    from plumbum import local  # here, not at import: every hpkctl run imports this module, few pull
    from plumbum.commands.processes import ProcessTimedOut

    os.makedirs(os.path.dirname(image.sif), exist_ok=True)
    with open(f"{image.sif}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_fresh(image.sif, policy=image.policy, window=window):
            return False  # another pull finished while we waited for the lock
        print(f"pulling {image.source} → {image.sif}", file=out)
        tmp = f"{image.sif}.tmp.{os.getpid()}"
        call_env = dict(os.environ if env is None else env)
        if image.credentials:
            call_env["APPTAINER_DOCKER_USERNAME"], call_env["APPTAINER_DOCKER_PASSWORD"] = image.credentials
        try:
            rc, _out, err = local[apptainer].run(["pull", "--force", *(["--arch", arch] if arch else []), tmp,
                                                   image.source], retcode=None,
                                                  timeout=timeout, env=call_env)
        except ProcessTimedOut:
            Path(tmp).unlink(missing_ok=True)
            raise PodError("ErrImagePull", f"pulling {image.source} took longer than {timeout:g} s and was stopped",
                           hint="raise [apptainer] pull_timeout in the site profile, or pull the image by hand "
                           f"to {image.sif}") from None
        except OSError as exc:
            raise PodError("ErrImagePull", f"cannot run {apptainer}: {exc.strerror or exc}",
                           hint="set [apptainer] binary in the site profile to Apptainer's path "
                           "(e.g. after 'module load apptainer')") from exc
        if rc != 0:
            Path(tmp).unlink(missing_ok=True)
            raise PodError("ErrImagePull", f"pulling {image.source} failed: {str(err).strip()[-500:]}")
        os.replace(tmp, image.sif)
        return True

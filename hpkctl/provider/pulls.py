"""Image pulls on the submit host for ``[apptainer] pull = "submit"`` (offline compute nodes): each image
once, off the pod-creation path, so a pod whose images are missing is parked and its creation resumed
when the pull ends while other pods go on. With ``pull = "job"`` the job pulls, on its node."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from hpkctl.errors import PodError
from hpkctl.runtime import ImageToPull, pull_images
from hpkctl.sites.schema import SiteProfile


class ImagePuller:
    """Pulls each image once, off the pod-creation path: a pod whose images are missing is parked
    and re-queued when the pull ends; other pods go on meanwhile. Only used with ``[apptainer] pull
    = "submit"`` (offline compute nodes); with ``pull = "job"`` the job pulls, on its node."""

    def __init__(self, profile: SiteProfile, *, workers: int = 2) -> None:
        self.profile = profile
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pull")
        self._lock = threading.Lock()
        self._pulls: dict[str, Future[None]] = {}

    def _pull(self, image: ImageToPull) -> None:
        a = self.profile.apptainer
        with open(os.devnull, "w") as quiet:
            pull_images([image], apptainer=a.binary, window=a.always_pull_window, timeout=a.pull_timeout, out=quiet)

    def ensure(self, images: list[ImageToPull], *, when_done: Callable[[], None]) -> list[Future[None]]:
        """Start (or join) the pulls; the futures not yet done. ``when_done`` runs once per pull that ends."""
        pending = []
        with self._lock:
            for image in images:
                fut = self._pulls.get(image.sif)
                if fut is None:
                    fut = self._pool.submit(self._pull, image)
                    self._pulls[image.sif] = fut
                if not fut.done():
                    fut.add_done_callback(lambda _f: when_done())
                    pending.append(fut)
                elif (exc := fut.exception()) is not None:
                    raise exc  # the caller forgets it after its back-off, so the next try pulls again
        return pending

    def forget(self, images: list[ImageToPull]) -> None:
        """After a failed pull: let the next attempt pull again."""
        with self._lock:
            for image in images:
                fut = self._pulls.get(image.sif)
                if fut is not None and fut.done():
                    del self._pulls[image.sif]

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def pull_message(profile: SiteProfile, exc: PodError, images: Sequence[ImageToPull]) -> str:
    """``exc``'s message for a failed pull, with what to do where the node cannot reach the registry."""
    message = exc.message
    if exc.reason == "ErrImagePull":  # e.g. compute nodes without internet (JSC)
        names = " ".join(i.source.removeprefix("docker://") for i in images)
        message += (f" (if this node cannot reach the registry, pull where it can, e.g. on a login "
                    f"node: hpkctl pull {names} --site {profile.name}")
        if any(i.policy == "Always" for i in images):  # :latest or untagged, or asked for
            message += ("; and set imagePullPolicy: IfNotPresent, or Always pulls again after "
                        f"[apptainer] always_pull_window ({profile.apptainer.always_pull_window} s)")
        message += ")"
    return message

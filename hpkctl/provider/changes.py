"""The change log the pods' jobs write into, read by the status loop (``hpkctl.pod.paths.CHANGES_DIR``).

Why a directory of markers and not a stat of every pod's ``status/`` each round: on GPFS or Lustre
every stat is a metadata operation, and a kubelet with 1,000 pods polling twice a second made 2,000
a second. A job's status write is followed by ``: > <state_dir>/changes/<uid>`` (the runtime's
``hpk_changed``); the kubelet lists the one small directory (one operation) each round and removes
only the markers of pods it tracks (one operation each) before reading those pods' files. Nothing
is lost: a status write after the kubelet's read comes with a marker created after the removal.
inotify would be cheaper still, but does not see writes from other nodes on a parallel file system.
Also rejected: the job telling the kubelet over HTTPS (a per-pod credential in every job, and the
compute nodes may not reach the kubelet's host); the marker works wherever the state directory does.

``ops`` counts the metadata operations made here (bench/: file-system load per round).
"""

from __future__ import annotations

import os
from pathlib import Path

from hpkctl.pod.paths import changes_dir_for


class ChangeLog:
    def __init__(self, state_dir: Path) -> None:
        self.dir = Path(changes_dir_for(str(state_dir)))
        self.ops = 0

    def ensure(self) -> None:
        """Create the directory (0700, as the state directory): from now on the jobs write markers."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def take(self, uids: set[str]) -> set[str]:
        """The tracked pods (``uids``) that wrote since their marker was last taken; their markers are
        removed. Markers of other pods (``hpkctl run``'s, or not yet tracked) stay for their reader."""
        self.ops += 1
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            self.ensure()  # removed by hand: the jobs write again once it is back
            return set()
        found = uids.intersection(names)
        for uid in found:
            self.ops += 1
            try:
                os.unlink(self.dir / uid)
            except FileNotFoundError:
                pass
        return found

    def clean(self, pods_dir: Path) -> int:
        """Remove markers whose pod directory is gone (pods deleted or cleaned); the number removed."""
        removed = 0
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return 0
        for name in names:
            if not (pods_dir / name).exists():
                try:
                    os.unlink(self.dir / name)
                    removed += 1
                except FileNotFoundError:
                    pass
        return removed

#!/usr/bin/env python3
"""Start-up cost of the Apptainer stand-in against bare bubblewrap (best of N, same machine).

The stand-in only exists on machines without Apptainer; this keeps its overhead visible so the
pod-start benchmark is not mostly the stand-in. usage: bench/standin_overhead.py [N]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STORE = Path(os.environ.get("HPK_STANDIN_STORE", "/srv/hpk-images/standin"))


def best(argv: list[str], n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    wrap = ["runuser", "-u", "hpk", "--"] if os.geteuid() == 0 else []
    ours = best(wrap + [str(REPO / "ci/standin/apptainer"), "exec", "docker://busybox:1.36", "true"], n)
    bare = best(wrap + ["bwrap", "--ro-bind", str(STORE / "busybox" / "rootfs"), "/", "--unshare-user",
                        "--die-with-parent", "/bin/true"], n)
    print(f"stand-in exec: {ours * 1000:.1f} ms, bare bwrap: {bare * 1000:.1f} ms, "
          f"overhead {(ours - bare) * 1000:.1f} ms, ratio {ours / bare:.1f} (best of {n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

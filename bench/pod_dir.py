"""``write_pod_dir``'s cost per pod: CPU in-process and its file-system calls (no Slurm needed).

The kubelet (job-per-pod and pilot) and ``hpkctl run`` write a pod's directory on their submit path,
and on GPFS/Lustre every metadata call (stat, mkdir, open, rename, chmod, readdir, unlink) is a round
trip to a server. For a simple pod (one container) and ``tests/pod/pods/volumes-all.yaml`` (11 files,
four volumes of files) this prints:

* CPU per pod over N fresh pods (default 200), rendered beforehand: only ``write_pod_dir`` is timed,
  user (the Python, which holds the kubelet's GIL) and system (the kernel's file-system work, which
  other processes' I/O on the same disk makes noisy) apart, from ``os.times()``;
* with ``strace`` installed, the system calls of one pod's ``write_pod_dir``, new, resubmitted (its
  ``status``/``logs``/``run`` left by an earlier job, renamed aside) and resubmitted again (the first
  resubmission's leftovers removed too), by name, and the metadata calls among them.
  The runtime file is installed and verified by two earlier pods first, as in a running kubelet;
* the same for a projected service-account token's file (``write_token``, 1,100 bytes as a real
  one): its first write after ``sbatch`` and a renewal.

Run it with the dev venv: ``/opt/hpkctl-venv/bin/python bench/pod_dir.py [N]``.
"""

from __future__ import annotations

import collections
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpkctl.local.manifest import load_manifest, select_pod, with_api_defaults  # noqa: E402
from hpkctl.pod import RenderedPod, render_pod, write_pod_dir  # noqa: E402
from hpkctl.pod.objects import ObjectSource  # noqa: E402
from hpkctl.provider.tokens import write_token  # noqa: E402
from hpkctl.sites.schema import SiteProfile  # noqa: E402

METADATA = {"newfstatat", "statx", "stat", "lstat", "mkdir", "mkdirat", "open", "openat", "rename", "renameat",
            "renameat2", "chmod", "fchmod", "fchmodat", "unlink", "unlinkat", "rmdir", "getdents64"}
MARK = b"HPK-BENCH-MARK\n"
TOKEN = b"x" * 1100  # a projected token's size (a JWT with the pod's bound claims)


def _profile(tmp: Path) -> SiteProfile:
    return SiteProfile.model_validate({
        "name": "bench", "slurm": {"partition": "debug", "default_time": "00:10:00"},
        "pods": {"state_dir": str(tmp / "state"), "hostpath_allow": ["/srv", "/run", "/tmp"]},
        "apptainer": {"image_cache": str(tmp / "images")}})


def _pod(kind: str) -> tuple[dict[str, Any], ObjectSource | None]:
    if kind == "simple":
        return with_api_defaults({"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"name": "p", "namespace": "default", "uid": "u"},
                                  "spec": {"containers": [{"name": "app", "image": "b:1", "command": ["x"]}]}}), None
    manifest = load_manifest(REPO / "tests" / "pod" / "pods" / "volumes-all.yaml")
    return with_api_defaults(select_pod(manifest)), manifest.objects


def _rendered(tmp: Path, kind: str, n: int) -> list[tuple[RenderedPod, bytes]]:
    base, objects = _pod(kind)
    profile = _profile(tmp)
    out = []
    for i in range(n + 2):
        pod = copy.deepcopy(base)
        pod["metadata"]["uid"] = str(uuid.UUID(int=i + 1))
        out.append((render_pod(pod, profile, objects=objects, strict=False),
                    json.dumps(pod, separators=(",", ":")).encode()))
    for rendered, pod_json in out[:2]:  # the runtime file: installed, then verified and remembered
        write_pod_dir(rendered, pod_json=pod_json)
    return out[2:]


def one(kind: str, tmp: Path, resubmit: int) -> None:
    """Under strace: one pod's write_pod_dir (or token write: a renewal with ``resubmit``) between two
    marks on stderr; ``resubmit``: 1 the pod's first resubmission, 2 its second (the first's leftovers
    removed)."""
    if kind == "token":
        path = tmp / "volume" / "token"
        path.parent.mkdir()
        if resubmit:
            write_token(path, TOKEN, 0o644)
        os.write(2, MARK)
        write_token(path, TOKEN, 0o644)
        os.write(2, MARK)
        return
    ((rendered, pod_json),) = _rendered(tmp, kind, 1)
    for _ in range(resubmit):
        write_pod_dir(rendered, pod_json=pod_json)
        for sub in ("status", "logs", "run"):
            os.makedirs(os.path.join(rendered.plan.pod_dir, sub), exist_ok=True)
            Path(rendered.plan.pod_dir, sub, "left").write_text("earlier job")
    os.write(2, MARK)
    write_pod_dir(rendered, pod_json=pod_json)
    os.write(2, MARK)


def calls(kind: str, resubmit: int) -> collections.Counter[str] | None:
    if not shutil.which("strace"):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace"
        subprocess.run(["strace", "-f", "-qq", "-o", str(trace), sys.executable, __file__, "--one", kind, tmp,
                        str(resubmit)], check=True, capture_output=True)
        lines = trace.read_text().splitlines()
    marks = [i for i, line in enumerate(lines) if "HPK-BENCH-MARK" in line]
    counts: collections.Counter[str] = collections.Counter()
    for line in lines[marks[0] + 1:marks[1]]:
        name = line.split(None, 1)[1].split("(", 1)[0] if line[:1].isdigit() else line.split("(", 1)[0]
        counts[name] += 1
    return counts


def _counted(counts: collections.Counter[str]) -> str:
    meta = sum(v for k, v in counts.items() if k in METADATA)
    detail = ", ".join(f"{k} {v}" for k, v in counts.most_common() if k in METADATA)
    return f"{meta} metadata calls ({detail}); {sum(counts.values())} system calls in all"


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        one(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for kind in ("simple", "volumes"):
        with tempfile.TemporaryDirectory() as tmp:
            pods = _rendered(Path(tmp), kind, n)
            t0 = os.times()
            for rendered, pod_json in pods:
                write_pod_dir(rendered, pod_json=pod_json)
            t1 = os.times()
        user, system = (t1.user - t0.user) / n, (t1.system - t0.system) / n
        files = len(pods[0][0].files) + 1
        print(f"{kind}: {files} files, write_pod_dir CPU per pod over {n} pods: user {user * 1000:.3f} ms, "
              f"system {system * 1000:.3f} ms")
        for resubmit in (0, 1, 2):
            counts = calls(kind, resubmit)
            if counts is None:
                print("  (no strace: no call counts)")
                break
            print(f"  {('new', 'resubmitted', 'resubmitted again')[resubmit]}: {_counted(counts)}")
    for renewal in (0, 1):
        counts = calls("token", renewal)
        if counts is not None:
            print(f"token ({len(TOKEN)} bytes), {'renewal' if renewal else 'first write'}: {_counted(counts)}")


if __name__ == "__main__":
    main()

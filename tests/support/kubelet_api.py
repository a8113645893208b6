"""A ``KubeletServer`` over pods that already run, as a process of its own.

Only a job's owner may add a step to it, so the real-Slurm exec test runs this as the user ``hpk``
whose jobs the pods are (``as_hpk_server``), the way the kubelet daemon runs as the user of its pods:

    python -m tests.support.kubelet_api --cert C --key K --ca CA --slurm-conf CONF POD_DIR...

It prints the port it listens on (127.0.0.1) on one line and serves until its stdin closes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hpkctl.jobs import Slurm
from hpkctl.kubelet.certs import serving_tls
from hpkctl.kubelet.server import KubeletServer
from hpkctl.kubelet.table import PodTable, Tracked
from hpkctl.pod import paths as f
from hpkctl.pod.paths import PodDir
from hpkctl.provider.jobpod import JobPodProvider
from hpkctl.provider.records import SUBMITTED, PodRecord, Records
from hpkctl.sites import load_site
from hpkctl.sites.schema import SlurmSection
from tests.support.ci import HPK_USER, REPO


def tracked(pod_dir: Path, records: Records) -> Tracked:
    """The table entry of a pod ``hpkctl run`` started (its object and job id), and the provider's
    record of it (its directory)."""
    pod = json.loads(PodDir(pod_dir).pod_json.read_text())
    meta = pod["metadata"]
    t = Tracked(uid=meta["uid"], namespace=meta.get("namespace") or "default", name=meta["name"], pod=pod,
                job_id=PodDir(pod_dir).read(f.JOB_ID) or "")
    records.save(PodRecord(uid=t.uid, namespace=t.namespace, name=t.name, pod_dir=str(pod_dir), state=SUBMITTED,
                           job_id=t.job_id))
    return t


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="kubelet_api")
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--slurm-conf", default="")
    p.add_argument("pod_dirs", nargs="+", type=Path)
    args = p.parse_args(argv)
    table = PodTable()
    with tempfile.TemporaryDirectory() as state:
        profile = load_site("ci")
        profile = profile.model_copy(update={"pods": profile.pods.model_copy(update={"state_dir": state})})
        provider = JobPodProvider(slurm=Slurm(SlurmSection(conf_file=args.slurm_conf)), profile=profile,
                                  records=Records(Path(state)))
        for d in args.pod_dirs:
            table.put(tracked(d, provider.records))
        provider.leftovers()  # the provider reads the records
        server = KubeletServer(table, provider=provider, node_name="hpk", host="127.0.0.1", port=0,
                               tls=serving_tls(args.cert, args.key, args.ca))
        server.start()
        print(server.port, flush=True)
        sys.stdin.read()
        server.stop()
    return 0


def as_hpk_server(*, cert: Path, key: Path, ca: Path, slurm_conf: str, pod_dirs: list[Path],
                  path: str) -> subprocess.Popen[str]:
    """Start this module as user hpk (via runuser when we are root) with ``path`` as PATH."""
    env = {"PATH": path, "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m", "tests.support.kubelet_api",
            "--cert", str(cert), "--key", str(key), "--ca", str(ca), "--slurm-conf", slurm_conf,
            *(str(d) for d in pod_dirs)]
    if os.geteuid() == 0:
        argv = ["runuser", "-u", HPK_USER, "--", *argv]
    return subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

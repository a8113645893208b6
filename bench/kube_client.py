"""The API client's own cost: CPU per request of ``hpkctl.kube.Kube`` and the kubelet's import time.

Against the API stand-in (started here), T threads (default 4) share one ``Kube`` (pool_size 4, as
the kubelet's) and send N GETs of a ConfigMap and N POSTs of an Event (default 2000 each), as the
kubelet's create path does (TokenRequest, Submitted event). Printed: the client process's CPU per
request (user and system apart, ``resource.getrusage``: the stand-in is another process, so this is
the client alone: JSON, HTTP, TLS records) and the wall time (noisy: the stand-in shares the cores).
Then ``import hpkctl.kubelet.daemon`` plus a ``Kube`` on the stand-in's kubeconfig in a fresh
interpreter, best of 5, and whether the ``kubernetes`` package was loaded.

Run it with the dev venv: ``/opt/hpkctl-venv/bin/python bench/kube_client.py [N] [--threads T]
[--checkout DIR]``; ``--checkout`` measures the ``Kube`` of another checkout (e.g. main's, for a
before/after on the same stand-in and machine).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser(prog="kube_client.py")
    p.add_argument("n", type=int, nargs="?", default=2000, help="GETs and POSTs each (default 2000)")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--checkout", type=Path, default=REPO, help="the hpkctl checkout whose Kube is measured")
    a = p.parse_args()
    checkout = a.checkout.resolve()
    sys.path[:0] = [str(checkout), str(REPO)]  # its hpkctl; this checkout's tests.support (the stand-in)
    from hpkctl.kube import Kube, namespaced
    from tests.support.kubeapi import start

    d = Path(tempfile.mkdtemp(prefix="bench-kube-client-"))
    api = start(d / "state")
    try:
        kube = Kube(str(api.kubeconfig), pool_size=4)
        kube.post(namespaced("configmaps", "default"), {"metadata": {"name": "bench"}, "data": {"a": "b" * 200}})
        event = {"metadata": {"generateName": "bench."}, "involvedObject": {"kind": "Pod", "namespace": "default",
                                                                           "name": "p", "uid": "u"},
                 "reason": "Submitted", "message": "Slurm job 4242 submitted", "type": "Normal",
                 "source": {"component": "hpk-kubelet"}}
        per_thread = a.n // a.threads

        def work(method: str) -> None:
            for _ in range(per_thread):
                if method == "GET":
                    kube.get(namespaced("configmaps", "default", "bench"))
                else:
                    kube.post(namespaced("events", "default"), event)

        for method in ("GET", "POST"):
            work(method)  # warm: connections open, code paths imported
            threads = [threading.Thread(target=work, args=(method,)) for _ in range(a.threads)]
            r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            n = per_thread * a.threads
            user, system = (r1.ru_utime - r0.ru_utime) / n * 1e3, (r1.ru_stime - r0.ru_stime) / n * 1e3
            print(f"{method:4} x{n} from {a.threads} threads: client CPU {user + system:.3f} ms/request "
                  f"(user {user:.3f}, system {system:.3f}), wall {w1 - w0:.2f} s ({n / (w1 - w0):.0f}/s)")
        kube.close()
        code = ("import sys, time\nt = time.perf_counter()\nimport hpkctl.kubelet.daemon\n"
                f"from hpkctl.kube import Kube\nKube({str(api.kubeconfig)!r})\n"
                "print(time.perf_counter() - t, 'kubernetes' in sys.modules)\n")
        runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               cwd=checkout, env={"PYTHONPATH": str(checkout)}).stdout.split() for _ in range(5)]
        best = min(float(r[0]) for r in runs)
        print(f"import hpkctl.kubelet.daemon + Kube(kubeconfig), fresh interpreter, best of 5: {best:.3f} s "
              f"(kubernetes imported: {runs[0][1]})")
    finally:
        api.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

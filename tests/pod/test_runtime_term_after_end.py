"""A TERM that reaches the job script after the pod ended (a delete, the time limit or a pilot
allocation's end arriving just as the last container exits) leaves the pod's end as it was written:
``pod.done`` once, no ``pod.failed``, the job's exit status the pod's. Before, the stop sequence ran
anyway and wrote ``pod.failed`` and ``pod.done 143`` over a pod that had succeeded, which status
rounds read as Succeeded and then Failed (found in review).

Deterministic: an ``mv`` first on PATH sends the TERM to the job script (its session's leader) while
it moves the pod's final ``pod.done`` into place; bash runs the trap after that ``mv`` returns."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from hpkctl.pod import render_pod, write_pod_dir
from tests.support.pods import pod_doc, stub_environment

MV = r'''#!/bin/bash
# moves as /bin/mv does; the move of the pod's final pod.done (staged in status/.new.PID) is logged,
# and the job script gets a TERM before it returns
for a in "${@:1:$#-1}"; do
  case $a in
    */.new.*/pod.done)
      v=''; read -r v <"$a"; printf '%s\n' "$v" >>"$HPK_TEST_DONE_LOG"
      kill -TERM "$(ps -o sid= -p $$ | tr -d ' ')" ;;
    */pod.done|*/.pod.done.*)
      v=''; read -r v <"$a"; printf '%s\n' "$v" >>"$HPK_TEST_DONE_LOG" ;;
  esac
done
exec /bin/mv "$@"
'''


def test_a_term_after_the_pod_ended_keeps_its_end(stub_env: dict[str, Any]) -> None:
    (Path(stub_env["bin"]) / "mv").write_text(MV)
    (Path(stub_env["bin"]) / "mv").chmod(0o755)
    spec = {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox:1.36", "command": ["true"]}]}
    root = write_pod_dir(render_pod(pod_doc(spec), stub_env["profile"]))
    log = stub_env["tmp"] / "done.log"
    env = stub_environment(stub_env, stub_env["tmp"] / "record.jsonl", HPK_TEST_DONE_LOG=str(log))
    r = subprocess.run(["bash", str(root / "job" / "job.sh")], env=env, capture_output=True, timeout=120,
                       check=False, start_new_session=True)  # the script leads its session: the TERM's target
    status = root / "status"
    assert log.read_text().split() == ["0"], (log.read_text(), r.stderr.decode()[-2000:])  # written once
    assert not (status / "pod.failed").exists(), (status / "pod.failed").read_text()
    assert (status / "pod.done").read_text().strip() == "0"
    assert r.returncode == 0, r.stderr.decode()[-2000:]

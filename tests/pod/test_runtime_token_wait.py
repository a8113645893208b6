"""sbatch/runtime.sh hpk_wait_token: a job per pod is submitted before the kubelet wrote its projected
service-account token (issue 23.2), so the job waits for the file before the pod's first container,
with a bounded number of looks (shared file systems throttle metadata polling), and fails the pod with
FailedMount when it never comes. Run with the real bash on the functions as the job has them; ``sleep``
is a shell function of the test that records each pause (and writes the token when told to), so no
test waits in real time."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "sbatch" / "runtime.sh"


def _functions(*names: str) -> str:
    text = RUNTIME.read_text()
    out = []
    for name in names:
        m = re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", text, re.S | re.M)
        assert m, f"{name} is missing from sbatch/runtime.sh"
        out.append(m.group(0))
    return "".join(out)


def run(tmp: Path, *, write_after: int = -1, wait: str = "") -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """hpk_wait_token on ``tmp/token``; the fake ``sleep`` writes the token at its ``write_after``-th call."""
    (tmp / "status").mkdir(exist_ok=True)
    fake_sleep = ('sleep() { printf "%s\\n" "$1" >>"$T/sleeps"; '
                  '[ "$(wc -l <"$T/sleeps")" -ne "$WRITE_AFTER" ] || printf tok >"$T/token"; }\n')
    script = "hpk_changed() { :; }\n" + _functions("hpk_put", "hpk_fail", "hpk_wait_token") + fake_sleep + \
        'hpk_wait_token "$T/token"; echo "waited rc=$?"'
    env = {"T": str(tmp), "WRITE_AFTER": str(write_after), "HPK_STATUS": str(tmp / "status"),
           "PATH": "/usr/bin:/bin"}
    if wait:
        env["HPK_TOKEN_WAIT"] = wait
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    sleeps = (tmp / "sleeps").read_text().split() if (tmp / "sleeps").exists() else []
    return r, sleeps


def test_a_token_already_written_costs_one_look(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok")
    r, sleeps = run(tmp_path)
    assert (r.returncode, r.stdout, sleeps) == (0, "waited rc=0\n", [])


def test_the_job_waits_for_the_token_with_growing_pauses(tmp_path: Path) -> None:
    r, sleeps = run(tmp_path, write_after=4)
    assert (r.returncode, r.stdout) == (0, "waited rc=0\n")
    assert sleeps == ["0.1", "0.2", "0.4", "0.8"]
    assert not (tmp_path / "status" / "pod.failed").exists()


def test_an_empty_file_is_no_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("")
    r, sleeps = run(tmp_path, write_after=1)
    assert (r.returncode, sleeps) == (0, ["0.1"])


def test_a_token_that_never_comes_fails_the_pod_after_a_bounded_number_of_looks(tmp_path: Path) -> None:
    r, sleeps = run(tmp_path)
    assert r.returncode == 1 and "waited" not in r.stdout
    reason, message = (tmp_path / "status" / "pod.failed").read_text().split("\n", 1)
    assert reason == "FailedMount"
    assert f"the service account token {tmp_path}/token was not written within 300 s" in message
    assert (tmp_path / "status" / "pod.done").read_text() == "1\n"
    assert sum(float(s) for s in sleeps) >= 300  # the whole wait
    assert len(sleeps) <= 70 and max(float(s) for s in sleeps) == 5.0  # at most one look in 5 s after the first


def test_the_wait_is_a_setting(tmp_path: Path) -> None:
    r, sleeps = run(tmp_path, wait="3")
    assert r.returncode == 1
    assert sleeps == ["0.1", "0.2", "0.4", "0.8", "1.6"]

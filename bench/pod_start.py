#!/usr/bin/env python3
"""Pod start latency and burst throughput of hpkctl against bare ``sbatch``, measured in one run.

Run as the normal user with the Apptainer stand-in first on PATH: ``sudo bench/run [args]``
(see ``bench/README.md`` for the exact definitions and how to read the output).

Both sides are treated alike:

* the same number of warm-up samples, discarded (the first pod also fills the image cache);
* the sides interleaved ABBA (bare, hpkctl, hpkctl, bare, ...), each sample after a random 0-1 s
  pause, so drift and the 1 s scheduling tick hit both sides equally;
* the same span for each metric, from ``t0`` (just before the submitting command starts) to a
  moment the job itself records as a file's mtime: the job script started, the workload ran, the
  job script finished. The benchmark watches files only while a sample is timed; it asks Slurm
  whether the job has ended, and deletes the pod, after the sample is taken, for both sides;
* Slurm commands are counted by logging shims for sbatch/squeue/scancel/scontrol/sacct/srun put
  first on the PATH the product (and the bare ``sbatch``) sees. The benchmark's own Slurm calls use
  the real binaries by absolute path, so they are never counted.

Speed claims come from here, never from timed assertions in tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sacct", "srun")
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
METRICS = (  # (key, label): each a span in seconds from t0, same definition on both sides
    ("submitted", "submit command returned"),
    ("started", "job script started"),
    ("ran", "workload ran"),
    ("finished", "job script finished"),
)
#: the latency table's first line: when the job is in Slurm's queue, which decides its start (see Calls)
QUEUED = ("queued", "sbatch returned (queued)")


# ---------------------------------------------------------------------------- Slurm, counted and not


class Calls:
    """Logging shims for Slurm's commands, and the real binaries for the benchmark's own use.

    The latency samples' ``sbatch`` (``timed_env``) also notes when the real ``sbatch`` returned
    (bash's ``$EPOCHREALTIME``): from then on the job is in slurmctld's queue and starts at one of its
    scheduling passes, whoever submitted it. Its span from ``t0`` is what a submitter adds to a job's
    start, without the 0-1 s of the pass's phase that makes the "job script started" differences
    noisy. That shim stays (bash forks the real ``sbatch`` instead of becoming it), a few ms of both
    sides' "submit command returned"; the bursts keep the plain shims."""

    def __init__(self, root: Path) -> None:
        self.real = {name: shutil.which(name) for name in SLURM_COMMANDS}
        if not self.real["sbatch"] or not self.real["squeue"]:
            raise SystemExit("bench: sbatch/squeue not on PATH")
        self.dir = root / "shims"
        self.dir.mkdir()
        self.log = root / "calls.log"
        self.queued_log = root / "queued.log"
        for name, real in self.real.items():
            if real:
                shim = self.dir / name
                shim.write_text(f'#!/bin/sh\necho {name} >> "{self.log}"\nexec "{real}" "$@"\n')
                shim.chmod(0o755)
        self.timed_dir = root / "shims-timed"
        self.timed_dir.mkdir()
        timed = self.timed_dir / "sbatch"  # LC_ALL=C: the locale's decimal point would be $EPOCHREALTIME's
        timed.write_text(f'#!/bin/bash\necho sbatch >> "{self.log}"\n"{self.real["sbatch"]}" "$@"\nrc=$?\n'
                         f'LC_ALL=C\necho "$EPOCHREALTIME" >> "{self.queued_log}"\nexit $rc\n')
        timed.chmod(0o755)

    def timed_env(self) -> dict[str, str]:
        """The environment of a latency sample's submission: ``sbatch`` notes when it returned (``queued``)."""
        return dict(os.environ, PATH=f"{self.timed_dir}:{os.environ['PATH']}")

    def queued(self) -> float | None:
        """When the last ``sbatch`` since the previous call returned (and forget them all)."""
        try:
            text = self.queued_log.read_text()
        except FileNotFoundError:
            return None
        self.queued_log.unlink()
        stamps = text.split()
        return float(stamps[-1]) if stamps else None

    def take(self) -> Counter[str]:
        """The commands logged since the last ``take`` (and forget them)."""
        try:
            text = self.log.read_text()
        except FileNotFoundError:
            return Counter()
        self.log.unlink()
        return Counter(text.split())

    def states(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Slurm's state of each job (uncounted: the real squeue); a job Slurm forgot is absent."""
        out: dict[str, str] = {}
        for i in range(0, len(job_ids), 400):
            r = subprocess.run([self.real["squeue"] or "squeue", "--noheader", "--all", "--states=all",
                                "--jobs=" + ",".join(job_ids[i:i + 400]), "--format=%i %T"],
                               capture_output=True, text=True, check=False)
            for line in r.stdout.splitlines():
                jid, _, state = line.strip().partition(" ")
                out[jid] = state
        return out

    def wait_ended(self, job_ids: Sequence[str], timeout: float = 300) -> None:
        """Until Slurm says every job ended (or forgot it). Not part of any timed span."""
        end = time.monotonic() + timeout
        pending = list(job_ids)
        while pending:
            st = self.states(pending)
            pending = [j for j in pending if st.get(j, "COMPLETED") not in TERMINAL]
            if pending:
                if time.monotonic() > end:
                    raise TimeoutError(f"jobs still not ended after {timeout} s: {pending[:5]}")
                time.sleep(0.05)

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = list(job_ids)
        if ids and self.real["scancel"]:
            subprocess.run([self.real["scancel"], *ids], capture_output=True, check=False)


def hpkctl_program(root: Path) -> str:
    """The ``hpkctl`` the benchmark runs: a script of this venv's Python, as the console script is, that
    starts the CLI of the checkout measured (``PYTHONPATH``) through ``hpkctl.cli.entry``, or ``main``
    in a checkout older than it. The venv's own console script names the one of its install: it failed
    on an older export, and a newer checkout measured through an older script skipped ``entry``'s exit."""
    path = root / "hpkctl"
    path.write_text(f"#!{sys.executable}\nimport sys\n\nimport hpkctl.cli as cli\n\n"
                    "sys.exit((getattr(cli, 'entry', None) or cli.main)())\n")
    path.chmod(0o755)
    return str(path)


def mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def wait_files(paths: Sequence[Path], timeout: float) -> None:
    """Until every path exists (files only: no Slurm call while a sample is timed)."""
    end = time.monotonic() + timeout
    pending = list(paths)
    while pending:
        pending = [p for p in pending if not p.exists()]
        if pending:
            if time.monotonic() > end:
                raise TimeoutError(f"{len(pending)} of {len(paths)} files did not appear within {timeout} s, "
                                   f"e.g. {pending[0]}")
            time.sleep(0.01 if len(paths) == 1 else 0.05)


def random_phase() -> None:
    """Sleep 0-1 s: slurmctld schedules on a 1 s tick, so a loop that submits right after the
    previous job ended would always land at the same phase of it and bias the median."""
    time.sleep(random.random())


# ---------------------------------------------------------------------------- one job of each kind


@dataclass
class Job:
    """One submitted job: its id and the files whose mtimes are the measured moments."""

    job_id: str
    started: Path
    ran: Path
    finished: Path
    name: str = ""  # pod name (hpkctl side)
    ok_check: Callable[[], bool] = lambda: True


@dataclass
class Sample:
    """Seconds from t0 for each metric, or ``None`` where the moment was not recorded."""

    times: dict[str, float | None]
    ok: bool


def bare_script(d: Path) -> Path:
    """A trivial batch script: its first line, its workload and its last line each leave a file."""
    d.mkdir()
    script = d / "job.sh"
    script.write_text(f"#!/bin/bash\ntouch {d}/started\ntouch {d}/ran\ntouch {d}/finished\n")
    return script


def bare_submit(d: Path, script: Path, partition: str, time_limit: str, env: dict[str, str] | None = None) -> Job:
    r = subprocess.run(["sbatch", "--parsable", f"--partition={partition}", "--output=/dev/null",
                        f"--time={time_limit}", str(script)], check=True, capture_output=True, text=True, env=env)
    return Job(r.stdout.strip().split(";")[0], d / "started", d / "ran", d / "finished",
               ok_check=lambda: (d / "ran").exists())


def pod_manifest(d: Path, name: str) -> Path:
    """A one-container pod whose container touches ``d/ran`` through a hostPath volume."""
    d.mkdir()
    manifest = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": "busybox:1.36", "command": ["touch", "/out/ran"],
            "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
            "volumes": [{"name": "out", "hostPath": {"path": str(d), "type": "Directory"}}]},
    }
    path = d / "pod.json"  # JSON is YAML
    path.write_text(json.dumps(manifest))
    return path


def pod_job(d: Path, name: str, job_id: str, pod_dir: str) -> Job:
    from hpkctl.pod.paths import JOB_STARTED, POD_DONE

    status = Path(pod_dir) / "status"

    def ok() -> bool:
        try:
            return (status / POD_DONE).read_text().strip() == "0" and (d / "ran").exists()
        except OSError:
            return False

    return Job(job_id, status / JOB_STARTED, d / "ran", status / POD_DONE, name=name, ok_check=ok)


def measure(t0: float, submitted: float, job: Job, queued: float | None = None) -> Sample:
    times: dict[str, float | None] = {"submitted": submitted - t0}
    if queued is not None:
        times["queued"] = queued - t0
    for key in ("started", "ran", "finished"):
        m = mtime(getattr(job, key))
        times[key] = None if m is None else m - t0
    ok = job.ok_check()
    return Sample(times, ok and all(v is not None for v in times.values()))


# ---------------------------------------------------------------------------- latency: one job at a time


@dataclass
class Side:
    label: str
    samples: list[Sample] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)  # Slurm commands of the timed part
    cleanup_calls: Counter[str] = field(default_factory=Counter)  # of the cleanup (hpkctl delete)


class Latency:
    def __init__(self, args: argparse.Namespace, work: Path, calls: Calls, hpkctl: str) -> None:
        from hpkctl.provider.runrecords import record_path
        from hpkctl.sites import load_site

        self.args, self.work, self.calls, self.hpkctl = args, work, calls, hpkctl
        self.profile = load_site(args.site)
        self.record_path = record_path
        self.time_limit = self.profile.slurm.default_time or "00:10:00"  # what the pod's job gets too

    def bare(self, side: Side, keep: bool) -> None:
        d = self.work / f"lat-bare-{uuid.uuid4().hex[:8]}"
        script = bare_script(d)
        self.calls.take()
        self.calls.queued()
        random_phase()
        t0 = time.time()
        job = bare_submit(d, script, self.args.partition, self.time_limit, env=self.calls.timed_env())
        submitted = time.time()
        self._finish(side, keep, t0, submitted, job)

    def hpk(self, side: Side, keep: bool) -> None:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        d = self.work / f"lat-{name}"
        manifest = pod_manifest(d, name)
        self.calls.take()
        self.calls.queued()
        random_phase()
        t0 = time.time()
        r = subprocess.run([self.hpkctl, "run", "--detach", "-q", "-f", str(manifest), "--site", self.args.site],
                           capture_output=True, text=True, check=False, env=self.calls.timed_env())
        submitted = time.time()
        if r.returncode != 0:
            raise SystemExit(f"bench: hpkctl run failed ({r.returncode}): {r.stderr.strip()}")
        rec = json.loads(self.record_path(self.profile, "default", name).read_text())
        job = pod_job(d, name, rec["job_id"], rec["pod_dir"])
        self._finish(side, keep, t0, submitted, job)
        # Cleanup, after the sample is taken and after the job ended: not timed, counted apart.
        subprocess.run([self.hpkctl, "delete", name, "--site", self.args.site], capture_output=True, check=False)
        cleanup = self.calls.take()
        if keep:
            side.cleanup_calls += cleanup

    def _finish(self, side: Side, keep: bool, t0: float, submitted: float, job: Job) -> None:
        try:
            wait_files([job.finished], timeout=self.args.timeout)
        except TimeoutError:
            print(f"bench: {side.label}: job {job.job_id} did not finish within {self.args.timeout} s: "
                  f"Slurm says {self.calls.states([job.job_id]) or 'nothing (forgotten)'}", file=sys.stderr)
            self.calls.cancel([job.job_id])
        sample = measure(t0, submitted, job, self.calls.queued())
        # The job's last file is written; let Slurm see it end too, so the next sample (either side)
        # starts on an idle node. Uncounted real squeue, outside the timed span, for both sides.
        self.calls.wait_ended([job.job_id])
        counted = self.calls.take()
        if keep:
            side.samples.append(sample)
            side.calls += counted
            if not sample.ok:
                print(f"bench: {side.label}: job {job.job_id} did not succeed: {sample.times}", file=sys.stderr)


# ---------------------------------------------------------------------------- burst: many jobs at once


@dataclass
class Burst:
    label: str
    count: int
    times: dict[str, float]  # last job's moment, seconds from t0 (submitted: the whole loop)
    ok: int
    calls: Counter[str]
    status_calls: Counter[str] = field(default_factory=Counter)


def bare_burst(work: Path, count: int, calls: Calls, partition: str, time_limit: str, timeout: float) -> Burst:
    dirs = [work / f"burst-bare-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    scripts = [bare_script(d) for d in dirs]  # inputs prepared before t0, as the pods' manifests are
    calls.take()
    t0 = time.time()
    jobs = [bare_submit(d, s, partition, time_limit) for d, s in zip(dirs, scripts)]
    submitted = time.time()
    return _burst_end("bare sbatch", t0, submitted, jobs, calls, timeout)


def hpkctl_burst(work: Path, count: int, calls: Calls, site: str, timeout: float) -> Burst:
    """B pods submitted back to back in one process, as a kubelet would (``submit_pod``)."""
    from hpkctl.jobs import Slurm
    from hpkctl.provider.runrecords import forget_run
    from hpkctl.local.submit import submit_pod
    from hpkctl.provider.slurmjobs import job_states
    from hpkctl.sites import load_site

    profile = load_site(site)
    names = [f"burst-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    manifests = [pod_manifest(work / n, n) for n in names]
    calls.take()
    devnull = open(os.devnull, "w")
    t0 = time.time()
    records = [submit_pod(profile, str(m), out=devnull)[0] for m in manifests]
    submitted = time.time()
    devnull.close()
    jobs = [pod_job(work / n, n, r.job_id, r.pod_dir) for n, r in zip(names, records)]
    try:
        burst = _burst_end("hpkctl pods", t0, submitted, jobs, calls, timeout)
        # Not timed, not in the per-job count: what one status round over all these (ended) pods
        # costs the product, as 'hpkctl status' or a kubelet's sync loop would ask.
        job_states(Slurm(profile.slurm), [r.job_id for r in records])
        burst.status_calls = calls.take()
        return burst
    finally:
        for r in records:
            forget_run(profile, r)


def _burst_end(label: str, t0: float, submitted: float, jobs: list[Job], calls: Calls, timeout: float) -> Burst:
    try:
        wait_files([j.finished for j in jobs], timeout=timeout)
    except TimeoutError as e:
        print(f"bench: {label}: {e}", file=sys.stderr)
        calls.cancel(j.job_id for j in jobs)
    samples = [measure(t0, submitted, j) for j in jobs]
    calls.wait_ended([j.job_id for j in jobs])
    counted = calls.take()
    times = {"submitted": submitted - t0}
    for key in ("started", "ran", "finished"):
        got = [s.times[key] for s in samples if s.times[key] is not None]
        times[key] = max(got) if got else float("nan")  # type: ignore[type-var]
    return Burst(label, len(jobs), times, sum(s.ok for s in samples), counted)


# ---------------------------------------------------------------------------- report


def p90(xs: Sequence[float]) -> float:
    return statistics.quantiles(xs, n=10, method="inclusive")[8] if len(xs) > 1 else xs[0]


def run_text(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
        return (r.stdout or r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"? ({e})"


def environment(args: argparse.Namespace) -> list[str]:
    from hpkctl.sites import load_site

    profile = load_site(args.site)
    git = ["git", "-c", "safe.directory=*", "-C", str(REPO)]
    head = subprocess.run(git + ["rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=False)
    commit = os.environ.get("HPK_BENCH_COMMIT") or (head.stdout.strip() if head.returncode == 0 else "unknown")
    dirty = ""
    if head.returncode == 0:  # a checkout (an exported commit has no .git: it is exactly that commit)
        dirty = subprocess.run(git + ["status", "--porcelain", "--", "bench", "hpkctl", "sbatch", "site-configs",
                                      "ci/standin"], capture_output=True, text=True, check=False).stdout.strip()
    apptainer = shutil.which("apptainer") or "?"
    standin = Path(apptainer).resolve().is_relative_to(REPO / "ci" / "standin")
    app_line = (f"Apptainer STAND-IN ({run_text([apptainer, '--version'])}, ci/standin on bubblewrap), "
                "NOT real Apptainer" if standin else f"Apptainer {run_text([apptainer, '--version'])} ({apptainer})")
    nodes = run_text(["sinfo", "--noheader", f"--partition={args.partition}", "--format=%D nodes, %c CPUs/node "
                      "(advertised), %m MB/node"])
    return [
        f"date      {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC')}",
        f"commit    {commit}" + (" + UNCOMMITTED changes under bench/ hpkctl/ sbatch/ site-configs/ ci/standin/"
                                 if dirty else "") + f" (code measured: {REPO})",
        f"Slurm     {run_text(['sbatch', '--version'])}; partition {args.partition}: {nodes}",
        f"profile   {profile.name} (apptainer.pull = {profile.apptainer.pull}, network = {profile.apptainer.network})",
        f"runtime   {app_line}",
        f"machine   {platform.node()}, {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start",
    ]


def latency_table(n_warm: int, bare: Side, hpk: Side) -> list[str]:
    ob = [s for s in bare.samples if s.ok]
    oh = [s for s in hpk.samples if s.ok]
    lines = [f"start latency: n = {len(ob)} bare, {len(oh)} hpkctl samples (after {n_warm} warm-up pair(s), "
             "discarded), interleaved ABBA",
             f"  {'seconds from submit':26} {'bare median':>11} {'p90':>7}  {'hpkctl median':>13} {'p90':>7}  "
             f"{'ratio median':>12} {'p90':>6}  {'diff median':>11}  {'diff mean ± 2 SE':>16}"]
    for key, label in (QUEUED, *METRICS):
        b = [s.times[key] for s in ob if key in s.times]
        h = [s.times[key] for s in oh if key in s.times]
        if key == QUEUED[0] and not (b and h):
            continue  # not timed (bench/pilot.py's shims)
        if not b or not h:
            lines.append(f"  {label:26} (no successful samples)")
            continue
        mb, mh, pb, ph = statistics.median(b), statistics.median(h), p90(b), p90(h)  # type: ignore[arg-type]
        lines.append(f"  {label:26} {mb:11.3f} {pb:7.3f}  {mh:13.3f} {ph:7.3f}  {mh / mb:12.2f} {ph / pb:6.2f}  "
                     f"{mh - mb:+11.3f}  {mean_diff(b, h):>16}")
    lines.append("  (a batch job starts at slurmctld's next scheduling pass, not at its submission: passes come about "
                 "1 s apart here, so a start is its submission plus 0-1 s; with random phases the mean difference "
                 "estimates what hpkctl adds to a start, the medians' difference wanders by ~0.2 s at n = 20"
                 + ("; 'sbatch returned (queued)' is that addition without the pass's noise)"
                    if any(QUEUED[0] in s.times for s in oh) else ")"))
    nb, nh = max(len(bare.samples), 1), max(len(hpk.samples), 1)
    lines.append(f"  Slurm commands per sample: bare {per(bare.calls, nb)}; hpkctl run --detach {per(hpk.calls, nh)}"
                 f" (+ cleanup 'hpkctl delete', untimed: {per(hpk.cleanup_calls, nh)})")
    failed = (len(bare.samples) - len(ob), len(hpk.samples) - len(oh))
    if any(failed):
        lines.append(f"  FAILED samples (excluded): bare {failed[0]}, hpkctl {failed[1]}")
    return lines


def mean_diff(bare: Sequence[float], hpk: Sequence[float]) -> str:
    """mean(hpk) - mean(bare), with two standard errors of that difference (independent samples)."""
    if len(bare) < 2 or len(hpk) < 2:
        return "n/a"
    se = (statistics.variance(bare) / len(bare) + statistics.variance(hpk) / len(hpk)) ** 0.5
    return f"{statistics.fmean(hpk) - statistics.fmean(bare):+.3f} ± {2 * se:.3f}"


def per(calls: Counter[str], n: int) -> str:
    if not calls:
        return "none"
    return " ".join(f"{k} {v / n:g}" for k, v in sorted(calls.items()))


def burst_table(bursts: list[tuple[Burst, Burst]]) -> list[str]:
    count = bursts[0][0].count
    lines = [f"burst: {count} jobs submitted back to back per side (hpkctl: submit_pod in one process, as a "
             f"kubelet would), {len(bursts)} round(s), sides alternating;",
             "  time until the LAST job reached each moment" + (", median over rounds" if len(bursts) > 1 else ""),
             f"  {'seconds from first submit':26} {'bare':>9} {'hpkctl':>9} {'ratio':>7}"]
    for key, label in METRICS:
        label = "all submitted" if key == "submitted" else f"all: {label}"
        b = statistics.median(x.times[key] for x, _ in bursts)
        h = statistics.median(y.times[key] for _, y in bursts)
        lines.append(f"  {label:26} {b:9.2f} {h:9.2f} {h / b:7.2f}")
    bb = [x for x, _ in bursts]
    hh = [y for _, y in bursts]
    lines.append(f"  throughput (jobs/s, to all finished): bare {count / statistics.median(x.times['finished'] for x in bb):.1f}, "
                 f"hpkctl {count / statistics.median(y.times['finished'] for y in hh):.1f}")
    bc = sum((x.calls for x in bb), Counter())
    hc = sum((y.calls for y in hh), Counter())
    lines.append(f"  Slurm commands per job (product only, not the benchmark's polling): bare {per(bc, count * len(bb))}; "
                 f"hpkctl {per(hc, count * len(hh))}")
    lines.append(f"  (untimed) one hpkctl status round over all {count} ended pods: "
                 f"{' '.join(f'{k} {v}' for k, v in sorted(hh[-1].status_calls.items())) or 'none'}")
    lines.append(f"  succeeded: bare {sum(x.ok for x in bb)}/{count * len(bb)}, hpkctl {sum(y.ok for y in hh)}/{count * len(hh)}")
    if len(bursts) > 1:
        lines.append("  per round: " + "; ".join(
            f"round {i + 1}: finished bare {x.times['finished']:.1f} s, hpkctl {y.times['finished']:.1f} s"
            for i, (x, y) in enumerate(bursts)))
    return lines


# ---------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site", default="ci")
    ap.add_argument("--partition", default="debug")
    ap.add_argument("-n", type=int, default=15, help="latency samples per side (default 15)")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up samples per side, discarded (default 2)")
    ap.add_argument("--burst", type=int, default=200, help="jobs per side in a burst (0 skips it; default 200)")
    ap.add_argument("--burst-rounds", type=int, default=1, help="bursts per side, alternating order (default 1)")
    ap.add_argument("--timeout", type=float, default=180, help="seconds one latency job may take (default 180)")
    args = ap.parse_args()
    if args.n < 1 or args.warmup < 0 or args.burst < 0 or args.burst_rounds < 1:
        ap.error("-n and --burst-rounds must be >= 1, --warmup and --burst >= 0")
    if shutil.which("apptainer") is None:
        print("bench: no apptainer on PATH (put ci/standin first on PATH for the local stand-in)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="hpk-bench-", dir=os.environ.get("HPK_BENCH_DIR", "/tmp")))
    hpkctl = hpkctl_program(root)
    work = root / "work"
    work.mkdir()
    calls = Calls(root)
    # From here on every Slurm command the product or the bare side runs goes through a shim.
    os.environ["PATH"] = f"{calls.dir}:{os.environ['PATH']}"
    for line in environment(args):
        print(f"# {line}")
    print(f"# sizes     -n {args.n} --warmup {args.warmup} --burst {args.burst} --burst-rounds {args.burst_rounds}",
          flush=True)
    try:
        lat = Latency(args, work, calls, hpkctl)
        bare, hpk = Side("bare sbatch"), Side("hpkctl run")
        for i in range(args.warmup + args.n):
            keep = i >= args.warmup
            order = (lat.bare, lat.hpk) if i % 2 == 0 else (lat.hpk, lat.bare)  # ABBA
            for fn in order:
                fn(bare if fn == lat.bare else hpk, keep)
        print("\n".join(latency_table(args.warmup, bare, hpk)), flush=True)
        if args.burst:
            bursts = []
            for r in range(args.burst_rounds):
                one = lambda: bare_burst(work, args.burst, calls, args.partition, lat.time_limit, 900)  # noqa: E731
                two = lambda: hpkctl_burst(work, args.burst, calls, args.site, 900)  # noqa: E731
                if r % 2 == 0:
                    b = one()
                    h = two()
                else:
                    h = two()
                    b = one()
                bursts.append((b, h))
            print("\n".join(burst_table(bursts)))
        print(f"# load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

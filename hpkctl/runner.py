"""``hpkctl run/status/logs/delete``: pods as Slurm jobs without any Kubernetes control plane.

A run is recorded in ``<state_dir>/runs/<namespace>/<name>.json`` (uid, job id, pod directory),
so ``status``, ``logs`` and ``delete`` find it by pod name, as ``kubectl`` would.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from hpkctl.errors import HpkError, PodError
from hpkctl.jobs import TERMINAL_STATES, JobInfo, Slurm, SlurmError
from hpkctl.kubelet import render_pod, write_pod_dir
from hpkctl.kubelet.manifest import load_manifest, select_pod, validate_pod_shape, with_api_defaults
from hpkctl.kubelet.podstatus import PodStatus, containers_of, read_pod_status
from hpkctl.sites import load_site, require_submittable
from hpkctl.sites.schema import SiteProfile

# How often the status files are read (cheap, local) and Slurm is asked (one squeue for the run).
FILE_POLL = 0.2
SLURM_BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0)


@dataclass
class RunRecord:
    name: str
    namespace: str
    uid: str
    job_id: str
    pod_dir: str
    site: str
    submitted: float

    def pod(self) -> dict[str, Any]:
        return json.loads((Path(self.pod_dir) / "job" / "pod.json").read_text())


def _runs_dir(profile: SiteProfile) -> Path:
    return Path(os.path.expanduser(profile.pods.state_dir)) / "runs"


def _record_path(profile: SiteProfile, namespace: str, name: str) -> Path:
    return _runs_dir(profile) / namespace / f"{name}.json"


def load_record(profile: SiteProfile, name: str, namespace: str = "default") -> RunRecord:
    path = _record_path(profile, namespace, name)
    try:
        return RunRecord(**json.loads(path.read_text()))
    except FileNotFoundError:
        known = ", ".join(r.name for r in all_records(profile)) or "none"
        raise HpkError(f"no run named {name!r} (site {profile.name}); runs: {known}",
                       hint="start one with 'hpkctl run -f POD.yaml', or pass the --site it was started with") from None


def all_records(profile: SiteProfile) -> list[RunRecord]:
    out = []
    for path in sorted(_runs_dir(profile).glob("*/*.json")):
        try:
            out.append(RunRecord(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):  # deleted meanwhile, or half-written by an old version
            continue
    return out


def _save_record(profile: SiteProfile, rec: RunRecord) -> None:
    path = _record_path(profile, rec.namespace, rec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(rec), indent=2))
    os.replace(tmp, path)


def _ended(job: JobInfo | None) -> bool:
    """Whether Slurm is done with the job (or has forgotten it)."""
    return job is None or job.state in TERMINAL_STATES


def job_states(slurm: Slurm, job_ids: list[str]) -> dict[str, JobInfo | None]:
    """Slurm's view of jobs: one squeue call, then one batched final-state lookup for those that ended."""
    jobs: dict[str, JobInfo | None] = dict(slurm.query(job_ids)) if job_ids else {}
    ended = [j for j in job_ids if _ended(jobs.get(j))]
    finals = slurm.finals(ended) if ended else {}
    return {j: finals.get(j) or jobs.get(j) for j in job_ids}


def forget_run(profile: SiteProfile, rec: RunRecord) -> None:
    """Remove a run's record and its pod directory (the job must have ended)."""
    _record_path(profile, rec.namespace, rec.name).unlink(missing_ok=True)
    shutil.rmtree(rec.pod_dir, ignore_errors=True)


def pod_status(slurm: Slurm, rec: RunRecord) -> PodStatus:
    """Status of one run: its status files combined with Slurm's view of its job."""
    job = job_states(slurm, [rec.job_id])[rec.job_id]
    return read_pod_status(Path(rec.pod_dir), containers_of(rec.pod()), job)


# ----------------------------------------------------------------------------- images


def pull_images(profile: SiteProfile, rendered: Any, *, out: TextIO) -> None:
    """Pull missing images before submission (sites whose compute nodes are offline).

    Same protocol as the job's ``hpk_image``: one lock per image, a temp name, an atomic rename.
    """
    import fcntl

    for image, sif, policy in rendered.plan.images:
        if os.path.exists(sif) and policy != "Always":
            continue
        if policy == "Never":
            raise PodError("ErrImageNeverPull", f"image {image.full} is not cached and imagePullPolicy is Never")
        os.makedirs(os.path.dirname(sif), exist_ok=True)
        with open(f"{sif}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(sif) and policy != "Always":
                continue
            print(f"pulling {image.source} → {sif}", file=out)
            tmp = f"{sif}.tmp.{os.getpid()}"
            env = dict(os.environ)
            creds = rendered.plan.pull_credentials.get(image.registry)
            if creds:
                env["APPTAINER_DOCKER_USERNAME"], env["APPTAINER_DOCKER_PASSWORD"] = creds
            r = subprocess.run([profile.apptainer.binary, "pull", "--force", tmp, image.source],
                               capture_output=True, text=True, check=False, env=env)
            if r.returncode != 0:
                Path(tmp).unlink(missing_ok=True)
                raise PodError("ErrImagePull", f"pulling {image.source} failed: {r.stderr.strip()[-500:]}")
            os.replace(tmp, sif)


# ----------------------------------------------------------------------------- run


def submit_pod(profile: SiteProfile, manifest_path: str, *, pod_name: str | None = None,
               out: TextIO = sys.stderr) -> tuple[RunRecord, Any]:
    """Render, write the pod directory, submit. Returns the run record and the rendered pod."""
    require_submittable(profile)
    manifest = load_manifest(manifest_path)
    pod = select_pod(manifest, pod_name)
    validate_pod_shape(pod, source=manifest_path)
    pod = with_api_defaults(pod, create=True)
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    slurm = Slurm(profile.slurm)
    path = _record_path(profile, namespace, name)
    old = RunRecord(**json.loads(path.read_text())) if path.exists() else None
    if old is not None:
        st = pod_status(slurm, old)
        if not st.finished:
            raise HpkError(f"pod {namespace}/{name} already exists (Slurm job {old.job_id}, {st.phase})",
                           hint=f"wait for it, or 'hpkctl delete {name} --site {profile.name}'")
        shutil.rmtree(old.pod_dir, ignore_errors=True)
    rendered = render_pod(pod, profile, objects=manifest.objects, services=manifest.services)
    for w in rendered.warnings:
        print(f"hpkctl: warning: {w}", file=out)
    if profile.apptainer.pull == "submit":
        pull_images(profile, rendered, out=out)
    root = write_pod_dir(rendered, pod_json=json.dumps(pod, indent=2).encode())
    try:
        job_id = slurm.submit(root / "job" / "job.sh", workdir=root)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)  # nothing was submitted: leave nothing behind
        raise
    (root / "job" / "jobid").write_text(job_id + "\n")
    rec = RunRecord(name=name, namespace=namespace, uid=pod["metadata"]["uid"], job_id=job_id,
                    pod_dir=str(root), site=profile.name, submitted=time.time())
    _save_record(profile, rec)
    return rec, rendered


class _LogTail:
    """Follows the containers' log files (and their replacements after a restart)."""

    def __init__(self, pod_dir: Path, names: list[str], out: TextIO, *, prefixed: set[str] | None = None) -> None:
        self.files = {n: pod_dir / "logs" / f"{n}.log" for n in names}
        self.pos = dict.fromkeys(names, 0)
        self.inode: dict[str, int] = {}
        self.prefixed = set(names) if prefixed is None else prefixed
        self.out = out
        self.partial = dict.fromkeys(names, b"")

    def pump(self, *, final: bool = False) -> None:
        for name, path in self.files.items():
            try:
                with open(path, "rb") as fh:
                    st = os.fstat(fh.fileno())
                    if self.inode.get(name) != st.st_ino:  # new file: first time, or rotated by a restart
                        self.inode[name], self.pos[name] = st.st_ino, 0
                    fh.seek(self.pos[name])
                    data = fh.read()
                    self.pos[name] += len(data)
            except FileNotFoundError:
                continue
            data = self.partial[name] + data
            lines = data.split(b"\n")
            self.partial[name] = b"" if final else lines.pop()
            for line in lines if not final else [x for x in lines if x]:
                text = line.decode("utf-8", "replace")
                self.out.write(f"[{name}] {text}\n" if name in self.prefixed else f"{text}\n")
            self.out.flush()


def _describe(st: PodStatus, *, with_message: bool | None = None) -> str:
    """``Phase (Reason): message``; by default without the message while running (it only says "running")."""
    base = st.phase + (f" ({st.reason})" if st.reason and st.reason != st.phase else "")
    if with_message is None:
        with_message = st.phase != "Running"
    return f"{base}: {st.message}" if st.message and with_message else base


def follow_run(slurm: Slurm, rec: RunRecord, *, out: TextIO, log_out: TextIO, quiet: bool = False,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> PodStatus:
    """Stream logs and progress until the pod finishes; return its final status."""
    containers = containers_of(rec.pod())
    names = [n for n, _ in containers]
    mains = [n for n, init in containers if not init]
    # One main container: its output unprefixed (like kubectl logs); otherwise "[name] line".
    prefixed = {n for n, init in containers if init or len(mains) > 1}
    tail = _LogTail(Path(rec.pod_dir), names, log_out, prefixed=prefixed)
    last_line = ""
    next_slurm = 0.0
    attempt = 0
    job: JobInfo | None = None
    asked = False
    while True:
        now = clock()
        if now >= next_slurm:
            next_slurm = now + SLURM_BACKOFF[min(attempt, len(SLURM_BACKOFF) - 1)]
            attempt += 1
            try:
                job = slurm.query([rec.job_id]).get(rec.job_id)
                asked = True
            except SlurmError as exc:  # a busy or restarting slurmctld: keep following the files
                print(f"hpkctl: warning: cannot ask Slurm about job {rec.job_id} ({exc.message}); retrying",
                      file=out)
        tail.pump()
        files_done = (Path(rec.pod_dir) / "status" / "pod.done").exists()
        if files_done and (job is None or job.state != "COMPLETING") or asked and _ended(job):
            # Let Slurm finish its bookkeeping so TIMEOUT/OOM are reported as such.
            final = _settle(slurm, rec, sleep=sleep)
            tail.pump(final=True)
            return final
        st = read_pod_status(Path(rec.pod_dir), containers, job, job_known=asked)
        line = _describe(st)
        if not quiet and line != last_line:
            extra = f" on {st.node}" if st.phase == "Running" and st.node else ""
            print(f"pod {rec.namespace}/{rec.name} (Slurm job {rec.job_id}): {line}{extra}", file=out)
            last_line = line
        sleep(FILE_POLL)


def _settle(slurm: Slurm, rec: RunRecord, *, sleep: Callable[[float], None], tries: int = 20) -> PodStatus:
    """The job's final status, waiting briefly for Slurm to record it (COMPLETING → final)."""
    st = pod_status(slurm, rec)
    for _ in range(tries):
        if st.job is not None and _ended(st.job):
            break
        sleep(0.25)
        st = pod_status(slurm, rec)
    return st


def _result_line(rec: RunRecord, st: PodStatus) -> str:
    return f"pod {rec.namespace}/{rec.name} (Slurm job {rec.job_id}): {_describe(st, with_message=True)}"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_run(args: argparse.Namespace) -> int:
    profile = load_site(args.site)
    out = sys.stderr
    try:
        rec, _ = submit_pod(profile, args.filename, pod_name=args.pod, out=out)
    except PodError as exc:
        print(f"hpkctl: pod cannot run: {exc.reason}: {exc}", file=out)
        return 1
    if not args.quiet:
        print(f"pod {rec.namespace}/{rec.name}: submitted as Slurm job {rec.job_id} (pod directory {rec.pod_dir})",
              file=out)
    if args.detach:
        print(rec.job_id)
        return 0
    slurm = Slurm(profile.slurm)
    # SIGTERM (a closing terminal, a kill from a batch system) cancels the job like Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        st = follow_run(slurm, rec, out=out, log_out=sys.stdout, quiet=args.quiet)
    except KeyboardInterrupt:
        print(f"\ninterrupted: cancelling Slurm job {rec.job_id}", file=out)
        slurm.cancel(rec.job_id)
        st = _settle(slurm, rec, sleep=time.sleep)
        print(_result_line(rec, st), file=out)
        return 130
    print(_result_line(rec, st), file=out)
    if st.phase == "Succeeded":
        return 0
    return st.exit_code if st.exit_code and 0 < st.exit_code < 256 else 1


# ----------------------------------------------------------------------------- status / logs / delete


def cmd_status(args: argparse.Namespace) -> int:
    profile = load_site(args.site)
    records = [load_record(profile, args.name)] if args.name else all_records(profile)
    jobs = job_states(Slurm(profile.slurm), [r.job_id for r in records])
    rows = []
    for rec in records:
        job = jobs[rec.job_id]
        try:
            pod = rec.pod()
        except OSError:  # deleted by a concurrent 'hpkctl delete'
            if args.name:
                raise HpkError(f"run {rec.name} is being deleted") from None
            continue
        rows.append((rec, read_pod_status(Path(rec.pod_dir), containers_of(pod), job)))
    if args.json:
        print(json.dumps([{"name": r.name, "namespace": r.namespace, "uid": r.uid, "jobId": r.job_id,
                           "podDir": r.pod_dir, "status": st.as_k8s()} for r, st in rows], indent=2))
        return 0
    if not rows:
        print("no runs")
        return 0
    print(f"{'NAME':24} {'JOB':>8} {'PHASE':10} {'REASON':18} {'NODE':10} MESSAGE")
    for rec, st in rows:
        msg = st.message if st.phase != "Running" else ""
        print(f"{rec.name:24} {rec.job_id:>8} {st.phase:10} {st.reason or '-':18} {st.node or '-':10} {msg}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    profile = load_site(args.site)
    rec = load_record(profile, args.name)
    pod = rec.pod()
    names = containers_of(pod)
    container = args.container or next(n for n, init in names if not init)
    if container not in [n for n, _ in names]:
        raise HpkError(f"pod {rec.name} has no container {container!r}",
                       hint="choose one of " + ", ".join(n for n, _ in names))
    logs = Path(rec.pod_dir) / "logs"
    path = logs / (f"{container}.previous.log" if args.previous else f"{container}.log")
    if args.previous and not path.exists():
        raise HpkError(f"container {container} of pod {rec.name} has not been restarted: no previous log")
    if not args.follow:
        if path.exists():
            sys.stdout.buffer.write(path.read_bytes())
        return 0
    status = Path(rec.pod_dir) / "status"
    tail = _LogTail(Path(rec.pod_dir), [container], sys.stdout, prefixed=set())
    slurm = Slurm(profile.slurm)
    next_slurm = 0.0
    while True:
        tail.pump()
        if (status / "pod.done").exists() or (status / f"{container}.exitcode").exists() and not \
                (status / f"{container}.restarts").exists():
            tail.pump(final=True)
            return 0
        if time.monotonic() >= next_slurm:
            if _ended(slurm.query([rec.job_id]).get(rec.job_id)):
                tail.pump(final=True)
                return 0
            next_slurm = time.monotonic() + 2.0
        time.sleep(FILE_POLL)


def cmd_delete(args: argparse.Namespace) -> int:
    profile = load_site(args.site)
    rec = load_record(profile, args.name)
    slurm = Slurm(profile.slurm)
    if not _ended(slurm.query([rec.job_id]).get(rec.job_id)):
        slurm.cancel(rec.job_id)
        print(f"pod {rec.namespace}/{rec.name}: cancelled Slurm job {rec.job_id}", file=sys.stderr)
        for _ in range(60):  # let the job end before its directory goes (KillWait is short)
            if _ended(slurm.query([rec.job_id]).get(rec.job_id)):
                break
            time.sleep(0.5)
    forget_run(profile, rec)
    print(f"pod {rec.namespace}/{rec.name} deleted")
    return 0

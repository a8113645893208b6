"""``hpkctl run``'s first half: a manifest → a pod directory → a submitted Slurm job."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import TextIO

from hpkctl.errors import HpkError
from hpkctl.jobs import (TERMINAL_STATES, InvalidAccount, InvalidPartition, InvalidQos, JobInfo,
                         ResourcesUnavailable, Slurm, SubmitError, TimeLimitTooLong)
from hpkctl.local.manifest import load_manifest, select_pod, validate_pod_shape, with_api_defaults
from hpkctl.local.records import RunRecord, read_record, record_path, save_record
from hpkctl.pod import RenderedPod, render_pod, write_pod_dir
from hpkctl.pod.status import PodStatus, containers_of, read_pod_status
from hpkctl.runtime import ImageToPull, pull_images
from hpkctl.sites import require_submittable
from hpkctl.sites.schema import SiteProfile


def ended(job: JobInfo | None) -> bool:
    """Whether Slurm is done with the job (or has forgotten it)."""
    return job is None or job.state in TERMINAL_STATES


def job_states(slurm: Slurm, job_ids: list[str]) -> dict[str, JobInfo | None]:
    """Slurm's view of jobs: one squeue call, then one batched final-state lookup for those that ended."""
    jobs: dict[str, JobInfo | None] = dict(slurm.query(job_ids)) if job_ids else {}
    gone = [j for j in job_ids if ended(jobs.get(j))]
    finals = slurm.finals(gone) if gone else {}
    return {j: finals.get(j) or jobs.get(j) for j in job_ids}


def pod_status(slurm: Slurm, rec: RunRecord) -> PodStatus:
    """Status of one run: its status files combined with Slurm's view of its job."""
    job = job_states(slurm, [rec.job_id])[rec.job_id]
    return read_pod_status(rec.dir.root, containers_of(rec.pod()), job)


def images_to_pull(rendered: RenderedPod) -> list[ImageToPull]:
    plan = rendered.plan
    return [ImageToPull(source=image.source, sif=sif, policy=policy,
                        credentials=plan.pull_credentials.get(image.registry))
            for image, sif, policy in plan.images]


FLAGS_ANNOTATION = "slurm-job.hpk.io/flags"


def pod_submit_hint(exc: SubmitError, *, manifest: str, site: str) -> str:
    """Where a refused sbatch option came from, in the pod's terms, followed by the jobs layer's own
    hint (which knows Slurm, not pods: "the job's sbatch options", the ``slurm.*`` profile keys)."""
    show = f"'hpkctl render -f {manifest} --site {site}' shows the #SBATCH lines"
    if isinstance(exc, (InvalidPartition, InvalidAccount, InvalidQos)):
        option = {InvalidPartition: "partition", InvalidAccount: "account", InvalidQos: "qos"}[type(exc)]
        where = (f"set --{option}=NAME in the pod's annotation {FLAGS_ANNOTATION} ({manifest}), "
                 f"or [slurm] {option} in site profile {site} ('hpkctl sites show {site}')")
    elif isinstance(exc, TimeLimitTooLong):
        where = (f"lower the pod's spec.activeDeadlineSeconds or --time in its annotation {FLAGS_ANNOTATION} "
                 f"({manifest}); the site's limit is in 'sinfo -o \"%P %l\"'")
    elif isinstance(exc, ResourcesUnavailable):
        where = (f"lower the containers' resources (cpu becomes --cpus-per-task, memory --mem, GPUs --gres) "
                 f"or the node/task counts in the annotation {FLAGS_ANNOTATION} ({manifest}); "
                 f"'sinfo -o \"%P %c %m %G\"' shows what a node has")
    else:
        where = (f"the options come from the pod's resources, its annotation {FLAGS_ANNOTATION} ({manifest}) "
                 f"and site profile {site}")
    return "; ".join(part for part in (where, exc.hint, show) if part)


def submit_pod(profile: SiteProfile, manifest_path: str, *, pod_name: str | None = None,
               out: TextIO = sys.stderr) -> tuple[RunRecord, RenderedPod]:
    """Render, write the pod directory, submit. Returns the run record and the rendered pod."""
    require_submittable(profile)
    manifest = load_manifest(manifest_path)
    pod = select_pod(manifest, pod_name)
    validate_pod_shape(pod, source=manifest_path)
    pod = with_api_defaults(pod, create=True)
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    slurm = Slurm(profile.slurm)
    path = record_path(profile, namespace, name)
    old = read_record(path) if path.exists() else None
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
        pull_images(images_to_pull(rendered), apptainer=profile.apptainer.binary,
                    window=profile.apptainer.always_pull_window, timeout=profile.apptainer.pull_timeout, out=out)
    root = write_pod_dir(rendered, pod_json=json.dumps(pod, indent=2).encode())
    try:
        job_id = slurm.submit(root / "job" / "job.sh", workdir=root)
    except SubmitError as exc:
        shutil.rmtree(root, ignore_errors=True)  # nothing was submitted: leave nothing behind
        exc.hint = pod_submit_hint(exc, manifest=manifest_path, site=profile.name)
        raise
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    rec = RunRecord(name=name, namespace=namespace, uid=pod["metadata"]["uid"], job_id=job_id,
                    pod_dir=os.fspath(root), site=profile.name, submitted=time.time())
    save_record(profile, rec)
    return rec, rendered

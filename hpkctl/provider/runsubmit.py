"""``hpkctl run``'s submission of a prepared pod, as the job-per-pod provider submits one: its images
pulled first where the profile says so (``[apptainer] pull = "submit"``), ``sbatch`` of its script (a
time limit above the partition's lowered to it), and its intent record, created before, updated with
the job id; the job is cancelled when that record cannot be written or was deleted meanwhile, so no job
runs that no record names (moved here from ``hpkctl.local.submit``, issue 21.1)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TextIO

from hpkctl.errors import HpkError
from hpkctl.jobs import NO_CLEAR_ANSWER, Slurm, SubmitError
from hpkctl.pod import RenderedPod
from hpkctl.provider.runrecords import SUBMITTED, RunRecord, forget_run, owns_pod_dir, read_record, record_path, save_record
from hpkctl.provider.slurmjobs import images_to_pull, job_partition_option, lowered_note, submit_job
from hpkctl.runtime import pull_images
from hpkctl.sites.schema import SiteProfile


def pull_first(profile: SiteProfile, rendered: RenderedPod, *, out: TextIO) -> None:
    """With ``[apptainer] pull = "submit"``: pull the pod's images here, now (the nodes may be offline)."""
    if profile.apptainer.pull == "submit":
        a = profile.apptainer
        pull_images(images_to_pull(rendered), apptainer=a.binary, window=a.always_pull_window, timeout=a.pull_timeout,
                    out=out)


def submit_run(slurm: Slurm, profile: SiteProfile, rec: RunRecord, rendered: RenderedPod, *,
               out: TextIO = sys.stderr) -> RunRecord:
    """``sbatch`` the pod of ``rec`` (state ``submitting``, its directory written) and write the job id
    into its record. A refusal (``SubmitError``) removes the record and the pod directory; a Slurm
    timeout keeps both (the job may exist, and carries the pod's uid in its comment); a record that
    cannot be written, or was deleted meanwhile, cancels the job."""
    root = Path(rec.pod_dir)
    try:
        plan = rendered.plan
        job_id, lowered = submit_job(slurm, root / "job" / "job.sh", workdir=root, deadline=plan.active_deadline,
                                     partition=job_partition_option(plan))
        if lowered:
            print(f"hpkctl: warning: {lowered_note(job_id, lowered, deadline=plan.active_deadline, grace=plan.grace)}",
                  file=out)
    except NO_CLEAR_ANSWER as exc:  # the job may exist: the record and the pod stay
        exc.hint = (f"{exc.hint}; the job may have been created: 'hpkctl status {rec.name} -n {rec.namespace} "
                    f"--site {profile.name}' looks for it (uid {rec.uid}), 'hpkctl delete' cancels it")
        raise
    except SubmitError:
        forget_run(profile, rec)  # nothing was submitted: leave nothing behind
        raise
    except BaseException:
        forget_run(profile, rec)
        raise
    try:
        current = read_record(record_path(profile, rec.namespace, rec.name))
    except (OSError, ValueError, TypeError):
        current = None
    try:
        if current is None or current.uid != rec.uid:
            raise HpkError(f"pod {rec.namespace}/{rec.name} was deleted while it was being submitted")
        rec.job_id, rec.state = job_id, SUBMITTED
        save_record(profile, rec)
    except BaseException:
        slurm.cancel(job_id)  # a job no record names would be one nobody sees
        if current is not None and current.uid == rec.uid:
            forget_run(profile, rec)
        elif owns_pod_dir(profile, rec):
            shutil.rmtree(rec.pod_dir, ignore_errors=True)
        raise
    return rec


__all__ = ["pull_first", "submit_run"]

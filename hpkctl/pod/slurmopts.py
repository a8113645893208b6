"""A pod's Slurm options: the ``#SBATCH`` lines hpkctl generates (name, output, comment, resources,
time limit and its ``--signal``, the site's partition, account and QoS), merged with the site's
``extra_directives`` and the pod's flags annotation (the user's choice wins), plus the MPI launch's
``srun`` flags.

The grammar these options are read with is elsewhere: which options sbatch and srun know and how
their values are checked (:mod:`hpkctl.pod.sbatch_options`, :mod:`hpkctl.pod.srun_options`), and
parsing and merging them (:mod:`hpkctl.pod.flags`). This module only decides which ones a pod gets.
"""

from __future__ import annotations

import posixpath

from hpkctl.errors import PodError
from hpkctl.pod.context import Ctx
from hpkctl.pod.flags import (
    FLAGS_ANNOTATIONS,
    MPI_FLAGS_ANNOTATIONS,
    SlurmOption,
    annotation,
    job_comment,
    merge_options,
    parse_options,
    parse_srun_options,
)
from hpkctl.pod.lifecycle import checked_grace, room_for_grace, signal_option, stop_wait
from hpkctl.pod.resources import PodResources
from hpkctl.sites.schema import seconds_to_slurm_time, slurm_time_to_seconds

# Groups of sbatch options Slurm refuses together: a user's choice drops our generated one.
_EXCLUSIVE_GROUPS = (
    {"--mem", "--mem-per-cpu", "--mem-per-gpu"},
    {"--cpus-per-task", "--cpus-per-gpu"},
)


def slurm_options(ctx: Ctx, res: PodResources) -> tuple[list[SlurmOption], list[str], bool]:
    """The job's options, the MPI launch's srun flags, and whether the main container is an MPI launch
    (an MPI flags annotation, or more than one task or node)."""
    profile = ctx.profile
    s = profile.slurm
    annotations = ctx.meta.get("annotations") or {}
    site_opts = parse_options(" ".join(s.extra_directives), source="profile [slurm].extra_directives")
    user: list[SlurmOption] = []
    found = annotation(annotations, FLAGS_ANNOTATIONS)
    if found:
        user = parse_options(found[1], source=f"metadata.annotations[{found[0]}]")
    # The comment carries the pod's uid first (see flags.job_comment); a comment of the site or
    # the pod follows it instead of replacing it.
    comments = [o.value for o in site_opts + user if o.name == "--comment" and o.value]
    site_opts = [o for o in site_opts if o.name != "--comment"]
    user = [o for o in user if o.name != "--comment"]
    gen: list[SlurmOption] = [
        SlurmOption("--job-name", ctx.name),  # squeue shows the pod's name
        SlurmOption("--output", posixpath.join(ctx.pod_dir, "logs", "slurm.out")),
        SlurmOption("--chdir", ctx.pod_dir),
        SlurmOption("--comment", job_comment(ctx.uid, namespace=ctx.namespace, name=ctx.name,
                                             user=comments[-1] if comments else None)),
        SlurmOption("--cpus-per-task", str(res.cpus)),
        # the time limit: only the batch shell gets SIGTERM, early enough for the stop sequence
        SlurmOption("--signal", signal_option(checked_grace(ctx.spec))),
        # Slurm requeues by default (a node failure, 'scontrol requeue'): the containers would run
        # again unseen after the pod was reported final; a pod ends instead (NodeLost, as Kubernetes)
        SlurmOption("--no-requeue", None),
    ]
    if res.mem_mib:
        gen.append(SlurmOption("--mem", f"{res.mem_mib}M"))
    if res.tmp_mib and s.request_tmp:
        gen.append(SlurmOption("--tmp", f"{res.tmp_mib}M"))
    if res.gres:
        gen.append(SlurmOption("--gres", ",".join(f"{g}:{n}" for g, n in res.gres.items())))
    deadline = ctx.spec.get("activeDeadlineSeconds")
    if deadline is not None:
        if not isinstance(deadline, int) or deadline <= 0:
            raise PodError("InvalidPod", f"spec.activeDeadlineSeconds: {deadline!r} must be a positive integer")
        if s.max_time and deadline > slurm_time_to_seconds(s.max_time):
            raise PodError("DeadlineExceedsSiteLimit",
                           f"spec.activeDeadlineSeconds: {deadline}s is longer than this site's maximum {s.max_time}",
                           hint=f"lower it to at most {slurm_time_to_seconds(s.max_time)}")
        # The runtime stops the pod at the deadline itself, to the second (hpk_deadline); Slurm's limit,
        # whole minutes whose --signal may come a minute early, is the backstop after the stop sequence.
        limit = deadline + int(stop_wait(ctx.spec)) + 60  # the stop sequence's room is in it
        if s.max_time and limit > slurm_time_to_seconds(s.max_time):
            limit = _room_for_grace(ctx, slurm_time_to_seconds(s.max_time))
        gen.append(SlurmOption("--time", seconds_to_slurm_time(limit)))
    elif s.default_time:
        limit = slurm_time_to_seconds(s.default_time)
        room = _room_for_grace(ctx, limit)
        gen.append(SlurmOption("--time", s.default_time if room == limit else seconds_to_slurm_time(room)))
    for key, val in (("--partition", s.partition), ("--account", s.account), ("--qos", s.qos)):
        if val:
            gen.append(SlurmOption(key, val))
    if s.exclusive:
        gen.append(SlurmOption("--exclusive", None))
    if res.gres and profile.gpu.flags_per_gpu:
        gen += parse_options(" ".join(profile.gpu.flags_per_gpu), source="profile [gpu].flags_per_gpu")
    chosen = {o.name for o in user} | {o.name for o in site_opts}
    for group in _EXCLUSIVE_GROUPS:
        if chosen & group:
            gen = [o for o in gen if o.name not in group or o.name in chosen]
    options = merge_options(merge_options(gen, site_opts), user)
    if s.account_required and not any(o.name == "--account" for o in options):
        msg = "this site requires a Slurm account (budget) and none is set"
        hint = (f"set account = \"...\" under [slurm] in ~/.config/hpk/sites/{profile.name}.toml, "
                f"or add --account=... to the {FLAGS_ANNOTATIONS[0]} annotation")
        if ctx.strict:
            raise PodError("AccountRequired", msg, hint=hint)
        ctx.warn(f"{msg}; {hint}")

    mpi_found = annotation(annotations, MPI_FLAGS_ANNOTATIONS)
    mpi_flags: list[str] = []
    if mpi_found:
        srun = parse_srun_options(mpi_found[1], source=f"metadata.annotations[{mpi_found[0]}]")
        mpi_flags = [o.word for o in srun]
    multi = any(o.name in ("--nodes", "--ntasks", "--ntasks-per-node") and o.value not in (None, "1")
                for o in options)
    return options, mpi_flags, bool(mpi_found) or multi


def _room_for_grace(ctx: Ctx, limit: int) -> int:
    limit, warning = room_for_grace(ctx.spec, limit, max_time=ctx.profile.slurm.max_time)
    if warning:
        ctx.warn(warning)
    return limit


__all__ = ["slurm_options"]

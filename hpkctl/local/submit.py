"""``hpkctl run``'s first half: a manifest → a run record → a pod directory → a submitted Slurm job."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from hpkctl.errors import ManifestError
from hpkctl.jobs import (InvalidAccount, InvalidPartition, InvalidQos, ResourcesUnavailable, Slurm, SubmitError,
                         TimeLimitTooLong)
from hpkctl.local.manifest import load_manifest, pod_warnings, refuse_suspended, select_pod, with_api_defaults
from hpkctl.provider.runrecords import (SUBMITTING, RunExists, RunRecord, check_name, create_record, forget_run,
                                        read_record, record_path)
from hpkctl.pod import RenderedPod, render_pod, write_pod_dir
from hpkctl.pod.flags import FLAGS_ANNOTATIONS
from hpkctl.provider.runsubmit import pull_first, submit_run
from hpkctl.sites import require_submittable
from hpkctl.sites.schema import SiteProfile


_SERVICE_VARIABLE = re.compile(r"KUBERNETES_[A-Za-z0-9_]*")


def service_variable_warnings(pod: Mapping[str, Any]) -> list[str]:
    """A warning per container whose command, args or env values name a ``KUBERNETES_`` variable
    the pod does not set itself: without a control plane there is no API server, so ``hpkctl run``
    gives no ``KUBERNETES_SERVICE_HOST``/``_PORT`` (a client that needs them fails, and under
    OnFailure runs again and again)."""
    spec = pod.get("spec") or {}
    out = []
    for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        if not isinstance(c, dict):
            continue
        env = [e for e in c.get("env") or [] if isinstance(e, dict)]
        own = {e.get("name") for e in env}
        words = [w for key in ("command", "args") for w in c.get(key) or [] if isinstance(w, str)]
        words += [e["value"] for e in env if isinstance(e.get("value"), str)]
        named = sorted({m for w in words for m in _SERVICE_VARIABLE.findall(w)} - own)
        if named:
            out.append(f"container {c.get('name')!r} uses {', '.join(named)}: hpkctl run has no API server, so "
                       f"no KUBERNETES_SERVICE_* variables are set; give them in its env, or run the pod on the "
                       f"private cluster (hpkctl start, then kubectl)")
    return out


FLAGS_ANNOTATION = FLAGS_ANNOTATIONS[0]  # the name hints show; the others are aliases


def pod_submit_hint(exc: SubmitError, *, manifest: str, site: str, removed: str = "") -> str:
    """Where a refused sbatch option came from, in the pod's terms, followed by the jobs layer's own
    hint (which knows Slurm, not pods: "the job's sbatch options", the ``slurm.*`` profile keys).

    Parts of that hint naming ``removed`` (the pod directory, deleted after the refusal, e.g. sbatch's
    command line to reproduce it) are left out: a hint names only files that still exist; ``render
    --out`` writes the script again for whoever wants to run sbatch by hand."""
    show = (f"'hpkctl render -f {manifest} --site {site}' shows the #SBATCH lines "
            f"(--out DIR writes the pod directory, to try 'sbatch DIR/job/job.sh' by hand)")
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
    slurm_hint = "; ".join(p for p in exc.hint.split("; ") if not (removed and removed in p))
    return "; ".join(part for part in (where, slurm_hint, show) if part)


def resolve_namespace(pod: dict[str, Any], option: str | None, *, source: str) -> str:
    """The pod's namespace: its own ``metadata.namespace``, else ``-n``, else ``default``; both given
    and different is an error, as ``kubectl apply -n`` makes it."""
    own = (pod.get("metadata") or {}).get("namespace")
    if own and option and own != option:
        raise ManifestError(f"the namespace from the provided object {own!r} does not match the namespace "
                            f"{option!r} ({source})",
                            hint=f"pass --namespace={own}, or remove metadata.namespace from the manifest")
    return str(own or option or "default")


@dataclass
class PreparedRun:
    """A run whose record exists (state ``submitting``) and whose pod directory is written."""

    profile: SiteProfile
    record: RunRecord
    rendered: RenderedPod
    manifest_path: str


def _discard(profile: SiteProfile, rec: RunRecord) -> None:
    """Undo a run that submitted nothing: its pod directory and its record."""
    forget_run(profile, rec)


def prepare_run(profile: SiteProfile, manifest_path: str, *, pod_name: str | None = None,
                namespace: str | None = None, replace: bool = False, slurm: Slurm | None = None,
                now: bool = False, out: TextIO = sys.stderr) -> PreparedRun:
    """Render the pod, create its run record exclusively, write its pod directory; submit nothing.

    An existing run of the name is refused (``RunExists``), unless ``replace``: then it is deleted
    first (its job cancelled, its directory removed). Whatever fails after the record was created
    removes the record and the pod directory again.
    """
    require_submittable(profile)
    manifest = load_manifest(manifest_path)
    pod = select_pod(manifest, pod_name)
    refuse_suspended(manifest, pod)
    warnings = pod_warnings(manifest, pod)  # select_pod validated it; these are the workload's fields
    warnings += service_variable_warnings(pod)
    workload = None
    if manifest.owner(pod) is not None:  # a workload's template: the array code is imported only then
        from hpkctl.local.arrays import workload_of

        workload = workload_of(manifest, pod, now=now)
    ns = resolve_namespace(pod, namespace, source=manifest_path)
    name = workload.name if workload is not None else str(pod["metadata"].get("name") or "")
    check_name(name, namespace=ns)
    slurm = slurm or Slurm(profile.slurm)
    path = record_path(profile, ns, name)
    if path.exists():
        if not replace:
            raise RunExists(f"pod {name!r} already exists in namespace {ns}; delete it first",
                            hint=f"'hpkctl delete {name} -n {ns} --site {profile.name}', or run with --replace")
        from hpkctl.local.runs import delete_run  # only here: a run imports nothing of a delete (issue 23.2)

        delete_run(slurm, profile, read_record(path), out=out)
        print(f"pod {ns}/{name}: deleted the previous run (--replace)", file=out)
    for w in warnings:
        print(f"hpkctl: warning: {w}", file=out)
    if workload is not None:
        from hpkctl.local.arrays import prepare_array

        rec, first = prepare_array(profile, manifest, pod, workload, namespace=ns, out=out)
        try:
            pull_first(profile, first, out=out)
        except BaseException:
            _discard(profile, rec)
            raise
        return PreparedRun(profile=profile, record=rec, rendered=first, manifest_path=manifest_path)
    pod = with_api_defaults(pod, namespace=ns, create=True)
    # select_pod validated the pod, check_name its name and namespace: rendering does not validate again
    rendered = render_pod(pod, profile, objects=manifest.objects, services=manifest.services, validated=True)
    for w in rendered.warnings:
        print(f"hpkctl: warning: {w}", file=out)
    rec = RunRecord(name=name, namespace=ns, uid=pod["metadata"]["uid"], job_id="",
                    pod_dir=rendered.plan.pod_dir, site=profile.name, submitted=time.time(),
                    state=SUBMITTING, pid=os.getpid())
    create_record(profile, rec)  # exclusive: a concurrent run of this name stops here
    try:
        pull_first(profile, rendered, out=out)
        write_pod_dir(rendered, pod_json=json.dumps(pod, indent=2).encode())
    except BaseException:
        _discard(profile, rec)
        raise
    return PreparedRun(profile=profile, record=rec, rendered=rendered, manifest_path=manifest_path)


def submit_prepared(slurm: Slurm, prep: PreparedRun, *, out: TextIO = sys.stderr) -> RunRecord:
    """``sbatch`` the prepared pod and write the job id into its record, through the provider
    (:func:`hpkctl.provider.runsubmit.submit_run`); a refusal's hint says where in the pod (its
    manifest, its annotation) the refused option came from.

    Run this with signals deferred (:meth:`hpkctl.local.signals.Interrupts.deferred`): between
    ``sbatch`` and the record there is a job only this process knows."""
    try:
        return submit_run(slurm, prep.profile, prep.record, prep.rendered, out=out)
    except SubmitError as exc:
        exc.hint = pod_submit_hint(exc, manifest=prep.manifest_path, site=prep.profile.name,
                                   removed=prep.record.pod_dir)
        raise


def submit_pod(profile: SiteProfile, manifest_path: str, *, pod_name: str | None = None,
               namespace: str | None = None, replace: bool = False,
               out: TextIO = sys.stderr) -> tuple[RunRecord, RenderedPod]:
    """Render, write the pod directory, submit. Returns the run record and the rendered pod."""
    slurm = Slurm(profile.slurm)
    prep = prepare_run(profile, manifest_path, pod_name=pod_name, namespace=namespace, replace=replace,
                       slurm=slurm, out=out)
    return submit_prepared(slurm, prep), prep.rendered


__all__ = ["PreparedRun", "prepare_run", "resolve_namespace", "submit_pod",
           "submit_prepared"]

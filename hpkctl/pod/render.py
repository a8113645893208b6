"""A :class:`PodPlan` → the sbatch script and the files of the pod directory.

The template receives only :class:`~hpkctl.pod.shell.Shell` values (already quoted) and
integers; the Jinja2 ``finalize`` hook rejects anything else, so an unquoted user string cannot
reach a script even by mistake.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from hpkctl.pod.flags import sbatch_directive_word
from hpkctl.pod.shell import Shell, concat, env_file_line, literal, quote, shell_word
from hpkctl.pod.translate import ContainerPlan, PodPlan
from hpkctl.resources import data_dir

ALWAYS_PULL_WINDOW = 300  # seconds a cached "Always" image is trusted before it is pulled again
NO_MOUNT = "home,cwd,tmp"
MPI_WRAPPER = ('for v in ${!SLURM_@} ${!SLURMD_@} ${!PMI_@} ${!PMIX_@} ${!OMPI_@} ${!I_MPI_@}; do '
               'export "APPTAINERENV_$v=${!v}"; done; exec "$@"')


@dataclass
class RenderedPod:
    """What a pod becomes: the script, the files to write before submitting, and warnings."""

    plan: PodPlan
    script: str
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # relative path → (data, mode)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (relative path, what is missing)

    @property
    def warnings(self) -> list[str]:
        return self.plan.warnings


def _finalize(value: Any) -> Any:
    if isinstance(value, Shell) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise TypeError(f"template got an unquoted value {value!r}; wrap it with shell.quote()")


_ENV: jinja2.Environment | None = None


def _environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(data_dir("sbatch"))),
            autoescape=False,
            keep_trailing_newline=True,
            undefined=jinja2.StrictUndefined,
            finalize=_finalize,
        )
    return _ENV


def _env_path(plan: PodPlan, c: ContainerPlan) -> str:
    return posixpath.join(plan.pod_dir, c.run_env_file if c.env_runtime else c.env_file)


def container_command(plan: PodPlan, c: ContainerPlan) -> Shell:
    """The command line that starts one container (one line of bash)."""
    words: list[str] = []
    if c.mpi:
        # srun sets each rank's SLURM_*/PMI* variables per task, after this line is written; a tiny
        # fixed wrapper hands them to the container as APPTAINERENV_* (honoured under --cleanenv).
        words += ["srun", *(quote(f) for f in plan.mpi_flags), "/bin/bash", "-c", quote(MPI_WRAPPER), "hpk-mpi"]
    # --no-eval: without it Apptainer runs injected env values (and run's args) through a shell in
    # the container once more, so `$(...)`, backticks and `$VAR` in a manifest would be executed.
    words += ['"$HPK_APPTAINER"', c.verb, "--cleanenv", "--no-eval", "--no-mount", NO_MOUNT]
    words += [quote(f) for f in c.flags]
    words += ["--env-file", quote(_env_path(plan, c))]
    binds = [
        literal(f"{plan.pod_dir}/tmp/{c.name}:/tmp"),
        literal(f"{plan.pod_dir}/etc/hosts:/etc/hosts"),
        literal(f"{plan.pod_dir}/etc/resolv.conf:/etc/resolv.conf"),
        *(literal(b) for b in plan.profile.apptainer.binds),
        *(concat(b.source, literal(f":{b.dest}" + (":ro" if b.read_only else ""))) for b in c.binds),
    ]
    for bind in binds:
        words += ["--bind", shell_word(bind)]
    if c.workdir:
        words += ["--pwd", shell_word(c.workdir)]
    words.append(quote(c.sif))
    words += [shell_word(a) for a in c.argv]
    return Shell(" ".join(words))


def _parent(plan: PodPlan) -> dict[str, Shell]:
    assert plan.parent is not None
    app = plan.profile.apptainer
    image, sif = plan.parent
    # The parent must see every host path a container binds, or the nested binds fail.
    paths = [plan.pod_dir, posixpath.dirname(sif)]
    if any(d.path.startswith(plan.memory_dir) for d in plan.volumes.job_dirs):
        paths.append(plan.memory_dir)
    for kind, host, _ in plan.volumes.sources.values():
        if kind in ("hostPath", "persistentVolumeClaim", "emptyDir") and not host.startswith(plan.pod_dir + "/"):
            paths.append(host)
    paths += [b.split(":", 1)[0] for b in app.binds]
    words = ['"$HPK_APPTAINER"', "exec", "--net", "--network", quote(app.cni_network), "--fakeroot"]
    for p in dict.fromkeys(paths):
        words += ["--bind", quote(p)]
    words += [quote(f) for f in app.parent_flags]
    words += [quote(sif), "/bin/bash", '"$HPK_POD_DIR/job/job.sh"', "pod-part"]
    return {"sif": quote(sif), "source": quote(image.source), "command": Shell(" ".join(words))}


def render_plan(plan: PodPlan) -> RenderedPod:
    profile = plan.profile
    directives = []
    for opt in plan.options:
        directives.append(Shell(opt.name if opt.value is None else f"{opt.name}={sbatch_directive_word(opt.value)}"))
    containers = []
    for c in plan.containers:
        containers.append({
            "name": Shell(c.name),  # validated DNS label
            "kind": Shell("init" if c.init else "main"),
            "init": c.init,
            "image": Shell(c.image.full),  # validated: no whitespace
            "function": Shell(f"hpk_{'init' if c.init else 'main'}_{c.index}"),
            "policy": Shell(c.restart_policy),
            "command": container_command(plan, c),
            "env_file": Shell(c.env_file),
            "run_env_file": Shell(c.run_env_file),
            "runtime_env": [(Shell(k), shell_word(v)) for k, v in c.env_runtime],
        })
    subdirs = [shell_word(s) for c in plan.containers for s in c.subdirs]
    size_limits = [
        {"path": quote(d.path), "limit": d.size_limit_kib,
         "message": quote(f"emptyDir volume {d.volume} is over its sizeLimit ({d.size_limit_kib} KiB)")}
        for d in plan.volumes.job_dirs if d.size_limit_kib is not None
    ]
    names = [plan.fqdn] + ([plan.hostname] if plan.hostname != plan.fqdn else [])
    aliases = [quote(f"{ip}\t{' '.join(hosts)}") for ip, hosts in plan.host_aliases]
    if plan.network == "host":
        note = "host: the pod shares the node's network; pod IP = node IP; containers reach each other on localhost"
    else:
        note = (f"cni: the pod has its own network namespace (apptainer --net --network "
                f"{profile.apptainer.cni_network}); its containers share it")
    context = {
        "directives": directives,
        "version": Shell(plan.version),
        "pod_label": Shell(f"{_comment(plan.namespace)}/{_comment(plan.name)} (uid {_comment(plan.uid)})"),
        "site": Shell(_comment(profile.name)),
        "network_note": Shell(note),
        "network": plan.network,
        "pod_dir": quote(plan.pod_dir),
        "apptainer": quote(profile.apptainer.binary),
        "memory_dir": quote(plan.memory_dir),
        "always_pull_window": ALWAYS_PULL_WINDOW,
        "pull_in_job": profile.apptainer.pull == "job",
        "containers": containers,
        "all_names": Shell(" ".join(c.name for c in plan.containers)),
        "size_limits": size_limits,
        "hosts_names": quote(" ".join(names)),
        "host_aliases": aliases,
        "dns_mode": plan.dns_mode,
        "resolv_conf": quote(plan.resolv_conf),
        "subdirs": subdirs,
        "images": [{"sif": quote(sif), "source": quote(img.source), "policy": Shell(pol),
                    "creds": quote(posixpath.join(plan.pod_dir, credentials_file(plan, img.registry)))
                    if img.registry in plan.pull_credentials else Shell("''")}
                   for img, sif, pol in plan.images],
        "hostpath_checks": [{"path": quote(h.path), "type": quote(h.type), "volume": quote(h.volume)}
                            for h in plan.volumes.hostpath_checks],
        "job_dirs": [{"path": quote(d.path), "volume": quote(d.volume)} for d in plan.volumes.job_dirs],
        "parent": _parent(plan) if plan.parent else {},
    }
    script = _environment().get_template("pod.sh.j2").render(**context)
    rendered = RenderedPod(plan=plan, script=script)
    _pod_files(plan, rendered)
    return rendered


def credentials_file(plan: PodPlan, registry: str) -> str:
    """Relative path of the pull credentials for ``registry`` (0600, read only by the pull)."""
    return f"env/pull-{sorted(plan.pull_credentials).index(registry)}.cred"


def _comment(text: str) -> str:
    """Text safe inside a ``#`` comment line (no line breaks)."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def _pod_files(plan: PodPlan, rendered: RenderedPod) -> None:
    rendered.files["job/job.sh"] = (rendered.script.encode(), 0o700)
    for c in plan.containers:
        lines = [f"# environment of container {c.name} (Apptainer --env-file; shell syntax)\n"]
        lines += [env_file_line(k, v) for k, v in c.env_static]
        rendered.files[c.env_file] = ("".join(lines).encode("utf-8", "surrogateescape"), 0o600)
    for registry, (user, password) in plan.pull_credentials.items():
        text = env_file_line("APPTAINER_DOCKER_USERNAME", user) + env_file_line("APPTAINER_DOCKER_PASSWORD", password)
        rendered.files[credentials_file(plan, registry)] = (text.encode(), 0o600)
    for p in plan.volumes.payloads:
        rel = posixpath.relpath(p.path, plan.pod_dir)
        if p.missing:
            rendered.missing.append((rel, p.origin))
        rendered.files[rel] = (p.data, p.mode)


def write_pod_dir(rendered: RenderedPod, *, pod_json: bytes | None = None) -> Path:
    """Create the pod directory with every file the job expects (before submission).

    Status and logs of an earlier job in the same directory (a resubmission) are removed first:
    a new job must not inherit another's verdict.
    """
    root = Path(rendered.plan.pod_dir)
    for sub in ("status", "logs", "run"):
        shutil.rmtree(root / sub, ignore_errors=True)
    for sub in ("job", "env", "logs", "status", "volumes"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    for rel, (data, mode) in rendered.files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    if pod_json is not None:
        (root / "job" / "pod.json").write_bytes(pod_json)
    return root

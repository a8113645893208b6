"""A :class:`PodPlan` → the sbatch script and the files of the pod directory.

The template receives only :class:`~hpkctl.pod.shell.Shell` values (already quoted) and
integers; the Jinja2 ``finalize`` hook rejects anything else, so an unquoted user string cannot
reach a script even by mistake.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from hpkctl.pod.flags import sbatch_directive_word
from hpkctl.pod.hostpaths import protected_paths
from hpkctl.pod.images import ImageRef
from hpkctl.pod.lifecycle import device_binds, hook_command, message_bound, message_file
from hpkctl.errors import PodError
from hpkctl.pod.paths import SECRETS_FILE
from hpkctl.pod.probes import ProbePlan
from hpkctl.pod.ranks import launch_words
from hpkctl.pod.runtimefile import current_runtime, runtime_for
from hpkctl.pod.template import environment
from hpkctl.pod.shell import RuntimeRef, SecretText, Shell, Value, concat, env_file_line, literal, quote, shell_word
from hpkctl.pod.storage import size_limits
from hpkctl.pod.plan import ContainerPlan, PodPlan
from hpkctl.pod.volumes import Bind

NO_MOUNT = "home,cwd,tmp"
CONTINUE = " \\\n    "  # a script line continued, indented under the command it belongs to


@dataclass
class RenderedPod:
    """What a pod becomes: the script, the files to write before submitting, and warnings."""

    plan: PodPlan
    script: str
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # relative path → (data, mode)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (relative path, what is missing)
    runtime: str = ""  # the runtime file the script sources (runtimefile.py); write_pod_dir installs it

    @property
    def warnings(self) -> list[str]:
        return self.plan.warnings


# Apptainer flags that make it create a cgroup of its own for the container (its "cgroups" options):
# rootless under cgroup v2 that is a systemd scope outside the job, whose OOM kills the job's counter
# misses (hpk_oom_kills).
_CGROUP_FLAGS = ("--apply-cgroups", "--memory", "--memory-reservation", "--memory-swap", "--oom-kill-disable",
                 "--cpus", "--cpu-shares", "--cpuset-cpus", "--cpuset-mems", "--blkio-weight",
                 "--blkio-weight-device", "--pids-limit")


def apptainer_cgroups(exec_flags: list[str]) -> bool:
    """Whether ``[apptainer] exec_flags`` give containers cgroups of Apptainer's own."""
    return any(f.split("=", 1)[0] in _CGROUP_FLAGS for f in exec_flags)


class ScriptWords:
    """Shell words for one pod's script. Paths in the pod directory read ``"$HPK_POD_DIR"/rel``;
    Secret text never appears: each distinct value becomes ``"${HPK_SECRETS[i]}"``, which the job
    loads from the 0600 file ``env/secrets`` (NUL-separated) just before it is needed."""

    def __init__(self, plan: PodPlan) -> None:
        self.plan = plan
        self.secrets: list[str] = []
        # the longer root first, should one ever lie inside the other
        self._roots = sorted(((plan.pod_dir, "HPK_POD_DIR"), (plan.memory_dir, "HPK_MEMORY_DIR")),
                             key=lambda r: -len(r[0]))

    def word(self, value: Value) -> Shell:
        return shell_word(self._hide(self._in_pod(value)))

    def _in_pod(self, value: Value) -> Value:
        """A path under the pod directory (or its memory directory) as ``"$HPK_POD_DIR"/rel``: the
        script shows the pod's layout instead of one long absolute path repeated on every line."""
        if not value or not isinstance(value[0], str):
            return value
        head = value[0]
        for root, variable in self._roots:
            if head == root or head.startswith(root + "/"):
                return concat((RuntimeRef(variable),), literal(head[len(root):]), value[1:])
        return value

    def path(self, path: str | Value) -> Shell:
        return self.word(literal(path) if isinstance(path, str) else path)

    def _hide(self, value: Value) -> Value:
        out: list[str | RuntimeRef | SecretText] = []
        for part in value:
            if isinstance(part, SecretText):
                if "\0" in part.text:
                    raise PodError("CreateContainerConfigError",
                                   "a Secret value with a NUL byte cannot be part of a command line or path",
                                   hint="pass it as an environment variable or a secret volume instead")
                if part.text not in self.secrets:
                    self.secrets.append(part.text)
                out.append(RuntimeRef(f"HPK_SECRETS[{self.secrets.index(part.text)}]"))
            else:
                out.append(part)
        return tuple(out)

    def secrets_file(self) -> bytes:
        return b"".join(t.encode("utf-8", "surrogateescape") + b"\0" for t in self.secrets)


def _flag_lines(flags: list[str]) -> list[list[str]]:
    """Apptainer flags one per line, each with its value words (``--security uid:1,gid:1``)."""
    lines: list[list[str]] = []
    for flag in flags:
        if flag.startswith("-") or not lines:
            lines.append([quote(flag)])
        else:
            lines[-1].append(quote(flag))
    return lines


def container_command(words: ScriptWords, c: ContainerPlan) -> Shell:
    """The command that starts one container: one flag per line, the container's argv last.

    It ``exec``s: the runner starts the container function as a background subshell whose output is
    the container's log, and a bash left in between would write its own "Terminated" line into that
    log when the container is stopped by a signal (and would be what the stop sequence signals).
    ``setsid`` gives the container a process group of its own (the subshell is no group leader, so
    setsid does not fork: the runner's pid is still the container's), which the runner kills once the
    main process has ended: what the teardown of a container's PID namespace does in Kubernetes."""
    plan = words.plan
    lines: list[list[str]] = []
    if c.mpi:
        # each rank runs hpk_rank (the runtime, through HPK_MPI_ENV): srun's per-task SLURM_*/PMI*
        # variables, the pod's memory directory on the rank's node; pilot mode: pod/ranks.py
        lines.append([*launch_words(plan), "/bin/bash", "-c", '"$HPK_MPI_ENV"', "hpk-mpi"])
        lines += _apptainer_lines(words, c, c.verb)
    else:
        lines += _apptainer_lines(words, c, c.verb)
        lines[0][:0] = ["exec", "setsid"]
    if c.argv:
        lines.append([words.word(a) for a in c.argv])
    return Shell("\n  ".join([*subpath_checks(words, c, "start"), CONTINUE.join(" ".join(line) for line in lines)]))


def container_exec_command(words: ScriptWords, c: ContainerPlan) -> Shell:
    """``apptainer exec`` of the function's arguments in the container's image, env and mounts.

    Every container gets it: ``job.sh exec`` (the kubelet's exec), exec probes and lifecycle hooks
    run it. It is a new Apptainer process, not the running one:
    it shares the pod's network, the container's volumes and its /tmp, but not files written to a
    writable-tmpfs root (DEVELOPERS.md says so). An MPI container's hooks run once, without srun.
    """
    lines = _apptainer_lines(words, c, "exec")
    lines.append(['"$@"'])
    return Shell("\n  ".join([*subpath_checks(words, c, "exec"), CONTINUE.join(" ".join(line) for line in lines)]))


def probe_words(words: ScriptWords, p: ProbePlan) -> Shell:
    """A probe's array for the script: timing (integers), grace ('' for the pod's), handler, its words."""
    timing = [str(n) for n in (p.delay, p.period, p.timeout, p.success, p.failure)]
    grace = str(p.grace) if p.grace is not None else "''"
    return Shell(" ".join([*timing, grace, p.handler, *(words.word(a) for a in p.args)]))


def _apptainer_lines(words: ScriptWords, c: ContainerPlan, verb: str) -> list[list[str]]:
    plan = words.plan
    lines: list[list[str]] = []
    # --no-eval: without it Apptainer runs injected env values (and run's args) through a shell in
    # the container once more, so `$(...)`, backticks and `$VAR` in a manifest would be executed.
    # --contain: Apptainer's minimal /dev, not the node's (whose /dev/shm every pod shares); the
    # pod's own /dev/shm is bound over it. An MPI container's ranks too: on a node other than the
    # batch script's, hpk_rank (the runtime) makes the pod's memory directory first, which the
    # node's ranks share (shared memory between ranks); fabric devices (/dev/infiniband) come from
    # the profile's [apptainer] binds, as for any container.
    lines.append(['"$HPK_APPTAINER"', verb, "--cleanenv", "--no-eval", "--contain", "--no-mount", NO_MOUNT])
    lines += _flag_lines(c.flags)
    lines.append(["--env-file", words.path(posixpath.join(plan.pod_dir, c.run_env_file if c.env_runtime
                                                          else c.env_file))])
    binds = [
        literal(f"{plan.pod_dir}/tmp/{c.name}:/tmp"),
        literal(f"{plan.pod_dir}/etc/hosts:/etc/hosts"),
        literal(f"{plan.pod_dir}/etc/resolv.conf:/etc/resolv.conf"),
        *([] if any(b.dest == "/dev/shm" for b in c.binds) else [literal(f"{plan.memory_dir}/.dev-shm:/dev/shm")]),
        *(literal(b) for b in plan.profile.apptainer.binds),
        *([literal(f"{plan.pod_dir}/{message_file(c.name)}:{c.message_path}")]
          if message_bound(c.message_path, plan.profile.apptainer.binds) else []),
        *(concat(_bind_source(c, b), literal(f":{b.dest}" + (":ro" if b.read_only else ""))) for b in c.binds),
    ]
    lines += [["--bind", words.path(bind)] for bind in binds]
    if c.workdir:
        lines.append(["--pwd", words.word(c.workdir)])
    lines.append([quote(c.sif)])
    return lines


def _bind_source(c: ContainerPlan, b: Bind) -> Value:
    """A subPath bind's source is what ``hpk_subpath`` checked as the container started (its k-th
    entry of HPK_SUBPATHS); any other bind's is its path."""
    if not b.root:
        return b.source
    return (RuntimeRef(f"HPK_SUBPATHS[{[x for x in c.binds if x.root].index(b)}]"),)


def subpath_checks(words: ScriptWords, c: ContainerPlan, mode: str) -> list[str]:
    """The lines that check the container's subPaths right before Apptainer binds them (issue 20:
    an earlier container may have replaced a checked directory with a symlink). ``hpk_subpath``
    opens each one, checks what it opened and binds its real path; the descriptor is closed, since
    Apptainer would hand it to the container, where ``/proc/self/fd/N/..`` is the host's file system."""
    subs = [b for b in c.binds if b.root]
    if not subs:
        return []
    fail = "exit" if mode == "start" else "return 125"
    lines = ["local -a HPK_SUBPATHS=()"]
    for b in subs:
        what = quote(f"container {c.name}: volumeMount {b.dest}")
        lines.append(" ".join(["hpk_subpath", mode, words.path(b.root), words.path(b.source),
                               str(int(b.source in c.subdirs)), what, "||", fail]))
        if b.host:
            lines.append(" ".join(["hpk_unprotected", mode, what, "||", fail]))
    return lines


def _parent(words: ScriptWords) -> dict[str, Shell]:
    plan = words.plan
    assert plan.parent is not None
    app = plan.profile.apptainer
    image, sif = plan.parent
    # The parent must see every host path a container binds, or the nested binds fail.
    paths = [plan.pod_dir, posixpath.dirname(sif)]
    for kind, host, _ in plan.volumes.sources.values():
        if kind in ("hostPath", "persistentVolumeClaim", "emptyDir") and not host.startswith(plan.pod_dir + "/"):
            paths.append(host)
    # (not a bind of a /dev path: the parent has the node's /dev, and Apptainer would pass it on to
    # each container in APPTAINER_BIND: "already mounted" warnings in their logs)
    paths += [b.split(":", 1)[0] for b in app.binds if b.split(":", 1)[0] not in device_binds(app.binds)]
    lines = [['"$HPK_APPTAINER"', "exec", "--net", "--network", quote(app.cni_network), "--fakeroot"]]
    lines += [["--bind", words.path(p)] for p in dict.fromkeys(paths)]
    rdir = posixpath.dirname(runtime_for(plan.profile))  # the pod part (and exec) source the runtime in there
    lines.append(["--bind", quote(f"{rdir}:{rdir}:ro")])
    # run/memory links into the node's /dev/shm, which the parent sees as its /dev (no bind: one under
    # /dev would reach the containers through APPTAINER_BIND as a device bind)
    lines += _flag_lines(list(app.parent_flags))
    lines += [[quote(sif)], ["/bin/bash", '"$HPK_POD_DIR"/job/job.sh', "pod-part"]]
    return {"sif": quote(sif), "source": quote(image.source), "command": Shell(CONTINUE.join(" ".join(x) for x in lines))}


def _image_args(words: ScriptWords, img: ImageRef, sif: str, policy: str) -> Shell:
    plan = words.plan
    args = [quote(sif), quote(img.source), Shell(policy)]
    if img.registry in plan.pull_credentials:
        args.append(words.path(posixpath.join(plan.pod_dir, credentials_file(plan, img.registry))))
    return Shell(" ".join(args))


def render_plan(plan: PodPlan) -> RenderedPod:
    profile = plan.profile
    words = ScriptWords(plan)
    # (a pilot pod's script is a step's, with no #SBATCH lines: its options are not written as words)
    directives = [] if profile.pilot.enabled else [
        Shell(opt.name if opt.value is None else f"{opt.name}={sbatch_directive_word(opt.value)}") for opt in plan.options]
    containers = []
    for c in plan.containers:
        containers.append({
            "name": Shell(c.name),  # validated DNS label
            "kind": Shell("init" if c.init else "main"),
            "init": c.init,
            "image": Shell(c.image.full),  # validated: no whitespace
            "function": Shell(f"hpk_{'init' if c.init else 'main'}_{c.index}"),
            "policy": Shell(c.restart_policy),
            "command": container_command(words, c),
            "exec_command": container_exec_command(words, c),
            "hooks": [{"kind": Shell(k), "command": hook_command(f"hpk_{'init' if c.init else 'main'}_{c.index}", h)}
                      for k, h in c.hooks.items()],
            "probes": [{"kind": Shell(p.kind), "words": probe_words(words, p)} for p in c.probes],
            "probe_kinds": Shell(" ".join(p.kind for p in c.probes)),
            "env_file": Shell(c.env_file),
            "run_env_file": Shell(c.run_env_file),
            "runtime_env": [(Shell(k), words.word(v)) for k, v in c.env_runtime],
        })
    names = [plan.fqdn] + ([plan.hostname] if plan.hostname != plan.fqdn else [])
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
        "pod_dir": quote(plan.pod_dir),
        "apptainer": quote(profile.apptainer.binary),
        "memory_root": quote(profile.pods.memory_dir),
        "image_pull": Shell(profile.apptainer.pull),  # a schema Literal
        "always_pull_window": profile.apptainer.always_pull_window,
        "restart_backoff": profile.pods.restart_backoff,
        "restart_backoff_max": profile.pods.restart_backoff_max,
        "size_check_interval": profile.pods.size_check_interval,
        "grace": plan.grace,
        "active_deadline": plan.active_deadline,
        "log_fallback": Shell(" ".join(c.name for c in plan.containers if c.log_fallback)),
        "containers": containers,
        "init_table": Shell(" ".join(f"{c['name']} {c['policy']} {c['function']}" for c in containers if c["init"])),
        "main_table": Shell(" ".join(f"{c['name']} {c['policy']} {c['function']}" for c in containers if not c["init"])),
        "size_limits": [{"limit": s.limit_kib, "message": quote(s.message),
                         "paths": Shell(" ".join(words.path(p) for p in s.paths))} for s in size_limits(plan)],
        "hosts_names": quote(" ".join(names)),
        "host_aliases": [quote(f"{ip}\t{' '.join(hosts)}") for ip, hosts in plan.host_aliases],
        "dns_mode": plan.dns_mode,
        "dns_word": quote(plan.dns_mode),
        "resolv_conf": quote(plan.resolv_conf),
        "images": [_image_args(words, img, sif, pol) for img, sif, pol in plan.images],
        "token_waits": [words.path(p.path) for p in plan.volumes.payloads if p.deferred],
        "apptainer_cgroups": int(apptainer_cgroups(profile.apptainer.exec_flags)),
        "pilot": int(profile.pilot.enabled),
        "protected": Shell(" ".join(quote(p) for p in protected_paths(profile))) if plan.volumes.hostpath_roots else "",
        "hostpath_checks": [{"path": quote(h.path), "type": quote(h.type), "volume": quote(h.volume)}
                            for h in plan.volumes.hostpath_checks],
        "job_dirs": [{"path": words.path(d.path), "volume": quote(d.volume)} for d in plan.volumes.job_dirs],
        "parent": _parent(words) if plan.parent else {},
        "runtime_path": quote(runtime_for(profile)),
        "runtime_sha256": Shell(current_runtime().sha256),  # hex digits
    }
    script = environment().get_template("pod.sh.j2").render(**context)
    rendered = RenderedPod(plan=plan, script=script, runtime=runtime_for(profile))
    _pod_files(plan, rendered)
    if words.secrets:
        rendered.files[SECRETS_FILE] = (words.secrets_file(), 0o600)
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
        if p.deferred:
            continue
        rel = posixpath.relpath(p.path, plan.pod_dir)
        if p.missing:
            rendered.missing.append((rel, p.origin))
        rendered.files[rel] = (p.data, p.mode)

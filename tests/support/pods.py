"""The translator's test helpers: a fixed test profile, pod documents, and a recording ``apptainer`` stub.

The stub stands for Apptainer in *unit* tests only (real behaviour is proven with the stand-in
and real Slurm elsewhere). It records the argv it got and the environment the container would
see, reading ``--env-file`` with bash exactly as a shell-syntax env file is read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from hpkctl.local.manifest import load_manifest, select_pod, with_api_defaults
from hpkctl.sites.schema import SiteProfile
from tests.support.ci import REPO

PODS = REPO / "tests" / "pod" / "pods"

STUB = textwrap.dedent('''\
    #!/usr/bin/python3
    """Recording Apptainer stub: pull creates the file; exec/run record argv, env and binds."""
    import json, os, subprocess, sys
    argv = sys.argv[1:]
    rec = os.environ["HPK_STUB_RECORD"]
    if argv[0] == "pull":
        if os.environ.get("HPK_STUB_PULL_FAIL"):
            print("FATAL:   stub: pull refused", file=sys.stderr)
            sys.exit(255)
        open(argv[-2], "w").write("sif")
        with open(rec, "a") as fh:
            fh.write(json.dumps({"verb": "pull", "source": argv[-1],
                                 "user": os.environ.get("APPTAINER_DOCKER_USERNAME"),
                                 "password": os.environ.get("APPTAINER_DOCKER_PASSWORD")}) + "\\n")
        sys.exit(0)
    verb = argv[0]
    i, flags, binds, env_file = 1, [], [], None
    valued = {"--no-mount", "--env-file", "--bind", "--pwd", "--hostname", "--security", "--network"}
    while argv[i].startswith("-"):
        if argv[i] in valued:
            if argv[i] == "--bind":
                binds.append(argv[i + 1])
            if argv[i] == "--env-file":
                env_file = argv[i + 1]
            flags += argv[i:i + 2]
            i += 2
        else:
            flags.append(argv[i])
            i += 1
    image, args = argv[i], argv[i + 1:]
    env = {}
    if env_file:
        out = subprocess.run(["env", "-i", "/bin/bash", "--norc", "-c", 'set -a; . "$0"; exec env -0', env_file],
                             capture_output=True, check=True).stdout
        skip = {"PWD", "SHLVL", "_"}
        for item in out.split(b"\\0"):
            if item:
                k, _, v = item.partition(b"=")
                if k.decode() not in skip:
                    env[k.decode()] = v.decode("utf-8", "surrogateescape")
    files = {}
    for b in binds:
        src = b.split(":")[0]
        if os.path.isdir(src):
            for root, _, names in os.walk(src):
                for n in names:
                    p = os.path.join(root, n)
                    files[p] = open(p, "rb").read().decode("utf-8", "surrogateescape")
    with open(rec, "a") as fh:
        fh.write(json.dumps({"verb": verb, "flags": flags, "image": image, "args": args, "env": env,
                             "files": files, "srun": os.environ.get("HPK_STUB_SRUN_ARGS"),
                             # what each bind's source is as Apptainer would mount it
                             "resolved": [os.path.realpath(b.split(":")[0]) for b in binds],
                             # descriptors of directories the container's process would inherit
                             "dir_fds": sorted(os.readlink("/proc/self/fd/" + n) for n in os.listdir("/proc/self/fd")
                                               if int(n) > 2 and os.path.isdir("/proc/self/fd/" + n)
                                               and not os.readlink("/proc/self/fd/" + n).startswith("/proc/"))},
                            ensure_ascii=False) + "\\n")
    import time
    time.sleep(float(os.environ.get("HPK_STUB_SLEEP", "0")))
    seq = os.environ.get("HPK_STUB_EXIT_FILE")
    if seq and os.path.exists(seq):
        codes = open(seq).read().split()
        if codes:
            open(seq, "w").write(" ".join(codes[1:]))
            sys.exit(int(codes[0]))
    sys.exit(int(os.environ.get("HPK_STUB_EXIT", "0")))
''')

SRUN_STUB = textwrap.dedent('''\
    #!/usr/bin/python3
    import json, os, sys
    args = sys.argv[1:]
    i = 0
    while i < len(args) and args[i] != os.environ["HPK_STUB_APPTAINER"]:
        i += 1
    os.environ["HPK_STUB_SRUN_ARGS"] = json.dumps(args[:i], ensure_ascii=False)
    os.execv(args[i], args[i:])
''')


def make_profile(tmp: Path | None = None, **sections: dict[str, Any]) -> SiteProfile:
    base: dict[str, Any] = {
        "name": "test",
        "slurm": {"partition": "debug", "default_time": "00:10:00"},
        "pods": {"state_dir": str(tmp / "state") if tmp else "/hpk-state",
                 "hostpath_allow": ["/srv", "/run", "/tmp"]},  # what the test pods' hostPaths name
        "apptainer": {"image_cache": str(tmp / "images") if tmp else "/hpk-images"},
    }
    for key, val in sections.items():
        base.setdefault(key, {}).update(val)
    return SiteProfile.model_validate(base)


def load_pod(name: str) -> tuple[dict[str, Any], Any]:
    m = load_manifest(PODS / name)
    return with_api_defaults(select_pod(m)), m


def make_stub(tmp_path: Path) -> dict[str, Any]:
    """A bin dir with the recording ``apptainer`` and ``srun`` stubs, and a profile that uses them."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("apptainer", STUB), ("srun", SRUN_STUB)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    # the scripts run under the bash first on the tests' own PATH (/opt/bash-4.2/bin: test_bash42.py),
    # although their PATH starts with this directory and /usr/bin
    outer = shutil.which("bash")
    if outer and Path(outer).resolve() != Path("/bin/bash").resolve():
        (bindir / "bash").symlink_to(outer)
    app = bindir / "apptainer"
    profile = make_profile(tmp_path, apptainer={"binary": str(app)})
    return {"bin": bindir, "apptainer": app, "profile": profile, "tmp": tmp_path}


def stub_environment(stub: dict[str, Any], record: Path, exit_code: int = 0, **extra: str) -> dict[str, str]:
    return {
        "PATH": f"{stub['bin']}:/usr/bin:/bin",
        "HPK_STUB_RECORD": str(record),
        "HPK_STUB_APPTAINER": str(stub["apptainer"]),
        "HPK_STUB_EXIT": str(exit_code),
        "HOME": str(stub["tmp"]),
        **extra,
    }


def run_script(script_path: Path, *, stub: dict[str, Any], record: Path, exit_code: int = 0,
               timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    env = {
        "PATH": f"{stub['bin']}:/usr/bin:/bin",
        "HPK_STUB_RECORD": str(record),
        "HPK_STUB_APPTAINER": str(stub["apptainer"]),
        "HPK_STUB_EXIT": str(exit_code),
        "HOME": str(stub["tmp"]),
    }
    return subprocess.run(["bash", str(script_path)], env=env, capture_output=True, timeout=timeout, check=False)


def records(path: Path, *, pulls: bool = False) -> list[dict[str, Any]]:
    """What the stub recorded: container runs (exec/run), or with ``pulls=True`` the pulls."""
    if not path.exists():
        return []
    recs = [json.loads(line) for line in path.read_text().split("\n") if line]
    return [r for r in recs if (r["verb"] == "pull") == pulls]


def pod_doc(spec: dict[str, Any], *, name: str = "p", annotations: dict[str, str] | None = None,
            uid: str = "00000000-0000-0000-0000-000000000001") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": uid}
    if annotations:
        meta["annotations"] = annotations
    return with_api_defaults({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})


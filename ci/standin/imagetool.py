#!/usr/bin/python3 -IS
"""Helpers for ci/standin/build-images (stdlib only).

  imagetool.py meta DIR --name N --kind rootfs|host-rootfs [--env K=V]... [--cmd ARG]...
                        [--entrypoint ARG]...
      write DIR/image.conf; for a rootfs also DIR/rootfs/.singularity.d/ (the image's
      environment script, its runscript and a copy of image.conf), like the files Apptainer
      writes when it converts a Docker/OCI image.
  imagetool.py index STORE
      write STORE/index: "<SIF key> <entry name>" for every STORE/*/image.sif, so the stand-in
      maps a pulled copy of a store SIF back to its unpacked rootfs without hashing it.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def conf_text(name, kind, env, cmd, entrypoint, writable_dirs=()):
    def esc(v):
        return v.replace("\\", "\\\\").replace("\n", "\\n")
    lines = ["# stand-in image metadata (ci/standin/build-images); read by ci/standin/apptainer",
             "name=" + esc(name), "kind=" + esc(kind)]
    lines += ["env=" + esc(e) for e in env]
    lines += ["entrypoint=" + esc(a) for a in entrypoint]
    lines += ["cmd=" + esc(a) for a in cmd]
    lines += ["writable_dir=" + esc(d) for d in writable_dirs]
    return "\n".join(lines) + "\n"


def sq(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def oci_words(args):
    """Each argument double-quoted with \\ " ` $ escaped, space separated (the form Apptainer
    stores OCI_CMD/OCI_ENTRYPOINT in, evaluated once by the runscript)."""
    out = []
    for a in args:
        for ch in ("\\", '"', "`", "$"):
            a = a.replace(ch, "\\" + ch)
        out.append('"%s"' % a)
    return " ".join(out)


def runscript(cmd, entrypoint):
    """A runscript with the semantics of the one Apptainer generates for Docker/OCI images:
    arguments replace CMD and follow ENTRYPOINT; by default the resulting command line goes
    through one shell evaluation, with --no-eval (APPTAINER_NO_EVAL/SINGULARITY_NO_EVAL set)
    arguments are used verbatim."""
    ep_set = " ".join(sq(a) for a in entrypoint)
    cmd_set = " ".join(sq(a) for a in cmd)
    return f"""#!/bin/sh
# Written by hpkctl's ci/standin/build-images. Same behaviour as Apptainer's runscript for
# Docker/OCI images: CMD={cmd!r} ENTRYPOINT={entrypoint!r}
OCI_ENTRYPOINT={sq(oci_words(entrypoint))}
OCI_CMD={sq(oci_words(cmd))}
if [ -n "${{SINGULARITY_NO_EVAL:-}}${{APPTAINER_NO_EVAL:-}}" ]; then
    # verbatim (Docker) semantics
    if [ $# -eq 0 ]; then
        set -- {cmd_set}
    fi
    set -- {ep_set} "$@"
    exec "$@"
fi
# default semantics: one shell evaluation of the resulting command line
standin_args=""
for standin_arg in "$@"; do
    standin_args="$standin_args \\"$standin_arg\\""
done
if [ $# -gt 0 ]; then
    standin_run="$OCI_ENTRYPOINT $standin_args"
else
    standin_run="$OCI_ENTRYPOINT $OCI_CMD"
fi
eval "set -- $standin_run"
exec "$@"
"""


def env_script(env):
    lines = ["#!/bin/sh", "# image environment (Docker ENV), as Apptainer writes it"]
    for item in env:
        k, eq, v = item.partition("=")
        esc = v
        for ch in ("\\", '"', "`", "$"):
            esc = esc.replace(ch, "\\" + ch)
        if not eq:
            lines.append('export %s="${%s:-}"' % (k, k))
        elif k == "PATH":
            lines.append('export PATH="%s"' % esc)
        else:
            lines.append('export %s="${%s:-"%s"}"' % (k, k, esc))
    return "\n".join(lines) + "\n"


def write(path, text, mode=0o644):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, mode)


def world_writable_dirs(rootfs):
    """Directories anyone may create files in (mode o+w), e.g. /tmp: the stand-in gives them an
    overlay upper copy under --writable-tmpfs (see prepare_overlay in standin_apptainer/overlay.py)."""
    out = []
    for top, dirs, _files in os.walk(rootfs):
        for d in dirs:
            p = os.path.join(top, d)
            st = os.lstat(p)
            if not os.path.islink(p) and st.st_mode & 0o002:
                out.append("/" + os.path.relpath(p, rootfs))
    return sorted(out)


def cmd_meta(a):
    rootfs = os.path.join(a.dir, "rootfs")
    wdirs = world_writable_dirs(rootfs) if a.kind == "rootfs" and os.path.isdir(rootfs) else []
    text = conf_text(a.name, a.kind, a.env, a.cmd, a.entrypoint, wdirs)
    write(os.path.join(a.dir, "image.conf"), text)
    if os.path.isdir(rootfs):
        sd = os.path.join(rootfs, ".singularity.d")
        os.makedirs(os.path.join(sd, "env"), exist_ok=True)
        write(os.path.join(sd, "standin-image.conf"), text)
        if a.kind == "rootfs":
            write(os.path.join(sd, "env", "10-docker2singularity.sh"), env_script(a.env), 0o755)
            write(os.path.join(sd, "runscript"), runscript(a.cmd, a.entrypoint), 0o755)


def load_standin():
    """The stand-in's package (standin_apptainer/ beside this file), the same code the executable runs."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import standin_apptainer
    return standin_apptainer


def cmd_index(a):
    standin = load_standin()
    lines = []
    for name in sorted(os.listdir(a.store)):
        sif = os.path.join(a.store, name, "image.sif")
        if name.startswith(".") or not os.path.isfile(sif):
            continue
        key, _offset = standin.sif_key(sif)
        lines.append("%s %s" % (key, name))
    tmp = os.path.join(a.store, ".index.tmp")
    write(tmp, "\n".join(lines) + "\n")
    os.replace(tmp, os.path.join(a.store, "index"))


def main(argv):
    p = argparse.ArgumentParser(prog="imagetool.py")
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("meta")
    m.add_argument("dir")
    m.add_argument("--name", required=True)
    m.add_argument("--kind", choices=["rootfs", "host-rootfs"], required=True)
    m.add_argument("--env", action="append", default=[])
    m.add_argument("--cmd", action="append", default=[])
    m.add_argument("--entrypoint", action="append", default=[])
    i = sub.add_parser("index")
    i.add_argument("store")
    a = p.parse_args(argv)
    {"meta": cmd_meta, "index": cmd_index}[a.what](a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The container's environment, in Apptainer's order of precedence, and its evaluation in the
container by a shell.

Part of the Apptainer stand-in (see __init__.py).
"""

from .common import DEFAULT_PATH, warn
from .envfile import _is_name


# --------------------------------------------------------------------------------------------
# Environment (internal/pkg/util/env/create.go + the action script's clear/restore order;
# docs environment_and_metadata.rst "Environment Variable Precedence")
# --------------------------------------------------------------------------------------------
ALWAYS_PASS = {"TERM", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy",
               "NO_PROXY", "all_proxy", "ALL_PROXY", "ftp_proxy", "FTP_PROXY"}
ALWAYS_OMIT = {"HOME": False, "PATH": False, "APPTAINER_SHELL": False, "APPTAINER_APPNAME": False,
               "SINGULARITY_SHELL": False, "SINGULARITY_APPNAME": False, "LD_LIBRARY_PATH": True}
READONLY_VARS = {"EUID", "GID", "HOME", "IFS", "OPTIND", "PWD", "UID"}
CLEAR_KEEP = {"PWD", "HOME", "OPTIND", "UID", "GID", "SINGULARITY_APPNAME", "SINGULARITY_SHELL"}


def build_environment(*, host, cleanenv, file_vars, image, home_dest, runtime):
    """Return (env before injection, injected [(k, v)], original process env [(k, v)]).

    Mirrors Apptainer: the host environment (or with --cleanenv only TERM/proxies + LANG=C)
    forms the process environment; the action script clears it, applies the image ENV,
    injects APPTAINERENV_/--env-file variables, then restores host variables not yet set."""
    overrides = _overrides(host, file_vars)
    process = _process_environment(host, overrides, cleanenv=cleanenv)
    process.update(runtime)
    process["HOME"] = home_dest
    process["PATH"] = DEFAULT_PATH
    env = _image_environment(process, image)
    injected = []
    for k, v in overrides.items():
        if k in ("UID", "GID"):
            continue
        if k == "LD_LIBRARY_PATH" and v:
            v += ":/.singularity.d/libs"
        injected.append((k, v))
    # getallenv only reports names matching ^[a-zA-Z_]+[a-zA-Z0-9_]*$
    original = [(k, v) for k, v in process.items() if _is_name(k)]
    return env, injected, original


def _overrides(host, file_vars):
    """{name: value} to inject: the host's APPTAINERENV_/SINGULARITYENV_ values and --env-file's."""
    overrides = {}
    for prefix in ("APPTAINERENV_", "SINGULARITYENV_"):
        for k, v in host.items():
            if k.startswith(prefix) and len(k) > len(prefix):
                key = k[len(prefix):]
                if prefix == "APPTAINERENV_" and key in file_vars:
                    continue            # --env-file sets APPTAINERENV_<key> over the host's
                overrides_add(overrides, prefix + key, key, v)
    for key, value in file_vars.items():
        overrides_add(overrides, "APPTAINERENV_" + key, key, value, from_file=True)
    return overrides


def _process_environment(host, overrides, *, cleanenv):
    """The host variables the container process starts with (before the action script)."""
    process = {}
    if cleanenv:
        process["LANG"] = "C"
    for k, v in host.items():
        if k.startswith(("APPTAINER_", "SINGULARITY_", "APPTAINERENV_", "SINGULARITYENV_")):
            continue
        if k in ALWAYS_PASS or (k not in ALWAYS_OMIT and not cleanenv):
            if k in overrides:
                if overrides[k] != v:
                    warn("Environment variable %s already has value [%s], will not forward new "
                         "value [%s] from parent process environment" % (k, overrides[k], v))
                continue
            process[k] = v
    return process


def _image_environment(process, image):
    """clear_env, then the image's environment scripts."""
    env = {k: v for k, v in process.items() if k in CLEAR_KEEP or k in
           ("APPTAINER_NAME", "APPTAINER_CONTAINER")}
    for item in image.values("env"):
        k, eq, v = item.partition("=")
        if not eq:
            env.setdefault(k, "")
        elif k == "PATH":
            env[k] = v
        elif not env.get(k):
            env[k] = v
    parts = env.get("PATH", "").split(":") if env.get("PATH") else []
    for p in DEFAULT_PATH.split(":"):
        if p not in parts:
            parts.append(p)
    env["PATH"] = ":".join(parts)
    env["LD_LIBRARY_PATH"] = (env["LD_LIBRARY_PATH"] + ":/.singularity.d/libs"
                              if env.get("LD_LIBRARY_PATH") else "/.singularity.d/libs")
    if not env.get("PS1"):
        env["PS1"] = "Apptainer> "
    return env


def overrides_add(overrides, shown, key, value, from_file=False):
    special = {"PREPEND_PATH": "SING_USER_DEFINED_PREPEND_PATH",
               "APPEND_PATH": "SING_USER_DEFINED_APPEND_PATH",
               "PATH": "SING_USER_DEFINED_PATH"}
    if from_file and key in READONLY_VARS:
        return
    if key in special:
        key = special[key]
    elif key in ALWAYS_OMIT and not ALWAYS_OMIT[key]:
        warn("Overriding %s environment variable with %s is not permitted" % (key, shown))
        return
    if key in overrides:
        if overrides[key] != value:
            warn("Skipping environment variable [%s=%s], %s is already overridden with "
                 "different value [%s]" % (shown, value, key, overrides[key]))
        return
    overrides[key] = value


def finish_environment(env, injected, original):
    """The part of the action script after injection, for values that need no evaluation."""
    env = dict(env)
    for k, v in injected:
        env[k] = v
    pre = env.pop("SING_USER_DEFINED_PREPEND_PATH", "")
    app = env.pop("SING_USER_DEFINED_APPEND_PATH", "")
    user = env.pop("SING_USER_DEFINED_PATH", "")
    if pre:
        env["PATH"] = pre + ":" + env.get("PATH", "")
    if app:
        env["PATH"] = env.get("PATH", "") + ":" + app
    if user:
        env["PATH"] = user
    for k, v in original:           # restore_env
        if k not in env:
            env[k] = v
        elif env[k] == "":
            del env[k]
    if not env.get("PS1"):
        env["PS1"] = "Apptainer> "
    if not env.get("PROMPT_COMMAND"):
        env["PROMPT_COMMAND"] = 'PS1="%s"; unset PROMPT_COMMAND' % env["PS1"]
    else:
        env["PROMPT_COMMAND"] = ('%s; PROMPT_COMMAND="${PROMPT_COMMAND%%%%; PROMPT_COMMAND=*}"; '
                                 'PS1="%s"' % (env["PROMPT_COMMAND"], env["PS1"]))
    env.setdefault("APPTAINER_ENVIRONMENT", "/.singularity.d/env/91-environment.sh")
    env["SINGULARITY_ENVIRONMENT"] = env["APPTAINER_ENVIRONMENT"]
    return env


# Evaluation in the container (Apptainer's default, see docs "Escaping and Evaluation of
# Environment Variables"): the injected values are exported as `export K="v"` (only `"`
# escaped) and evaluated by a shell in the container context, then the action script goes on.
# $1: injection script, $2: number of restore pairs, then pairs, then the command.
EVAL_WRAPPER = r'''
eval "$1" || exit 255
__n=$2; shift 2
if [ -n "${SING_USER_DEFINED_PREPEND_PATH:-}" ]; then PATH="$SING_USER_DEFINED_PREPEND_PATH:$PATH"; fi
if [ -n "${SING_USER_DEFINED_APPEND_PATH:-}" ]; then PATH="$PATH:$SING_USER_DEFINED_APPEND_PATH"; fi
if [ -n "${SING_USER_DEFINED_PATH:-}" ]; then PATH="$SING_USER_DEFINED_PATH"; fi
unset SING_USER_DEFINED_PREPEND_PATH SING_USER_DEFINED_APPEND_PATH SING_USER_DEFINED_PATH
export PATH
while [ "$__n" -gt 0 ]; do
  eval "__set=\${$1+x} __val=\${$1-}"
  if [ -z "$__set" ]; then export "$1=$2"; elif [ -z "$__val" ]; then unset "$1"; fi
  shift 2; __n=$((__n - 1))
done
unset __n __set __val
[ -n "${PS1:-}" ] || export PS1="Apptainer> "
if [ -z "${PROMPT_COMMAND:-}" ]; then export PROMPT_COMMAND="PS1=\"${PS1}\"; unset PROMPT_COMMAND"; fi
export APPTAINER_ENVIRONMENT="${APPTAINER_ENVIRONMENT:-/.singularity.d/env/91-environment.sh}"
export SINGULARITY_ENVIRONMENT="$APPTAINER_ENVIRONMENT"
if [ "$1" = "--standin-check" ]; then
  shift
  case "$1" in
    */*) [ -x "$1" ] ;;
    *) command -v -- "$1" >/dev/null 2>&1 ;;
  esac || { printf 'FATAL:   "%s": executable file not found in $PATH\n' "$1" >&2; exit 255; }
fi
exec "$@"
'''


def needs_eval(injected):
    return any(("$" in v or "`" in v or "\\" in v) for _, v in injected)

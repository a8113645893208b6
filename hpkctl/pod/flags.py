"""Slurm options from pod annotations: parsed as shell words, validated, de-duplicated.

HPK split its flags annotation on single spaces, so ``--comment="a b"`` or ``-N 2`` broke. Here the
annotation is parsed with POSIX shell word rules, short options are normalised to their long
names, and a user option replaces the generated option of the same name (the user wins).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from hpkctl.errors import PodError

FLAGS_ANNOTATIONS = (
    "slurm-job.hpk.io/flags",
    "slurm.hpk.io/flags",
    "slurm-job.vk.io/flags",
    "slurm-job.knoc.io/flags",
)
MPI_FLAGS_ANNOTATIONS = (
    "slurm-job.hpk.io/mpi-flags",
    "slurm.hpk.io/mpi-flags",
    "slurm-job.vk.io/mpi-flags",
    "slurm-job.knoc.io/mpi-flags",
)

# sbatch short options → long names (sbatch(1)); the ones that take a value.
_SHORT = {
    "-A": "--account", "-a": "--array", "-b": "--begin", "-C": "--constraint", "-c": "--cpus-per-task",
    "-D": "--chdir", "-d": "--dependency", "-e": "--error", "-G": "--gpus", "-i": "--input",
    "-J": "--job-name", "-L": "--licenses", "-M": "--clusters", "-m": "--distribution", "-N": "--nodes",
    "-n": "--ntasks", "-o": "--output", "-p": "--partition", "-q": "--qos", "-S": "--core-spec",
    "-t": "--time", "-w": "--nodelist", "-x": "--exclude", "-F": "--nodefile",
}
# Short options without a value.
_SHORT_BOOL = {"-H": "--hold", "-h": "--help", "-k": "--no-kill", "-O": "--overcommit", "-s": "--oversubscribe",
               "-V": "--version", "-v": "--verbose", "-Q": "--quiet", "-W": "--wait"}
# Long options that never take a value (so "--exclusive --mem=1G" is not read as exclusive=--mem).
_LONG_BOOL = {
    "--contiguous", "--exclusive", "--hold", "--no-kill", "--no-requeue", "--overcommit", "--oversubscribe",
    "--requeue", "--spread-job", "--use-min-nodes", "--reboot", "--test-only", "--ignore-pbs", "--quiet",
    "--verbose", "--wait",
}
# Options that would break how hpkctl tracks the job, with the reason shown to the user.
_FORBIDDEN = {
    "--output": "hpkctl keeps the job's output in the pod directory (use kubectl logs / hpkctl logs)",
    "--error": "hpkctl keeps the job's output in the pod directory",
    "--input": "pods have no stdin file",
    "--chdir": "the job runs in the pod directory; use the container's workingDir",
    "--array": "one pod is one job; use a Kubernetes Job with completions/parallelism instead",
    "--wrap": "the job script is generated from the pod",
    "--parsable": "hpkctl parses sbatch's output itself",
    "--test-only": "hpkctl must really submit the job",
    "--wait": "hpkctl watches the job itself",
    "--hold": "a held job would leave the pod Pending forever",
    "--export": "the containers' environment comes from the pod spec",
    "--export-file": "the containers' environment comes from the pod spec",
    "--clusters": "hpkctl watches jobs on the profile's cluster only (set slurm.conf_file in the profile)",
    "--help": "not a job option",
    "--usage": "not a job option",
    "--version": "not a job option",
}


@dataclass(frozen=True)
class SlurmOption:
    name: str  # long form, e.g. "--nodes"
    value: str | None  # None for flags without a value


def parse_options(text: str, *, source: str) -> list[SlurmOption]:
    """Parse sbatch options written as shell words (``-N 2 --comment="a b"``).

    ``source`` names where the text came from (e.g. the annotation) for error messages.
    """
    try:
        tokens = shlex.split(text, posix=True)
    except ValueError as exc:
        raise PodError("InvalidSlurmFlags", f"{source}: cannot parse {text!r}: {exc}",
                       hint="quote values with spaces like --comment=\"my run\"") from exc
    options: list[SlurmOption] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("-") or tok in ("-", "--"):
            raise PodError("InvalidSlurmFlags", f"{source}: {tok!r} is not an sbatch option",
                           hint="write options like --nodes=2 or -N 2; values with spaces need quotes")
        if tok.startswith("--"):
            name, eq, value = tok.partition("=")
            if not eq:
                if name in _LONG_BOOL:
                    value_opt: str | None = None
                elif i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                    i += 1
                    value_opt = tokens[i]
                else:
                    value_opt = None
            else:
                value_opt = value
        else:
            short, attached = tok[:2], tok[2:]
            if short in _SHORT_BOOL and not attached:
                name, value_opt = _SHORT_BOOL[short], None
            elif short in _SHORT:
                name = _SHORT[short]
                if attached:
                    value_opt = attached.removeprefix("=")
                elif i + 1 < len(tokens):
                    i += 1
                    value_opt = tokens[i]
                else:
                    raise PodError("InvalidSlurmFlags", f"{source}: option {short} needs a value",
                                   hint=f"write {short} VALUE or {_SHORT[short]}=VALUE")
            else:
                raise PodError("InvalidSlurmFlags", f"{source}: unknown short option {short!r}",
                               hint="use the long form (see 'man sbatch')")
        if name in _FORBIDDEN:
            raise PodError("InvalidSlurmFlags", f"{source}: {name} is not allowed: {_FORBIDDEN[name]}",
                           hint=f"remove {name} from the annotation")
        if value_opt is not None and ("\n" in value_opt or "\r" in value_opt or "\0" in value_opt):
            raise PodError("InvalidSlurmFlags", f"{source}: the value of {name} contains a line break",
                           hint="Slurm options are single-line; remove the newline")
        options.append(SlurmOption(name, value_opt))
        i += 1
    return options


def merge_options(generated: list[SlurmOption], user: list[SlurmOption]) -> list[SlurmOption]:
    """Generated options first, each replaced by the user's option of the same name (user wins)."""
    user_names = {o.name for o in user}
    merged = [o for o in generated if o.name not in user_names]
    seen: dict[str, int] = {}
    for opt in user:  # a repeated user option: the last one wins, like sbatch's own parsing
        if opt.name in seen:
            merged[seen[opt.name]] = opt
        else:
            seen[opt.name] = len(merged)
            merged.append(opt)
    return merged


def annotation(annotations: dict[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of ``names`` present in ``annotations`` as (name, value)."""
    for name in names:
        if name in annotations:
            return name, annotations[name]
    return None


def sbatch_directive_word(value: str) -> str:
    """Encode a value for an ``#SBATCH`` line so sbatch reads back exactly ``value``.

    sbatch's directive parser (``_get_argument`` in src/sbatch/opt.c) honours double quotes and
    backslash escapes and treats an unquoted ``#`` as a comment, so a double-quoted string with
    ``\\`` and ``"`` escaped is read back verbatim. Newlines cannot be expressed (rejected earlier).
    """
    if "\n" in value or "\r" in value or "\0" in value:
        raise ValueError("Slurm directives cannot contain line breaks")
    if value and all(c.isascii() and (c.isalnum() or c in "-_.,:/=+@%") for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

"""The options ``sbatch`` knows, as data: the grammar the flags annotation is read with.

Taken from the option table of Slurm itself (``common_options`` in ``src/common/slurm_opt.c``,
an option applies to sbatch when it has ``set_func`` or ``set_func_sbatch``) for every release
hpkctl supports: 22.05 (Debian 12, the local CI) up to 25.11. ``since``/``until`` mark options
that exist only in some of them; sbatch of an older Slurm refuses a newer option at submission,
with its own message.

Per option: its short form, whether it takes a value (``NONE``, ``REQUIRED``, ``OPTIONAL``: an
optional value is only ever written ``--opt=value``, as getopt reads it), the kind of value (how
it is checked before it reaches a script), and, for options hpkctl refuses, the reason. An option
is refused when it would take the job away from hpkctl: where its output goes, where and as whom
it runs, what it runs, its environment, its name, or whether sbatch really submits it and prints
the job id. Everything else is Slurm's business and passes through unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Arg = Literal["none", "required", "optional"]
NONE: Arg = "none"
REQUIRED: Arg = "required"
OPTIONAL: Arg = "optional"

# Kinds of value, each a full-match pattern. Every kind refuses control characters and line
# breaks first (``flags._check_value``); all but TEXT refuse whitespace, so one shell word never
# carries a second option ("--time=1 --output=/x" is a --time whose value is not a time).
WORD = "word"  # any printable text without whitespace (partition, gres, constraint, ...)
TEXT = "text"  # free text, spaces allowed (comment, burst buffer spec): quoted on its #SBATCH line
COUNT = "count"  # a non-negative integer
INT = "int"  # an integer, may be negative (--nice)
NODES = "nodes"  # min[-max] node counts, or a size list (1,4,8 / 2-16:2)
TIME = "time"  # Slurm's time formats (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]) or UNLIMITED
MEMORY = "memory"  # a size with an optional K/M/G/T unit
HOSTS = "hosts"  # a host list; no '/' (sbatch would read a file of that name on the submit host)

PATTERNS: dict[str, re.Pattern[str]] = {
    WORD: re.compile(r"[^\s]+"),
    TEXT: re.compile(r".*", re.S),
    COUNT: re.compile(r"[0-9]+"),
    INT: re.compile(r"[+-]?[0-9]+"),
    NODES: re.compile(r"[0-9]+([-,:][0-9]+)*"),
    TIME: re.compile(r"([0-9]+-[0-9]+(:[0-9]+){0,2}|[0-9]+(:[0-9]+){0,2}|(?i:unlimited|infinite))"),
    MEMORY: re.compile(r"[0-9]+[KMGTkmgt]?[Bb]?"),
    HOSTS: re.compile(r"[^\s/]+"),
}
KIND_RULES = {
    WORD: "a single word without spaces",
    TEXT: "text on one line",
    COUNT: "a whole number",
    INT: "a whole number, e.g. 10 or -5",
    NODES: "a node count or range, e.g. 2 or 2-4",
    TIME: "a Slurm time: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS",
    MEMORY: "a size such as 4000, 500M or 4G",
    HOSTS: "a host list such as node[01-04] (no '/': a file name is not allowed)",
}


@dataclass(frozen=True)
class Spec:
    """One option of a Slurm command."""

    name: str  # long form with its dashes, e.g. "--nodes"
    short: str = ""  # e.g. "-N"
    arg: Arg = REQUIRED
    kind: str = WORD
    refused: str = ""  # why hpkctl refuses it (empty: allowed)
    alias_of: str = ""  # another spelling of this long option (then everything else comes from there)
    since: str = ""  # first Slurm release that has it
    until: str = ""  # last Slurm release that has it


def option_table(*specs: Spec) -> dict[str, Spec]:
    return {s.name: s for s in specs}


# Reasons shared by several options.
_OUTPUT = "hpkctl keeps the job's output in the pod directory (logs/slurm.out); read it with 'hpkctl logs'"
_NOT_A_JOB = "it is not a job option: sbatch would not submit the job (or hpkctl would not see it)"
_SUBMIT_HOST = ("sbatch would read a file on the machine that submits, which is not part of the pod; "
                "give the content in the annotation instead")

SBATCH: dict[str, Spec] = option_table(
    Spec("--account", "-A"),
    Spec("--acctg-freq"),
    Spec("--array", "-a", refused="one pod is one job; hpkctl makes the job array itself for a "
                                  "Kubernetes Job (completions/parallelism) or a Deployment/StatefulSet (replicas)"),
    Spec("--autocomplete", refused=_NOT_A_JOB, since="23.02"),
    Spec("--batch"),  # node features the batch step needs: only where it runs
    Spec("--bb", kind=TEXT),
    Spec("--bbf", refused=_SUBMIT_HOST),
    Spec("--begin", "-b"),
    Spec("--chdir", "-D", refused="the job runs in the pod directory; set the container's workingDir instead"),
    Spec("--cluster", alias_of="--clusters"),
    Spec("--cluster-constraint"),
    Spec("--clusters", "-M", refused="hpkctl watches jobs on the profile's cluster only "
                                     "(set slurm.conf_file in the site profile to use another cluster)"),
    Spec("--comment", kind=TEXT),  # hpkctl's own comment (hpk-uid=...) comes first; the user's follows
    Spec("--consolidate-segments", arg=NONE, since="25.11"),
    Spec("--constraint", "-C"),
    Spec("--container", refused="the batch script would run inside an OCI container instead of running the pod"),
    Spec("--container-id", refused="the batch script would run inside an OCI container instead of running the pod",
         since="23.02"),
    Spec("--context"),
    Spec("--contiguous", arg=NONE),
    Spec("--core-spec", "-S", kind=COUNT),
    Spec("--cores-per-socket"),
    Spec("--cpu-freq"),
    Spec("--cpus-per-gpu", kind=COUNT),
    Spec("--cpus-per-task", "-c", kind=COUNT),
    Spec("--deadline"),
    Spec("--delay-boot"),
    Spec("--dependency", "-d"),
    Spec("--distribution", "-m"),
    Spec("--error", "-e", refused=_OUTPUT),
    Spec("--exclude", "-x", kind=HOSTS),
    Spec("--exclusive", arg=OPTIONAL),
    Spec("--export", refused="the containers' environment comes from the pod spec (env, envFrom); "
                             "the job itself must not inherit the submitting shell's"),
    Spec("--export-file", refused="the containers' environment comes from the pod spec (env, envFrom)"),
    Spec("--external", arg=NONE, refused="an external job never runs the pod's script", since="25.05"),
    Spec("--extra", kind=TEXT, since="23.02"),
    Spec("--extra-node-info", "-B"),
    Spec("--get-user-env", arg=OPTIONAL, refused="the containers' environment comes from the pod spec, "
                                                 "not from a login shell on the node"),
    Spec("--gid", refused="the job runs as the user who runs hpkctl (use securityContext for the container)"),
    Spec("--gpu-bind"),
    Spec("--gpu-freq"),
    Spec("--gpus", "-G"),
    Spec("--gpus-per-node"),
    Spec("--gpus-per-socket"),
    Spec("--gpus-per-task"),
    Spec("--gres"),
    Spec("--gres-flags"),
    Spec("--help", "-h", arg=NONE, refused=_NOT_A_JOB),
    Spec("--hint"),
    Spec("--hold", "-H", arg=NONE, refused="a held job would leave the pod Pending until someone releases it"),
    Spec("--ignore-pbs", arg=NONE),
    Spec("--input", "-i", refused="a pod has no stdin file"),
    Spec("--job-name", "-J", refused="hpkctl names the job after the pod (squeue shows the pod's name); "
                                     "put your own text in --comment"),
    Spec("--kill-on-invalid-dep"),
    Spec("--licenses", "-L"),
    Spec("--mail-type"),
    Spec("--mail-user"),
    Spec("--mcs-label"),
    Spec("--mem", kind=MEMORY),
    Spec("--mem-bind"),
    Spec("--mem-per-cpu", kind=MEMORY),
    Spec("--mem-per-gpu", kind=MEMORY),
    Spec("--mincpus", kind=COUNT),
    Spec("--network"),
    Spec("--nice", arg=OPTIONAL, kind=INT),
    Spec("--no-kill", "-k", arg=OPTIONAL),
    Spec("--no-requeue", arg=NONE),
    Spec("--nodefile", "-F", refused=_SUBMIT_HOST + " (use --nodelist)"),
    Spec("--nodelist", "-w", kind=HOSTS),
    Spec("--nodes", "-N", kind=NODES),
    Spec("--ntasks", "-n", kind=COUNT),
    Spec("--ntasks-per-core", kind=COUNT),
    Spec("--ntasks-per-gpu", kind=COUNT),
    Spec("--ntasks-per-node", kind=COUNT),
    Spec("--ntasks-per-socket", kind=COUNT),
    Spec("--ntasks-per-tres", kind=COUNT),
    Spec("--oom-kill-step", arg=OPTIONAL, since="24.11"),
    Spec("--open-mode", refused=_OUTPUT),
    Spec("--output", "-o", refused=_OUTPUT),
    Spec("--overcommit", "-O", arg=NONE),
    Spec("--oversubscribe", "-s", arg=NONE),
    Spec("--parsable", arg=NONE, refused="hpkctl sets how sbatch prints the job id itself"),
    Spec("--partition", "-p"),
    Spec("--power", until="23.11"),
    Spec("--prefer"),
    Spec("--priority"),
    Spec("--profile"),
    Spec("--propagate", arg=OPTIONAL),
    Spec("--qos", "-q"),
    Spec("--quiet", "-Q", arg=NONE, refused="sbatch would not print the job id, so hpkctl could not follow the job"),
    Spec("--reboot", arg=NONE),
    Spec("--requeue", arg=NONE, refused="a requeued job runs the pod's containers a second time behind its "
         "status, which already says the pod ended; hpkctl submits every pod with --no-requeue (a lost node "
         "fails the pod NodeLost, and its controller makes a new one)"),
    Spec("--reservation"),
    Spec("--resources", since="25.11"),
    Spec("--resv-ports", arg=OPTIONAL, since="24.05"),
    Spec("--segment", since="24.05"),
    Spec("--signal"),
    Spec("--sockets-per-node"),
    Spec("--spread-job", arg=NONE),
    Spec("--spread-segments", arg=NONE, since="25.11"),
    Spec("--stepmgr", arg=NONE, since="24.05"),
    Spec("--switches"),
    Spec("--tasks-per-node", alias_of="--ntasks-per-node"),
    Spec("--test-only", arg=NONE, refused="hpkctl must really submit the job"),
    Spec("--thread-spec", kind=COUNT),
    Spec("--threads-per-core"),
    Spec("--time", "-t", kind=TIME),
    Spec("--time-min", kind=TIME),
    Spec("--tmp", kind=MEMORY),
    Spec("--tres-bind", since="23.11"),
    Spec("--tres-per-task", since="23.02"),
    Spec("--uid", refused="the job runs as the user who runs hpkctl (use securityContext for the container)"),
    Spec("--usage", arg=NONE, refused=_NOT_A_JOB),
    Spec("--use-min-nodes", arg=NONE),
    Spec("--verbose", "-v", arg=NONE),
    Spec("--version", "-V", arg=NONE, refused=_NOT_A_JOB),
    Spec("--wait", "-W", arg=NONE, refused="hpkctl watches the job itself; sbatch must return at once"),
    Spec("--wait-all-nodes", kind=COUNT),
    Spec("--wckey"),
    Spec("--wrap", refused="the job script is generated from the pod; put the command in the container"),
)


def resolve(table: dict[str, Spec], spec: Spec) -> Spec:
    """``spec`` itself, or the option it is another spelling of."""
    return table[spec.alias_of] if spec.alias_of else spec


def shorts(table: dict[str, Spec]) -> dict[str, Spec]:
    """Short form (``-N``) → option."""
    return {s.short: s for s in table.values() if s.short}


__all__ = ["KIND_RULES", "NONE", "OPTIONAL", "PATTERNS", "REQUIRED", "SBATCH", "Spec", "option_table", "resolve", "shorts"]

"""Slurm options from pod annotations: read with sbatch's and srun's own grammar, never passed raw.

The flags annotation (and the mpi-flags annotation) is split into POSIX shell words; each word is
exactly one option: ``--name=value``, ``--name value``, ``-X value`` or ``-Xvalue`` for a short
option that takes a value, ``--name``/``-X`` for one that takes none. Option names must be in the
table of the command (:mod:`hpkctl.pod.sbatch_options`, :mod:`hpkctl.pod.srun_options`, taken
from Slurm 22.05 to 25.11); options hpkctl refuses say why. Values never contain control or
line-breaking characters and match the option's kind of value (a time, a count, one word...),
so one word can never carry a second option. What reaches the script is built from the parsed
(option, value) pairs only: ``--name=value`` in canonical long form.
"""

from __future__ import annotations

import difflib
import shlex
import unicodedata
from dataclasses import dataclass

from hpkctl.errors import PodError
from hpkctl.pod.sbatch_options import KIND_RULES, NONE, OPTIONAL, PATTERNS, SBATCH, Spec, resolve, shorts
from hpkctl.pod.srun_options import SRUN

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
# Unicode categories no value may contain: control characters (newline, NUL, ESC, U+0085...),
# format characters (bidi overrides, zero-width), surrogates, and the line/paragraph separators.
_FORBIDDEN_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
_TABLES = {"sbatch": SBATCH, "srun": SRUN}
# The prefix of every job's comment: ``hpk-uid=<pod uid>`` is the comment's first word; a batch of
# pods submitted as one array (:mod:`hpkctl.pod.batch`) has ``hpk-uids=<uid0>,<uid1>,...`` instead.
COMMENT_UID = "hpk-uid="
COMMENT_UIDS = "hpk-uids="


@dataclass(frozen=True)
class SlurmOption:
    name: str  # long form, e.g. "--nodes"
    value: str | None  # None for flags without a value

    @property
    def word(self) -> str:
        """The option as one word, ``--name=value`` or ``--name`` (for srun's argv)."""
        return self.name if self.value is None else f"{self.name}={self.value}"


def _fail(source: str, word: str, rule: str, fix: str) -> PodError:
    return PodError("InvalidSlurmFlags", f"{source}: {word!r}: {rule}", hint=fix)


def control_character(value: str) -> str | None:
    """The first character of ``value`` no Slurm option value may hold (control, format, line or
    paragraph separator, surrogate), else ``None``."""
    return next((ch for ch in value if unicodedata.category(ch) in _FORBIDDEN_CATEGORIES), None)


def _check_value(spec: Spec, value: str, *, source: str, word: str) -> None:
    ch = control_character(value)
    if ch is not None:
        raise _fail(source, word, f"the value of {spec.name} contains the control character "
                        f"U+{ord(ch):04X} ({unicodedata.name(ch, 'unnamed')}); a value is one line of "
                        "printable text", f"remove it from the value of {spec.name}")
    if not PATTERNS[spec.kind].fullmatch(value):
        rule = KIND_RULES[spec.kind]
        extra = ""
        if spec.kind != "text" and any(c.isspace() for c in value):
            extra = "; each option is its own shell word, so a space cannot separate a second option"
        raise _fail(source, word, f"{value!r} is not a valid value of {spec.name}: it must be {rule}{extra}",
                    f"write {spec.name}=VALUE with VALUE {rule}, and every further option as a word of its own")


def _lookup(table: dict[str, Spec], name: str, *, command: str, source: str, word: str) -> Spec:
    spec = table.get(name)
    if spec is None:
        close = difflib.get_close_matches(name, list(table), n=1)
        did = f"did you mean {close[0]}? " if close else ""
        raise _fail(source, word, f"{name} is not an option of {command} (Slurm 22.05 to 25.11)",
                    f"{did}see 'man {command}'; options are written in full, never abbreviated")
    spec = resolve(table, spec)
    if spec.refused:
        raise _fail(source, word, f"{spec.name} is not allowed: {spec.refused}",
                    f"remove {spec.name} from {source}")
    return spec


def parse_options(text: str, *, source: str, command: str = "sbatch") -> list[SlurmOption]:
    """Parse options of ``command`` (``sbatch`` or ``srun``) written as shell words.

    ``source`` names where the text came from (the annotation, a profile key) for error messages.
    Returns the options in canonical long form, in the order given.
    """
    table = _TABLES[command]
    short_forms = shorts(table)
    try:
        words = shlex.split(text, posix=True)
    except ValueError as exc:
        raise PodError("InvalidSlurmFlags", f"{source}: cannot split {text!r} into shell words: {exc}",
                       hint="close every quote; quote values with spaces like --comment=\"my run\"") from exc
    options: list[SlurmOption] = []
    i = 0
    while i < len(words):
        word = words[i]
        value: str | None = None
        if not word.startswith("-") or word in ("-", "--"):
            what = ("srun launches the pod's container: a program or its arguments cannot be given here"
                    if command == "srun" else "the annotation holds sbatch options only")
            raise _fail(source, word, f"not an option ({what})",
                        "write options like --nodes=2 or -N 2; quote a value with spaces: --comment='my run'")
        if word.startswith("--"):
            name, eq, attached = word.partition("=")
            spec = _lookup(table, name, command=command, source=source, word=word)
            if eq:
                if spec.arg == NONE:
                    raise _fail(source, word, f"{spec.name} takes no value", f"write {spec.name} alone")
                value = attached
            elif spec.arg != NONE and spec.arg != OPTIONAL:
                if i + 1 >= len(words) or words[i + 1].startswith("-"):
                    raise _fail(source, word, f"{spec.name} needs a value", f"write {spec.name}=VALUE")
                i += 1
                value = words[i]
        else:
            short, attached = word[:2], word[2:]
            found = short_forms.get(short)
            if found is None:
                raise _fail(source, word, f"{short} is not a short option of {command}",
                            f"use the long form (see 'man {command}')")
            spec = _lookup(table, found.name, command=command, source=source, word=word)
            if spec.arg == NONE:
                if attached:
                    raise _fail(source, word, f"{short} takes no value (and one word is one option)",
                                f"write {short} alone, and each further option as a word of its own")
            elif spec.arg == OPTIONAL:
                value = attached.removeprefix("=") if attached else None
            elif attached:
                value = attached.removeprefix("=")
            elif i + 1 >= len(words) or words[i + 1].startswith("-"):
                raise _fail(source, word, f"{short} needs a value", f"write {short} VALUE or {spec.name}=VALUE")
            else:
                i += 1
                value = words[i]
        if value is not None:
            _check_value(spec, value, source=source, word=word)
        options.append(SlurmOption(spec.name, value))
        i += 1
    return options


def parse_srun_options(text: str, *, source: str) -> list[SlurmOption]:
    """The mpi-flags annotation: ``srun`` options only (see :func:`parse_options`)."""
    return parse_options(text, source=source, command="srun")


def job_comment(uid: str, *, namespace: str, name: str, user: str | None = None) -> str:
    """The job's ``--comment``: ``hpk-uid=<uid> hpk-pod=<namespace>/<name>``, then the user's own
    comment if the pod gave one, so a job can be traced to its pod when its record is gone."""
    own = f"{COMMENT_UID}{uid} hpk-pod={namespace}/{name}"
    return f"{own} {user}" if user else own


def uid_from_comment(comment: str) -> str | None:
    """The pod uid in a job comment written by :func:`job_comment`, else ``None``."""
    first = comment.strip().split(maxsplit=1)[0] if comment.strip() else ""
    uid = first[len(COMMENT_UID):] if first.startswith(COMMENT_UID) else ""
    return uid or None


def pod_of_job(job_id: str, comment: str) -> tuple[str, str] | None:
    """(pod uid, the pod's job id) for a job whose comment names a pod, else ``None``: a pod's own job
    or a workload's array (``hpk-uid=``; an element ``A_i`` of a workload stands for its array ``A``),
    or element ``A_i`` of a batch (``hpk-uids=``: the i-th uid, and the element itself). A batch's
    pending elements that squeue shows as one ``A_[range]`` line name no pod here."""
    words = comment.strip().split(maxsplit=1)
    first = words[0] if words else ""
    array, _, index = job_id.partition("_")
    if first.startswith(COMMENT_UIDS):
        uids = first[len(COMMENT_UIDS):].split(",")
        if not index.isdigit() or int(index) >= len(uids) or not uids[int(index)]:
            return None
        return uids[int(index)], job_id
    uid = uid_from_comment(comment)
    return (uid, array) if uid else None


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
    ``\\`` and ``"`` escaped is read back verbatim. Line breaks cannot be expressed (user values
    with any control character are refused by ``parse_options``; this is the last line of defence).
    """
    if "\n" in value or "\r" in value or "\0" in value:
        raise ValueError("Slurm directives cannot contain line breaks")
    if value and all(c.isascii() and (c.isalnum() or c in "-_.,:/=+@%") for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

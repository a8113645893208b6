"""What a job script may not use: bash constructs newer than 4.2 (RHEL 7; RHEL 8 has 4.4).

Each entry names the construct, the bash release that introduced it and the entry in bash's own
CHANGES file that says so (bminor/bash, file CHANGES; sections "New Features in Bash"), a regular
expression that finds it in a script line, and an example line the expression must catch.
Comments are not scanned (a comment may name what the script avoids).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Construct:
    name: str
    version: str  # first bash release with it
    changes: str  # the CHANGES entry: "bash-X-alpha, 3.x: ..."
    pattern: re.Pattern[str]
    example: str  # a line the pattern must catch (tests/pod/test_bash42.py checks each)


def _c(name: str, version: str, changes: str, pattern: str, example: str) -> Construct:
    return Construct(name, version, changes, re.compile(pattern), example)


_FLAGS = r"(?:-[A-Za-z]+\s+)*"  # other option words before the one that matters

CONSTRUCTS: tuple[Construct, ...] = (
    _c("EPOCHSECONDS / EPOCHREALTIME", "5.0", "bash-5.0-alpha 3b/3c: There is an EPOCHSECONDS / EPOCHREALTIME variable",
       r"\bEPOCH(?:SECONDS|REALTIME)\b", 'end=$((${EPOCHREALTIME//[!0-9]/} + 2000000))'),
    _c("BASH_ARGV0", "5.0", "bash-5.0-alpha 3e: BASH_ARGV0: a new variable",
       r"\bBASH_ARGV0\b", "BASH_ARGV0=hpk"),
    _c("wait -f", "5.0", "bash-5.0-alpha 3j: The `wait' builtin now has a `-f' option",
       rf"\bwait\s+{_FLAGS}-[A-Za-z]*f", 'wait -f "$pid"'),
    _c("shopt localvar_inherit / localvar_unset / assoc_expand_once", "5.0",
       "bash-5.0-alpha 3o: A new shopt option: localvar_inherit (and assoc_expand_once, localvar_unset)",
       r"\b(?:localvar_inherit|localvar_unset|assoc_expand_once)\b", "shopt -s localvar_inherit"),
    _c("SRANDOM", "5.1", "bash-5.1-alpha 3i: SRANDOM: a new variable",
       r"\bSRANDOM\b", "n=$SRANDOM"),
    _c("wait -p VARNAME", "5.1", "bash-5.1-alpha 3q: wait: has a new -p VARNAME option",
       rf"\bwait\s+{_FLAGS}-[A-Za-z]*p", "wait -p pid"),
    _c("${x@U} ${x@u} ${x@L} ${x@K}", "5.1", "bash-5.1-alpha 3dd/3hh: New `U', `u', and `L' (and `K') parameter transformations",
       r"\$\{[^{}]*@[UuLK]\}", 'label="${kind@u} probe"'),
    _c("declare/local -I", "5.1", "bash-5.1-alpha 3bb: `declare' and `local' now have a -I option",
       rf"\b(?:declare|local|typeset)\s+{_FLAGS}-[A-Za-z]*I", "local -I x"),
    _c("${x@k}", "5.2", "bash-5.2-alpha 3t: There is a new parameter transformation operator: @k",
       r"\$\{[^{}]*@k\}", 'echo "${m@k}"'),
    _c("shopt patsub_replacement / varredir_close / noexpand_translation", "5.2",
       "bash-5.2-alpha 3x: New shell option: patsub_replacement (3o varredir_close)",
       r"\b(?:patsub_replacement|varredir_close|noexpand_translation)\b", "shopt -u patsub_replacement"),
    _c("${ cmd; } and ${| cmd; } (funsub)", "5.3", "bash-5.3-alpha 3s: New form of command substitution: ${ command; }",
       r"\$\{[\s|]", "x=${ date; }"),
    _c("GLOBSORT / BASH_TRAPSIG / array_expand_once", "5.3", "bash-5.3-alpha 3q/3x/3t: GLOBSORT, BASH_TRAPSIG, array_expand_once",
       r"\b(?:GLOBSORT|BASH_TRAPSIG|array_expand_once)\b", "GLOBSORT=name"),
    _c("wait -n", "4.3", "bash-4.3-alpha 3cc: The `wait' builtin has a new `-n' option",
       rf"\bwait\s+{_FLAGS}-[A-Za-z]*n", "wait -n"),
    _c("namerefs (declare/local -n)", "4.3", "bash-4.3-alpha 3w: The shell has `nameref' variables and new -n(/+n) options to declare",
       rf"\b(?:declare|local|typeset|unset)\s+{_FLAGS}-[A-Za-z]*n", 'local -n probe="probe_$kind"'),
    _c("test -R (nameref)", "4.3", "bash-4.3-alpha 3w: ... and a `test -R' option to test for them",
       r"(?:\[\[?|\btest)\s+-R\s", "[[ -R ref ]]"),
    _c("negative subscript in an assignment or unset", "4.3",
       "bash-4.3-alpha 3x: allows assigning, referencing, and unsetting elements of indexed arrays using negative "
       "subscripts (4.2 3p: referencing only)",
       r"(?:^|[\s;(])\w+\[-[^\]]*\]\+?=|\bunset\s+(?:-v\s+)?\w+\[-", "a[-1]=x"),
    _c("BASH_COMPAT", "4.3", "bash-4.3-alpha 3ee: There is a new variable, BASH_COMPAT",
       r"\bBASH_COMPAT\b", "BASH_COMPAT=4.2"),
    _c("shopt globasciiranges", "4.3", "bash-4.3-alpha 3e: There is a new shell option, `globasciiranges'",
       r"\bglobasciiranges\b", "shopt -s globasciiranges"),
    _c("[[ -v name[i] ]] (an array element)", "4.3", "bash-4.3-release 3a: The [[ -v ]] option now understands array references",
       r"(?:\[\[?|\btest)\s+-v\s+[\w$\"{}]+\[", '[[ -v HPK_INIT[i] ]]'),
    _c("${x@Q} ${x@E} ${x@P} ${x@A} ${x@a}", "4.4", "bash-4.4-alpha 3o: There is a new ${parameter@spec} family of operators",
       r"\$\{[^{}]*@[QEPAa]\}", "printf '%s\\n' \"${value@Q}\""),
    _c("mapfile/readarray -d", "4.4", "bash-4.4-alpha 3d: The `mapfile' builtin now has a -d option",
       rf"\b(?:mapfile|readarray)\s+{_FLAGS}-[A-Za-z]*d", "mapfile -d '' -t HPK_SECRETS <file"),
    _c("local -", "4.4", "bash-4.4-alpha 3s: The `local' builtin takes a new argument: `-'",
       r"\blocal\s+-(?:\s|;|$)", "local -"),
    _c("shopt inherit_errexit", "4.4", "bash-4.4-rc1 3b: inherit_errexit: a new `shopt' option",
       r"\binherit_errexit\b", "shopt -s inherit_errexit"),
    _c("EXECIGNORE", "4.4", "bash-4.4-alpha 3aa: New variable: EXECIGNORE", r"\bEXECIGNORE\b", "EXECIGNORE=x"),
)

#: "${a[@]}" or ${a[*]} of an array without elements is an "unbound variable" under set -u before
#: bash 4.4 (bash-4.4-rc2 3a: "Using ${a[@]} or ${a[*]} with an array without any assigned elements when
#: the nounset option is enabled no longer throws an unbound variable error"). Job scripts run with
#: set -u, so every such expansion is written ${a[@]+"${a[@]}"}, except of the arrays below, which
#: always have an element.
UNGUARDED_ARRAY = "${a[@]} of an empty array under set -u"
UNGUARDED_VERSION = "4.4"
NEVER_EMPTY = {
    "check": "a probe's HANDLER ARGS: render.probe_words always gives the handler",
    "curl_h": "hpk_probe_http always adds Connection: close",
    "words": "read -a of a resolv.conf line whose first word was just tested",
    "probe": "a probe's array: five numbers, the grace, the handler and its words (render.probe_words)",
    "others": "guarded by ${#others[@]} on the same line",
}
_ARRAY = re.compile(r"\$\{(\w+)\[[@*]\]([^}]?)")


def _code(line: str) -> str:
    """The line without its comment (a ``#`` at the start of a word, outside ``${#...}``/``$#``)."""
    return re.split(r"(?:^|(?<=\s))#", line, maxsplit=1)[0]


def scan(text: str) -> list[tuple[int, str, str, str]]:
    """Every construct newer than bash 4.2 in ``text``: (line number, version, construct, line)."""
    found: list[tuple[int, str, str, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        code = _code(line)
        for c in CONSTRUCTS:
            if c.pattern.search(code):
                found.append((n, c.version, c.name, line.strip()))
        for m in _ARRAY.finditer(code):
            name, after = m.group(1), m.group(2)
            if after in ("+", "-") or name in NEVER_EMPTY:
                continue  # the guard ${a[@]+...} itself, or an array that is never empty
            if re.search(r"\$\{" + name + r"\[[@*]\]\+\"?$", code[:m.start()]):
                continue  # the expansion inside its guard
            found.append((n, UNGUARDED_VERSION, UNGUARDED_ARRAY, line.strip()))
    return found

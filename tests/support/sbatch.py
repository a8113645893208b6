"""Reading ``#SBATCH`` lines back the way sbatch does, to prove how hpkctl encodes directive values."""

from __future__ import annotations


def parse_sbatch_directive(line: str) -> list[str]:
    """The words of an ``#SBATCH`` line as sbatch reads them (``_get_argument`` in src/sbatch/opt.c):
    double and single quotes, backslash escapes, an unquoted ``#`` starts a comment."""
    assert line.startswith("#SBATCH")
    s = line[len("#SBATCH"):]
    words: list[str] = []
    i = 0
    while i < len(s):
        while i < len(s) and s[i].isspace():
            i += 1
        if i >= len(s):
            break
        arg: list[str] = []
        quoted, q_char, escape = False, "", False
        while i < len(s) and (quoted or not s[i].isspace()) and s[i] != "\n":
            c = s[i]
            if escape:
                escape = False
            elif c == "\\":
                escape = True
                i += 1
                continue
            elif quoted:
                if c == q_char:
                    quoted = False
                    i += 1
                    continue
            elif c in "\"'":
                quoted, q_char = True, c
                i += 1
                continue
            elif c == "#":
                return words + (["".join(arg)] if arg else [])
            arg.append(c)
            i += 1
        words.append("".join(arg))
    return words

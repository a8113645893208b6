"""``--bind`` specs, as Apptainer parses them.

Part of the Apptainer stand-in (see __init__.py).
"""

from .common import Fatal


# --------------------------------------------------------------------------------------------
# Bind specs (pkg/runtime/engine/apptainer/config/bind.go semantics, own implementation):
# `src[:dst[:opts]]`, several per value separated by commas, `\,` and `\:` escape,
# options ro, rw (image-src=, id= are image binds: not implemented)
# --------------------------------------------------------------------------------------------
BIND_OPTIONS = ("ro", "rw")
BIND_VALUE_OPTIONS = ("image-src=", "id=")


def _split_unescaped(text, sep):
    parts, cur, k = [], "", 0
    while k < len(text):
        ch = text[k]
        if ch == "\\" and k + 1 < len(text) and text[k + 1] == sep:
            cur += "\\" + sep
            k += 2
            continue
        if ch == sep:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
        k += 1
    parts.append(cur)
    return parts


def _is_bind_option(tok):
    return tok in BIND_OPTIONS or tok.startswith(BIND_VALUE_OPTIONS)


def parse_binds(values):
    """Return [(src, dst, opts)] or raise Fatal with Apptainer's message."""
    prefix = "While setting bind mount configuration: while parsing bind path: "
    binds = []
    for value in values:
        groups = []
        for tok in _split_unescaped(value, ","):
            tok = tok.strip().replace("\\,", ",")
            if not tok:
                continue
            if groups and len(_split_unescaped(groups[-1][0], ":")) >= 2 and _is_bind_option(tok):
                groups[-1][1].append(tok)
            else:
                groups.append([tok, []])
        for spec, extra in groups:
            parts = _split_unescaped(spec, ":")
            if len(parts) > 3:
                raise Fatal(prefix + "wrong bind syntax: %s" % spec)
            src = parts[0].replace("\\:", ":")
            if not src:
                raise Fatal(prefix + 'while getting bind path: empty bind source for bind path '
                            '"%s"' % spec)
            dst = parts[1].replace("\\:", ":") if len(parts) > 1 else src
            opts = (parts[2].split(",") if len(parts) > 2 and parts[2] else []) + extra
            if len(parts) > 2 and not parts[2] and not extra:
                opts = [""]
            for opt in opts:
                if opt.startswith(BIND_VALUE_OPTIONS):
                    raise Fatal("the stand-in does not implement image binds (%s)" % opt)
                if opt not in BIND_OPTIONS:
                    raise Fatal(prefix + "while getting bind path: %s is not a valid bind option"
                                % opt)
            binds.append((src, dst, "ro" in opts))
    return binds

"""``--env-file``: the shell subset Apptainer's interpreter evaluates an env file with.

Part of the Apptainer stand-in (see __init__.py).
"""


# --------------------------------------------------------------------------------------------
# --env-file: Apptainer evaluates the file with an embedded shell interpreter, command execution
# and redirections disabled, every assignment exported (internal/pkg/util/shell/interpreter,
# EvaluateEnv). The stand-in implements the shell subset a generated env file needs: words with
# '...', "..." and \ quoting, $NAME / ${NAME} expansion, comments, `;`/newline separators and
# `export`. Anything else is refused with a FATAL instead of being guessed at.
# --------------------------------------------------------------------------------------------
class EnvFileError(Exception):
    pass


def _is_name(s):
    return bool(s) and (s[0].isalpha() or s[0] == "_") and s.isascii() and \
        all(c.isalnum() or c == "_" for c in s)


def evaluate_env_file(text, env):
    """Return [(name, value)] assigned by `text`; `env` supplies $NAME expansions."""
    return _EnvFile(text, env).evaluate()


class _EnvFile:
    """One evaluation: a word reader, `$` expansion, and the simple commands the words form."""

    META = set(";&|<>()")

    def __init__(self, text, env):
        self.text, self.n = text, len(text)
        self.scope = dict(env)
        self.out = {}
        self.words = []     # the current simple command: [(raw text, value)]

    def evaluate(self):
        text, n, pos = self.text, self.n, 0
        while pos < n:
            ch = text[pos]
            if ch in " \t":
                pos += 1
            elif ch == "\n" or ch == ";":
                self.finish_command()
                pos += 1
            elif ch == "#":
                end = text.find("\n", pos)
                pos = n if end < 0 else end
            elif ch == "\\" and pos + 1 < n and text[pos + 1] == "\n":
                pos += 2
            elif ch in self.META:
                if ch in "<>":
                    raise EnvFileError("could not open/create/modify file: file feature is "
                                       "disabled")
                raise EnvFileError("the stand-in does not implement %r in env files" % ch)
            else:
                start = pos
                value, pos = self.read_word(pos)
                self.words.append((text[start:pos], value))
        self.finish_command()
        return list(self.out.items())

    def expand_dollar(self, k):
        """text[k] == "$": (expansion, next index)."""
        text, n = self.text, self.n
        if k + 1 >= n:
            return "$", k + 1
        c = text[k + 1]
        if c == "(":
            end = text.find(")", k)
            shown = text[k + 2:end] if end > 0 else text[k + 2:]
            raise EnvFileError('could not execute "%s": execution is disabled' % shown.strip())
        if c == "{":
            end = text.find("}", k)
            if end < 0:
                raise EnvFileError("reached EOF without matching ${ with }")
            name = text[k + 2:end]
            if not _is_name(name):
                raise EnvFileError("the stand-in does not implement ${%s} in env files" % name)
            return self.scope.get(name, ""), end + 1
        if c.isalpha() or c == "_":
            e = k + 1
            while e < n and (text[e].isalnum() or text[e] == "_") and text[e].isascii():
                e += 1
            return self.scope.get(text[k + 1:e], ""), e
        if c.isdigit() or c in "@*#?$!-":
            raise EnvFileError("the stand-in does not implement $%s in env files" % c)
        return "$", k + 1

    def read_word(self, k):
        """One shell word from k: (value, next index)."""
        text, n = self.text, self.n
        val = ""
        while k < n:
            ch = text[k]
            if ch in " \t\n" or ch in self.META:
                break
            if ch == "'":
                end = text.find("'", k + 1)
                if end < 0:
                    raise EnvFileError("reached EOF without closing quote '")
                val += text[k + 1:end]
                k = end + 1
            elif ch == '"':
                part, k = self.double_quoted(k + 1)
                val += part
            elif ch == "\\":
                if k + 1 < n:
                    if text[k + 1] != "\n":
                        val += text[k + 1]
                    k += 2
                else:
                    k += 1
            elif ch == "$":
                exp, k = self.expand_dollar(k)
                if exp and any(c in " \t\n" for c in exp):
                    raise EnvFileError("the stand-in does not implement field splitting of "
                                       "unquoted expansions")
                val += exp
            elif ch == "`":
                raise EnvFileError("could not execute command substitution: execution is disabled")
            else:
                val += ch
                k += 1
        return val, k

    def double_quoted(self, k):
        """The inside of "..." from k (after the opening quote): (value, index after the closing)."""
        text, n = self.text, self.n
        val = ""
        while True:
            if k >= n:
                raise EnvFileError('reached EOF without closing quote "')
            c = text[k]
            if c == '"':
                return val, k + 1
            if c == "\\" and k + 1 < n and text[k + 1] in '$`"\\\n':
                if text[k + 1] != "\n":
                    val += text[k + 1]
                k += 2
            elif c == "$":
                exp, k = self.expand_dollar(k)
                val += exp
            elif c == "`":
                raise EnvFileError("could not execute command substitution: execution is disabled")
            else:
                val += c
                k += 1

    def finish_command(self):
        """The words so far form a simple command: assignments, `export`, or a refused command."""
        if not self.words:
            return
        assigns, rest = [], []
        for raw, value in self.words:
            if not rest:
                name, eq, _ = raw.partition("=")
                if eq and _is_name(name):
                    assigns.append((name, value.split("=", 1)[1]))
                    continue
            rest.append((raw, value))
        if rest and rest[0][1] == "export":
            for raw, value in rest[1:]:
                name, eq, _ = raw.partition("=")
                if eq and _is_name(name):
                    assigns.append((name, value.split("=", 1)[1]))
                elif _is_name(value):
                    if value in self.scope:
                        self.out[value] = self.scope[value]
                else:
                    raise EnvFileError("export: invalid variable name %r" % value)
            rest = []
        if rest:
            raise EnvFileError('could not execute "%s": execution is disabled'
                               % " ".join(v for _, v in rest))
        for name, value in assigns:
            self.scope[name] = value
            self.out[name] = value
        self.words.clear()

"""The Jinja environment of the job-script templates (``sbatch/*.j2``): every value a template prints
must already be a :class:`~hpkctl.pod.shell.Shell` word (or an int), and the compiled templates are
kept between processes (:class:`_BytecodeCache`)."""

from __future__ import annotations

from typing import Any

import jinja2
import jinja2.bccache

from hpkctl.pod.shell import Shell
from hpkctl.resources import data_dir


def _finalize(value: Any) -> Any:
    if isinstance(value, Shell) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise TypeError(f"template got an unquoted value {value!r}; wrap it with shell.quote()")


_ENV: jinja2.Environment | None = None
#: how the templates are compiled; part of the cache key, so a change here never reuses old code
_OPTIONS: dict[str, Any] = {"autoescape": False, "keep_trailing_newline": True, "trim_blocks": True,
                            "lstrip_blocks": True, "undefined": jinja2.StrictUndefined, "finalize": _finalize}


class _BytecodeCache(jinja2.FileSystemBytecodeCache):
    """The compiled job-script template, kept between processes: compiling it from source is most of
    a render (about 0.1 s on an idle core, several times that on a busy login node), and
    ``hpkctl run`` renders once per process. Jinja's per-user directory under the temporary
    directory (mode 0700, owner checked, files replaced atomically, entries keyed by the source's
    checksum, so an edited template is compiled again, and by the compile options). A cache that
    cannot be written is only slower: a full or read-only disk never fails a render."""

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        options = ",".join(f"{k}={getattr(v, '__qualname__', v)}" for k, v in sorted(_OPTIONS.items()))
        return super().get_cache_key(f"{name}|{options}", filename)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    try:
        return _BytecodeCache()
    except (OSError, RuntimeError):  # no usable temporary directory, or one another user owns
        return None


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(
            bytecode_cache=_bytecode_cache(),
            loader=jinja2.FileSystemLoader(str(data_dir("sbatch"))),
            **_OPTIONS,
        )
    return _ENV

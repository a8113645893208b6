"""Merging profile files key by key while remembering which file set every value.

``hpkctl sites show`` prints the origin next to each value and every validation error names the file
to edit, so the merge records, for each leaf key path, the file that set it last. Tables are merged;
every other value (lists included) is replaced whole, with the origins under it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from hpkctl.typed import BaseModel

#: Origin of a value no file set.
SCHEMA_DEFAULT = "schema default"

#: A key path such as ``("apptainer", "network")`` or ``("gpu", "extended_resources", "amd.com/gpu")``.
Key = tuple[str, ...]


def merge_layer(base: dict[str, Any], over: dict[str, Any], *, origins: dict[Key, str], src: str) -> None:
    """Merge ``over`` (one file's data) into ``base`` in place; record ``src`` as the origin of its leaves."""
    _merge(base, over, origins=origins, src=src, prefix=())


def _merge(base: dict[str, Any], over: dict[str, Any], *, origins: dict[Key, str], src: str, prefix: Key) -> None:
    for k, v in over.items():
        key = (*prefix, k)
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v, origins=origins, src=src, prefix=key)
            continue
        for old in [o for o in origins if o[: len(key)] == key]:
            del origins[old]
        base[k] = copy.deepcopy(v)
        if isinstance(v, dict) and v:
            _record(v, origins=origins, src=src, prefix=key)
        else:
            origins[key] = src


def _record(d: dict[str, Any], *, origins: dict[Key, str], src: str, prefix: Key) -> None:
    for k, v in d.items():
        if isinstance(v, dict) and v:
            _record(v, origins=origins, src=src, prefix=(*prefix, k))
        else:
            origins[(*prefix, k)] = src


def schema_leaves(model: type[BaseModel]) -> list[Key]:
    """``(section, field)`` for every field of every section of the profile schema, in schema order."""
    keys: list[Key] = []
    for sname, sfield in model.model_fields.items():
        section = sfield.annotation
        if not (isinstance(section, type) and issubclass(section, BaseModel)):
            continue  # `name`: not a table, never in a file
        keys.extend((sname, fname) for fname in section.model_fields)
    return keys


def add_schema_defaults(origins: dict[Key, str], leaves: Iterable[Key]) -> None:
    """Mark every schema leaf no file touched as :data:`SCHEMA_DEFAULT`."""
    for key in leaves:
        if not any(k[: len(key)] == key for k in origins):
            origins[key] = SCHEMA_DEFAULT


def ordered(origins: dict[Key, str], leaves: Iterable[Key]) -> dict[Key, str]:
    """``origins`` in schema order; entries of dict-valued fields (and anything else) in file order."""
    out: list[Key] = []
    for key in leaves:
        out.extend(k for k in origins if k[: len(key)] == key)
    out.extend(k for k in origins if k not in out)
    return {k: origins[k] for k in out}


__all__ = ["SCHEMA_DEFAULT", "Key", "add_schema_defaults", "merge_layer", "ordered", "schema_leaves"]

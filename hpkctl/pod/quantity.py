"""Kubernetes resource quantities ("500m", "2Gi", "1e3") as exact numbers."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIXES = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|)$")


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a quantity; raise ValueError with the accepted forms when it is not one."""
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    m = _QUANTITY.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. '500m', '2', '512Mi', '1Gi')")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc
    if number < 0:
        raise ValueError(f"{value!r}: resource quantities cannot be negative")
    return number * _SUFFIXES[m.group(2)]


def ceil_int(value: Decimal) -> int:
    return int(math.ceil(value))


def mebibytes(value: Decimal) -> int:
    """Bytes → whole MiB, rounded up (Slurm's ``--mem=<n>M`` means MiB)."""
    return max(1, ceil_int(value / Decimal(2**20)))


def format_bytes(value: Decimal) -> str:
    """A byte count as Kubernetes prints a quantity: the largest binary or decimal suffix that
    divides it (``1Gi``, ``500M``, ``1500Ki``), else plain bytes."""
    n = ceil_int(value)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki", "E", "P", "T", "G", "M", "k"):
        unit = int(_SUFFIXES[suffix])
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)

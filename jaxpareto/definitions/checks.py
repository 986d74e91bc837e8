"""Checks of user-supplied numbers, shared by the settings and the grid axes, and of the folder an
output path is written to."""

from __future__ import annotations

import math
import numbers
from pathlib import Path

import numpy as np

from jaxpareto.definitions.errors import JaxparetoError


def _fmt(bound: float) -> str:
    return str(int(bound)) if math.isfinite(bound) and float(bound).is_integer() else f"{bound:g}"


def check_number(
    field: str,
    value,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    integer: bool = False,
) -> float | int:
    """A finite Python number within the bounds (Python or NumPy scalars accepted).

    Returns:
        ``int`` when ``integer`` else ``float``.

    Raises:
        JaxparetoError: not a real number (bools and strings included), NaN or infinite,
            not whole where an integer is needed, or out of range; names ``field`` and the
            allowed range.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        kind = "an integer" if integer else "a number"
        raise JaxparetoError(field, f"must be {kind}, got {value!r} ({type(value).__name__})")
    number = float(value)
    if not math.isfinite(number):
        raise JaxparetoError(field, f"must be finite, got {value!r}")
    if integer and not number.is_integer():
        raise JaxparetoError(field, f"must be a whole number, got {value!r}")
    ok_low = number >= low if low_inclusive else number > low
    ok_high = number <= high if high_inclusive else number < high
    if not (ok_low and ok_high):
        if math.isinf(high):
            allowed = f"{'>=' if low_inclusive else '>'} {_fmt(low)}"
        else:
            allowed = f"{'[' if low_inclusive else '('}{_fmt(low)}, {_fmt(high)}{']' if high_inclusive else ')'}"
        shown = int(number) if integer else value  # a whole number read as a float reads as one
        raise JaxparetoError(field, f"out of range: {shown!r}", allowed)
    return int(number) if integer else number


def check_output_folder(path: str | Path, field: str) -> Path:
    """The folder an output ``path`` goes into, resolved; it must exist as a folder.

    Raises:
        JaxparetoError: on ``field``: the folder is missing, or a part of the path is a file.
    """
    parent = Path(path).resolve().parent
    if parent.is_dir():
        return parent
    blocking = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise JaxparetoError(field, f"{blocking} is a file, not a folder; the output cannot go under it")
    raise JaxparetoError(field, f"the folder {parent} does not exist")

"""Reading the values of one column of benchmark records: numbers, true/false flags and lists.

Each reader refuses a bad value with a `JaxparetoError` naming the field and the row of the
first bad value. The readers are vectorised; a per-value reading runs only to find that row (and
for columns of mixed types), so a value means the same either way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from jaxpareto.definitions.errors import JaxparetoError


def fail(field: str, rows: np.ndarray, problem: str, allowed: str | None = None) -> None:
    """Raise for the first row where ``rows`` is true.

    Raises:
        JaxparetoError: ``rows`` is true anywhere, naming ``field`` and the first such row.
    """
    if rows.any():
        raise JaxparetoError(field, f"row {int(np.argmax(rows))}: {problem}", allowed)


def is_missing(v: object) -> bool:
    """True for None, pandas' NA, a float NaN or blank text."""
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def finite_number(v: object) -> float | None:
    """``v`` as a finite float if it is a number or numeric text (not a bool), else None."""
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        x = float(v)
    elif isinstance(v, str):
        try:
            x = float(v)
        except ValueError:
            return None
    else:
        return None
    return x if math.isfinite(x) else None


def real_number(v: object) -> float | None:
    """``v`` as a float if it is a real number (not a bool, not a string), else None."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    return float(v)


def _series(values: pd.Series | Sequence) -> pd.Series:
    return values if isinstance(values, pd.Series) else pd.Series(list(values), dtype=object)


def _item(s: pd.Series, i: int) -> object:
    """Row ``i`` (by position) as a plain Python value, for messages."""
    v = s.iloc[int(i)]
    return v.item() if isinstance(v, np.generic) else v


# Column contents whose values numpy converts to float exactly as float() does: numbers, numeric
# strings and missing values, never bools (float(True) is 1.0) or containers.
_NUMBER_KINDS = frozenset({"string", "floating", "integer", "mixed-integer-float", "empty"})


def _numbers_each(values: list, field: str, unit: str) -> np.ndarray:
    """The per-value reading of :func:`numbers`: slow, but it names the first bad row."""
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if is_missing(v):
            continue
        x = finite_number(v)
        if x is None:
            raise JaxparetoError(field, f"row {i}: {v!r} is not a finite number", unit)
        out[i] = x
    return out


def numbers(values: pd.Series | Sequence, field: str, unit: str) -> np.ndarray:
    """float64 values; missing (None, NaN, blank) -> NaN.

    Raises:
        JaxparetoError: a bool, an infinity or text that is not a number, naming its row and
            ``unit`` (the allowed values).
    """
    s = _series(values)
    if pd.api.types.is_bool_dtype(s.dtype):  # true/false where a number belongs: refused
        given = s.notna().to_numpy()
        if given.any():
            i = int(np.argmax(given))
            raise JaxparetoError(field, f"row {i}: {_item(s, i)!r} is not a finite number", unit)
        return np.full(len(s), np.nan)
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_complex_dtype(s.dtype):
        x = s.to_numpy(dtype=np.float64, na_value=np.nan)  # NaN: missing, as before
        bad = np.isinf(x)
        if bad.any():
            i = int(np.argmax(bad))
            raise JaxparetoError(field, f"row {i}: {_item(s, i)!r} is not a finite number", unit)
        return x
    if not (s.dtype == object or pd.api.types.is_string_dtype(s.dtype)) or \
            pd.api.types.infer_dtype(s, skipna=True) not in _NUMBER_KINDS:
        return _numbers_each(s.tolist(), field, unit)
    values = s.to_numpy(dtype=object)
    present = s.notna().to_numpy() & (values != "")
    x = np.full(len(s), np.nan)
    try:
        x[present] = values[present].astype(np.float64)  # float() per value, in C: exact as float()
    except (TypeError, ValueError):  # text that is no number, or blank with spaces: find the row
        return _numbers_each(s.tolist(), field, unit)
    if not np.isfinite(x[present]).all():  # "inf", "nan" and the like
        return _numbers_each(s.tolist(), field, unit)
    return x


def _flag(v: object, field: str, i: int) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)) and v in (0, 1):
        return bool(v)
    word = v.strip().lower() if isinstance(v, str) else None
    if word in ("true", "1", "false", "0"):
        return word in ("true", "1")
    raise JaxparetoError(field, f"row {i}: {v!r} is not true or false", "true/false, 1/0")


_FLAG_WORDS = {"true": True, "false": False, "True": True, "False": False, "TRUE": True, "FALSE": False,
               "1": True, "0": False, True: True, False: False}  # True == 1 and False == 0 as keys


def flags(values: pd.Series | Sequence, field: str) -> np.ndarray:
    """bool values from true/false, 1/0 (any case, spaces allowed) or booleans; vectorised.

    Raises:
        JaxparetoError: a value that is none of these (a missing one included), naming its row.
    """
    s = _series(values)
    if pd.api.types.is_bool_dtype(s.dtype) and not s.isna().any():
        return s.to_numpy(dtype=bool)
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
        x = s.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = (x != 0) & (x != 1)
        if bad.any():
            _flag(_item(s, np.argmax(bad)), field, int(np.argmax(bad)))
        return x == 1
    try:
        mapped = s.map(_FLAG_WORDS)
    except TypeError:  # unhashable values (lists): read one by one
        return np.array([_flag(v, field, i) for i, v in enumerate(s.tolist())], dtype=bool)
    unknown = mapped.isna().to_numpy()
    out = np.zeros(len(s), dtype=bool)
    out[~unknown] = mapped.to_numpy(dtype=object)[~unknown].astype(bool)
    for i in np.flatnonzero(unknown):  # " True ", "tRUE", 1.0 as text... or the bad row
        out[i] = _flag(_item(s, i), field, i)
    return out


def _list(v: object, field: str, i: int) -> np.ndarray:
    """One row's list of finite numbers (a list, tuple, 1-D array or JSON text) as float64."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            v = None
    x = None
    if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "iuf":
        x = v.astype(np.float64)
    elif isinstance(v, (list, tuple)) and set(map(type, v)) <= {int, float}:
        x = np.array(v, dtype=np.float64) if len(v) else np.empty(0)
    elif isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind == "O"):
        xs = [finite_number(e) for e in v]  # numeric text and numpy scalars, but no bools
        x = None if any(e is None for e in xs) else np.array(xs, dtype=np.float64)
    if x is None or not np.isfinite(x).all():
        raise JaxparetoError(field, f"row {i}: expected a list of finite numbers (seconds)",
                             "a JSON list such as [0.8, 0.85, 0.9]")
    return x


def number_lists(values: pd.Series | Sequence, field: str) -> list[np.ndarray | None]:
    """Each row's list of finite numbers (seconds) as float64; None for a missing value.

    Raises:
        JaxparetoError: a value that is not a list of finite numbers, naming its row.
    """
    return [None if not isinstance(v, (list, tuple, np.ndarray)) and is_missing(v) else _list(v, field, i)
            for i, v in enumerate(_series(values).tolist())]


def flatten(lists: Sequence[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
    """The per-row arrays (None: no values) end to end, and the row of each value."""
    sizes = np.fromiter((0 if x is None else x.size for x in lists), dtype=np.int64, count=len(lists))
    parts = [x for x in lists if x is not None and x.size]
    flat = np.concatenate(parts) if parts else np.empty(0)
    return flat, np.repeat(np.arange(len(lists)), sizes)


def row_mask(n: int, rows: np.ndarray) -> np.ndarray:
    """A mask of ``n`` rows, true at ``rows``."""
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return mask

"""Validation of the grid axes (SPEC.md section 2), before anything compiles."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from jaxpareto.definitions.catalog import resolve_gpu, resolve_model
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.definitions.model import Model
from jaxpareto.definitions.checks import check_number

# Integer axes are carried as floats in the float32 path: exact below 2**24.
_MAX_INTEGER = 2**24


def _as_list(field: str, value) -> list:
    if isinstance(value, (str, bytes, Hardware, Model)) or np.ndim(value) == 0:
        return [value]
    values = list(value)
    if not values:
        raise JaxparetoError(field, "must not be empty")
    return values


def _unique(field: str, keys: Sequence) -> None:
    seen = set()
    for key in keys:
        if key in seen:
            raise JaxparetoError(field, f"duplicate value {key!r}; axis values must be unique")
        seen.add(key)


def numeric_axis(field: str, value, *, integer: bool, low: float, high: float = math.inf) -> np.ndarray:
    """Validate one numeric axis into a 1-D array (int64 or float64).

    Raises:
        JaxparetoError: non-numeric, NaN/inf, non-integer where an integer is needed, out of
            range, empty, or duplicated values; the message names the field.
    """
    out = [check_number(field, v, low=low, high=high, integer=integer) for v in _as_list(field, value)]
    _unique(field, out)
    return np.asarray(out, dtype=np.int64 if integer else np.float64)


def grid_axes(
    gpu,
    model,
    tp,
    concurrency,
    think_time_s,
    context_tokens,
    hit_rate,
    custom_gpus: Mapping[str, Hardware] | None = None,
    custom_models: Mapping[str, Model] | None = None,
) -> tuple[list[Hardware], list[Model], dict[str, np.ndarray]]:
    """Resolve names and validate every axis of the grid.

    Returns:
        (GPU definitions, model definitions, {axis name: 1-D values} for the numeric axes).

    Raises:
        JaxparetoError: naming the field; unknown names list the known ones.
    """
    gpus = [resolve_gpu(g, custom_gpus) for g in _as_list("gpu", gpu)]
    models = [resolve_model(m, custom_models) for m in _as_list("model", model)]
    _unique("gpu", [g.name for g in gpus])
    _unique("model", [m.name for m in models])
    axes = {
        "tp": numeric_axis("tp", tp, integer=True, low=1, high=_MAX_INTEGER),
        "concurrency": numeric_axis("concurrency", concurrency, integer=True, low=1, high=_MAX_INTEGER),
        "think_time_s": numeric_axis("think_time_s", think_time_s, integer=False, low=0),
        "context_tokens": numeric_axis("context_tokens", context_tokens, integer=True, low=1, high=_MAX_INTEGER),
        "hit_rate": numeric_axis("hit_rate", hit_rate, integer=False, low=0, high=1),
    }
    return gpus, models, axes

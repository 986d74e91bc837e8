"""Cells and selections: which grid values a plot draws.

A plot fixes every axis it does not span: to the value asked for (checked against the grid), else
to the headline cell ``jaxpareto sweep`` stored in the dataset's ``report`` attribute, else to the
axis's first value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from jaxpareto.dataset.selection import grid_value
from jaxpareto.definitions.errors import JaxparetoError

SPANNED = ("tp", "concurrency", "request_rate", "front_point")  # every plot spans these: never selected


def headline(ds: xr.Dataset) -> dict:
    """The headline cell stored by ``jaxpareto sweep`` (attribute ``report``), if any."""
    try:
        report = json.loads(ds.attrs.get("report", "{}"))
    except (TypeError, ValueError):
        return {}
    cell = report.get("headline", {}) if isinstance(report, dict) else {}
    return {k: v for k, v in cell.items() if k in ds.dims} if isinstance(cell, dict) else {}


def grid_values(ds: xr.Dataset, axis: str) -> list:
    """The values of ``axis`` as Python scalars, in grid order."""
    return [v.item() for v in np.asarray(ds[axis].values)]


def match(ds: xr.Dataset, axis: str, value, field: str):
    """The grid value of ``axis`` equal to ``value`` (strings exactly, numbers to 1e-9 relative).

    Raises:
        JaxparetoError: (named ``field``) a value that is not a number on a numeric axis, or not on
            the grid.
    """
    return grid_value(ds[axis].values, value, field)


def pick(ds: xr.Dataset, axis: str, requested=None, default=None):
    """``requested`` (checked), else the dataset's headline, else ``default``, else the first value."""
    if requested is not None:
        return match(ds, axis, requested, axis)
    cell = headline(ds)
    if axis in cell:
        try:
            return match(ds, axis, cell[axis], axis)
        except JaxparetoError:
            pass
    return default if default is not None else grid_values(ds, axis)[0]


def select_names(ds: xr.Dataset, gpu, model) -> tuple[str, str]:
    """The figure's GPU and model: as asked, else the headline's, else the first."""
    return pick(ds, "gpu", gpu), pick(ds, "model", model)


def check_cell(ds: xr.Dataset, cell: Mapping, spread: Sequence[str]) -> None:
    """Every key of ``cell`` is a dimension of ``ds`` that the plot does not span (``spread``).

    Raises:
        JaxparetoError: an unknown dimension, or one the plot spans.
    """
    for key in cell:
        if key not in ds.dims:
            raise JaxparetoError(key, "not a dimension of the dataset", [str(d) for d in ds.dims])
        if key in spread or key == "front_point":
            raise JaxparetoError(key, f"this plot spans every value of {key!r}; it cannot be fixed")


def fixed(ds: xr.Dataset, var: str, free: Sequence[str], cell: Mapping) -> dict:
    """One value per dimension of ``ds[var]`` outside ``free``: ``cell``'s, the headline's or the first."""
    return {d: pick(ds, d, cell.get(d)) for d in ds[var].dims if d not in free and d != "front_point"}


def selection_value(ds: xr.Dataset, key: str, value, field: str):
    """A selected axis value, checked: a known axis other than tp and concurrency, on the grid.

    Args:
        ds: the dataset the selection applies to.
        key: the axis name, e.g. ``"context_tokens"``.
        value: the value asked for, in the axis's unit (a string is converted on a numeric axis).
        field: the name errors give, e.g. ``"--sel context_tokens"``.

    Returns:
        The grid value (a Python scalar) equal to ``value``.

    Raises:
        JaxparetoError: ``key`` is tp, concurrency or not an axis of ``ds``, or ``value`` is not on
            its grid.
    """
    if key in SPANNED:
        raise JaxparetoError(field, "the plots span every tp and load (concurrency, request_rate); select another "
                                    "axis", selectable_axes(ds))
    if key not in ds.dims:
        raise JaxparetoError(field, "unknown axis", selectable_axes(ds))
    return match(ds, key, value, field)


def selectable_axes(ds: xr.Dataset) -> list[str]:
    """The axes of ``ds`` a plot's selection may fix: all but tp and the load, which it spans."""
    return [str(d) for d in ds.dims if d not in SPANNED]

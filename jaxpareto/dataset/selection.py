"""Picking cells and points of a sweep: the headline cell a report prints, the coordinates a
session sweep will have (to pick that cell before it runs), and a session sweep's best
configuration by tasks/s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.axes import AXES, AXIS_BY_NAME


def headline_cell(coords: Mapping[str, Sequence], headline: Mapping, dims: Sequence[str],
                  axes: Sequence[str] = AXES, source: str = "report.headline") -> dict:
    """One coordinate value for every axis outside ``dims``: the headline's, else the first.

    Args:
        coords: every axis's coordinate values (a dataset's or a plan's coords).
        headline: wanted values by axis; numbers match to a relative 1e-9.
        dims: the front's dimensions, taken over all their values (not selected).
        axes: the grid's axes, in order.
        source: the field named in errors.

    Returns:
        axis -> the grid's own value (a Python scalar), in ``axes`` order.

    Raises:
        JaxparetoError: a headline key that is no axis, is one of ``dims``, or whose value is
            not on the grid (`grid_value`).
    """
    dims, axes = tuple(dims), tuple(axes)
    for key in headline:
        if key not in axes:
            raise JaxparetoError(f"{source}.{key}", "unknown axis", [a for a in axes if a not in dims])
        if key in dims:
            rest = [d for d in dims if d != key]
            raise JaxparetoError(f"{source}.{key}", f"is a dimension of the front ({', '.join(dims)}); "
                                                    "the front is taken over all its values. To fix it, take the "
                                                    f"front over the others (--dims {','.join(rest)})")
    selection = {}
    for axis in axes:
        if axis in dims:
            continue
        values = np.asarray(coords[axis])
        if axis not in headline:
            selection[axis] = values[0].item()
            continue
        selection[axis] = grid_value(values, headline[axis], f"{source}.{axis}")
    return selection


def grid_value(values: np.ndarray, wanted, field: str):
    """The coordinate value equal to ``wanted``: strings exactly, numbers to 1e-9 relative.

    Returns:
        The grid's own value, as a Python scalar.

    Raises:
        JaxparetoError: (named ``field``) not a number on a numeric axis, or not on the grid
            (the grid's values listed).
    """
    values = np.asarray(values)
    if values.dtype.kind in "USO":
        hits = np.flatnonzero(values.astype(str) == str(wanted))
    else:
        try:
            number = float(wanted)
        except (TypeError, ValueError):
            raise JaxparetoError(field, f"not a number: {wanted!r}") from None
        hits = np.flatnonzero(np.isclose(values.astype(float), number, rtol=1e-9, atol=0))
    if not len(hits):
        raise JaxparetoError(field, f"{wanted!r} is not on the grid", [v.item() for v in values])
    return values[hits[0]].item()


def session_axes(axes: Sequence[str] = AXES) -> list[str]:
    """A session sweep's axes: ``turn`` in place of ``context_tokens``."""
    return [a if a != "context_tokens" else "turn" for a in axes]


def session_coords(kwargs: Mapping, turns: int, axes: Sequence[str] = AXES) -> dict[str, list | np.ndarray]:
    """The coordinates `jaxpareto.dataset.session.session_sweep(**kwargs)` will give, before it
    runs: the values of every categorical axis (GPUs, models, engines) by name, an axis not in
    ``kwargs`` at its default, turns 1..``turns``."""
    coords = {a: np.atleast_1d(np.arange(1, turns + 1) if a == "turn" else kwargs.get(a, AXIS_BY_NAME[a].default))
              for a in session_axes(axes)}
    for a in coords:
        if a in AXIS_BY_NAME and AXIS_BY_NAME[a].categorical:
            coords[a] = [v if isinstance(v, str) else v.name for v in coords[a]]
    return coords


def best_task_configuration(cell: xr.Dataset) -> xr.Dataset | None:
    """The configuration of one session-sweep cell (tp and concurrency, and a layout's or
    disaggregated replica's axes where the cell has them) with the most tasks/s, among the
    concurrencies the KV memory admits in full for a whole task; None when there is none."""
    best = cell.tasks_per_s.where((cell.task_concurrency_eff >= 1) & (cell.concurrency <= cell.task_concurrency_eff))
    if not bool(best.notnull().any()):
        return None
    return cell.isel(best.argmax(dim=list(best.dims)))

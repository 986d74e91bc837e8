"""Pareto frontiers of a sweep (README, "Python"), by sort and scan: O(n log n) per group.

Within each group (the points that differ only along ``dims``), a point is on the front when
no other valid point is at least as good in both objectives and strictly better in one. Exact
duplicates therefore share the front. Invalid points (infeasible, unconverged, or a non-finite
objective) are never on it and never dominate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.axes import DISAGGREGATION_AXES, LAYOUT_AXES, load_axis
from jaxpareto.definitions.schema import DEFAULT_DIMS, DEFAULT_X, DEFAULT_Y, FLAG_VARIABLES, NOT_OBJECTIVES, \
    default_maximize

TABLE_METRICS = (
    "ttft_ms", "tpot_ms", "latency_ms", "batch_eff", "concurrency_eff", "turns_per_s", "kv_per_session_gb",
    "decode_bound",
)


def front_mask(x: np.ndarray, y: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Non-dominated rows of 2-D arrays, maximising both objectives, row by row.

    Args:
        x, y: objectives, shape (groups, n).
        valid: shape (groups, n); invalid points are neither on the front nor dominate.

    Returns:
        Boolean array (groups, n).

    Sort each row by x descending, then y descending. A point is non-dominated exactly when
    its y beats every y of a strictly larger x (a prefix maximum taken just before its run of
    equal x) and equals the best y of its own run (the run's first element).
    """
    groups, n = x.shape
    out = np.zeros((groups, n), dtype=bool)
    if n == 0:
        return out
    xs = np.where(valid, x, -np.inf)
    ys = np.where(valid, y, -np.inf)
    order = np.lexsort((-ys, -xs, ~valid), axis=-1)  # last key is primary: valid points first
    xs = np.take_along_axis(xs, order, axis=-1)
    ys = np.take_along_axis(ys, order, axis=-1)
    vs = np.take_along_axis(valid, order, axis=-1)
    idx = np.broadcast_to(np.arange(n), (groups, n))
    run_start = np.ones((groups, n), dtype=bool)
    run_start[:, 1:] = xs[:, 1:] != xs[:, :-1]
    start = np.maximum.accumulate(np.where(run_start, idx, 0), axis=-1)
    best_so_far = np.maximum.accumulate(ys, axis=-1)
    before = np.take_along_axis(best_so_far, np.maximum(start - 1, 0), axis=-1)
    before = np.where(start > 0, before, -np.inf)
    run_best = np.take_along_axis(ys, start, axis=-1)
    on = vs & (ys > before) & (ys == run_best)
    np.put_along_axis(out, order, on, axis=-1)
    return out


def _validity(ds: xr.Dataset, x: xr.DataArray, y: xr.DataArray) -> xr.DataArray:
    valid = np.isfinite(x) & np.isfinite(y)
    for flag in ("feasible", "converged"):
        if flag in ds:  # a session's per-task objectives: every turn of the task feasible
            status = ds[flag]
            valid = valid & status.all([d for d in status.dims if d not in x.dims])
    return valid


def default_dims(dims: Sequence[str]) -> tuple[str, ...]:
    """The Pareto front's default dimensions for a dataset's ``dims``: TP and the load axis, and
    a disaggregated sweep's prefill pool (``prefill_tp``, ``prefill_workers``, ``decode_workers``)
    or a layout sweep's ``pp``, ``ep`` and ``dp_attention``: the front over every layout (a
    ``gpu_budget`` is the scenario's, not a choice: one front per budget)."""
    pools = tuple(a.name for a in (*LAYOUT_AXES, *DISAGGREGATION_AXES) if a.name in dims and a.name != "gpu_budget")
    return tuple(load_axis(dims) if d == "concurrency" else d for d in DEFAULT_DIMS) + pools


def pareto_front(
    ds: xr.Dataset,
    x: str = DEFAULT_X,
    y: str = DEFAULT_Y,
    dims: Sequence[str] | None = None,
    maximize: tuple[bool, bool] | None = None,
) -> xr.DataArray:
    """Mark the Pareto-optimal points of every group of a sweep.

    Args:
        ds: a sweep Dataset (or any Dataset with the two variables).
        x, y: objective variable names (default interactivity tokens/s/user and throughput
            tokens/s/GPU, the AIConfigurator axes).
        dims: the dimensions the front is taken over (the configuration choices); the front
            is computed separately for each combination of the other dimensions. Default:
            ``tp`` and the load (``concurrency``, or ``request_rate`` under Poisson arrivals).
        maximize: per objective, True to maximise, False to minimise; None (default): a latency
            (``*_ms``), a task time or a cost (``*_usd``) minimised, any other maximised
            (`jaxpareto.definitions.schema.lower_is_better`).

    Returns:
        Boolean DataArray named ``pareto_front``, dimensioned like ``ds[x]``.

    Raises:
        JaxparetoError: unknown variable or dimension names.
    """
    if not isinstance(ds, xr.Dataset):
        raise JaxparetoError("ds", f"expected an xarray.Dataset (a sweep), got {type(ds).__name__}")
    dims = default_dims(ds.dims) if dims is None else dims
    if maximize is None:
        maximize = default_maximize(x, y)
    if not isinstance(maximize, (tuple, list)) or len(maximize) != 2 or \
            not all(isinstance(m, (bool, np.bool_)) for m in maximize):
        raise JaxparetoError("maximize", f"expected two booleans (x, y), got {maximize!r}")
    for field, name in (("x", x), ("y", y)):
        if name not in ds.data_vars:
            raise JaxparetoError(field, f"unknown variable {name!r}", sorted(map(str, ds.data_vars)))
        if name in NOT_OBJECTIVES or ds[name].dtype.kind == "b":
            raise JaxparetoError(field, f"{name!r} is a status flag, not a quantity to optimise",
                                 sorted(str(v) for v in ds.data_vars if v not in NOT_OBJECTIVES))
    dims = (dims,) if isinstance(dims, str) else tuple(dims)
    xa, ya = ds[x], ds[y]
    if set(xa.dims) != set(ya.dims):  # a session's per-turn output against a per-task one
        extra = sorted(set(xa.dims) ^ set(ya.dims))
        raise JaxparetoError("x/y", f"{x!r} and {y!r} do not share their dimensions ({', '.join(extra)} in one "
                                    "only): select it first, e.g. ds.sel(turn=...) for a per-turn output")
    for d in dims:
        if d not in xa.dims:
            raise JaxparetoError("dims", f"unknown dimension {d!r}", [str(n) for n in xa.dims])
    if len(set(dims)) != len(dims):
        raise JaxparetoError("dims", f"repeated dimension in {dims}")
    valid = _validity(ds, xa, ya)
    groups = [d for d in xa.dims if d not in dims]
    order = (*groups, *dims)
    xa, ya, valid = (a.transpose(*order) for a in (xa, ya, valid))
    n = int(np.prod([xa.sizes[d] for d in dims]))
    sign_x = 1.0 if maximize[0] else -1.0
    sign_y = 1.0 if maximize[1] else -1.0
    mask = front_mask(
        sign_x * np.asarray(xa.values, dtype=np.float64).reshape(-1, n),
        sign_y * np.asarray(ya.values, dtype=np.float64).reshape(-1, n),
        np.asarray(valid.values, dtype=bool).reshape(-1, n),
    )
    front = xr.DataArray(mask.reshape(xa.shape), dims=order, coords=xa.coords, name="pareto_front")
    front.attrs = {"long_name": f"Pareto front of ({x}, {y}) over {', '.join(dims)}", "units": "1"}
    return front.transpose(*ds[x].dims)


def frontier_table(
    ds: xr.Dataset,
    front: xr.DataArray | None = None,
    *,
    x: str = DEFAULT_X,
    y: str = DEFAULT_Y,
    dims: Sequence[str] | None = None,
    metrics: Sequence[str] = TABLE_METRICS,
    drop_ties: bool = False,
) -> pd.DataFrame:
    """The frontier's configurations with their metrics, one row per point on the front.

    Args:
        ds: a sweep Dataset (select a cell first, e.g. ``ds.sel(gpu="h100-sxm")``, to keep
            the table short).
        front: a mask from `pareto_front`; computed with ``x, y, dims`` when None.
        x, y, dims: as in `pareto_front`.
        metrics: further variables to include (those missing from ``ds``, or on other
            dimensions than the objectives', a session's per-turn outputs beside per-task
            objectives, are skipped).
        drop_ties: keep only the first (lowest along ``dims``) of each set of points with
            identical objectives in a group, e.g. concurrencies above what memory admits.

    Returns:
        DataFrame with one column per dimension, then x, y and the metrics; sorted by the
        group dimensions and then by x. ``decode_bound`` and ``infeasible_reason`` are given as
        their labels.
    """
    if front is None:
        front = pareto_front(ds, x=x, y=y, dims=dims)
    dims = default_dims(ds.dims) if dims is None else dims
    front = front.transpose(*ds[x].dims)
    hits = np.nonzero(np.asarray(front.values))
    table = {d: np.asarray(ds[d].values)[i] for d, i in zip(front.dims, hits)}
    for name in (x, y, *metrics):
        if name in ds.data_vars and name not in table and set(ds[name].dims) == set(front.dims):
            values = np.asarray(ds[name].transpose(*front.dims).values)[hits]
            if name in FLAG_VARIABLES:
                labels = FLAG_VARIABLES[name][1]
                values = np.array([labels.get(int(v), str(v)) for v in values], dtype=object)
            table[name] = values
    df = pd.DataFrame(table)
    groups = [d for d in front.dims if d not in dims]
    if drop_ties:
        df = df[~df.duplicated(subset=[*groups, x, y], keep="first")]
    return df.sort_values([*groups, x], kind="stable").reset_index(drop=True)

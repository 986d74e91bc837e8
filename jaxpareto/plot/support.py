"""Which plots a dataset supports, and why not.

The frontier and cache plots also draw from a reduced store (``jaxpareto sweep --reduce``, which
keeps only each cell's Pareto front over TP x concurrency, or TP x request rate in the open loop):
its stored fronts are the curves. The memory wall needs the full sweep.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from jaxpareto.dataset.pareto import DEFAULT_X, DEFAULT_Y
from jaxpareto.definitions.errors import JaxparetoError

PLOTS = ("frontier", "cache", "memory_wall")

_FULL_SWEEP = "`jaxpareto sweep SPEC --out FILE.zarr` (without --reduce) stores the full sweep"


def load_dim(ds: xr.Dataset) -> str:
    """The load axis a frontier spans: ``request_rate`` in the open loop (a reduced sweep: its
    fronts' ``front_request_rate``), else ``concurrency``."""
    return "request_rate" if "request_rate" in ds.dims or "front_request_rate" in ds.data_vars else "concurrency"


def reduced(ds: xr.Dataset) -> bool:
    """Whether ``ds`` is a reduced sweep (`jaxpareto.pareto_sweep`, ``jaxpareto sweep --reduce``)."""
    return ds.attrs.get("reduction") == "pareto"


def xvar(ds: xr.Dataset) -> str:
    """The variable holding the frontier's x values: the front's in a reduced sweep."""
    return f"front_{DEFAULT_X}" if reduced(ds) else DEFAULT_X


def _reduced_unsupported(ds: xr.Dataset, plot: str) -> str | None:
    """Why a reduced sweep's stored fronts cannot give ``plot``; None if they can."""
    what = "a reduced store (`jaxpareto sweep --reduce`) keeps only each cell's Pareto front"
    if plot == "memory_wall":
        return f"{what}, not concurrency_max; {_FULL_SWEEP}"
    x, y = ds.attrs.get("pareto_x"), ds.attrs.get("pareto_y")
    dims = [str(d) for d in np.atleast_1d(ds.attrs.get("pareto_dims", []))]
    maximize = [bool(m) for m in np.atleast_1d(ds.attrs.get("pareto_maximize", []))]
    load = load_dim(ds)
    if (x, y) != (DEFAULT_X, DEFAULT_Y) or sorted(dims) != sorted([load, "tp"]) or maximize != [True, True]:
        return (f"{what}, here of {y} against {x} over {' x '.join(dims) or '?'}; the plot needs the fronts of "
                f"{DEFAULT_Y} against {DEFAULT_X}, both maximised, over tp x {load}; {_FULL_SWEEP}")
    for name in ("front_size", "front_tp", f"front_{load}", f"front_{DEFAULT_X}", f"front_{DEFAULT_Y}"):
        if name not in ds.data_vars:
            return f"needs the variable {name} of a reduced store"
    return None


def _memory_wall_unsupported(ds: xr.Dataset) -> str | None:
    if "concurrency_max" not in ds.data_vars:
        return "needs the variable concurrency_max"
    dims = ds.concurrency_max.dims
    axis = "turn" if "turn" in dims else "context_tokens"
    if "tp" not in dims or axis not in dims:
        return "needs tp and context_tokens (or turn) dimensions"
    if ds.sizes[axis] < 2:
        return f"needs two or more {axis} values (the dataset has {ds.sizes[axis]})"
    return None


def _cache_unsupported(ds: xr.Dataset) -> str | None:
    z = np.asarray(ds.think_time_s.values, dtype=float)
    if "hit_rate" not in ds[xvar(ds)].dims:
        return "needs a 'hit_rate' dimension"
    h = np.asarray(ds.hit_rate.values, dtype=float)
    if not (np.any(z == 0) and np.any(z > 0)):
        return f"needs think_time_s = 0 (standard serving) and one > 0 (agent); the dataset has {z.tolist()}"
    if not (np.any(h == 0) and np.any(h > 0)):
        return f"needs hit_rate = 0 (no prefix cache) and one > 0 (with cache); the dataset has {h.tolist()}"
    return None


def unsupported(ds: xr.Dataset, plot: str) -> str | None:
    """Why ``plot`` cannot be drawn from ``ds``.

    Args:
        ds: a sweep, session sweep or reduced sweep.
        plot: "frontier", "cache" or "memory_wall".

    Returns:
        The reason in words, or None when ``ds`` supports the plot.

    Raises:
        JaxparetoError: an unknown ``plot``.
    """
    if plot not in PLOTS:
        raise JaxparetoError("plot", f"unknown plot {plot!r}", PLOTS)
    missing = [d for d in ("gpu", "model") if d not in ds.dims]
    if missing:
        return f"the dataset has no {missing[0]!r} dimension (not a jaxpareto sweep)"
    is_reduced = reduced(ds)
    if is_reduced and (reason := _reduced_unsupported(ds, plot)):
        return reason
    if plot == "memory_wall":
        return _memory_wall_unsupported(ds)
    for name in (DEFAULT_X, DEFAULT_Y):
        if not is_reduced and name not in ds.data_vars:
            return f"needs the variable {name}"
    for d in ("think_time_s",) if is_reduced else ("tp", load_dim(ds), "think_time_s"):
        if d not in ds[xvar(ds)].dims:
            return f"needs a {d!r} dimension"
    return _cache_unsupported(ds) if plot == "cache" else None


def require(ds: xr.Dataset, plot: str) -> None:
    """Raise unless ``ds`` is a dataset that supports ``plot``.

    Raises:
        JaxparetoError: ``ds`` is not an xarray Dataset, or `unsupported` gives a reason.
    """
    if not isinstance(ds, xr.Dataset):
        hint = "; jaxpareto.cache_comparison_sweep(gpu, model) computes one" if plot == "cache" else ""
        raise JaxparetoError("ds", f"expected an xarray.Dataset (a sweep), got {type(ds).__name__}{hint}")
    reason = unsupported(ds, plot)
    if reason:
        raise JaxparetoError("ds", f"cannot draw the {plot} plot: {reason}")

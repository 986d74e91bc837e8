"""`sweep`: the model over a grid, as an xarray Dataset (README, "The dataset" and "Python")."""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from jaxpareto.dataset.plan import SweepPlan, as_plan, plan_sweep
from jaxpareto.definitions.axes import AXIS_BY_NAME, coordinate_attrs
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.schema import FLAG_VARIABLES, OUTPUTS
from jaxpareto.physics.intensity import ridge_point


def sweep(*args, **kwargs) -> xr.Dataset:
    """Evaluate the agent-serving model over the grid of all axis combinations, in memory.

    Takes the arguments of `jaxpareto.dataset.plan.plan_sweep` (the axes, ``workload=``,
    ``efficiency=``, ``solver=``, ``options=`` or their fields as flat keywords, ``dtype``,
    ``variables``, ...), or a `SweepPlan` it made. The Dataset's dimensions are always the axes of the axis table
    (``gpu, model, engine, tp, concurrency, think_time_s, context_tokens, hit_rate``; ``request_rate``
    in place of ``concurrency`` with ``arrivals="poisson"``). For grids too
    large for memory use `jaxpareto.sweep_to_zarr`, which takes the same arguments.

    Returns:
        `xarray.Dataset` with the variables of `jaxpareto.definitions.schema.OUTPUTS` (each with
        ``units`` and ``long_name``) over the axes, and provenance attributes.

    Raises:
        JaxparetoError: any invalid input, naming the field and the allowed values; raised
            before anything is compiled.
    """
    return sweep_plan(as_plan(*args, **kwargs))


def sweep_plan(plan: SweepPlan) -> xr.Dataset:
    """`sweep` of an existing `SweepPlan` (nothing is validated again but whether its outputs
    fit in this machine's memory at all)."""
    check_fits_in_memory(plan)
    return with_ridge_points(build_dataset(plan.coords, plan.problem().run(), plan.attrs()), plan)


def check_fits_in_memory(plan: SweepPlan) -> None:
    """Refuse, before anything is compiled, an in-memory sweep whose outputs alone (4 or 8 bytes
    a point and variable) pass the machine's physical memory: it would run, then fail to allocate.

    Raises:
        JaxparetoError: naming the grid, its size and what to do instead.
    """
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): the allocation will tell
        return
    points = math.prod(plan.shape)
    need = points * len(plan.variables) * np.dtype(plan.dtype).itemsize
    if need > memory:
        raise JaxparetoError("grid", f"{points:,} points x {len(plan.variables)} variables need about "
                                     f"{need / 1e9:,.1f} GB in memory, more than this machine's {memory / 1e9:,.1f} GB: "
                                     "write the sweep to a store (jp.sweep_to_zarr; CLI: --out), or keep fewer "
                                     "variables or points")


sweep.__signature__ = inspect.signature(plan_sweep).replace(return_annotation=xr.Dataset)


def with_ridge_points(ds: xr.Dataset, plan: SweepPlan) -> xr.Dataset:
    """Add each (GPU, model)'s ridge point as a coordinate, to read against operational_intensity."""
    ridge = np.asarray([[ridge_point(g, m, plan.options.gemm_rate) for m in plan.models] for g in plan.gpus])
    # at the measured rate, the GPU's own share (the median over engines): an engine's kernels
    # move its operational intensity's ridge by their share (docs/model.md, "Measured matmul rate")
    rate = "peak" if plan.options.gemm_rate == "peak" else "measured matmul (the GPU's median over engines)"
    return ds.assign_coords(ridge_point=(("gpu", "model"), ridge, {
        "units": "FLOP/byte", "long_name": f"ridge point: {rate} FLOPS at the model's precision / bandwidth"}))


def build_dataset(coords: Mapping[str, Sequence], results: Mapping[str, np.ndarray], attrs: Mapping) -> xr.Dataset:
    """Assemble the Dataset of README, "The dataset" from axis values (in the grid's order) and
    full-grid arrays."""
    coord_vars = {}
    for name, values in coords.items():
        axis = AXIS_BY_NAME[name]
        values = np.asarray(values, dtype=str) if axis.categorical else np.asarray(values)
        coord_vars[name] = xr.Variable(name, values, coordinate_attrs(name))
    data_vars = {}
    for name, info in OUTPUTS.items():
        if name not in results:
            continue
        var_attrs = {"units": info.units, "long_name": info.long_name}
        if name in FLAG_VARIABLES:
            var_attrs.update(FLAG_VARIABLES[name][0])
        data_vars[name] = xr.Variable(tuple(coords), results[name], var_attrs)
    return xr.Dataset(data_vars, coords=coord_vars, attrs=dict(attrs))

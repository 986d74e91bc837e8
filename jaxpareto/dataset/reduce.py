"""Sweeps too large to store: keep only each cell's Pareto front and best configurations.

A cell is one combination of the axes outside the front's ``dims`` (by default one GPU, model,
think time, context and hit rate, with the front over TP x concurrency). Blocks are cut so that
each holds whole cells; each block is evaluated and reduced with the same sort-and-scan as
`jaxpareto.pareto_front`, and dropped, so memory is set by the block and the reduced output,
never by the grid. On an accelerator the reduction runs on the device that computed the block
(`reduce_block`), so that only each cell's front and best points travel to the host (the copy of
every output, not the model, would otherwise bound the rate); on a CPU, NumPy reduces it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.dataset.pareto import DEFAULT_X, DEFAULT_Y, default_dims, front_mask
from jaxpareto.definitions.axes import AXIS_BY_NAME, coordinate_attrs
from jaxpareto.definitions.schema import OUTPUTS, QUANTITIES, default_maximize
from jaxpareto.dataset.plan import as_plan
from jaxpareto.definitions.checks import check_number
from jaxpareto.mapper import block_shaped


def pareto_sweep(
    *args,
    x: str = DEFAULT_X,
    y: str = DEFAULT_Y,
    dims: Sequence[str] | None = None,
    maximize: tuple[bool, bool] | None = None,
    max_front_points: int = 64,
    **kwargs,
) -> xr.Dataset:
    """Run a sweep keeping, per cell, only its Pareto front and its best configurations.

    Takes every argument of `jaxpareto.sweep` (``variables`` excepted), or a `SweepPlan`
    (whose ``variables`` are ignored: the reduction computes what it needs), plus:

    Args:
        x, y: objectives (output names); ``maximize`` says which are maximised (None, the
            default: as `jaxpareto.pareto_front` takes them, latencies and costs minimised).
        dims: the configuration axes the front is taken over (default tp and the load:
            concurrency, or request_rate under Poisson arrivals).
        max_front_points: front points kept per cell, ordered from the worst x to the best
            (``front_size`` gives the full count, so a truncated front is visible).

    Returns:
        Dataset over the other axes plus ``front_point``: ``front_size``, ``front_<dim>``
        for every dim, ``front_<x>``, ``front_<y>`` (padded with -1 / NaN), and for each
        objective ``best_<objective>`` with ``best_<objective>_<dim>``: the valid point with
        the best value (first in grid order among ties).

    Raises:
        JaxparetoError: invalid inputs, named.
    """
    for field, name in (("x", x), ("y", y)):
        if name not in QUANTITIES:
            raise JaxparetoError(field, f"not a numeric output: {name!r}", QUANTITIES)
    if "variables" in kwargs:
        raise JaxparetoError("variables", "pareto_sweep computes exactly what the reduction needs")
    plan = as_plan(*args, **kwargs)
    axes = plan.dims
    dims = default_dims(axes) if dims is None else (dims,) if isinstance(dims, str) else tuple(dims)
    for d in dims:
        if d not in axes:
            raise JaxparetoError("dims", f"unknown dimension {d!r}", axes)
    if len(set(dims)) != len(dims) or not dims:
        raise JaxparetoError("dims", f"need one or more distinct axes, got {list(dims)}")
    if maximize is None:
        maximize = default_maximize(x, y)
    if len(tuple(maximize)) != 2:
        raise JaxparetoError("maximize", f"expected two booleans (x, y), got {maximize!r}")
    keep = check_number("max_front_points", max_front_points, low=1, integer=True)
    dim_axes = [axes.index(d) for d in dims]
    problem = plan.problem(outputs=sorted({x, y, "feasible", "converged"}), whole_axes=dim_axes)
    cell_axes = [a for a in range(len(axes)) if a not in dim_axes]
    cell_shape = tuple(problem.shape[a] for a in cell_axes)
    n = int(np.prod([problem.shape[a] for a in dim_axes]))
    float_dtype = np.dtype(plan.dtype)
    coordinate = {d: _coordinate(plan, d) for d in axes}

    out = {
        "front_size": np.zeros(cell_shape, np.int32),
        **{f"front_{d}": np.full((*cell_shape, keep), _fill(coordinate[d]), coordinate[d].dtype) for d in dims},
        f"front_{x}": np.full((*cell_shape, keep), np.nan, float_dtype),
        f"front_{y}": np.full((*cell_shape, keep), np.nan, float_dtype),
    }
    for name in dict.fromkeys((x, y)):
        out[f"best_{name}"] = np.full(cell_shape, np.nan, float_dtype)
        for d in dims:
            out[f"best_{name}_{d}"] = np.full(cell_shape, _fill(coordinate[d]), coordinate[d].dtype)
    dim_values = [coordinate[d] for d in dims]
    sign = {x: 1.0 if maximize[0] else -1.0, y: 1.0 if maximize[1] else -1.0}

    # coordinates of each point of a row along dims (row-major over the dims axes)
    dim_index = np.unravel_index(np.arange(n), [problem.shape[a] for a in dim_axes])
    signs = (sign[x], sign[y])
    if reduces_on_device():
        blocks = problem.iter_reduced(functools.partial(reduce_block, cell_axes=tuple(cell_axes),
                                                        dim_axes=tuple(dim_axes), x=x, y=y, signs=signs, keep=keep),
                                      cell_axes)
        blocks = ((cells, {k: v.reshape(-1, *v.shape[len(cells):]) for k, v in found.items()})
                  for cells, found in blocks)
    else:
        blocks = ((cells, reduce_rows(rows[x], rows[y], _valid(rows, x, y, np), signs=signs, keep=keep,
                                      on_device=False))
                  for cells, rows in problem.iter_cells(dim_axes))
    for cells, rows in blocks:
        rank, taken = rows["rank"], rows["taken"]
        block_cells = tuple(c.stop - c.start for c in cells)
        updates = {"front_size": rows["front_size"]}
        for d, idx, values in zip(dims, dim_index, dim_values):
            updates[f"front_{d}"] = np.where(taken, values[idx[rank]], _fill(values))
        updates[f"front_{x}"], updates[f"front_{y}"] = rows["front_x"], rows["front_y"]
        for name, key in ((x, "x"), (y, "y")):
            best, ok = rows[f"best_{key}_index"], rows[f"found_{key}"]
            updates[f"best_{name}"] = np.where(ok, rows[f"best_{key}"], np.nan)
            for d, idx, coord in zip(dims, dim_index, dim_values):
                updates[f"best_{name}_{d}"] = np.where(ok, coord[idx[best]], _fill(coord))
        for name, value in updates.items():
            width = out[name].shape[len(cell_shape):]
            padded = np.asarray(value)
            if width and padded.shape[1] < width[0]:  # fewer points than max_front_points
                fill = _fill(out[name])
                padded = np.concatenate([padded, np.full((padded.shape[0], width[0] - padded.shape[1]), fill,
                                                         out[name].dtype)], axis=1)
            out[name][cells] = padded.reshape(*block_cells, *width)

    cell_dims = [axes[a] for a in cell_axes]
    coords = {}
    for name in cell_dims:
        values = coordinate[name]
        coords[name] = xr.Variable(name, values, coordinate_attrs(name))
    data = {}
    for name, values in out.items():
        var_dims = (*cell_dims, "front_point") if values.ndim > len(cell_dims) else tuple(cell_dims)
        data[name] = xr.Variable(var_dims, values, _reduced_attrs(name, x, y, dims))
    attrs = {**plan.attrs(), "reduction": "pareto", "pareto_x": x, "pareto_y": y, "pareto_dims": list(dims),
             "pareto_maximize": [bool(m) for m in maximize], "max_front_points": keep}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def front_mask_rows(x: jax.Array, y: jax.Array, valid: jax.Array) -> jax.Array:
    """`jaxpareto.dataset.pareto.front_mask` on the device: the non-dominated points of each
    row of (groups, n) arrays, maximising both objectives, by the same sort and scan (so the
    same points, ties included)."""
    n = x.shape[-1]
    xs = jnp.where(valid, x, -jnp.inf)
    ys = jnp.where(valid, y, -jnp.inf)
    order = jnp.lexsort((-ys, -xs, ~valid), axis=-1)  # last key is primary: valid points first
    xs, ys, vs = (jnp.take_along_axis(a, order, axis=-1) for a in (xs, ys, valid))
    idx = jnp.broadcast_to(jnp.arange(n), xs.shape)
    run_start = jnp.concatenate([jnp.ones_like(vs[:, :1]), xs[:, 1:] != xs[:, :-1]], axis=-1)
    start = jax.lax.cummax(jnp.where(run_start, idx, 0), axis=1)
    before = jnp.take_along_axis(jax.lax.cummax(ys, axis=1), jnp.maximum(start - 1, 0), axis=-1)
    before = jnp.where(start > 0, before, -jnp.inf)
    on = vs & (ys > before) & (ys == jnp.take_along_axis(ys, start, axis=-1))
    rows = jnp.broadcast_to(jnp.arange(x.shape[0])[:, None], order.shape)
    return jnp.zeros_like(valid).at[rows, order].set(on)


def reduce_rows(xs, ys, valid, *, signs: tuple, keep: int, on_device: bool) -> dict:
    """Each row's (cell's) front and best points from (cells, n) arrays, with NumPy or, with
    ``on_device``, jax.numpy (the same sort and scan, so the same points).

    Returns ``front_size``, ``rank`` (the front points' indices within the row, from the worst
    x to the best, at most ``keep``), ``taken`` (rank holds a front point), ``front_x``,
    ``front_y`` (NaN beyond the front), and per objective k in (x, y) ``best_k_index``,
    ``best_k``, ``found_k`` (the valid point with the best value, first in grid order among
    ties)."""
    xp, front = (jnp, front_mask_rows) if on_device else (np, front_mask)
    on = front(signs[0] * xs, signs[1] * ys, valid)
    rank = xp.argsort(xp.where(on, signs[0] * xs, xp.inf), axis=1, stable=True)[:, :keep]
    taken = xp.take_along_axis(on, rank, axis=1)
    out = {"front_size": on.sum(axis=1).astype(np.int32), "rank": rank.astype(np.int32), "taken": taken,
           "front_x": xp.where(taken, xp.take_along_axis(xs, rank, axis=1), xp.nan),
           "front_y": xp.where(taken, xp.take_along_axis(ys, rank, axis=1), xp.nan)}
    for key, values, sign in (("x", xs, signs[0]), ("y", ys, signs[1])):
        best = xp.argmax(xp.where(valid, sign * values, -xp.inf), axis=1)
        out[f"best_{key}_index"] = best.astype(np.int32)
        out[f"best_{key}"] = xp.take_along_axis(values, best[:, None], axis=1)[:, 0]
        out[f"found_{key}"] = valid.any(axis=1)
    return out


def _valid(rows: dict, x: str, y: str, xp):
    return rows["feasible"] & rows["converged"] & xp.isfinite(rows[x]) & xp.isfinite(rows[y])


@functools.partial(jax.jit, static_argnames=("block", "cell_axes", "dim_axes", "x", "y", "signs", "keep"))
def reduce_block(outputs: dict, block: tuple[int, ...], *, cell_axes: tuple, dim_axes: tuple, x: str, y: str,
                 signs: tuple, keep: int) -> dict:
    """`reduce_rows` of one block's cells on the device that computed it: ``outputs`` as
    `jaxpareto.mapper.GridProblem.launch` returns them (flat, the block's points in C order, then
    any padding), ``block`` the block's shape; arrays of shape (the block's cell axes..., ...)."""
    cells = tuple(block[a] for a in cell_axes)
    n = int(np.prod([block[a] for a in dim_axes]))
    order = (*cell_axes, *dim_axes)
    rows = {name: jnp.transpose(block_shaped(outputs[name], block), order).reshape(-1, n)
            for name in {x, y, "feasible", "converged"}}
    out = reduce_rows(rows[x], rows[y], _valid(rows, x, y, jnp), signs=signs, keep=keep, on_device=True)
    return {name: value.reshape(*cells, *value.shape[1:]) for name, value in out.items()}


def reduces_on_device() -> bool:
    """Whether `pareto_sweep` reduces on the device: on an accelerator, where copying every
    output to the host would bound the sweep; not on a CPU, where the device is the host and
    NumPy's sort is 3x faster than XLA's (benchmarks/bench_sweep.py)."""
    return jax.default_backend() != "cpu"


def _coordinate(plan, axis: str) -> np.ndarray:
    """An axis' coordinate values in their dataset dtype (names as strings)."""
    return np.asarray(plan.coords[axis], dtype=str if AXIS_BY_NAME[axis].categorical else AXIS_BY_NAME[axis].dtype)


def _fill(values: np.ndarray):
    """Padding of a front coordinate beyond the front's points: -1, NaN or ""."""
    return -1 if values.dtype.kind == "i" else np.nan if values.dtype.kind == "f" else ""


def _reduced_attrs(name: str, x: str, y: str, dims: Sequence[str]) -> dict:
    if name == "front_size":
        return {"units": "1", "long_name": f"configurations on the Pareto front over {', '.join(dims)}"}
    for prefix, what in (("front_", "on the front, by increasing x"), ("best_", "of the best point for")):
        if name.startswith(prefix):
            rest = name[len(prefix):]
            for d in dims:
                if rest == d:
                    return {"units": coordinate_attrs(d)["units"], "long_name": f"{d} of the front points ({what})"}
                if rest.endswith(f"_{d}"):
                    objective = rest[: -len(d) - 1]
                    return {"units": coordinate_attrs(d)["units"], "long_name": f"{d} {what} {objective}"}
            info = OUTPUTS[rest]
            return {"units": info.units, "long_name": f"{info.long_name} ({'front' if prefix == 'front_' else 'best'})"}
    raise KeyError(name)

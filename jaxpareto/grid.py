"""The one place where the scalar model is batched: a block of the grid is expanded to its
points, `evaluate_point` is vmapped over them, and the block is jitted once per block shape.

The host loop cuts the grid into hyper-rectangular blocks of one fixed shape (edge blocks are
padded by repeating the last axis value and cropped afterwards), so a sweep compiles once and
every later sweep with the same block shape and dtype re-uses the compiled code.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxpareto.hardware import HardwareParams
from jaxpareto.model import ModelParams
from jaxpareto.point import PointOutputs, evaluate_point
from jaxpareto.settings import Efficiency, Solver, Workload

DEFAULT_CHUNK_POINTS = 1 << 17


def stack_params(rows: Sequence, dtype="float32"):
    """A table pytree (leading axis = rows) from `HardwareParams` or `ModelParams` rows."""
    cls = type(rows[0])
    return cls(**{f: np.asarray([getattr(r, f) for r in rows], dtype=dtype) for f in cls.__dataclass_fields__})


def shared_scalars(workload: Workload, efficiency: Efficiency, solver: Solver, dtype="float32"):
    """The shared scalars as 0-d arrays of the compute dtype (max_iter stays int32)."""
    as_float = functools.partial(np.asarray, dtype=np.dtype(dtype))
    return (
        jax.tree_util.tree_map(as_float, workload),
        jax.tree_util.tree_map(as_float, efficiency),
        Solver(as_float(solver.damping), as_float(solver.tol), np.asarray(solver.max_iter, np.int32)),
    )


_IN_AXES = (0, 0, 0, 0, 0, 0, 0, None, None, None)


@jax.jit
def evaluate_points(
    hw: HardwareParams,
    model: ModelParams,
    tp: jax.Array,
    concurrency: jax.Array,
    think_time_s: jax.Array,
    context_tokens: jax.Array,
    hit_rate: jax.Array,
    workload: Workload,
    efficiency: Efficiency,
    solver: Solver,
) -> PointOutputs:
    """Evaluate a list of unrelated points (the batched form of `evaluate_point`).

    Args:
        hw, model: per-point GPU and model fields, each of shape (n,).
        tp, concurrency, think_time_s, context_tokens, hit_rate: shape (n,).
        workload, efficiency, solver: shared scalars.

    Returns:
        `PointOutputs` with fields of shape (n,).
    """
    return jax.vmap(evaluate_point, in_axes=_IN_AXES)(
        hw, model, tp, concurrency, think_time_s, context_tokens, hit_rate, workload, efficiency, solver
    )


@jax.jit
def evaluate_block(
    hw_table: HardwareParams,
    model_table: ModelParams,
    tp: jax.Array,
    concurrency: jax.Array,
    think_time_s: jax.Array,
    context_tokens: jax.Array,
    hit_rate: jax.Array,
    workload: Workload,
    efficiency: Efficiency,
    solver: Solver,
) -> PointOutputs:
    """Evaluate the outer product of the given axis values.

    Args:
        hw_table: GPUs, fields of shape (n_gpu,).
        model_table: models, fields of shape (n_model,).
        tp, concurrency, think_time_s, context_tokens, hit_rate: 1-D axis values.
        workload, efficiency, solver: shared scalars (traced: new values do not recompile).

    Returns:
        `PointOutputs` whose fields have shape (n_gpu, n_model, n_tp, n_c, n_z, n_l, n_h).
    """
    n_gpu = hw_table.memory_gb.shape[0]
    n_model = model_table.params_total_b.shape[0]
    axes = (jnp.arange(n_gpu), jnp.arange(n_model), tp, concurrency, think_time_s, context_tokens, hit_rate)
    shape = tuple(a.shape[0] for a in axes)
    flat = [g.reshape(-1) for g in jnp.meshgrid(*axes, indexing="ij")]
    hw = jax.tree_util.tree_map(lambda a: a[flat[0]], hw_table)
    model = jax.tree_util.tree_map(lambda a: a[flat[1]], model_table)
    out = jax.vmap(evaluate_point, in_axes=_IN_AXES)(hw, model, *flat[2:], workload, efficiency, solver)
    return jax.tree_util.tree_map(lambda a: a.reshape(shape), out)


def chunk_shape(grid_shape: Sequence[int], max_points: int = DEFAULT_CHUNK_POINTS) -> tuple[int, ...]:
    """Block shape: whole trailing axes while they fit in ``max_points``, then a slab.

    Returns a shape of the same rank, every extent >= 1, with at most ``max_points`` points
    (the trailing axis is split when it alone is longer).
    """
    block = [1] * len(grid_shape)
    budget = max(1, int(max_points))
    for axis in reversed(range(len(grid_shape))):
        extent = grid_shape[axis]
        if extent <= budget:
            block[axis] = extent
            budget //= extent
        else:
            block[axis] = max(1, budget)
            break
    return tuple(block)


def _padded(values: np.ndarray, start: int, extent: int) -> np.ndarray:
    piece = values[start : start + extent]
    if piece.shape[0] < extent:  # edge block: repeat the last value, cropped afterwards
        piece = np.concatenate([piece, np.repeat(piece[-1:], extent - piece.shape[0], axis=0)])
    return piece


def run_grid(
    hardware: Sequence[HardwareParams],
    models: Sequence[ModelParams],
    axes: dict[str, np.ndarray],
    workload: Workload,
    efficiency: Efficiency,
    solver: Solver,
    *,
    dtype: str = "float32",
    chunk_points: int = DEFAULT_CHUNK_POINTS,
    on_block: Callable[[int], None] | None = None,
) -> dict[str, np.ndarray]:
    """Evaluate the full grid block by block into host arrays.

    Args:
        hardware: one `HardwareParams` per ``gpu`` coordinate.
        models: one `ModelParams` per ``model`` coordinate.
        axes: 1-D values of tp, concurrency, think_time_s, context_tokens, hit_rate.
        workload, efficiency, solver: shared scalars.
        dtype: "float32" (default) or "float64".
        chunk_points: target points per block.
        on_block: called with the number of points of each finished block (progress).

    Returns:
        Output name -> array of the full grid shape.
    """
    float_dtype = np.dtype(dtype)
    hw_table = stack_params(hardware, float_dtype)
    model_table = stack_params(models, float_dtype)
    names = ("tp", "concurrency", "think_time_s", "context_tokens", "hit_rate")
    values = [np.arange(len(hardware)), np.arange(len(models))] + [np.asarray(axes[n], dtype=float_dtype) for n in names]
    grid = tuple(v.shape[0] for v in values)
    block = chunk_shape(grid, chunk_points)
    scalars = shared_scalars(workload, efficiency, solver, float_dtype)
    results: dict[str, np.ndarray] = {}
    starts = itertools.product(*(range(0, n, b) for n, b in zip(grid, block)))

    def launch(origin):
        pieces = [_padded(v, o, b) for v, o, b in zip(values, origin, block)]
        hw = jax.tree_util.tree_map(lambda a: a[pieces[0]], hw_table)
        model = jax.tree_util.tree_map(lambda a: a[pieces[1]], model_table)
        return origin, evaluate_block(hw, model, *pieces[2:], *scalars)

    def collect(origin, out):
        region = tuple(slice(o, min(o + b, n)) for o, b, n in zip(origin, block, grid))
        crop = tuple(slice(0, s.stop - s.start) for s in region)
        for name, array in zip(PointOutputs._fields, out):
            host = np.asarray(array)
            if name not in results:
                results[name] = np.empty(grid, dtype=host.dtype)
            results[name][region] = host[crop]
        if on_block is not None:
            on_block(math.prod(s.stop - s.start for s in region))

    x64 = jax.enable_x64(float_dtype == np.float64)
    with x64:
        pending = None
        for origin in starts:
            launched = launch(origin)  # dispatch the next block before waiting on the last
            if pending is not None:
                collect(*pending)
            pending = launched
        if pending is not None:
            collect(*pending)
    return results

"""The one place where the scalar model is batched.

`evaluate_points` vmaps `evaluate_point` over a list of unrelated points; `evaluate_block`
expands a block of the grid (the outer product of its axis values) into points and evaluates
them the same way. Both are jitted: one compilation per block shape, dtype, method, output
selection and device count.

`iter_blocks` cuts a grid into hyper-rectangular blocks of one fixed shape (edge blocks are
padded by repeating the last axis value and cropped afterwards), dispatches each block before
collecting the previous one, and yields the host results block by block, so a sweep's memory is
set by the block size, never by the grid.

With several local devices (GPUs, or CPU devices forced with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``), each block's points are split evenly
over them with `jax.shard_map`; every point is computed by the same scalar code, so results do
not depend on the device count.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from jaxpareto.definitions.hardware import HardwareParams
from jaxpareto.definitions.model import ModelParams
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.physics.point import PointOutputs, evaluate_point
from jaxpareto.definitions.settings import Efficiency, Solver, Workload

DEFAULT_CHUNK_POINTS = 1 << 18  # points per block and zarr chunk (1 MB per float32 output)
SUB_BATCH = 1 << 15  # points vmapped at once inside a block: the solver's state stays in cache
_LANES = 64
NUMERIC_AXES = ("tp", "concurrency", "think_time_s", "context_tokens", "hit_rate")
OUTPUT_NAMES = PointOutputs._fields


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


def _evaluate_flat(hw, model, tp, concurrency, think_time_s, context_tokens, hit_rate, workload, efficiency,
                   solver, method, outputs, options=ModelOptions()):
    """The scalar model over flat per-point arrays, keeping only ``outputs``.

    Points are vmapped in sub-batches of `SUB_BATCH` run one after the other (`lax.map`), so
    the solver's working set stays in cache however large the block (and zarr chunk) is.
    """

    def point(args):
        out = evaluate_point(*args, workload, efficiency, solver, method=method, options=options)
        return {name: getattr(out, name) for name in outputs}

    args = (hw, model, tp, concurrency, think_time_s, context_tokens, hit_rate)
    return jax.lax.map(point, args, batch_size=min(SUB_BATCH, tp.shape[0]))


def _on_devices(fn, args: tuple, n_points: int) -> dict[str, jax.Array]:
    """Run ``fn`` on the flat per-point ``args`` (the first 7; the rest are shared scalars),
    split evenly over all local devices with `jax.shard_map` (one device included). The points
    are padded to whole vector lanes on every device by repeating the last one, and the padding
    is cut off."""
    devices = jax.devices()
    # Every device gets a multiple of _LANES points, so that every point runs through the
    # same vectorised loop body: a remainder loop may round differently (e.g. without FMA),
    # which would make results depend on the block size or the device count.
    pad = -n_points % (len(devices) * _LANES)
    per_point = [jax.tree_util.tree_map(lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], pad)]) if pad else a, arg)
                 for arg in args[:7]]
    mesh = Mesh(np.asarray(devices), ("points",))
    in_specs = (PartitionSpec("points"),) * 7 + (PartitionSpec(),) * (len(args) - 7)
    sharded = jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=PartitionSpec("points"), check_vma=False)
    out = sharded(*per_point, *args[7:])
    return {name: value[:n_points] for name, value in out.items()}


@functools.partial(jax.jit, static_argnames=("method", "outputs", "options"))
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
    method: str = "damped",
    outputs: tuple[str, ...] = OUTPUT_NAMES,
    options: ModelOptions = ModelOptions(),
) -> dict[str, jax.Array]:
    """Evaluate a list of unrelated points (the batched form of `evaluate_point`).

    Args:
        hw, model: per-point GPU and model fields, each of shape (n,).
        tp, concurrency, think_time_s, context_tokens, hit_rate: shape (n,).
        workload, efficiency, solver: shared scalars (traced: new values do not recompile).
        method: "damped" or "exact" closed-loop solver (static).
        outputs: names of `PointOutputs` fields to return (static).
        options: which equations (`jaxpareto.definitions.options.ModelOptions`, static).

    Returns:
        Output name -> array of shape (n,).
    """
    fn = functools.partial(_evaluate_flat, method=method, outputs=outputs, options=options)
    args = (hw, model, tp, concurrency, think_time_s, context_tokens, hit_rate, workload, efficiency, solver)
    return _on_devices(fn, args, tp.shape[0])


@functools.partial(jax.jit, static_argnames=("method", "outputs", "options"))
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
    method: str = "damped",
    outputs: tuple[str, ...] = OUTPUT_NAMES,
    options: ModelOptions = ModelOptions(),
) -> dict[str, jax.Array]:
    """Evaluate the outer product of the given axis values.

    Args:
        hw_table: GPUs, fields of shape (n_gpu,).
        model_table: models, fields of shape (n_model,).
        tp, concurrency, think_time_s, context_tokens, hit_rate: 1-D axis values.
        workload, efficiency, solver, method, outputs, options: as in `evaluate_points`.

    Returns:
        Output name -> array of shape (n_gpu, n_model, n_tp, n_c, n_z, n_l, n_h).
    """
    n_gpu = hw_table.memory_gb.shape[0]
    n_model = model_table.params_total_b.shape[0]
    axes = (jnp.arange(n_gpu), jnp.arange(n_model), tp, concurrency, think_time_s, context_tokens, hit_rate)
    shape = tuple(a.shape[0] for a in axes)
    flat = [g.reshape(-1) for g in jnp.meshgrid(*axes, indexing="ij")]
    hw = jax.tree_util.tree_map(lambda a: a[flat[0]], hw_table)
    model = jax.tree_util.tree_map(lambda a: a[flat[1]], model_table)
    fn = functools.partial(_evaluate_flat, method=method, outputs=outputs, options=options)
    out = _on_devices(fn, (hw, model, *flat[2:], workload, efficiency, solver), math.prod(shape))
    return {name: value.reshape(shape) for name, value in out.items()}


def chunk_shape(grid_shape: Sequence[int], max_points: int = DEFAULT_CHUNK_POINTS,
                whole: Sequence[int] = ()) -> tuple[int, ...]:
    """Block shape: the ``whole`` axes in full, then whole trailing axes while they fit in
    ``max_points``, then a slab of the next axis.

    Returns a shape of the same rank, every extent >= 1, with at most ``max_points`` points
    unless the ``whole`` axes alone hold more.
    """
    block = [1] * len(grid_shape)
    budget = max(1, int(max_points))
    for axis in whole:
        block[axis] = grid_shape[axis]
        budget = max(1, budget // grid_shape[axis])
    for axis in reversed(range(len(grid_shape))):
        if axis in whole:
            continue
        extent = grid_shape[axis]
        if extent <= budget:
            block[axis] = extent
            budget //= extent
        else:
            block[axis] = max(1, budget)
            break
    return tuple(block)


def block_origins(grid_shape: Sequence[int], block: Sequence[int]) -> list[tuple[int, ...]]:
    """Origins of the blocks covering the grid, in C order (the last axis fastest)."""
    return list(itertools.product(*(range(0, n, b) for n, b in zip(grid_shape, block))))


def block_region(origin: Sequence[int], block: Sequence[int], grid_shape: Sequence[int]) -> tuple[slice, ...]:
    """The part of the grid a block covers (edge blocks are cropped)."""
    return tuple(slice(o, min(o + b, n)) for o, b, n in zip(origin, block, grid_shape))


def _padded(values: np.ndarray, start: int, extent: int) -> np.ndarray:
    piece = values[start : start + extent]
    if piece.shape[0] < extent:  # edge block: repeat the last value, cropped afterwards
        piece = np.concatenate([piece, np.repeat(piece[-1:], extent - piece.shape[0], axis=0)])
    return piece


class GridProblem:
    """Everything a block needs, in the compute dtype: tables, axis values and scalars.

    Args:
        hardware: one `HardwareParams` per ``gpu`` coordinate.
        models: one `ModelParams` per ``model`` coordinate.
        axes: 1-D values of tp, concurrency, think_time_s, context_tokens, hit_rate.
        workload, efficiency, solver: shared scalars.
        dtype: "float32" (default) or "float64".
        method: "damped" or "exact".
        outputs: which outputs to compute and return (default all).
        options: `jaxpareto.definitions.options.ModelOptions`.
        chunk_points: target points per block.
        whole_axes: axes every block must hold in full (e.g. a Pareto front's dims).
    """

    def __init__(self, hardware, models, axes, workload, efficiency, solver, *, dtype="float32", method="damped",
                 outputs: Sequence[str] = OUTPUT_NAMES, chunk_points: int = DEFAULT_CHUNK_POINTS,
                 whole_axes: Sequence[int] = (), options: ModelOptions = ModelOptions()):
        self.dtype = np.dtype(dtype)
        self.method = method
        self.options = options
        self.outputs = tuple(outputs)
        self.hw_table = stack_params(hardware, self.dtype)
        self.model_table = stack_params(models, self.dtype)
        self.values = [np.arange(len(hardware)), np.arange(len(models))]
        self.values += [np.asarray(axes[name], dtype=self.dtype) for name in NUMERIC_AXES]
        self.shape = tuple(v.shape[0] for v in self.values)
        self.block = chunk_shape(self.shape, chunk_points, whole_axes)
        self.scalars = shared_scalars(workload, efficiency, solver, self.dtype)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def origins(self) -> list[tuple[int, ...]]:
        return block_origins(self.shape, self.block)

    def region(self, origin) -> tuple[slice, ...]:
        return block_region(origin, self.block, self.shape)

    def launch(self, origin) -> dict[str, jax.Array]:
        """Dispatch one block (asynchronously) and return its device arrays."""
        pieces = [_padded(v, o, b) for v, o, b in zip(self.values, origin, self.block)]
        hw = jax.tree_util.tree_map(lambda a: a[pieces[0]], self.hw_table)
        model = jax.tree_util.tree_map(lambda a: a[pieces[1]], self.model_table)
        return evaluate_block(hw, model, *pieces[2:], *self.scalars, method=self.method, outputs=self.outputs,
                              options=self.options)

    def crop(self, origin, out: dict[str, jax.Array]) -> dict[str, np.ndarray]:
        """Host copies of a block's results, cropped to the grid."""
        region = self.region(origin)
        keep = tuple(slice(0, s.stop - s.start) for s in region)
        return {name: np.asarray(value)[keep] for name, value in out.items()}

    def iter_blocks(self, origins: Sequence[tuple[int, ...]] | None = None
                    ) -> Iterator[tuple[tuple[slice, ...], dict[str, np.ndarray]]]:
        """Yield (region, host results) per block, dispatching each block before the last
        one is collected so that host work overlaps device work."""
        pending = None
        for origin in self.origins() if origins is None else origins:
            with jax.enable_x64(self.dtype == np.float64):  # never left on across a yield
                launched = (origin, self.launch(origin))
            if pending is not None:
                yield self.region(pending[0]), self.crop(*pending)
            pending = launched
        if pending is not None:
            yield self.region(pending[0]), self.crop(*pending)

    def iter_cells(self, dim_axes: Sequence[int]
                   ) -> Iterator[tuple[tuple[slice, ...], dict[str, np.ndarray]]]:
        """Yield, per block, the region of the cell axes it covers and its results as rows:
        one row per cell (a combination of the axes outside ``dim_axes``), one column per
        point of the cell (the ``dim_axes`` in row-major order). Blocks must hold whole cells
        (build the problem with ``whole_axes=dim_axes``)."""
        if any(self.block[a] != self.shape[a] for a in dim_axes):
            raise ValueError("blocks do not hold whole cells: build the problem with whole_axes")
        cell_axes = [a for a in range(len(self.shape)) if a not in dim_axes]
        order = [*cell_axes, *dim_axes]
        n = math.prod(self.shape[a] for a in dim_axes)
        for region, block in self.iter_blocks():
            rows = {name: np.transpose(values, order).reshape(-1, n) for name, values in block.items()}
            yield tuple(region[a] for a in cell_axes), rows

    def run(self) -> dict[str, np.ndarray]:
        """The whole grid in memory: output name -> array of the grid shape."""
        results: dict[str, np.ndarray] = {}
        for region, block in self.iter_blocks():
            for name, values in block.items():
                if name not in results:
                    results[name] = np.empty(self.shape, dtype=values.dtype)
                results[name][region] = values
        return results

"""The one place where the scalar model is batched.

`evaluate_points` vmaps `evaluate_point` over a list of unrelated points; `evaluate_block`
expands a block of the grid (the outer product of its axis values) into points and evaluates
them the same way, through `map_points`, the one batching of scalar code (the optimiser's
gradient search and the validation batch through it too; the hardware what-if keeps a plain
`jax.vmap` over its few scenarios, because the lane padding here changes the last bits of its
float64 answers, see `jaxpareto.search.whatif`). Both are jitted: one compilation per number of
points (a block's are rounded up to whole sub-batches and its axis tables to powers of two, so
blocks of many shapes share one), dtype, solver, output selection (a small block's tier of
outputs, `shared_outputs`, so that small sweeps asking for different variables share one too)
and device count. The block's dimensions are the axis table's (`jaxpareto.definitions.axes`):
a new axis needs no change here.

A large block evaluated without an iterative solver (``solver="exact"``) is evaluated factored
instead (`evaluate_factored`): one `jax.vmap` per axis, so that what depends on a few axes only (a
TP group's costs, a turn's tokens) is computed once per combination of those axes, not once per
point. The scalar code is the same; only the order of batching differs, which changes results by
float rounding at most.

`iter_blocks` cuts a grid into hyper-rectangular blocks of one fixed shape (edge blocks are
padded by repeating the last axis value and cropped afterwards), dispatches each block before
collecting the previous one, and yields the host results block by block, so a sweep's memory is
set by the block size, never by the grid.

With several local devices (GPUs, or CPU devices forced with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``), each block's points are split evenly
over them with `jax.shard_map`, and factored blocks go to the devices in turn (block k to device
k mod N); either way every point is computed by the same program, so results do not depend on
the device count.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
from collections.abc import Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.axes import AXIS_TABLE, Axis, GridPoint
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.program_memory import release_programs_near_map_limit
from jaxpareto.definitions.settings import DEFAULT_CHUNK_POINTS, Efficiency, Solver, Workload
from jaxpareto.definitions.schema import PERCENTILE_VARIABLES
from jaxpareto.physics.point import PointOutputs, evaluate_point

# points vmapped at once (a sub-batch): a vmapped while-loop runs as long as its slowest point, so
# narrow sub-batches confine a slow point's cost (the damped iteration's long climbs, a joint
# solve's tail), while wide ones amortise the loop's overhead. The width depends on the number of
# points only, never on the device count, and every device's share is padded to whole
# sub-batches: every point then runs through one vectorised loop body of one width, so results
# are bit-identical on one device and on many (a remainder of another width may round
# differently, e.g. without FMA).
SUB_BATCH = 1 << 10
_LANES = 64
# blocks of at least this many points are evaluated factored (`evaluate_factored`; for an
# iterative solver only where `GridProblem` says); smaller ones (tests, small sweeps) keep the
# flat program, which blocks of many shapes share
FACTORED_MIN_POINTS = 1 << 15
OUTPUT_NAMES = PointOutputs._fields
# a grid of at most this many points computes a whole tier of outputs (`shared_outputs`) and
# returns those asked for: small sweeps asking for different variables then share one compiled
# program (an open-loop program compiles for 15-25 s; the extra outputs of so few points cost
# microseconds), where larger grids, in blocks of any size, compute only what they keep (the work
# they skip is theirs: a 262,144-point sweep in blocks of 4,096 ran 3.5x slower with the tier)
SHARED_OUTPUTS_MAX_POINTS = 4 * SUB_BATCH


def shared_outputs(outputs: tuple[str, ...]) -> tuple[str, ...]:
    """The tier of `PointOutputs` a small grid computes for ``outputs``: every output but the
    percentiles where none is asked for (their code is left out, as `_kept` leaves it), else every
    output. Measured on an open-loop sweep with an empty compilation cache: one mean 18.2 s, every
    mean 17.3 s; one percentile 18.7 s, every output 26.0 s (a sweep asking for one percentile
    compiles 40 % longer the first time, and not at all for another selection of its tier)."""
    if {*PERCENTILE_VARIABLES} & {*outputs}:
        return OUTPUT_NAMES
    return tuple(name for name in OUTPUT_NAMES if name not in PERCENTILE_VARIABLES)


def stack_params(rows: Sequence, dtype="float32"):
    """A table pytree (leading axis = rows) from parameter rows of one kind (`HardwareParams`,
    `ModelParams`, `EngineParams`: any pytree of scalars). A field some rows leave None (an
    optional term they do not have, e.g. an engine's ``scheduler_delay_steps``) and others set is
    0 in the former; None in every row, it stays None (no term)."""
    if rows and dataclasses.is_dataclass(rows[0]):
        mixed = {f.name for f in dataclasses.fields(rows[0])
                 if len({getattr(r, f.name) is None for r in rows}) > 1}
        rows = [dataclasses.replace(r, **{name: 0.0 for name in mixed if getattr(r, name) is None}) for r in rows]
    return jax.tree_util.tree_map(lambda *leaves: np.asarray(leaves, dtype=dtype), *rows)


def shared_scalars(workload: Workload, efficiency: Efficiency, solver: Solver, dtype="float32"):
    """The shared scalars as 0-d arrays of the compute dtype (max_iter stays int32). A host tier
    of 0 GB goes in as None: the program leaves the tier out (`jaxpareto.physics.point.TurnLatency`
    ``tier_slots``), which under lognormal pauses is an inner root of R(B) the fewer (the same
    numbers: an empty tier adds no hits)."""
    as_float = functools.partial(np.asarray, dtype=np.dtype(dtype))
    if workload.tier_capacity_gb is not None and not np.any(np.asarray(workload.tier_capacity_gb)):
        workload = dataclasses.replace(workload, tier_capacity_gb=None)
    return (
        jax.tree_util.tree_map(as_float, workload),
        jax.tree_util.tree_map(as_float, efficiency),
        dataclasses.replace(solver, damping=as_float(solver.damping), tol=as_float(solver.tol),
                            max_iter=np.asarray(solver.max_iter, np.int32)),
    )


def sub_batch_width(n_points: int) -> int:
    """Points vmapped at once for a batch of ``n_points`` (whatever the device count):
    `SUB_BATCH`, or the batch rounded up to whole vector lanes when smaller."""
    return min(SUB_BATCH, -(-max(n_points, 1) // _LANES) * _LANES)


def map_points(fn, per_point, shared: tuple = (), n_points: int | None = None, min_sub_batches: int = 1):
    """The one batching of scalar code: ``fn(point, *shared)`` over the leading axis of ``per_point``.

    Call it inside a jitted function. Points are split evenly over all local devices with
    `jax.shard_map` (one device included), padded to whole sub-batches on every device by
    repeating the last point (the padding is cut off), and vmapped in sub-batches of
    `sub_batch_width` points run one after the other (`lax.map`), so the working set stays in
    cache however many points there are.

    Args:
        fn: scalar function of one point and the shared arguments, returning a pytree.
        per_point: pytree whose leaves all have the leading point axis (e.g. a `GridPoint`).
        shared: arguments every point receives whole (scalars, tables).
        n_points: the number of points (default: the leading extent of the first leaf).
        min_sub_batches: sub-batches every device runs at least (padding added). Two keep the
            loop a loop on any device count: XLA inlines a loop of one trip, and the inlined
            body may fuse, so round (a multiply-add contracted or not), differently.

    Returns:
        ``fn``'s pytree with a leading axis of ``n_points``.
    """
    n_points = jax.tree_util.tree_leaves(per_point)[0].shape[0] if n_points is None else n_points
    devices = jax.devices()
    width = sub_batch_width(n_points)
    pad = -n_points % (len(devices) * width)  # whole sub-batches on every device
    pad += max(0, min_sub_batches * len(devices) * width - n_points - pad)
    padded = jax.tree_util.tree_map(
        lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], pad, axis=0)]) if pad else a, per_point)

    def local(points, *args):
        return jax.lax.map(lambda p: fn(p, *args), points, batch_size=width)

    mesh = Mesh(np.asarray(devices), ("points",))
    in_specs = (PartitionSpec("points"),) + (PartitionSpec(),) * len(shared)
    sharded = jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=PartitionSpec("points"), check_vma=False)
    return jax.tree_util.tree_map(lambda v: v[:n_points], sharded(padded, *shared))


@functools.lru_cache(maxsize=None)
def _kept(point_fn, outputs: tuple[str, ...], options: ModelOptions):
    """``point_fn`` keeping only ``outputs`` as a dict (one object per arguments: jit keys on it)."""

    # the percentiles' code only where an output needs it (the model's own point function)
    extra = {"percentiles": bool({*PERCENTILE_VARIABLES} & {*outputs})} \
        if point_fn is evaluate_point else {}

    def point(p: GridPoint, workload, efficiency, solver):
        out = point_fn(p, workload, efficiency, solver, options=options, **extra)
        return {name: getattr(out, name) for name in outputs}

    return point


@functools.partial(jax.jit, static_argnames=("outputs", "options", "point_fn"))
def evaluate_points(
    points: GridPoint,
    workload: Workload,
    efficiency: Efficiency,
    solver: Solver,
    outputs: tuple[str, ...] = OUTPUT_NAMES,
    options: ModelOptions = ModelOptions(),
    point_fn=evaluate_point,
) -> dict[str, jax.Array]:
    """Evaluate a list of unrelated points (the batched form of `evaluate_point`).

    Args:
        points: a `GridPoint` whose every leaf has shape (n,) (``gpu`` and ``model`` hold
            per-point parameter pytrees).
        workload, efficiency, solver: shared scalars (traced: new values do not recompile;
            ``solver.name`` is static).
        outputs: names of `PointOutputs` fields to return (static).
        options: which equations (`jaxpareto.definitions.options.ModelOptions`, static).
        point_fn: the scalar model (static; default `evaluate_point`).

    Returns:
        Output name -> array of shape (n,).
    """
    return map_points(_kept(point_fn, outputs, options), points, (workload, efficiency, solver))


def block_points(n_points: int) -> int:
    """The points `evaluate_block` evaluates for a block of ``n_points``: whole sub-batches
    (`SUB_BATCH`), so that blocks of any shape with as many sub-batches share one compiled
    program (a compilation costs seconds, a padded sub-batch of the seed's model well under one
    millisecond)."""
    return -(-max(int(n_points), 1) // SUB_BATCH) * SUB_BATCH


def block_shaped(value, block: Sequence[int]):
    """A launched block's flat output (device, traced or host array) in the block's shape."""
    return value[: math.prod(block)].reshape(tuple(block))


def _table_rows(n_rows: int) -> int:
    """Rows a block's axis tables are padded to: a power of two, at least 8 (few shapes)."""
    return max(8, 1 << max(int(n_rows) - 1, 0).bit_length())


def block_inputs(table: tuple[Axis, ...], tables: dict[str, object], values: dict[str, np.ndarray]
                 ) -> tuple[dict[str, object], np.ndarray, np.ndarray]:
    """`evaluate_block`'s inputs for the outer product of a block's axis values.

    Args:
        table: the axis table: the block's dimensions, in order.
        tables: categorical axis -> the block's definitions' parameters stacked (e.g. ``"gpu"``: a
            `HardwareParams` with fields of shape (n_gpu,)).
        values: numeric axis -> 1-D values.

    Returns:
        (tables with rows padded to `_table_rows` by repeating the last row, the numeric axes'
        values as one (n_numeric, width) array padded likewise, the block's extents as int32
        (n_axes,)). Only the padded sizes reach the compiled program's shapes.
    """
    extents = [jax.tree_util.tree_leaves(tables[a.name])[0].shape[0] if a.categorical else len(values[a.name])
               for a in table]
    padded = {a.name: jax.tree_util.tree_map(lambda rows, n=n: _padded(rows, 0, _table_rows(n)), tables[a.name])
              for a, n in zip(table, extents) if a.categorical}
    numeric = [np.asarray(values[a.name]) for a in table if not a.categorical]
    width = _table_rows(max((len(v) for v in numeric), default=1))
    dtype = numeric[0].dtype if numeric else np.float32
    stacked = np.stack([_padded(v, 0, width) for v in numeric]) if numeric else np.zeros((0, width), dtype)
    return padded, stacked, np.asarray(extents, np.int32)


@functools.partial(jax.jit, static_argnames=("n_points", "outputs", "options", "point_fn", "table"))
def evaluate_block(tables: dict[str, object], values: jax.Array, extents: jax.Array, scalars: tuple, *,
                   n_points: int, outputs: tuple[str, ...], options: ModelOptions, point_fn,
                   table: tuple[Axis, ...]) -> dict[str, jax.Array]:
    """Evaluate the outer product of a block's axis values (inputs from `block_inputs`).

    Point i of the block is its C-order (row-major) index over ``extents``, so the compiled
    program depends on the padded sizes only, not on the block's shape (tests and small sweeps of
    many shapes share one compilation).

    Args:
        tables: categorical axis -> parameters stacked with rows padded (`block_inputs`).
        values: (n_numeric, width) numeric axis values in the table's order, padded.
        extents: (n_axes,) int32: the block's extent along each axis (traced).
        scalars: (workload, efficiency, solver), as in `evaluate_points`.
        n_points: points evaluated (static), a multiple of `SUB_BATCH` at least the block's
            size (`block_points`); the points beyond the block repeat its last one and are to be
            cut off.
        outputs, options, point_fn: as in `evaluate_points`.
        table: the axis table (static): the block's dimensions, in order.

    Returns:
        Output name -> array of shape (n_points,): the block's points in C order, then padding.
    """
    # the points beyond the block repeat its last point, as `map_points` pads
    i = jnp.minimum(jnp.arange(n_points, dtype=jnp.int32), jnp.prod(extents) - 1)
    point, numeric = {}, values.shape[0]
    for k in reversed(range(len(table))):  # C order: the last axis fastest
        axis, index = table[k], i % extents[k]
        i = i // extents[k]
        if axis.categorical:
            point[axis.name] = jax.tree_util.tree_map(lambda a: a[index], tables[axis.name])
        else:
            numeric -= 1
            point[axis.name] = values[numeric][index]
    return map_points(_kept(point_fn, outputs, options), GridPoint(**point), scalars, n_points, min_sub_batches=2)


@functools.partial(jax.jit, static_argnames=("outputs", "options", "point_fn", "table"))
def evaluate_factored(tables: dict[str, object], values: dict[str, jax.Array], scalars: tuple, *,
                      outputs: tuple[str, ...], options: ModelOptions, point_fn,
                      table: tuple[Axis, ...]) -> dict[str, jax.Array]:
    """Evaluate the outer product of a block's axis values by one `jax.vmap` per axis.

    A vmap batches only the values that depend on its axis, so a quantity of a few axes is
    computed over those axes' values only and broadcast afterwards: the seed's costs of a TP
    group (gpu, model, engine, tp) and of a turn (context, hit rate) once per combination, not
    once per point of concurrency and think time. An axis of one value in the block is not
    vmapped at all, so what depends only on such axes (a block's one GPU, model and TP) stays a
    scalar. On the benchmark grid (`benchmarks/bench_sweep.py`) the exact solver's program does
    2.5x fewer operations a point than `evaluate_block`'s and runs 4-6x faster.

    An iterative solver's loop, vmapped axis by axis, would run the whole block as long as its
    slowest point. Its batching rule (`jaxpareto.physics.chunked`) folds the axes into one flat
    batch and steps that in chunks of `LOOP_CHUNK` points instead (or, where R(B) holds inner
    roots, through refilled lanes), while what comes before and after the loop stays factored:
    the seed's damped solver runs about 5x faster than flat on the benchmark grid. The program
    depends on the block's shape, so it is used for large blocks only (`FACTORED_MIN_POINTS`).

    Args:
        tables: categorical axis -> the block's parameters stacked (rows = the block's extent).
        values: numeric axis -> the block's 1-D values.
        scalars: (workload, efficiency, solver), as in `evaluate_points`.
        outputs, options, point_fn, table: as in `evaluate_block`.

    Returns:
        Output name -> array of shape (block size,): the block's points in C order.
    """
    fn = _kept(point_fn, outputs, options)

    def point(*coordinates):
        return fn(GridPoint(**{axis.name: c for axis, c in zip(table, coordinates)}), *scalars)

    inputs = [tables[a.name] if a.categorical else values[a.name] for a in table]
    extents = [jax.tree_util.tree_leaves(x)[0].shape[0] for x in inputs]
    batched = point
    for k in reversed(range(len(table))):  # the last axis innermost: C order
        if extents[k] > 1:  # an axis of one value is not batched: what depends on it alone stays a scalar
            batched = jax.vmap(batched, in_axes=tuple(0 if i == k else None for i in range(len(table))))
    out = batched(*(x if n > 1 else jax.tree_util.tree_map(lambda a: a[0], x) for x, n in zip(inputs, extents)))
    return {name: value.reshape(-1) for name, value in out.items()}


#: Blocks beyond which a grid must not be cut into blocks of less than a sub-batch each: every
#: block is a launch of its own and, in a store, a chunk file per variable
MAX_SMALL_BLOCKS = 256


def check_block_count(grid_shape: Sequence[int], block: Sequence[int], chunk_points: int) -> None:
    """Refuse blocks of less than a sub-batch that cut a grid into more than `MAX_SMALL_BLOCKS`
    (a ``chunk_points`` of 7 makes 30,000 launches and 800,000 chunk files of a 210,000-point
    sweep, which then runs minutes instead of seconds).

    Raises:
        JaxparetoError: naming ``chunk_points`` and the least value allowed.
    """
    count = math.prod(-(-extent // size) for extent, size in zip(grid_shape, block))
    if chunk_points < SUB_BATCH and count > MAX_SMALL_BLOCKS:
        raise JaxparetoError("chunk_points", f"{chunk_points:,} points a block cut this grid of "
                                             f"{math.prod(grid_shape):,} points into {count:,} blocks, each a launch "
                                             f"of its own and a chunk file per variable in a store: give at least "
                                             f"{SUB_BATCH:,} (one sub-batch; default {DEFAULT_CHUNK_POINTS:,})")


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
        definitions: categorical axis -> the parameters of each of its values
            (`HardwareParams` per ``gpu`` coordinate, `ModelParams` per ``model`` coordinate).
        axes: numeric axis -> 1-D values.
        workload, efficiency, solver: shared scalars (``solver.name`` picks the solver).
        dtype: "float32" (default) or "float64".
        outputs: which outputs to compute and return (default all).
        options: `jaxpareto.definitions.options.ModelOptions`.
        chunk_points: target points per block.
        whole_axes: axes every block must hold in full (e.g. a Pareto front's dims).
        table: the axis table (default the model's; a test may add a toy axis).
        point_fn: the scalar model (default `evaluate_point`).
        factored: evaluate blocks with `evaluate_factored` (True), with `evaluate_block`
            (False), or the first for blocks of at least `FACTORED_MIN_POINTS` under the exact
            solver, or under an iterative one in the closed, aggregated loop (None, the default:
            elsewhere the loop is nearly all of the cost, and factored blocks measured 1.2-2.4x
            slower than flat).
    """

    def __init__(self, definitions, axes, workload, efficiency, solver, *, dtype="float32",
                 outputs: Sequence[str] = OUTPUT_NAMES, chunk_points: int = DEFAULT_CHUNK_POINTS,
                 whole_axes: Sequence[int] = (), options: ModelOptions = ModelOptions(),
                 table: tuple[Axis, ...] = AXIS_TABLE, point_fn=evaluate_point, factored: bool | None = None):
        self.dtype = np.dtype(dtype)
        self.options = options
        self.outputs = tuple(outputs)
        self.table = tuple(table)
        self.point_fn = point_fn
        self.tables = {a.name: stack_params(definitions[a.name], self.dtype) for a in self.table if a.categorical}
        self.values = [np.arange(len(definitions[a.name])) if a.categorical else np.asarray(axes[a.name], self.dtype)
                       for a in self.table]
        self.shape = tuple(v.shape[0] for v in self.values)
        self.block = chunk_shape(self.shape, chunk_points, whole_axes)
        check_block_count(self.shape, self.block, chunk_points)
        # what a flat block computes: a small grid's tier of outputs (`shared_outputs`), else its own
        small = math.prod(self.shape) <= SHARED_OUTPUTS_MAX_POINTS and point_fn is evaluate_point
        self.computed_outputs = shared_outputs(self.outputs) if small else self.outputs
        self.scalars = shared_scalars(workload, efficiency, solver, self.dtype)
        if factored is None:
            # an iterative solver only in the closed, aggregated loop: elsewhere (the open loop's
            # heavy-tailed iterations, disaggregated serving) the loop is most of the cost and
            # factored blocks measured 1.2-2.4x slower than flat. Where R(B) holds inner roots the
            # factored block's one flat batch runs through refilled lanes
            # (`jaxpareto.physics.chunked.LANES`): 1.1-3x faster than flat on the models
            # benchmark grid, for a first compilation up to twice as long
            loop_ok = not options.open_loop and options.serving == "aggregated"
            factored = math.prod(self.block) >= FACTORED_MIN_POINTS and (solver.name == "exact" or loop_ok)
        self.factored = bool(factored)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def origins(self) -> list[tuple[int, ...]]:
        return block_origins(self.shape, self.block)

    def region(self, origin) -> tuple[slice, ...]:
        return block_region(origin, self.block, self.shape)

    def launch(self, origin) -> dict[str, jax.Array]:
        """Dispatch one block (asynchronously) and return its device arrays, flat: shape
        (`block_points` of the block's size,), the block's points in C order then padding, or
        (the block's size,) when factored (`block_shaped` gives the block's shape)."""
        tables, values = {}, {}
        for axis, v, o, b in zip(self.table, self.values, origin, self.block):
            piece = _padded(v, o, b)
            if axis.categorical:
                tables[axis.name] = jax.tree_util.tree_map(lambda a: a[piece], self.tables[axis.name])
            else:
                values[axis.name] = piece
        if self.factored:  # whole blocks to the devices in turn: one program whatever their number
            devices = jax.devices()
            index = np.ravel_multi_index(tuple(o // b for o, b in zip(origin, self.block)),
                                         tuple(-(-n // b) for n, b in zip(self.shape, self.block)))
            # one device: the jitted call moves the inputs (a per-leaf device_put cost 40 ms a sweep)
            if len(devices) > 1:
                tables, values = jax.device_put((tables, values), devices[index % len(devices)])
            return evaluate_factored(tables, values, self.scalars, outputs=self.outputs, options=self.options,
                                     point_fn=self.point_fn, table=self.table)
        tables, values, extents = block_inputs(self.table, tables, values)
        out = evaluate_block(tables, values, extents, self.scalars, n_points=block_points(math.prod(self.block)),
                             outputs=self.computed_outputs, options=self.options, point_fn=self.point_fn,
                             table=self.table)
        return {name: out[name] for name in self.outputs}

    def crop(self, origin, out: dict[str, jax.Array]) -> dict[str, np.ndarray]:
        """Host copies of a block's results, cropped to the grid."""
        region = self.region(origin)
        keep = tuple(slice(0, s.stop - s.start) for s in region)
        return {name: block_shaped(np.asarray(value), self.block)[keep] for name, value in out.items()}

    def iter_blocks(self, origins: Sequence[tuple[int, ...]] | None = None
                    ) -> Iterator[tuple[tuple[slice, ...], dict[str, np.ndarray]]]:
        """Yield (region, host results) per block, dispatching each block before the last
        one is collected so that host work overlaps device work."""
        return self._pipelined(self.origins() if origins is None else origins, self.launch,
                               lambda origin, out: (self.region(origin), self.crop(origin, out)))

    def _pipelined(self, origins, launch, collect) -> Iterator:
        """``collect(origin, launch(origin))`` per block, each block launched before the last
        one is collected (JAX dispatches asynchronously, so the device runs ahead of the host);
        factored blocks, which go to the devices in turn, one more per device."""
        ahead = len(jax.devices()) if self.factored else 1
        release_programs_near_map_limit()  # a long-lived process's programs, before it aborts
        pending: collections.deque = collections.deque()
        for origin in origins:
            with jax.enable_x64(self.dtype == np.float64):  # never left on across a yield
                pending.append((origin, launch(origin)))
            if len(pending) > ahead:
                yield collect(*pending.popleft())
        while pending:
            yield collect(*pending.popleft())

    def iter_reduced(self, reduce, cell_axes: Sequence[int]
                     ) -> Iterator[tuple[tuple[slice, ...], dict[str, np.ndarray]]]:
        """Yield, per block, the region of the ``cell_axes`` it covers and ``reduce`` of its
        device results, copied to the host and cropped to the grid. ``reduce(outputs, block)``
        maps a block's flat outputs (as `launch` returns them) and the block's shape to arrays
        whose leading axes are the block's ``cell_axes`` (the other axes held whole: build the
        problem with ``whole_axes``); it runs on the device, so only its result is copied. Each
        block is dispatched before the last one is collected."""

        def collect(origin, out):
            cells = tuple(self.region(origin)[a] for a in cell_axes)
            keep = tuple(slice(0, s.stop - s.start) for s in cells)
            return cells, {name: np.asarray(value)[keep] for name, value in out.items()}

        return self._pipelined(self.origins(), lambda origin: reduce(self.launch(origin), self.block), collect)

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

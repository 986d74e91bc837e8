"""Iterative solves batched in cache-sized chunks, however the caller batches them.

A `jax.vmap` of a while loop steps every point of its batch until the slowest one has finished,
carrying the whole batch's state through every step. Under the flat evaluation
(`jaxpareto.mapper.evaluate_block`: one vmap over a sub-batch of points) that batch is a
cache-sized sub-batch. Under the factored one (`jaxpareto.mapper.evaluate_factored`: one vmap
per grid axis) it would be the whole block: hundreds of thousands of points, out of cache,
stepped as long as the slowest of them.

`chunked` gives a scalar solve a batching rule (`jax.custom_batching.custom_vmap`) that keeps
its loop in chunks of `LOOP_CHUNK` points under any nesting of vmaps. Each vmap folds its axis
into one flat batch of the solve's inputs, broadcasting an input batched before but not along
this axis (and the reverse), while an input no vmap batches stays unbatched. The flat batch runs
as `jax.lax.map` over chunks, each a vmap of the scalar solve with the same batched and
unbatched inputs as a plain vmap would have: under one vmap of at most `LOOP_CHUNK` points the
program is a plain vmap's. What the loop needs is computed before it, and what follows from its
result after it, batched as the caller batches them (factored: once per combination of the axes
each depends on).

A solve given as a `Loop` (its parts: start, keep-going test, step, finish) runs as its own
masked loop over a chunk: every step updates the points still going, whose mask is carried and
narrowed by the test once a step. `jax.vmap` of a while loop evaluates the test twice a step (in
the loop's condition and again in its body, to select), and ran the seed's damped solve on the
named benchmark grid in 115-126 ms against 89-93 ms so.

A `Loop` whose steps are costly can instead run through refilled lanes (``lanes``): a batch
wider than `LANES` is not cut into chunks but stepped `LANES` points at a time, a lane whose
point stops taking the next point waiting (stream compaction with refill, as a GPU's persistent
threads take work from a queue), its last lanes narrowed once no point waits. The batch then
costs its points' own steps, not its slowest point's steps times its width: the factored
evaluation of a grid whose R(B) holds inner roots (the shared engine, the LRU time of lognormal
pauses), whose whole block is one flat batch, ran 1.1-3x faster on the models benchmark grid
than flat sub-batches, narrowed or not (the joint solves 1.6-3x, the damped ones 1.1-2.5x).

A `Loop` may also narrow its batch (``narrowings``): all points are stepped until at most 1 in
`NARROWING` are still going, then those are gathered into a batch that much narrower and stepped
alone (stream compaction), its fill neither stepped nor written back. A batch then costs about
its points' own steps, not its slowest point's steps times its width, at the price of compiling
the step once more. The damped solve narrows where R(B) holds inner roots and in the open loop:
on the models benchmark grid (flat sub-batches of 1,024, narrowed to 128) the damped shared
engine ran 1.4x faster (0.87 -> 0.61 s) and the damped lognormal LRU 1.7x (5.98 -> 3.58 s);
the seed's cheap steps gained nothing on the named grid (89-93 ms against 95-103), and Newton's
few steps (1.2x) did not repay compiling its large step twice (4.5 -> 6.7 s). The open loop
narrows twice (1,024 -> 128 -> 16): its step counts stay heavy-tailed undamped (P99 33, the
slowest 247, on an open-loop grid of 4,320 points), and the second narrowing took its sweep
from 1.03 to 0.77 s, for 2 s more of a first call's compilation (18.8 -> 20.9 s). A batch of
fewer than 8 x `NARROWEST` points (a small sweep's sub-batches) is not narrowed: its steps
are few, and a narrowing would compile its step again.

The masked loop runs each point's steps as a plain vmap does, and its results are a plain
vmap's bit for bit on the grids compared. A narrower batch runs the same step function as a
separately compiled program, which XLA may round differently, so a point can stop a step apart
where its test is near its tolerance: on a shared-engine open-loop grid B moved by up to 3e-6
relative, 2 points of 2,880 took another number of steps, and outputs sensitive to B (the wait
for a KV slot) moved by up to 7e-5; in the closed loop's shared engine, GPU utilisation by
2e-7.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

# points stepped together. Wider than the flat evaluation's sub-batch of 1,024 (which this does not
# split): a step's fixed cost is shared by more points. On the benchmarks' grids (2-core CPU)
# 4,096 ran the seed's damped solver at 7.3 M configs/s on the one-model grid against 5.5 M at
# 1,024 (vmapped while loops); with the masked loop, 8,192 and 16,384 ran no faster.
LOOP_CHUNK = 1 << 12
# a narrowing keeps the points still going once no more than 1 in `NARROWING` are, in a batch
# that much narrower (gathered by `jnp.nonzero`), of `NARROWEST` points at least. Narrowed twice
# by 8, the named grid's damped solve ran in 86-88 ms, by 4 in 92, by 2 in 103 (each narrowing
# gathers every input of the points kept). A further narrowing goes down to `NARROWEST_AGAIN`
# (the open loop's second: its last few slow points, module docstring); a batch narrower than
# 8 x `NARROWEST` (a small sweep's) is not narrowed at all, and compiles its step once.
NARROWING = 8
NARROWEST = 64
NARROWEST_AGAIN = 16
# lanes of a refilled loop (`Loop.lanes`, `_refilled_loop`). A step costs a fixed part (its few
# hundred fused operations, each a call) and a part a lane: on the models benchmark grid (133,120
# points, the shared engine and LRU under Newton) 4,096 lanes ran the loop in 186 steps and the
# sweep in 0.23 s, 1,024 in 0.42 s (4x the steps), 8,192 in 0.30 s and 16,384 in 0.56 s (the last
# points' steps at the full width)
LANES = 1 << 12


class LoopParts(NamedTuple):
    """A while loop for one point, in parts, so that a batch of points can be narrowed to those
    still going (`chunked`); ``state`` is any pytree of arrays.

    Attributes:
        start: () -> the first state.
        keep_going: state -> bool, whether to step again (a pure function of the state: it is
            evaluated again on the states gathered into a narrower batch).
        step: state -> the next state.
        finish: state -> the result, a pytree of arrays.
    """

    start: Callable
    keep_going: Callable
    step: Callable
    finish: Callable

    def run(self):
        """The loop (`jax.lax.while_loop`) and its result."""
        return self.finish(jax.lax.while_loop(self.keep_going, self.step, self.start()))


class Loop(NamedTuple):
    """An iterative solve given by its parts: ``parts(args)`` is the `LoopParts` of the point
    with arguments ``args`` (a pytree of arrays). Calling it runs the loop.

    ``narrowings``: how many times `chunked` narrows a batch to its points still going (each
    narrowing compiles the step once more: worth it where steps are many and costly).
    ``lanes``: 0, or step a flat batch wider than this through this many lanes, each refilled
    with the next point waiting as soon as its own stops (`_refilled_loop`; such a batch is not
    cut into chunks: its last lanes are narrowed once, then ``narrowings`` times more).
    """

    parts: Callable
    narrowings: int = 0
    lanes: int = 0

    def __call__(self, args):
        return self.parts(args).run()


def chunked(solve: Callable) -> Callable:
    """``solve`` (a pytree of arrays of one point -> a pytree of arrays) with its vmaps run by
    chunks of `LOOP_CHUNK` points (module docstring). Without a vmap it is ``solve``. A `Loop`
    runs as a masked loop over each chunk, narrowed to the points still going as often as its
    ``narrowings`` say (a narrower batch may round differently: module docstring).

    ``solve`` is static: give the same object for the same computation (jit keys on it).
    """

    def scalar(args):
        leaves, tree = jax.tree_util.tree_flatten(args)
        leaves = [jnp.asarray(leaf) for leaf in leaves]
        return _folded(solve, tree, (False,) * len(leaves))(leaves)

    return scalar


def _run(solve, tree, batched: tuple[bool, ...], leaves: list):
    """``solve`` over the flat batch: the ``batched`` leaves have its leading axis, the others none."""
    if not any(batched):
        return solve(jax.tree_util.tree_unflatten(tree, leaves))
    axes = [0 if b else None for b in batched]

    def vmapped(parts):
        if isinstance(solve, Loop):
            return _masked_loop(solve, tree, batched, parts)
        return jax.vmap(lambda *xs: solve(jax.tree_util.tree_unflatten(tree, list(xs))), in_axes=axes)(*parts)

    n = next(leaf.shape[0] for leaf, b in zip(leaves, batched) if b)
    if n <= LOOP_CHUNK or (isinstance(solve, Loop) and solve.lanes):  # lanes: no chunks (`_refilled_loop`)
        return vmapped(leaves)
    chunks = -(-n // LOOP_CHUNK)
    pad = chunks * LOOP_CHUNK - n  # whole chunks: the last point repeated, its results cut off

    def split(leaf):
        leaf = jnp.pad(leaf, [(0, pad)] + [(0, 0)] * (leaf.ndim - 1), mode="edge")
        return leaf.reshape((chunks, LOOP_CHUNK) + leaf.shape[1:])

    per_chunk = [split(leaf) for leaf, b in zip(leaves, batched) if b]

    def one_chunk(parts):
        parts = iter(parts)
        return vmapped([next(parts) if b else leaf for leaf, b in zip(leaves, batched)])

    out = jax.lax.map(one_chunk, per_chunk)
    return jax.tree_util.tree_map(lambda a: a.reshape((chunks * LOOP_CHUNK,) + a.shape[2:])[:n], out)


def _masked_loop(loop: Loop, tree, batched: tuple[bool, ...], leaves: list):
    """``loop`` over a batch of points (the ``batched`` leaves' leading axis): started, stepped
    where still going and narrowed as its ``narrowings`` say (`_narrowed`), and finished."""
    axes = [0 if b else None for b in batched]
    n = next(leaf.shape[0] for leaf, b in zip(leaves, batched) if b)

    def per_point(part):
        def fn(*xs):
            *point, state = xs
            return getattr(loop.parts(jax.tree_util.tree_unflatten(tree, list(point))), part)(state)
        return fn

    def going(parts, state):
        return jax.vmap(per_point("keep_going"), in_axes=(*axes, 0))(*parts, state)

    def stepped(parts, state):
        return jax.vmap(per_point("step"), in_axes=(*axes, 0))(*parts, state)

    start = jax.vmap(lambda *xs: loop.parts(jax.tree_util.tree_unflatten(tree, list(xs))).start(),
                     in_axes=axes)(*leaves)
    if loop.lanes and n > loop.lanes:
        state = _refilled_loop(going, stepped, batched, leaves, start, n, loop.lanes, loop.narrowings)
    else:
        state = _narrowed(going, stepped, batched, leaves, start, n, levels=loop.narrowings)
    return jax.vmap(per_point("finish"), in_axes=(*axes, 0))(*leaves, state)


def _narrowed(going, stepped, batched, leaves, state, n: int, live=None, levels: int = 0, floor: int = NARROWEST):
    """Step the batch of ``n`` points where they keep going (``live``: only those of its points,
    the rest fill) until none do, or, with ``levels`` of narrowing left, until at most n /
    `NARROWING` do; then gather those into that narrower batch, recurse, and scatter their
    states back (the narrower batch's fill is neither stepped nor written back)."""
    width = n // NARROWING
    width = width if width >= floor and levels > 0 else 0

    def more(carry):
        _, still = carry
        return still.sum() > width

    def update(carry):
        state, still = carry
        new = stepped(leaves, state)
        state = jax.tree_util.tree_map(lambda a, b: _select(still, a, b), new, state)
        return state, still & going(leaves, state)

    still = going(leaves, state) if live is None else live & going(leaves, state)
    state, still = jax.lax.while_loop(more, update, (state, still))
    if not width:
        return state

    def narrowed(state):
        return _gathered(going, stepped, batched, leaves, state, still, width, levels - 1, NARROWEST_AGAIN)

    # a batch whose points have all stopped skips the gathering
    return jax.lax.cond(still.any(), narrowed, lambda state: state, state)


def _gathered(going, stepped, batched, leaves, state, still, width: int, levels: int, floor: int):
    """The batch's points still going (``still``, at most ``width`` of them) gathered into a
    batch of ``width``, stepped to their end by `_narrowed` (``levels`` and ``floor`` its own)
    and scattered back into ``state`` (the narrower batch's fill is neither stepped nor written
    back)."""
    index = jnp.nonzero(still, size=width, fill_value=0)[0]
    kept = jnp.arange(width) < still.sum()
    narrow = [leaf[index] if b else leaf for leaf, b in zip(leaves, batched)]
    inner = _narrowed(going, stepped, batched, narrow, jax.tree_util.tree_map(lambda a: a[index], state), width,
                      kept, levels, floor)
    return _put_back(state, index, kept, inner)  # the fill goes nowhere


def _refilled_loop(going, stepped, batched, leaves, state, n: int, lanes: int, narrowings: int):
    """Step the ``n`` points through ``lanes`` lanes until every one has stopped: each lane
    holds one point still going, and a lane whose point stops writes its state back and takes
    the next point waiting (their indices gathered once, in order, by `jnp.nonzero`), its inputs
    and start state gathered into the lane. Once no point waits and at most 1 lane in
    `NARROWING` still goes, those lanes alone are gathered into a batch that much narrower and
    stepped as `_narrowed` steps a batch (narrowed ``narrowings`` times more). A batch so costs
    about the sum of its points' own steps over the lanes, where a masked batch costs its
    slowest point's steps times its width; and a point that crawls to ``max_iter`` (the damped
    solve where its map's slope is near 1: 10,000 steps) costs its steps at the narrow width,
    not at the lanes' (whose step costs a fixed part, `LANES`: 7 s against 1.4 s so on a grid
    of 183,168 points)."""
    waiting = going(leaves, state)
    count = waiting.sum()
    order = jnp.nonzero(waiting, size=n, fill_value=n)[0]  # the points to step, n: none

    def gather(index, into=None, where=None):
        """The batched leaves and the state at ``index`` (clipped), or, with ``into``, those
        lanes' own where ``where`` is False."""
        safe = jnp.minimum(index, n - 1)
        lane_leaves = [leaf[safe] if b else leaf for leaf, b in zip(leaves, batched)]
        lane_state = jax.tree_util.tree_map(lambda a: a[safe], state)
        if into is None:
            return lane_leaves, lane_state
        return ([_select(where, new, old) if b else new for new, old, b in zip(lane_leaves, into[0], batched)],
                jax.tree_util.tree_map(lambda new, old: _select(where, new, old), lane_state, into[1]))

    width = max(lanes // NARROWING, 1)  # the tail's

    def more(carry):
        return (carry[3] < count) | ((carry[4] < n).sum() > width)

    def update(carry):
        state, lane_leaves, lane_state, ptr, index = carry
        live = index < n
        lane_state = jax.tree_util.tree_map(lambda a, b: _select(live, a, b), stepped(lane_leaves, lane_state),
                                            lane_state)
        stopped = live & ~going(lane_leaves, lane_state)
        # a point stopped here goes back to its place, and its lane is free
        state = _put_back(state, index, stopped, lane_state)
        free = stopped | ~live
        # the free lanes take the next points waiting
        source = ptr + jnp.cumsum(free) - 1
        index = jnp.where(free, jnp.where(source < count, order[jnp.minimum(source, n - 1)], n), index)
        lane_leaves, lane_state = gather(index, (lane_leaves, lane_state), free)
        return state, lane_leaves, lane_state, ptr + free.sum(), index

    index = order[:lanes]
    state, lane_leaves, lane_state, _, index = jax.lax.while_loop(
        more, update, (state, *gather(index), jnp.minimum(count, lanes), index))
    # no point waits and few lanes go: those alone, in a narrower batch, to their end
    live = index < n
    lane_state = _gathered(going, stepped, batched, lane_leaves, lane_state, live, width, narrowings, NARROWEST)
    return _put_back(state, index, live, lane_state)


def _put_back(state, index, where, values):
    """``state`` with each lane's ``values`` written back at its point's ``index`` where
    ``where`` holds (the other lanes' dropped)."""
    return jax.tree_util.tree_map(lambda a, b: a.at[jnp.where(where, index, a.shape[0])].set(b, mode="drop"),
                                  state, values)


def _select(mask, new, old):
    """``new`` where the points' ``mask`` holds, else ``old`` (leaves of any rank)."""
    return jnp.where(mask.reshape(mask.shape + (1,) * (new.ndim - 1)), new, old)


@functools.lru_cache(maxsize=None)
def _folded(solve, tree, batched: tuple[bool, ...]):
    """``solve`` on leaves batched as ``batched`` says, as a function with a batching rule that
    folds a further vmap's axis into the flat batch (one object per arguments)."""

    @custom_vmap
    def run(leaves):
        return _run(solve, tree, batched, leaves)

    @run.def_vmap
    def fold(axis_size, in_batched, leaves):
        along = in_batched[0]
        if not any(along):  # nothing varies along this axis (JAX's jvp of a custom_vmap asks so)
            out = _run(solve, tree, batched, leaves)
            return out, jax.tree_util.tree_map(lambda _: False, out)
        inner = next((leaf.shape[1 if a else 0] for leaf, a, b in zip(leaves, along, batched) if b), None)
        flat = []
        for leaf, a, b in zip(leaves, along, batched):
            if b or a:
                # (axis, n, ...): the new axis outermost, a leaf lacking one of the two broadcast along it
                if not a:
                    leaf = jnp.broadcast_to(leaf, (axis_size,) + leaf.shape)
                elif not b and inner is not None:
                    leaf = jnp.broadcast_to(leaf[:, None], (axis_size, inner) + leaf.shape[1:])
                leaf = leaf.reshape((axis_size * (inner or 1),) + leaf.shape[2 if inner is not None else 1:])
            flat.append(leaf)
        now = tuple(a or b for a, b in zip(along, batched))
        out = _folded(solve, tree, now)(flat)
        if inner is not None:
            out = jax.tree_util.tree_map(lambda v: v.reshape((axis_size, inner) + v.shape[1:]), out)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return run

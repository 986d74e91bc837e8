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
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

# points stepped together. Wider than the flat evaluation's sub-batch of 1,024 (which this leaves
# alone): a step's fixed cost is shared by more points, while a slow point holds back more. On
# the benchmarks' grids (2-core CPU) 4,096 ran the seed's damped solver at 7.3 M configs/s on
# the one-model grid against 5.5 M at 1,024, and the mixed grid as fast or faster.
LOOP_CHUNK = 1 << 12


def chunked(solve: Callable) -> Callable:
    """``solve`` (a pytree of arrays of one point -> a pytree of arrays) with its vmaps run by
    chunks of `LOOP_CHUNK` points (module docstring). Without a vmap it is ``solve``.

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
        return jax.vmap(lambda *xs: solve(jax.tree_util.tree_unflatten(tree, list(xs))), in_axes=axes)(*parts)

    n = next(leaf.shape[0] for leaf, b in zip(leaves, batched) if b)
    if n <= LOOP_CHUNK:
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

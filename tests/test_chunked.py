"""`jaxpareto.physics.chunked`: a scalar while-loop solve under any nesting of vmaps gives what a
plain vmap gives, point by point, while its loop runs in chunks of `LOOP_CHUNK` points (or
through refilled lanes)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpareto.physics.chunked import (LOOP_CHUNK, NARROWEST, NARROWEST_AGAIN, NARROWING, Loop, LoopParts,
                                       chunked)


def heron_parts(args):
    """√a by Heron's iteration from x = a + 1, to a relative step of ``tol``, as the parts of a
    loop (`LoopParts`): a loop whose trip count varies from point to point (the property
    chunking must respect)."""
    a, tol = args

    def keep_going(state):
        x, step, i = state
        return (jnp.abs(step) > tol * x) & (i < 200)

    def step(state):
        x, _, i = state
        new = 0.5 * (x + a / x)
        return new, new - x, i + 1

    return LoopParts(lambda: (a + 1.0, jnp.inf * a, jnp.zeros((), jnp.int32)), keep_going, step,
                     lambda state: {"root": state[0], "iterations": state[2]})


def heron(args):
    """`heron_parts` run by `jax.lax.while_loop`: the plain solve, a scalar function."""
    return heron_parts(args).run()


CHUNKED = chunked(heron)
MASKED = chunked(Loop(heron_parts))  # its own masked loop over the whole batch
NARROWED = chunked(Loop(heron_parts, narrowings=2))
REFILLED = chunked(Loop(heron_parts, lanes=256))  # 256 lanes, refilled, their last 32 apart
REFILLED_NARROWED = chunked(Loop(heron_parts, lanes=4096, narrowings=1))  # their last 512, then 64


def test_without_vmap_it_is_the_solve():
    got = jax.jit(CHUNKED)((jnp.float32(2.0), jnp.float32(1e-6)))
    assert abs(float(got["root"]) - np.sqrt(2.0)) < 1e-6 and int(got["iterations"]) > 2


@pytest.mark.parametrize("n", [7, LOOP_CHUNK, 3 * LOOP_CHUNK + 5])
def test_one_vmap_equals_plain_vmap(n):
    a = jnp.asarray(np.geomspace(1e-3, 1e6, n), jnp.float32)
    tol = jnp.float32(1e-6)
    want = jax.jit(jax.vmap(heron, in_axes=((0, None),)))((a, tol))
    got = jax.jit(jax.vmap(CHUNKED, in_axes=((0, None),)))((a, tol))
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert len(np.unique(want["iterations"])) > 3  # trip counts differ between points


def test_nested_vmaps_fold_into_chunks():
    """Three vmaps, an input batched along only some of them (broadcast where it is not) and one
    along none: the plain nested vmap's results, in the C order of the axes; the loop runs over
    the flat batch of all 3 x 500 x 4 points in chunks of `LOOP_CHUNK`, not over the block."""
    a = jnp.asarray(np.geomspace(1e-2, 1e5, 500), jnp.float32)
    scale = jnp.asarray([1.0, 2.0, 3.0], jnp.float32)
    tols = jnp.asarray([1e-3, 1e-4, 1e-5, 1e-6], jnp.float32)

    def nest(fn):
        def point(s, x, t):
            return fn((s * x, t))  # a depends on the outer two axes, tol on the inner one

        inner = jax.vmap(point, in_axes=(None, None, 0))
        middle = jax.vmap(inner, in_axes=(None, 0, None))
        return jax.vmap(middle, in_axes=(0, None, None))

    got = jax.jit(nest(CHUNKED))(scale, a, tols)
    want = jax.jit(nest(heron))(scale, a, tols)
    assert got["root"].shape == (3, 500, 4)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    loops = [line for line in str(jax.make_jaxpr(nest(CHUNKED))(scale, a, tols)).splitlines()
             if "= while[" in line or "= scan[" in line]
    chunks = -(-3 * 500 * 4 // LOOP_CHUNK)
    assert any(f"i32[{chunks},{LOOP_CHUNK}]" in line and "scan" in line for line in loops), loops
    assert all(f"f32[{LOOP_CHUNK}]" in line for line in loops if "while" in line), loops


def test_unbatched_everywhere_stays_unbatched():
    """An input no vmap batches is not broadcast: the program is a plain vmap's."""
    a = jnp.asarray(np.linspace(1.0, 9.0, 5), jnp.float32)
    args = (a, jnp.float32(1e-6))
    text = {name: str(jax.make_jaxpr(jax.vmap(fn, in_axes=((0, None),)))(args))
            for name, fn in (("chunked", CHUNKED), ("plain", heron))}
    assert text["chunked"].count("broadcast_in_dim") == text["plain"].count("broadcast_in_dim")
    np.testing.assert_allclose(jax.vmap(CHUNKED, in_axes=((0, None),))(args)["root"],
                               np.sqrt(np.linspace(1.0, 9.0, 5)), rtol=2e-6)


def test_jvp_under_vmap():
    """JAX's jvp of a custom_vmap function asks its rule about an axis along which nothing varies
    (the tangents'): the solve runs unbatched there, and the derivative is the plain one's."""
    a = jnp.asarray(np.linspace(1.0, 9.0, 6), jnp.float32)

    def tangent(fn):
        return jax.vmap(lambda x: jax.jvp(lambda y: fn((y, jnp.float32(1e-6)))["root"], (x,), (jnp.float32(1.0),))[1])

    np.testing.assert_allclose(tangent(CHUNKED)(a), tangent(heron)(a), rtol=1e-6)


@pytest.mark.parametrize("n", [NARROWING * NARROWEST - 1, LOOP_CHUNK, 2 * LOOP_CHUNK + 3])
def test_narrowed_loop_equals_plain_vmap(n):
    """A `Loop` (masked, and narrowed to its points still going) gives a plain vmap's results
    (bit for bit for this loop, whose few operations XLA rounds alike in any batch), whatever
    the order of slow and fast points (a few very slow ones among many fast: the
    narrowest batch; every point slow: no narrowing happens), and the program holds the
    narrower loops."""
    rng = np.random.default_rng(n)
    a = np.geomspace(1e-3, 1e6, n)
    a[rng.random(n) < 0.01] = 1e30  # Heron from a + 1 halves its way down: ~50 steps
    a = jnp.asarray(rng.permutation(a), jnp.float32)
    tol = jnp.float32(1e-6)
    want = jax.jit(jax.vmap(heron, in_axes=((0, None),)))((a, tol))
    for fn in (MASKED, NARROWED):
        got = jax.jit(jax.vmap(fn, in_axes=((0, None),)))((a, tol))
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert np.ptp(np.asarray(want["iterations"])) > 30
    # the slowest point first: the narrower batch's fill (copies of point 0) is not stepped
    first = jnp.concatenate([jnp.full((1,), 1e30, jnp.float32), a[1:]])
    np.testing.assert_array_equal(jax.vmap(NARROWED, in_axes=((0, None),))((first, tol))["iterations"],
                                  jax.vmap(heron, in_axes=((0, None),))((first, tol))["iterations"])
    slow = jnp.full((n,), 1e30, jnp.float32)
    np.testing.assert_array_equal(jax.vmap(NARROWED, in_axes=((0, None),))((slow, tol))["root"],
                                  jax.vmap(heron, in_axes=((0, None),))((slow, tol))["root"])
    loops = [line for line in str(jax.make_jaxpr(jax.vmap(NARROWED, in_axes=((0, None),)))((a, tol))).splitlines()
             if "= while[" in line]
    width = min(n, LOOP_CHUNK)
    narrower = [f"f32[{width // NARROWING}]" in line for line in loops]
    assert any(narrower) == (width >= NARROWING * NARROWEST), loops
    if width >= NARROWING * NARROWEST and width // NARROWING ** 2 >= NARROWEST_AGAIN:  # narrowed twice
        assert any(f"f32[{width // NARROWING ** 2}]" in line for line in loops), loops
    masked = str(jax.make_jaxpr(jax.vmap(MASKED, in_axes=((0, None),)))((a, tol)))
    assert f"f32[{width // NARROWING}]" not in masked


def test_narrowed_loop_under_nested_vmaps_and_jvp():
    """Folded into chunks by nested vmaps, and differentiated, a `Loop` is its plain solve."""
    a = jnp.asarray(np.geomspace(1e-2, 1e5, 700), jnp.float32)
    scale = jnp.asarray([1.0, 3.0], jnp.float32)
    nest = jax.vmap(jax.vmap(lambda s, x: NARROWED((s * x, jnp.float32(1e-6)))["root"], in_axes=(None, 0)),
                    in_axes=(0, None))
    plain = jax.vmap(jax.vmap(lambda s, x: heron((s * x, jnp.float32(1e-6)))["root"], in_axes=(None, 0)),
                     in_axes=(0, None))
    np.testing.assert_array_equal(jax.jit(nest)(scale, a), jax.jit(plain)(scale, a))
    tangent = jax.vmap(lambda x: jax.jvp(lambda y: NARROWED((y, jnp.float32(1e-6)))["root"], (x,),
                                         (jnp.float32(1.0),))[1])
    np.testing.assert_allclose(tangent(a[:600]), 0.5 / np.sqrt(np.asarray(a[:600])), rtol=1e-4)


@pytest.mark.parametrize("n", [100, 256, 257, 3 * LOOP_CHUNK + 5])
def test_refilled_loop_equals_plain_vmap(n):
    """Through refilled lanes a `Loop` gives a plain vmap's results bit for bit (this loop's few
    operations round alike in any batch), whatever the order of slow and fast points (slow ones
    among many fast, the slowest first or last, every point slow, points that never step), in
    loops of the lanes' width over the whole batch (no chunks) and of the narrower tail; a batch
    no wider than the lanes runs as a masked batch."""
    rng = np.random.default_rng(n)
    a = np.geomspace(1e-3, 1e6, n)
    a[rng.random(n) < 0.02] = 1e30  # ~50 steps against ~10
    a = rng.permutation(a)
    tol = jnp.float32(1e-6)
    plain = jax.jit(jax.vmap(heron, in_axes=((0, None),)))
    for fn in (REFILLED, REFILLED_NARROWED):
        run = jax.jit(jax.vmap(fn, in_axes=((0, None),)))
        for case in (a, np.concatenate([[1e30], a[1:]]), np.concatenate([a[:-1], [1e30]]), np.full(n, 1e30),
                     np.where(np.arange(n) % 3 == 0, 1.0, a)):  # a = 1: stops at its first step
            case = jnp.asarray(case, jnp.float32)
            got, want = run((case, tol)), plain((case, tol))
            for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    loops = _loops(jax.make_jaxpr(jax.vmap(REFILLED, in_axes=((0, None),)))((case, tol)).jaxpr)
    assert "scan" not in {name for name, _ in loops}, loops
    assert any((min(n, 256),) in shapes for _, shapes in loops), loops  # the lanes' width
    if n > 4096:  # the lanes' last 512 apart, then their last 64
        loops = _loops(jax.make_jaxpr(jax.vmap(REFILLED_NARROWED, in_axes=((0, None),)))((case, tol)).jaxpr)
        assert all(any((w,) in shapes for _, shapes in loops) for w in (4096, 512, 64)), loops


def _loops(jaxpr) -> list:
    """The while and scan equations of ``jaxpr`` (nested ones too), each as (name, the shapes of
    its outputs)."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("while", "scan"):
            found.append((eqn.primitive.name, {v.aval.shape for v in eqn.outvars}))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                if hasattr(sub, "jaxpr") and hasattr(sub, "consts"):
                    found += _loops(sub.jaxpr)
    return found

"""`jaxpareto.physics.chunked`: a scalar while-loop solve under any nesting of vmaps gives what a
plain vmap gives, point by point, while its loop runs in chunks of `LOOP_CHUNK` points."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpareto.physics.chunked import LOOP_CHUNK, chunked


def heron(args):
    """√a by Heron's iteration from x = a + 1, to a relative step of ``tol``: a loop whose trip
    count varies from point to point (the property chunking must respect)."""
    a, tol = args

    def keep_going(state):
        x, step, i = state
        return (jnp.abs(step) > tol * x) & (i < 200)

    def step(state):
        x, _, i = state
        new = 0.5 * (x + a / x)
        return new, new - x, i + 1

    x, _, i = jax.lax.while_loop(keep_going, step, (a + 1.0, jnp.inf * a, jnp.zeros((), jnp.int32)))
    return {"root": x, "iterations": i}


CHUNKED = chunked(heron)


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

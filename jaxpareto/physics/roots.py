"""Scalar roots inside the model: a bracketed solve with implicit derivatives.

The engine's prefill load (`jaxpareto.physics.engine`) and the LRU characteristic time of lognormal
pauses (`jaxpareto.physics.cache`) are roots of increasing scalar functions on a known bracket. Both sit
inside the closed loop's iteration, so the solve must be cheap, branch-free (vmapped) and
differentiable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.physics.numerics import bisect_bracket

BISECTIONS = 12  # halvings of the bracket before Newton: 1/4096 of it
# A fixed point whose R(B) holds inner roots solved to rounding cannot meet a tolerance tighter
# than this many eps of the dtype (7.6e-6 in float32): it would cycle on rounding noise.
INNER_ROOT_EPS = 64
NEWTON_STEPS = 6  # safeguarded Newton steps: quadratic convergence from there to rounding


def increasing_root(f: Callable[[jax.Array], jax.Array], lo: jax.Array, hi: jax.Array,
                    bisections: int = BISECTIONS, newton_steps: int = NEWTON_STEPS) -> jax.Array:
    """x in [lo, hi] with f(x) = 0 for an increasing scalar f (the nearer end if there is none).

    Bisection narrows the bracket, then Newton steps converge quadratically; a Newton step that
    would leave the current bracket (or is not finite) bisects instead (the safeguard of
    Press et al., Numerical Recipes, section 9.4, ``rtsafe``). The value found is then held
    constant (``stop_gradient``) and corrected by one more Newton step, which leaves the value
    unchanged to within the solve's precision and gives the root the implicit-function
    derivative dx = -∂f/∂θ / f'(x), so gradients never flow through the iterations.

    Args:
        f: increasing scalar function (closing over everything it depends on).
        lo, hi: the bracket (scalars, lo < hi).
        bisections, newton_steps: iteration counts (static).

    Returns:
        The root, a scalar.
    """
    def newton(_, state):
        x, a, b = state
        fx, slope = jax.jvp(f, (x,), (jnp.ones_like(x),))
        a, b = jnp.where(fx < 0, x, a), jnp.where(fx < 0, b, x)
        step = x - fx / jnp.where(slope > 0, slope, 1.0)
        inside = (slope > 0) & (step > a) & (step < b)
        return jnp.where(inside, step, 0.5 * (a + b)), a, b

    a, b = bisect_bracket(lambda x: f(x) < 0, lo, hi, bisections)
    x, _, _ = jax.lax.fori_loop(0, newton_steps, newton, (0.5 * (a + b), a, b))
    return polished_root(f, x, lo, hi)


def polished_root(f: Callable[[jax.Array], jax.Array], x: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """A root ``x`` of f, held constant and corrected by one Newton step (at most 1e-3 of the
    bracket [lo, hi]): the value is unchanged to within the solve's precision, and its derivative
    is the implicit function's, dx = -∂f/∂θ / f'(x)."""
    root = jax.lax.stop_gradient(x)
    fx, slope = jax.jvp(f, (root,), (jnp.ones_like(root),))
    width = 1e-3 * (hi - lo)  # a flat tail must not throw the corrected value off
    return root - jnp.clip(fx / jnp.maximum(slope, 1e-30), -width, width)


class InnerRoot(NamedTuple):
    """An inner root of R(B) (scalars): its ``value`` and the residual f(value) there (0 when
    solved here; the joint solve's residual when its value was given)."""

    value: jax.Array
    residual: jax.Array


def inner_root(f: Callable[[jax.Array], jax.Array], lo: jax.Array, hi: jax.Array,
               given: jax.Array | None = None, polish: bool = False) -> InnerRoot:
    """The root of an increasing f in [lo, hi]: solved here (`increasing_root`) when ``given`` is
    None, else ``given`` taken as it is (an unknown of the joint solve,
    `jaxpareto.physics.joint`, which drives f(given) to 0) or, with ``polish`` (static), as a
    converged root to differentiate (`polished_root`)."""
    if given is None:
        x = increasing_root(f, lo, hi)
        return InnerRoot(x, 0.0 * x)
    if polish:
        return InnerRoot(polished_root(f, given, lo, hi), 0.0 * given)
    return InnerRoot(given, f(given))

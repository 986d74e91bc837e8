"""Small numerical pieces the model's formulas share, written so that their derivatives stay finite.

JAX differentiates both branches of a ``jnp.where`` and multiplies the untaken one's derivative by
0, so an infinite derivative there (sqrt at 0) still gives NaN (0 x inf). These keep every branch
finite: a spread that is exactly 0 has derivative 0, and a quantile found by bisection takes the
implicit function's derivative instead of the bisection's own.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def sqrt_or_zero(x: jax.Array) -> jax.Array:
    """sqrt(x) for x > 0, 0 elsewhere, with derivative 0 where x <= 0 (sqrt's is infinite at 0;
    the spreads taken here are 0 only where they vanish identically, with derivative 0)."""
    positive = x > 0.0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, x, 1.0)), 0.0)


def bisect_bracket(under: Callable[[jax.Array], jax.Array], lo: jax.Array, hi: jax.Array,
                   halvings: int) -> tuple[jax.Array, jax.Array]:
    """The bracket [a, b] within [lo, hi] where ``under`` (True below the point sought,
    elementwise) turns False, after ``halvings`` (static) halvings (a fixed count: branch-free
    under vmap). Not differentiable through the test: see `increasing_quantile`."""
    def halve(_, bracket):
        a, b = bracket
        mid = 0.5 * (a + b)
        below = under(mid)
        return jnp.where(below, mid, a), jnp.where(below, b, mid)

    return jax.lax.fori_loop(0, halvings, halve, (lo, hi))


def bisect(under: Callable[[jax.Array], jax.Array], lo: jax.Array, hi: jax.Array, halvings: int) -> jax.Array:
    """The midpoint of `bisect_bracket`'s bracket."""
    a, b = bisect_bracket(under, lo, hi, halvings)
    return 0.5 * (a + b)


def increasing_quantile(cdf: Callable[[jax.Array], jax.Array], level: jax.Array, lo: jax.Array, hi: jax.Array,
                        halvings: int) -> jax.Array:
    """x in [lo, hi] with cdf(x) = level for an increasing scalar ``cdf`` (closing over what it
    depends on), by `bisect`; its derivative is the implicit function's, dx = -∂F/∂θ / F'(x)
    (`jax.lax.custom_root`, forward and reverse mode), evaluated where the bisection stopped, 0
    where F' is 0 there: a kind narrower than the bisection resolves leaves its density
    underflowed there, so keep spreads above it (`percentiles.normal_mix_quantiles`). The value
    is the bisection's, unchanged.

    Without it the derivative would follow the bracket's ends through the halvings taken: the
    bounds' derivatives mixed in the proportions of the answer's place between them, which is
    no derivative of the quantile (nor finite where a bound's is not).
    """
    def solve(f, _):
        return bisect(lambda x: f(x) < 0.0, lo, hi, halvings)

    def tangent_solve(linear, rhs):
        slope = linear(jnp.ones_like(rhs))
        flat = ~(jnp.abs(slope) > 0.0)
        return jnp.where(flat, 0.0, rhs / jnp.where(flat, 1.0, slope))

    return jax.lax.custom_root(lambda x: cdf(x) - level, lo, solve, tangent_solve)


__all__ = ["bisect", "bisect_bracket", "increasing_quantile", "sqrt_or_zero"]

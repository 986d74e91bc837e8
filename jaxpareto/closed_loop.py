"""Closed-loop steady state: the effective batch B = C_eff x R(B) / (R(B) + Z) (seed eq. 4).

Sessions alternate a turn of latency R with a pause Z, so a fraction ρ = R / (R + Z) of them is
on the GPU at any time (operational analysis, Lazowska et al. 1984; X = C / (R + Z)). R depends
on B through TPOT, hence the fixed point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.settings import Solver


class FixedPoint(NamedTuple):
    """Outcome of the damped iteration for one point (scalars).

    Attributes:
        batch: B kept (the last iterate).
        converged: |B_target - B| <= tol x B at the B kept.
        iterations: damped updates performed (0 when B = 1 already satisfies the test).
        residual: |B_target - B| / B at the B kept.
    """

    batch: jax.Array
    converged: jax.Array
    iterations: jax.Array
    residual: jax.Array


def active_ratio(latency_ms: jax.Array, think_time_ms: jax.Array) -> jax.Array:
    """ρ = R / (R + Z): the share of its time a session occupies the GPU (seed step 3)."""
    return latency_ms / (latency_ms + think_time_ms)


def solve_effective_batch(
    latency_ms: Callable[[jax.Array], jax.Array],
    concurrency_eff: jax.Array,
    think_time_ms: jax.Array,
    solver: Solver,
) -> FixedPoint:
    """Damped fixed-point iteration of SPEC.md section 3 (the seed's reference solver).

    Start at B = 1; each step computes B_target = C_eff x ρ(B); stop when
    |B_target - B| <= tol x B, else B <- (1 - damping) B + damping B_target; give up after
    ``max_iter`` updates. A non-finite target stops the loop unconverged.

    Args:
        latency_ms: R(B), the turn latency [ms] at effective batch B (scalar -> scalar).
        concurrency_eff: C_eff [sessions] (scalar, >= 1).
        think_time_ms: Z [ms] (scalar, >= 0).
        solver: damping, tol, max_iter.

    Returns:
        `FixedPoint` with the status as data, never an exception.
    """

    def target(b):
        return concurrency_eff * active_ratio(latency_ms(b), think_time_ms)

    def within_tol(b, t):
        return jnp.abs(t - b) <= solver.tol * b

    def keep_going(state):
        b, t, i = state
        return ~within_tol(b, t) & jnp.isfinite(t) & (i < solver.max_iter)

    def step(state):
        b, t, i = state
        b_next = (1.0 - solver.damping) * b + solver.damping * t
        return b_next, target(b_next), i + 1

    b0 = jnp.ones_like(concurrency_eff)
    b, t, i = jax.lax.while_loop(keep_going, step, (b0, target(b0), jnp.zeros((), jnp.int32)))
    return FixedPoint(b, within_tol(b, t), i, jnp.abs(t - b) / b)

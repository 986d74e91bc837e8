"""The closed loop and R(B)'s inner roots solved together, by safeguarded Newton (``solver="newton"``).

With the shared engine (its prefill load) or the LRU model with lognormal pauses (the cache's
characteristic time), R(B) holds inner roots (`jaxpareto.physics.point.inner_unknowns`). Solving
them afresh at every damped step of B (the default "damped" solver) costs some twenty evaluations of
the turn per step. Here they are unknowns beside B, and Newton's method runs on the whole
system z = (B, a_1 .. a_k):

    G_0(z) = C_eff R(B, a) / (R(B, a) + Z) - B = 0     (seed eq. 4)
    G_i(z) = f_i(B, a) = 0                             (the inner roots' equations)

with the Jacobian from forward-mode differentiation (k + 1 columns). The inner roots are
eliminated (their Newton step at a fixed B, and their change per unit B: a Schur complement
of a lower-triangular block), and B takes a Newton step on the reduced equation, the inner
roots following it to first order (Dennis and Schnabel, "Numerical Methods for Unconstrained
Optimization and Nonlinear Equations", 1983, chapters 5 and 6), each by at most its
``follow_limit`` (a trust region for a tangent taken far from where it is used: the shared
engine's prefill load, whose growth slows as B grows). It starts from the inner roots solved
at B = 1, or, where an inner root has a follow limit, at the damped iteration's first step
B_1 = B_target(1) taken undamped (between 1 and the damped iteration's fixed point, its map
being increasing), with the inner roots solved again there: that start replaces the first
step and the steps that solved the prefill load afresh after it.

Safeguards, so that the root is the damped iteration's:

- B stays in a bracket: the damped iteration from B = 1 climbs monotonically to the smallest
  fixed point above 1 when B_target(1) >= 1 (its map is increasing), else falls to the largest
  below 1, so the bracket is [1, C_eff] (G_0(C_eff) <= 0) or (0, 1]. The sign of the reduced
  G_0 narrows it only where it is sure: the inner roots solved tightly at that B;
- B moves only while the inner roots are roughly solved (else they are solved at a fixed B
  first: their equations change fast with B where the LRU's free slots run out), and turns
  back only on a sure sign, so that every turn narrows the bracket;
- a Newton step for B must go where G_0 points (not back, where the map is steeper than 1: the
  LRU collapse) and, upward, at most ``STEP_LIMIT`` undamped steps B_target - B (a reach that
  doubles while it is refused); else the undamped step is taken (which never passes the damped
  iteration's fixed point, the map being increasing), or, outside the bracket, its midpoint.
  The limit keeps Newton from jumping over a stable fixed point into the basin of another where
  the map has several (caches kept, caches lost) far apart; where two lie close together (a
  narrow dip of G_0 below 0), a Newton step can still pass the first, and the solve then
  returns another fixed point than the damped iteration's. This is why "newton" is not the
  default: on random grids with the LRU model about 1 point in 10,000 lands there;
- each inner root keeps its own bracket while B and the roots before it stay put, narrowed by
  its residual's sign (each f_i increases in a_i), and bisects it when its Newton step leaves
  it (Press et al., Numerical Recipes, rtsafe); a root beyond its outer bracket stays at the
  bracket's end, as the damped solver's inner solve does.

Stops when |G_0| <= tol x B (or B is pinned within tol by sure signs on both sides: a kink of
R(B)) and each inner root's Newton step is below tol of its size (or its residual within
``INNER_NOISE`` tol of 0), after at most ``MAX_ITERATIONS`` (or the solver's ``max_iter``)
steps: 2 to 15 for nearly every point (tests/test_joint_solve.py); a point whose map is
steeper than 1 over a long stretch of B (Newton refused, the undamped steps crawling) can
reach the cap unconverged, and is flagged so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.settings import Solver
from jaxpareto.physics.chunked import LoopParts

MAX_ITERATIONS = 64  # Newton within a bracket: far more than it ever needs
# a Newton step for B may go at most this many undamped steps B_target - B
STEP_LIMIT = 8.0
SURE_STEP = 1e-4  # inner Newton steps below this share of their size: G_0's sign is sure
# inner residuals (relative, or log-odds) beyond which they are solved at a fixed B first
SETTLED_RESIDUAL = 0.1
# inner residuals within this many tol of 0 are solved (the rounding of steep equations)
INNER_NOISE = 8.0
EDGE = 1e-3  # a step past B's bracket by less than this share of it stops at its end


class InnerUnknown(NamedTuple):
    """One of R(B)'s inner roots as an unknown of the joint solve: its ``name``, the bracket
    [``low``, ``high``] it lies in, and ``follow_limit``, the most it follows a step of B to first
    order (a + da/dB ΔB; inf: no limit)."""

    name: str
    low: float
    high: float
    follow_limit: float = float("inf")


class JointSystem(NamedTuple):
    """R(B) and its inner roots as functions of the loop's latency inputs (static, hashable).

    Attributes:
        latency: (latency inputs, B, a) -> (R [ms], residuals f_i (k,)).
        start: (latency inputs, B) -> (R [ms], residuals (k,), the inner roots (k,)) with the
            inner roots solved at B.
        unknowns: the k `InnerUnknown`s, in the order ``latency`` and ``start`` take them.
    """

    latency: Callable
    start: Callable
    unknowns: tuple


def _solve_small(matrix: jax.Array, rhs: jax.Array) -> jax.Array:
    """x with matrix x = rhs for a k x k matrix (k static, a few), by Gaussian elimination
    unrolled without pivoting: the inner equations come in an order where each depends only on
    those before it (`inner_unknowns`), a lower-triangular matrix with positive diagonal (each
    f_i increases in a_i), for which this is forward substitution. A batched LAPACK call per
    point would cost more than the model's evaluation."""
    k = rhs.shape[0]
    a = [[matrix[i, j] for j in range(k)] for i in range(k)]
    b = [rhs[i] for i in range(k)]
    for col in range(k):
        for row in range(col + 1, k):
            factor = a[row][col] / a[col][col]
            a[row] = [a[row][j] - factor * a[col][j] for j in range(k)]
            b[row] = b[row] - factor * b[col]
    x = [None] * k
    for row in reversed(range(k)):
        x[row] = (b[row] - sum((a[row][j] * x[j] for j in range(row + 1, k)), 0.0)) / a[row][row]
    return jnp.stack(x)


class JointSolution(NamedTuple):
    """The joint solve's outcome for one point (scalars, and the inner roots).

    Attributes:
        batch: B kept. converged: the stopping test holds there. iterations: Newton steps.
        residual: |B_target - B| / B at the last point evaluated (B kept, but where the step
            limit stopped the loop: the B before it). inner: the inner roots a, shape (k,).
    """

    batch: jax.Array
    converged: jax.Array
    iterations: jax.Array
    residual: jax.Array
    inner: jax.Array


def joint_loop(system: JointSystem, latency_inputs, concurrency_eff: jax.Array, think_time_ms: jax.Array,
               solver: Solver) -> LoopParts:
    """The closed loop's B and the inner roots a, jointly (module docstring), as the parts of a
    loop (`jaxpareto.physics.chunked.LoopParts`; ``.run()`` runs it).

    Args:
        system: `JointSystem`.
        latency_inputs: what R needs besides B and a.
        concurrency_eff: C_eff [sessions] (scalar, >= 1). think_time_ms: Z [ms] (scalar, >= 0).
        solver: its ``tol`` and ``max_iter`` (the damping is not used).

    Returns:
        `LoopParts` whose ``finish`` gives the `JointSolution`.
    """
    lows, highs, follow = (jnp.asarray([getattr(u, field) for u in system.unknowns])
                           for field in ("low", "high", "follow_limit"))
    # an inner root with a follow limit (its tangent no guide far from its point) is solved again
    # at the first step's B (`start`)
    restart = any(u.follow_limit < float("inf") for u in system.unknowns)
    one = jnp.ones_like(concurrency_eff)

    def system_residuals(latency, inner, b):
        target = concurrency_eff * latency / (latency + think_time_ms)  # C_eff ρ (seed eq. 4)
        return jnp.concatenate([jnp.stack([target - b]), inner])

    def residuals(z):
        return system_residuals(*system.latency(latency_inputs, z[0], z[1:]), z[0])

    def linearised(z):
        """The residuals at z and their Jacobian, from one forward-mode pass (k + 1 tangents
        beside one primal)."""
        basis = jnp.eye(z.shape[0], dtype=z.dtype)
        return jax.vmap(lambda t: jax.jvp(residuals, (z,), (t,)), out_axes=(None, 1))(basis)

    def done(z, g, a_step):
        # an inner root is solved when its Newton step is small against its size (they are
        # logarithms of T_c and 1 - ρ), or its residual is within a few tol of 0: where its
        # equation is steep, rounding keeps the steps from shrinking further
        inner = (jnp.abs(a_step) <= solver.tol * jnp.maximum(jnp.abs(z[1:]), 1.0)) | \
            (jnp.abs(g[1:]) <= INNER_NOISE * solver.tol)
        return (jnp.abs(g[0]) <= solver.tol * z[0]) & inner.all()

    limit = jnp.minimum(solver.max_iter, MAX_ITERATIONS)

    def keep_going(state):
        z, g, _, _, _, i, finished = state
        return ~finished & jnp.isfinite(g).all() & (i < limit)

    def step(state):
        # G and its Jacobian at the z the step starts from, in one pass: the state's G is the last
        # step's (at the z it started from; it stops the loop where it is not finite), so a step
        # evaluates the system once, not again at the z it reaches for the test (evaluating the
        # Jacobian there too, to carry it to the next step, ran 1.5x slower: XLA recomputed that
        # z's chain of choices in every fusion reading it)
        z, _, (lo, hi), (a_lo, a_hi, tried), (reach, heading), i, _ = state
        g, jacobian = linearised(z)
        b, g_b, g_a = z[0], g[0], g[1:]
        j_aa, j_ab, j_ba = jacobian[1:, 1:], jacobian[1:, 0], jacobian[0, 1:]
        # eliminate the inner roots: their Newton step at fixed B and their change per unit B
        a_fixed, a_per_b = _solve_small(j_aa, -g_a), _solve_small(j_aa, -j_ab)
        a = z[1:]
        # each f_i increases in a_i: at this B and a_j (its bracket is reset when they move) its sign
        # narrows a_i's bracket, as in a safeguarded scalar Newton (Press et al., rtsafe)
        a_lo = jnp.where(g_a < 0, jnp.maximum(a_lo, a), a_lo)
        a_hi = jnp.where(g_a > 0, jnp.minimum(a_hi, a), a_hi)
        within = lambda step: jnp.isfinite(step) & (a + step >= a_lo) & (a + step <= a_hi)  # noqa: E731
        usable = within(a_fixed) & jnp.isfinite(a_per_b)
        # where the coupled step fails, a_i's own Newton step (the others held) may not
        own = -g_a / jnp.diagonal(j_aa)
        a_fixed, a_per_b = jnp.where(usable, a_fixed, own), jnp.where(usable, a_per_b, 0.0)
        usable = usable | within(own)
        # else (a flat or far-off inner equation) bisect the bracket, or, while its end on the
        # residual's side is still the outer one, go there (a root beyond it stays at that end,
        # as the damped solver's inner solve does), and leave B's step uncorrected
        end = jnp.where(g_a > 0, a_lo, a_hi)
        outer = ~tried & jnp.where(g_a > 0, a_lo <= lows, a_hi >= highs)
        tried = tried | (~usable & outer)
        a_per_b = jnp.where(usable, a_per_b, 0.0)
        h = g_b + j_ba @ jnp.where(usable, a_fixed, 0.0)  # G_0 with the inner roots solved at this B (to first order)
        a_fixed = jnp.where(usable, a_fixed, jnp.where(outer, end, 0.5 * (a_lo + a_hi)) - a)
        slope = jacobian[0, 0] + j_ba @ a_per_b  # its derivative in B
        newton = b - h / slope
        # the sign of G_0 is sure, and narrows the bracket, only where the inner roots are
        # solved tightly (or lie beyond the outer bracket, where the damped solver leaves them too)
        pinned = ((a <= lows) & (g_a > 0)) | ((a >= highs) & (g_a < 0))
        size = SURE_STEP * jnp.maximum(jnp.abs(a), 1.0)
        tight = (usable & (jnp.abs(a_fixed) <= size)) | (a_hi - a_lo <= size)  # a step, or the bracket, that small
        sure = (tight | pinned).all() & jnp.isfinite(h)
        lo = jnp.where(sure & (h > 0), jnp.maximum(lo, b), lo)
        hi = jnp.where(sure & (h < 0), jnp.minimum(hi, b), hi)
        undamped = b + h
        # a step just past the bracket's end (rounding) stops at it
        inside = lambda x: jnp.isfinite(x) & (x >= lo - EDGE * (hi - lo)) & (x <= hi + EDGE * (hi - lo))  # noqa: E731
        # Newton's step must go where G_0 points (not back where the map is steeper than 1)
        near = ((newton - b) * h > 0) & ((h < 0) | (newton - b <= reach * h))
        take = inside(newton) & near
        b_next = jnp.where(take, newton, jnp.where(inside(undamped), undamped, 0.5 * (lo + hi)))
        # B moves only while the inner roots are roughly solved at its value; else they are
        # solved first, at this B (their equations can change fast with B: the LRU's free slots
        # run out at the memory's last session); and B turns back only on a sure sign, so every
        # turn narrows the bracket (no cycling on signs the unsolved inner roots got wrong)
        turning = h * heading < 0
        settled = ((jnp.abs(g_a) <= SETTLED_RESIDUAL) | pinned).all() & jnp.isfinite(h) & (sure | ~turning)
        b_next = jnp.clip(b_next, lo, hi)
        b_next = jnp.where(b_next > 0, b_next, 0.5 * b)  # the bracket (0, 1] is open at 0
        b_next = jnp.where(settled, b_next, b)
        # the inner roots follow the B taken, each by at most its limit (a tangent far from its point)
        inner = a + a_fixed + jnp.clip(a_per_b * (b_next - b), -follow, follow)
        inner = jnp.where(jnp.isfinite(inner), jnp.clip(inner, lows, highs), a)
        # or B pinned by sure signs on both sides within tol (a kink in R(B), where G_0 jumps)
        pinned_b = (hi - lo <= solver.tol * b) & (jnp.abs(b_next - b) <= solver.tol * b)
        finished = done(z, g, a_fixed) & ((jnp.abs(h) <= solver.tol * b) | pinned_b)
        # a G not finite stops the loop where it is (as the test after the step before did)
        z_next = jnp.where(finished | ~jnp.isfinite(g).all(), z, jnp.concatenate([jnp.stack([b_next]), inner]))
        # the reach doubles while Newton's step is refused for its length alone (a map whose
        # slope is near 1, where the undamped steps crawl)
        longer = jnp.where(take, STEP_LIMIT, jnp.where(inside(newton) & ((newton - b) * h > 0), 2.0 * reach, reach))
        reach = jnp.where(settled, longer, reach)
        heading = jnp.where(b_next != b, jnp.sign(b_next - b), heading)
        # a_i's bracket holds while nothing its equation depends on moves: B and the a_j before
        # it (`inner_unknowns` orders them so)
        shifted = jnp.abs(z_next[1:] - a) > solver.tol * jnp.maximum(jnp.abs(a), 1.0)
        moved = (jnp.abs(z_next[0] - b) > solver.tol * b) | (jnp.cumsum(shifted) - shifted > 0)
        a_lo, a_hi, tried = jnp.where(moved, lows, a_lo), jnp.where(moved, highs, a_hi), tried & ~moved
        counted = ~finished & jnp.isfinite(g).all()  # a step finding G not finite stops, uncounted
        return z_next, g, (lo, hi), (a_lo, a_hi, tried), (reach, heading), i + counted, finished

    def start():
        # where an inner root follows B by a limited amount (its tangent is no guide far from its
        # point), the damped iteration's first step, undamped, with the inner roots solved at both
        # ends: from B = 1 to B_1 = B_target(1), which lies between 1 and the fixed point the damped
        # iteration finds (its map increases), or stays at 1 where B_target(1) < 1
        latency, inner, a1 = system.start(latency_inputs, one)
        b1, g1 = one, system_residuals(latency, inner, one)
        upward = g1[0] >= 0.0
        if restart:
            b1 = jnp.where(upward, one + g1[0], one)
            latency, inner, a1 = system.start(latency_inputs, b1)
            g1 = system_residuals(latency, inner, b1)
        bracket = (jnp.where(upward, one, 0.0 * one), jnp.where(upward, jnp.maximum(concurrency_eff, one), one))
        # a root beyond its bracket (the inner solve's last Newton correction can pass the end
        # by a little) starts at that end, where the step keeps it (its bracket then holds it)
        z0 = jnp.concatenate([jnp.stack([b1]), jnp.clip(a1, lows, highs)])
        return (z0, g1, bracket, (lows + 0.0 * one, highs + 0.0 * one, lows < lows),
                (STEP_LIMIT + 0.0 * one, 0.0 * one), jnp.zeros((), jnp.int32), jnp.zeros((), bool))

    def finish(state):
        z, g, _, _, _, i, finished = state
        b = z[0]
        return JointSolution(b, finished, i, jnp.abs(g[0]) / b, z[1:])

    return LoopParts(start, keep_going, step, finish)

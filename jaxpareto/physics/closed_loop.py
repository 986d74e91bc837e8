"""Closed-loop steady state: the effective batch B = C_eff x R(B) / (R(B) + Z) (seed eq. 4).

Sessions alternate a turn of latency R with a pause Z, so a fraction ρ = R / (R + Z) of them is
on the GPU at any time (operational analysis, Lazowska et al. 1984; X = C / (R + Z)). R depends
on B through TPOT, hence the fixed point.

The open loop's B = λ R(B) (`jaxpareto.physics.queueing`) is iterated from B = 0 without damping
while it climbs (`climbing_loop`): where its map is increasing the iterates B_{n+1} = λ R(B_n)
climb monotonically to its smallest fixed point (each stays below it: B_n <= B* gives
λ R(B_n) <= λ R(B*) = B*), the one the damped iteration reaches, at the rate λ R'(B*) against
the damped iteration's 1 - d (1 - λ R'(B*)); where the map turns back (near the prefill
capacity it can fall with B) an undamped step that passes the fixed point is taken back and the
iteration goes on damped from the B before it. On an open-loop grid of 4,320 points
(shared engine, spread lengths) that took 7 steps a point on average against 31 at the seed's
damping 0.4 (P99 33 against 91), and the sweep 2.2x less time; B moved within the tolerance
(8e-6 relative).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.settings import Solver
from jaxpareto.physics.chunked import LANES, Loop, LoopParts, chunked
from jaxpareto.physics.joint import JointSolution, JointSystem, joint_loop


class FixedPoint(NamedTuple):
    """Outcome of the fixed-point iteration for one point (scalars).

    Attributes:
        batch: B kept (the last iterate).
        converged: |B_target - B| <= tol x B at the B kept.
        iterations: updates performed (0 when the start already satisfies the test; the open
            loop's undamped steps count, those taken back too: `climbing_loop`).
        residual: |B_target - B| / B at the B kept.
    """

    batch: jax.Array
    converged: jax.Array
    iterations: jax.Array
    residual: jax.Array


def active_ratio(latency_ms: jax.Array, think_time_ms: jax.Array) -> jax.Array:
    """ρ = R / (R + Z): the share of its time a session occupies the GPU (seed step 3)."""
    return latency_ms / (latency_ms + think_time_ms)


def damped_loop(target: Callable[[jax.Array], jax.Array], start: jax.Array, solver: Solver,
                cap: jax.Array | None = None) -> LoopParts:
    """The damped fixed-point iteration of docs/model.md (the seed's reference solver), in parts
    (`jaxpareto.physics.chunked.LoopParts`; ``.run()`` runs it).

    From B = ``start`` (the closed loop's 1, seed step 4), each step computes the target
    (C_eff x ρ(B) in the closed loop, seed eq. 4); stop when |target - B| <= tol x B, else
    B <- (1 - damping) B + damping target; give up after ``max_iter`` updates. A non-finite
    target, or B above ``cap`` (the open loop's divergence: no fixed point below it), stops the
    loop unconverged. Where the map is increasing (the closed loop's), the iterates move
    monotonically to the nearest fixed point in the direction of target(start) - start.

    Args:
        target: B -> the target [sessions or requests] (scalar -> scalar).
        start: the first B (scalar). solver: damping, tol, max_iter. cap: B's bound, or None.

    Returns:
        `LoopParts` with state (B, target(B), updates); ``finish`` gives the `FixedPoint`, the
        status as data, never an exception.
    """
    cap = jnp.inf if cap is None else cap

    def keep_going(state):
        return _keep_going(*state[:3], solver, cap)

    def step(state):
        b, t, i = state
        b_next = (1.0 - solver.damping) * b + solver.damping * t
        return b_next, target(b_next), i + 1

    return LoopParts(lambda: (start, target(start), jnp.zeros((), jnp.int32)), keep_going, step,
                     lambda state: _finished(*state[:3], solver, cap))


def _keep_going(b, t, i, solver: Solver, cap):
    """An iteration at B with target t after i updates goes on: |t - B| > tol B, t finite, B at
    most ``cap``, fewer than ``max_iter`` updates."""
    return (jnp.abs(t - b) > solver.tol * b) & jnp.isfinite(t) & (b <= cap) & (i < solver.max_iter)


def _finished(b, t, i, solver: Solver, cap) -> FixedPoint:
    """The `FixedPoint` of an iteration stopped at B with target t after i updates."""
    return FixedPoint(b, (jnp.abs(t - b) <= solver.tol * b) & (b <= cap), i, jnp.abs(t - b) / b)


def climbing_loop(target: Callable[[jax.Array], jax.Array], solver: Solver, cap: jax.Array) -> LoopParts:
    """The open loop's iteration B <- λ R(B) from B = 0 (`jaxpareto.physics.queueing`), in parts
    (`jaxpareto.physics.chunked.LoopParts`): undamped while it climbs, damped once the map turns
    back.

    Where the map is increasing the undamped iterates climb to its smallest fixed point and stay
    below it, faster than damped ones (module docstring). Near the prefill capacity it need not
    be: the clusters of prefills that lengthen TPOT shrink as the decode step grows with B, so
    λ R(B) can fall with B, and an undamped step can pass the fixed point, or the cap. So a step
    goes at most to ``cap``, and an undamped step is taken back, the iteration going on as
    `damped_loop` from the B before it (the last iterate known to lie below a fixed point), once
    it lands where the target lies below its B by more than the tolerance (it passed a fixed
    point: coming down from there would find the nearest one above, not the smallest one the
    damped iteration from 0 finds where the map has several), where no target is finite, or at
    the cap with its target beyond (beyond capacity the damped iteration fails too). It stops,
    unconverged, at a non-finite target, at B above ``cap`` or after ``max_iter`` steps (a step
    taken back counts).

    What this test cannot see: a step that passes two fixed points of λ R(B) - B (down through
    one and up through the next) lands where the target lies above B again, and the climb goes
    on to a larger fixed point than the damped iteration's. The damped iteration, whose steps
    are 0.4 as long, can pass such a pair too; the two agree wherever the pair lies further
    apart than the undamped steps near it.

    Args:
        target: B -> λ R(B) [requests] (scalar -> scalar). solver: damping (once turned back),
            tol, max_iter. cap: B's bound (the KV slots).

    Returns:
        `LoopParts` with state (B, target(B), updates, turned back); ``finish`` gives the
        `FixedPoint`.
    """
    def keep_going(state):
        return _keep_going(*state[:3], solver, cap)

    def step(state):
        b, t, i, turned = state
        b_next = jnp.where(turned, (1.0 - solver.damping) * b + solver.damping * t, jnp.minimum(t, cap))
        t_next = target(b_next)
        # an undamped step past a fixed point (its target below it), to no finite target, or to
        # the cap with its target beyond, is taken back: the damped iteration goes on from B,
        # below the fixed point (beyond capacity it fails there too)
        passed = t_next < b_next * (1.0 - solver.tol)
        back = ~turned & (passed | ~jnp.isfinite(t_next) | ((b_next >= cap) & (t_next > b_next)))
        return jnp.where(back, b, b_next), jnp.where(back, t, t_next), i + 1, turned | back

    def finish(state):
        return _finished(*state[:3], solver, cap)

    def start():
        b = jnp.zeros_like(cap)
        return b, target(b), jnp.zeros((), jnp.int32), jnp.zeros((), bool)

    return LoopParts(start, keep_going, step, finish)


def _positive_root(intercept, slope, concurrency_eff, think_time_ms):
    """The positive B with B (α + β B + Z) = C (α + β B): β B² + (α + Z - C β) B - C α = 0.

    The product of the roots is -C α / β < 0, so exactly one is positive; it is taken in the
    form that avoids cancellation, and β = 0 (a flat line) gives B = C α / (α + Z).
    """
    b = intercept + think_time_ms - concurrency_eff * slope
    c_alpha = concurrency_eff * intercept
    disc = jnp.sqrt(b * b + 4.0 * slope * c_alpha)
    safe_slope = jnp.where(slope > 0, slope, 1.0)
    quadratic = jnp.where(b < 0, (disc - b) / (2.0 * safe_slope), 2.0 * c_alpha / (b + disc))
    flat = c_alpha / (intercept + think_time_ms)
    return jnp.where(slope > 0, quadratic, flat)


def solve_effective_batch_exact(
    latency_ms: Callable[[jax.Array], jax.Array],
    intercepts: jax.Array,
    slopes: jax.Array,
    concurrency_eff: jax.Array,
    think_time_ms: jax.Array,
) -> FixedPoint:
    """Closed-form fixed point for a piecewise-linear latency R(B).

    Wherever R(B) = α_i + β_i B, the fixed point B (R + Z) = C R is a quadratic in B; its
    positive root B_i is a true fixed point when line i is the active piece at B_i. The damped
    iteration from B = 1 moves monotonically (its map is increasing), so it reaches the nearest
    fixed point in the direction of B_target(1) - 1: the smallest consistent root >= 1 when
    B_target(1) >= 1, else the largest <= 1. This solver returns that same root.

    Args:
        latency_ms: R(B) [ms], equal at every B to one of the lines.
        intercepts, slopes: α_i [ms] and β_i [ms per session] of the lines, shape (k,).
        concurrency_eff: C_eff [sessions] (scalar, >= 1).
        think_time_ms: Z [ms] (scalar, >= 0).

    Returns:
        `FixedPoint` with ``iterations`` 0 and ``converged`` True when a consistent root was
        found (always, for finite inputs).
    """
    eps = 64.0 * jnp.finfo(jnp.result_type(concurrency_eff)).eps
    roots = _positive_root(intercepts, slopes, concurrency_eff, think_time_ms)
    on_line = jax.vmap(lambda r, a, s: jnp.abs(latency_ms(r) - (a + s * r)) <= eps * latency_ms(r))(
        roots, intercepts, slopes
    )
    r1 = latency_ms(jnp.ones_like(concurrency_eff))
    upward = concurrency_eff * active_ratio(r1, think_time_ms) >= 1.0
    above = jnp.where(on_line & (roots >= 1.0 - eps), roots, jnp.inf).min()
    below = jnp.where(on_line & (roots <= 1.0 + eps), roots, -jnp.inf).max()
    b = jnp.where(upward, above, below)
    found = jnp.isfinite(b)
    b = jnp.where(found, b, 1.0)
    t = concurrency_eff * active_ratio(latency_ms(b), think_time_ms)
    return FixedPoint(b, found, jnp.zeros((), jnp.int32), jnp.abs(t - b) / b)


def solve_open_loop_exact(latency_ms: Callable[[jax.Array], jax.Array], intercepts: jax.Array, slopes: jax.Array,
                          rate_per_ms: jax.Array, cap: jax.Array) -> FixedPoint:
    """Closed-form B = λ R(B) (the open loop, `jaxpareto.physics.queueing`) for a piecewise-linear R.

    On line i, B = λ α_i / (1 - λ β_i) where λ β_i < 1; the iteration from B = 0 rises to the
    smallest fixed point, which is the smallest root consistent with its line. None at or below
    ``cap``: the load is beyond capacity (``converged`` False).

    Args:
        latency_ms: R(B) [ms]. intercepts, slopes: α_i [ms], β_i [ms per request], shape (k,).
        rate_per_ms: λ [requests per ms] (> 0). cap: the largest B the server holds.
    """
    eps = 64.0 * jnp.finfo(jnp.result_type(rate_per_ms)).eps
    headroom = 1.0 - rate_per_ms * slopes
    roots = jnp.where(headroom > 0, rate_per_ms * intercepts / jnp.where(headroom > 0, headroom, 1.0), jnp.inf)
    on_line = jax.vmap(lambda r, a, s: jnp.abs(latency_ms(r) - (a + s * r)) <= eps * latency_ms(r))(
        jnp.where(jnp.isfinite(roots), roots, 1.0), intercepts, slopes)
    b = jnp.where(on_line & jnp.isfinite(roots), roots, jnp.inf).min()
    found = b <= cap
    b = jnp.where(found, b, 1.0)
    t = rate_per_ms * latency_ms(b)
    return FixedPoint(b, found, jnp.zeros((), jnp.int32), jnp.abs(t - b) / b)


class LoopInputs(NamedTuple):
    """What the loop depends on, as an explicit pytree (so it can be differentiated).

    Attributes:
        latency: whatever R(B) needs besides B (read by the ``latency_ms`` function).
        concurrency_eff: C_eff [sessions] (closed loop).
        think_time_ms: Z [ms] (closed loop).
        rate_per_ms: λ, requests arriving per ms (open loop).
        batch_cap: the largest B the server holds (open loop: none beyond it is a fixed point).
        active: False where the point is infeasible (its outputs are masked): an iterative
            solve then takes no step there, and gives its start, unconverged.
    """

    latency: object
    concurrency_eff: jax.Array
    think_time_ms: jax.Array
    rate_per_ms: jax.Array = 0.0
    batch_cap: jax.Array = float("inf")
    active: jax.Array = True


class LoopSolution(NamedTuple):
    """`solve_closed_loop`'s outcome: the `FixedPoint` and R(B)'s inner roots at it (shape (k,);
    the joint solve's, else empty), as constants (their derivatives come from polishing them,
    `jaxpareto.physics.roots.polished_root`)."""

    fixed_point: FixedPoint
    inner: jax.Array


def solve_closed_loop(latency_ms, inputs: LoopInputs, solver: Solver, lines=None, open_loop: bool = False,
                      joint: JointSystem | None = None) -> LoopSolution:
    """The closed-loop batch B, differentiable by implicit differentiation.

    The root of g(B) = C_eff x ρ(R(B)) - B is found by ``solver.name`` ("damped": the seed's
    iteration, with R(B)'s inner roots solved at every step; "newton": where R(B) holds inner
    roots and ``joint`` is given, Newton's method on B and them together,
    `jaxpareto.physics.joint`, else the damped iteration; "exact": `solve_effective_batch_exact`
    on the linear pieces ``lines(latency)`` of R), and its derivative with respect to everything g depends on (concurrency, think
    time, context, hit rate, efficiency factors, hardware and model numbers) is
    dB = -(∂g/∂θ · dθ) / (∂g/∂B) at the root (a `jax.custom_jvp`, so reverse mode works too):
    the iteration is never unrolled, and the forward pass costs nothing extra.

    Kinks: TPOT's max(memory, compute) and the MoE term min(B K, E) are differentiated on the
    active branch (JAX splits the derivative evenly at an exact tie, a measure-zero set);
    floor() in concurrency_max has zero derivative, so d/dC is 1 while C is below the memory cap
    and 0 above it.

    Args:
        latency_ms: R(latency, B) [ms], a module-level function (static).
        inputs: `LoopInputs`.
        solver: `Solver`: its ``name`` (static), "damped", "newton" or "exact", and the damped
            iteration's damping, tol and max_iter.
        lines: for "exact", a function of ``inputs.latency`` giving (intercepts, slopes) of
            R(B)'s linear pieces (static).
        open_loop: solve the open loop's B = λ R(B) from B = 0 instead (static;
            `jaxpareto.physics.queueing`), with ``inputs.rate_per_ms`` and ``inputs.batch_cap``.
        joint: R(B) with its inner roots as unknowns (`jaxpareto.physics.joint.JointSystem`,
            static), for the closed loop's "newton" solver; None: R(B) has none.

    Returns:
        `LoopSolution`; only the batch carries derivatives.
    """
    batch, converged, iterations, residual, inner = _closed_loop(latency_ms, solver.name, lines, open_loop, joint,
                                                                 inputs, solver)
    return LoopSolution(FixedPoint(batch, converged > 0.5, jnp.round(iterations).astype(jnp.int32), residual),
                        jax.lax.stop_gradient(inner))


def _target(latency_ms, open_loop, b, inputs: LoopInputs):
    r = latency_ms(inputs.latency, b)
    return inputs.rate_per_ms * r if open_loop else inputs.concurrency_eff * active_ratio(r, inputs.think_time_ms)


def _residual(latency_ms, open_loop, b, inputs: LoopInputs):
    return _target(latency_ms, open_loop, b, inputs) - b


@functools.lru_cache(maxsize=None)
def _iterative_solve(latency_ms, solver_name, open_loop, joint) -> Loop:
    """The iterative solve of ``solver_name`` for one point, a `Loop` over (inputs, solver) (the
    same object per arguments: `jaxpareto.physics.chunked.chunked` keys on it)."""

    def parts(args):
        inputs, solver = args
        if joint is not None and not open_loop and solver_name == "newton":
            loop = joint_loop(joint, inputs.latency, inputs.concurrency_eff, inputs.think_time_ms, solver)
        elif open_loop:  # undamped while B <- λ R(B) climbs from 0 (module docstring)
            loop = climbing_loop(lambda b: _target(latency_ms, True, b, inputs), solver,
                                 inputs.batch_cap + 0.0 * inputs.rate_per_ms)
        else:
            loop = damped_loop(lambda b: _target(latency_ms, False, b, inputs), jnp.ones_like(inputs.concurrency_eff),
                               solver)
        # an infeasible point takes no step: its stand-in inputs would cost the lanes as many steps
        # as a feasible point's (on the models benchmark's grid, 46 % of its points and a third of
        # the shared + LRU joint solve's steps) for outputs that are masked
        return loop._replace(keep_going=lambda state: loop.keep_going(state) & inputs.active)

    # where R(B) holds inner roots (damped or joint), a step is costly: a batch wider than the
    # lanes runs through refilled lanes (it costs its points' own steps, not its slowest point's
    # times its width; its last lanes narrowed), a batch no wider (a flat sub-batch) masked; the
    # damped solver narrows once more (its many steps, up to max_iter where its map's slope is
    # near 1, repay another compilation of the step; Newton's few did not); the open
    # loop narrows twice (its heavy-tailed step counts, under any solver name: the open loop has
    # no joint solve; nearly all of its cost lies outside the loop, and lanes ran it no faster);
    # the seed's steps are too cheap to repay either
    if open_loop:
        return Loop(parts, narrowings=2)
    return Loop(parts, narrowings=int(joint is not None and solver_name != "newton"),
                lanes=0 if joint is None else LANES)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2, 3, 4))
def _closed_loop(latency_ms, solver_name, lines, open_loop, joint, inputs: LoopInputs, solver: Solver):
    def r(b):
        return latency_ms(inputs.latency, b)

    inner = jnp.zeros((0,), jnp.result_type(inputs.think_time_ms))
    if solver_name != "exact":  # an iteration: its loop batched in chunks, however the caller batches
        found = chunked(_iterative_solve(latency_ms, solver_name, open_loop, joint))((inputs, solver))
        if isinstance(found, JointSolution):
            inner = found.inner
    elif open_loop:
        found = solve_open_loop_exact(r, *lines(inputs.latency), inputs.rate_per_ms, inputs.batch_cap)
    else:
        found = solve_effective_batch_exact(r, *lines(inputs.latency), inputs.concurrency_eff, inputs.think_time_ms)
    as_float = lambda v: v.astype(found.batch.dtype)  # noqa: E731  (one output dtype for the JVP)
    return found.batch, as_float(found.converged), as_float(found.iterations), found.residual, inner


@_closed_loop.defjvp
def _closed_loop_jvp(latency_ms, solver_name, lines, open_loop, joint, primals, tangents):
    inputs, solver = primals
    d_inputs, _ = tangents
    out = _closed_loop(latency_ms, solver_name, lines, open_loop, joint, inputs, solver)
    batch = out[0]
    # implicit function theorem at the root: g(B*(θ), θ) = 0
    dg_db = jax.jvp(lambda b: _residual(latency_ms, open_loop, b, inputs), (batch,), (jnp.ones_like(batch),))[1]
    dg_dtheta = jax.jvp(lambda i: _residual(latency_ms, open_loop, batch, i), (inputs,), (d_inputs,))[1]
    zero = jnp.zeros_like(batch)
    return out, (-dg_dtheta / dg_db, zero, zero, zero, jnp.zeros_like(out[4]))

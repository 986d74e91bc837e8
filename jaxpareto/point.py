"""The whole model at one grid point: memory, prefill, decode and the closed loop together.

This is the scalar function the grid code vmaps (once). Infeasible points are evaluated at
safe stand-in values and then masked to NaN (the double-where pattern), so they neither crash
nor leak NaN into gradients of the feasible points.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.cache import cache_survival
from jaxpareto.closed_loop import LoopInputs, active_ratio, solve_closed_loop
from jaxpareto.decode import EXPERT_ROUTINGS, DecodeCoefficients, decode_coefficients, decode_step, tpot_lines
from jaxpareto.hardware import HardwareParams, effective_tflops
from jaxpareto.intensity import operational_intensity
from jaxpareto.memory import memory_budget
from jaxpareto.model import ModelParams
from jaxpareto.prefill import prefill_tokens, ttft_ms
from jaxpareto.settings import Efficiency, Solver, Workload
from jaxpareto.units import MS_PER_S

DECODE_MEMORY, DECODE_COMPUTE, DECODE_NONE = 0, 1, -1
METHODS = ("damped", "exact")


class TurnLatency(NamedTuple):
    """What a turn's latency R(B) depends on besides the batch (scalars)."""

    ttft_ms: jax.Array
    osl: jax.Array
    decode: DecodeCoefficients


def turn_latency_ms(turn: TurnLatency, batch: jax.Array, routing: str = "seed") -> jax.Array:
    """Seed eq. 1: R(B) = TTFT + TPOT(B) x OSL [ms]."""
    return turn.ttft_ms + decode_step(turn.decode, batch, routing).tpot_ms * turn.osl


# One latency function per expert-routing model, defined once so the solver sees a stable one.
TURN_LATENCY = {routing: functools.partial(turn_latency_ms, routing=routing) for routing in EXPERT_ROUTINGS}


def turn_latency_lines(turn: TurnLatency) -> tuple[jax.Array, jax.Array]:
    """(intercepts, slopes) of R(B) on each linear piece of TPOT (for the exact solver)."""
    tpot = tpot_lines(turn.decode)
    zero = 0.0 * tpot.b_compute
    intercepts = jnp.stack([turn.ttft_ms + turn.osl * tpot.a_unsat, turn.ttft_ms + turn.osl * tpot.a_sat,
                            turn.ttft_ms + zero])
    slopes = jnp.stack([turn.osl * tpot.b_unsat, turn.osl * tpot.b_sat, turn.osl * tpot.b_compute])
    return intercepts, slopes


class PointOutputs(NamedTuple):
    """Every output of SPEC.md section 4 for one point (scalars; see `jaxpareto.schema`)."""

    ttft_ms: jax.Array
    tpot_ms: jax.Array
    latency_ms: jax.Array
    batch_eff: jax.Array
    gpu_active_ratio: jax.Array
    turns_per_s: jax.Array
    output_tokens_per_s_per_user: jax.Array
    output_tokens_per_s_per_gpu: jax.Array
    kv_per_session_gb: jax.Array
    concurrency_max: jax.Array
    concurrency_eff: jax.Array
    prefill_tokens: jax.Array
    t_weight_ms: jax.Array
    t_kv_ms: jax.Array
    t_compute_ms: jax.Array
    decode_bound: jax.Array
    operational_intensity: jax.Array
    prefill_share: jax.Array
    hit_rate_eff: jax.Array
    feasible: jax.Array
    converged: jax.Array
    iterations: jax.Array


def evaluate_point(
    hw: HardwareParams,
    model: ModelParams,
    tp: jax.Array,
    concurrency: jax.Array,
    think_time_s: jax.Array,
    context_tokens: jax.Array,
    hit_rate: jax.Array,
    workload: Workload,
    efficiency: Efficiency,
    solver: Solver,
    method: str = "damped",
    expert_routing: str = "seed",
) -> PointOutputs:
    """Evaluate seed eqs. 1-5 at one configuration (SPEC.md section 3).

    Args:
        hw: one GPU (scalars).
        model: one model (scalars).
        tp: G, tensor-parallel GPUs.
        concurrency: C, sessions offered.
        think_time_s: Z, pause between turns [s].
        context_tokens: L, context of the turn [tokens].
        hit_rate: h, prefix-cache hit rate in [0, 1].
        workload, efficiency, solver: shared scalars.
        method: closed-loop solver, static: "damped" (the seed's iteration, the reference) or
            "exact" (closed form per linear piece of R(B), `solve_effective_batch_exact`).
        expert_routing: distinct experts per decode step, static: "seed" (min(B K, E)) or
            "uniform" (E (1 - (1 - K/E)^B)); see `jaxpareto.decode.experts_touched`.

    Returns:
        `PointOutputs`. Where ``feasible`` is False (no memory left for KV, or not one
        session fits) every performance output is NaN, ``decode_bound`` is -1,
        ``iterations`` 0 and ``converged`` False; the memory outputs and ``prefill_tokens``
        are still reported, as they explain the infeasibility.
    """
    kv_context = jnp.where(workload.kv_context_tokens > 0, workload.kv_context_tokens, context_tokens)
    memory = memory_budget(hw, model, tp, concurrency, kv_context)
    ok = memory.feasible
    concurrency_eff = jnp.where(ok, memory.concurrency_eff, 1.0)  # safe stand-in when infeasible

    tflops = effective_tflops(hw, model.compute_bits)
    hit_rate_eff = hit_rate * cache_survival(think_time_s, workload.cache_ttl_s, workload.pause_distribution,
                                             workload.pause_sigma)
    tokens = prefill_tokens(context_tokens, workload.delta_tokens, hit_rate_eff)
    ttft = ttft_ms(model.params_active_b, tokens, tp, tflops, efficiency.eta_prefill)
    think_ms = think_time_s * MS_PER_S

    coefficients = decode_coefficients(
        hw, model, tp, context_tokens, tflops, efficiency.eta_decode, efficiency.elementwise_overhead
    )
    if method not in METHODS or expert_routing not in EXPERT_ROUTINGS:
        raise ValueError(f"method {method!r} / expert_routing {expert_routing!r} not in {METHODS} / {EXPERT_ROUTINGS}")
    if method == "exact" and expert_routing != "seed":
        raise ValueError("the exact solver needs the seed's piecewise-linear expert count")
    turn = TurnLatency(ttft, workload.osl, coefficients)
    latency_ms = TURN_LATENCY[expert_routing]
    solution = solve_closed_loop(latency_ms, LoopInputs(turn, concurrency_eff, think_ms), solver, method,
                                 turn_latency_lines)
    step = decode_step(coefficients, solution.batch, expert_routing)
    latency = latency_ms(turn, solution.batch)
    turns_per_s = concurrency_eff / ((latency + think_ms) / MS_PER_S)

    def masked(value):
        return jnp.where(ok, value, jnp.nan)

    return PointOutputs(
        ttft_ms=masked(ttft),
        tpot_ms=masked(step.tpot_ms),
        latency_ms=masked(latency),
        batch_eff=masked(solution.batch),
        gpu_active_ratio=masked(active_ratio(latency, think_ms)),
        turns_per_s=masked(turns_per_s),
        output_tokens_per_s_per_user=masked(MS_PER_S / step.tpot_ms),
        output_tokens_per_s_per_gpu=masked(turns_per_s * workload.osl / tp),
        kv_per_session_gb=memory.kv_per_session_gb,
        concurrency_max=memory.concurrency_max.astype(jnp.int32),
        concurrency_eff=memory.concurrency_eff.astype(jnp.int32),
        prefill_tokens=tokens,
        t_weight_ms=masked(step.t_weight_ms),
        t_kv_ms=masked(step.t_kv_ms),
        t_compute_ms=masked(step.t_compute_ms),
        decode_bound=jnp.where(ok, jnp.where(step.compute_bound, DECODE_COMPUTE, DECODE_MEMORY), DECODE_NONE).astype(
            jnp.int8
        ),
        operational_intensity=masked(operational_intensity(
            hw, model, tp, solution.batch, step, tokens, context_tokens, workload.osl)),
        prefill_share=masked(ttft / latency),
        hit_rate_eff=hit_rate_eff,
        feasible=ok,
        converged=ok & solution.converged,
        iterations=jnp.where(ok, solution.iterations, 0).astype(jnp.int32),
    )

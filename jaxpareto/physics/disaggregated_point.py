"""The whole model at one grid point under disaggregated serving (``serving="disaggregated"`` or
"conditional"; `jaxpareto.physics.disaggregation`): the counterpart of
`jaxpareto.physics.point.evaluate_point`, which calls it, with the same outputs.

Memory: each decode worker holds the KV of its C / D sessions (seed eq. 5 on its G GPUs; sessions
beyond what it holds are not admitted, under either profile), and each prefill worker must hold
the weights and one turn's context. The costs on either pool's GPUs are those of the aggregated
model (`jaxpareto.physics.costs.tp_costs`), so the two modes compare like for like.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.hardware import engine_gpu
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.schema import PERCENTILE_VARIABLES
from jaxpareto.definitions.settings import Efficiency, Solver, Workload
from jaxpareto.definitions.units import MS_PER_S
from jaxpareto.physics.closed_loop import active_ratio
from jaxpareto.physics.costs import engine_efficiency, prefill_alone_ms, tp_costs, turn_tokens
from jaxpareto.physics.disaggregation import (BISECTIONS, NEWTON_STEPS, Pools, kv_link_gbs, kv_transfer_ms,
                                              solve_decode_batch)
from jaxpareto.physics.intensity import operational_intensity
from jaxpareto.physics.limits import PREFILL_WORKER_TOO_SMALL, context_fits, heads_split, infeasible_reason
from jaxpareto.physics.memory import _INT32_MAX, memory_budget, session_contexts
from jaxpareto.physics.roots import INNER_ROOT_EPS
from jaxpareto.physics.outputs import DECODE_COMPUTE, DECODE_MEMORY, DECODE_NONE, PointOutputs



def _mix(weights, times, cv):
    """(mean, c_S²) of a mix of prefill kinds with ``weights`` and mean ``times``, each kind
    lognormal with coefficient of variation ``cv``; (0, 0) for an empty mix."""
    total = sum(weights)
    safe = jnp.where(total > 0, total, 1.0)
    mean = sum(w * t for w, t in zip(weights, times)) / safe
    second = (1.0 + cv * cv) * sum(w * t * t for w, t in zip(weights, times)) / safe
    scv = jnp.where(total > 0, jnp.maximum(second / jnp.where(total > 0, mean * mean, 1.0) - 1.0, 0.0), 0.0)
    return jnp.where(total > 0, mean, 0.0), scv


def evaluate_disaggregated(point: GridPoint, workload: Workload, efficiency: Efficiency, solver: Solver,
                           options: ModelOptions):
    """The model at one configuration of a disaggregated replica.

    Args:
        point: one configuration (`GridPoint`, scalars): as `evaluate_point`'s, with ``tp`` the
            decode workers' TP G, ``prefill_tp`` G_p (0: G), ``prefill_workers`` P and
            ``decode_workers`` D; ``concurrency`` C is the replica's sessions.
        workload, efficiency: shared scalars (``kv_link_gbs``, ``kv_link_latency_us`` and
            ``local_prefill_tokens`` among them). solver: its ``tol`` (the root is bracketed,
            whatever its name). options: ``serving`` "disaggregated" or "conditional".

    Returns:
        `jaxpareto.physics.outputs.PointOutputs`: the replica's throughput and sessions,
        ``batch_eff`` its decode workers' decode batch summed, per-GPU figures over its
        P G_p + D G GPUs; the latency percentiles and goodput NaN (not modelled here).
        Infeasible points are NaN with their reason: either pool's heads (1), the context (2),
        a decode worker's weights (3) or sessions (4), a prefill worker that cannot hold the
        weights and one turn (6).
    """
    measured = options.profile == "measured"
    engine = point.get("engine")
    efficiency = engine_efficiency(efficiency, engine)
    hw, model, tp = engine_gpu(point.gpu, engine, options), point.model, point.tp
    prefill_tp = jnp.where(point.prefill_tp > 0, point.prefill_tp, tp)
    prefill_workers, decode_workers = point.prefill_workers, point.decode_workers
    replica_gpus = prefill_workers * prefill_tp + decode_workers * tp
    context_tokens, hit_rate = point.context_tokens, point.hit_rate
    think_ms = point.think_time_s * MS_PER_S
    decode_context, kv_context = session_contexts(context_tokens, workload, measured, engine)

    memory = memory_budget(hw, model, tp, point.concurrency / decode_workers, kv_context, engine)
    prefill_memory = memory_budget(hw, model, prefill_tp, 1.0, kv_context, engine)
    # C / D may be below 1 (fewer sessions than decode workers): a worker must hold one session
    reason = infeasible_reason(heads_split(model, tp) & heads_split(model, prefill_tp),
                               context_fits(model, context_tokens + workload.osl), memory.available_gb > 0,
                               memory.concurrency_max >= 1)
    reason = jnp.where((reason == 0) & (prefill_memory.concurrency_max < 1), PREFILL_WORKER_TOO_SMALL,
                       reason).astype(jnp.int8)
    ok = reason == 0
    sessions = jnp.where(ok, memory.concurrency_eff, 1.0)  # per decode worker; safe stand-in when infeasible

    turn = turn_tokens(workload, engine, options, point.think_time_s, context_tokens, hit_rate)
    hit_rate, hit_tokens, tokens, chunk_tokens = turn
    decode_costs = tp_costs(hw, model, tp, turn, context_tokens, decode_context, efficiency, options)
    prefill_costs = tp_costs(hw, model, prefill_tp, turn, context_tokens, decode_context, efficiency,
                             options)

    # the two kinds of turn, a hit (ΔL tokens) and a miss (L), each local or remote
    kinds = (hit_tokens, context_tokens)
    shares = (hit_rate, 1.0 - hit_rate)
    if options.serving == "conditional":
        local = tuple(jnp.where(t <= workload.local_prefill_tokens, 1.0, 0.0) for t in kinds)
    else:
        local = (0.0 * tokens, 0.0 * tokens)
    local_weights = tuple(s * q for s, q in zip(shares, local))
    remote_weights = tuple(s * (1.0 - q) for s, q in zip(shares, local))
    # a prefill occupies its GPUs for its compute and reads; the request overhead (tokenising,
    # scheduling) delays its first token without occupying them, as in the aggregated engine
    overhead_ms = efficiency.ttft_overhead_ms

    def busy_ms(costs, tokens):
        return prefill_alone_ms(costs, tokens, chunk_tokens, efficiency, options) - overhead_ms

    local_ms, local_scv = _mix(local_weights, [busy_ms(decode_costs, t) for t in kinds], workload.isl_cv)
    remote_ms, remote_scv = _mix(remote_weights, [busy_ms(prefill_costs, t) for t in kinds], workload.isl_cv)
    remote_tokens, _ = _mix(remote_weights, kinds, 0.0)
    link = kv_link_gbs(hw, replica_gpus, workload.kv_link_gbs)
    transfer_ms = kv_transfer_ms(model, remote_tokens, prefill_tp, tp, link, workload.kv_link_latency_us)
    local_share = sum(local_weights)

    pools = Pools(decode_costs.decode, workload.osl, sessions, think_ms, decode_workers, prefill_workers,
                  local_share, local_ms, local_scv, remote_ms, remote_scv, transfer_ms, overhead_ms + 0.0 * tokens)
    tol = jnp.maximum(solver.tol, INNER_ROOT_EPS * jnp.finfo(think_ms.dtype).eps)
    batch, converged, turn = solve_decode_batch(pools, tol, options)
    step, latency = turn.step, turn.latency_ms
    turns_per_s = decode_workers * sessions / ((latency + think_ms) / MS_PER_S)
    local_tokens, _ = _mix(local_weights, kinds, 0.0)
    # the replica's GPU-time at η_d and η_p over its GPUs: decode and local prefills on the decode
    # workers, remote prefills on the prefill workers
    gpu_ms_per_turn = (workload.osl * decode_costs.decode.compute_ms / efficiency.eta_decode * tp
                       + local_share * local_tokens * decode_costs.prefill_ms_per_token * tp
                       + (1.0 - local_share) * remote_tokens * prefill_costs.prefill_ms_per_token * prefill_tp)
    utilization = turns_per_s / MS_PER_S * gpu_ms_per_turn / replica_gpus
    zero = 0.0 * tokens

    def masked(value):
        return jnp.where(ok, value, jnp.nan)

    nan = jnp.nan + zero
    return PointOutputs(
        ttft_ms=masked(turn.ttft_ms),
        tpot_ms=masked(turn.tpot_ms),
        latency_ms=masked(latency),
        batch_eff=masked(batch * decode_workers),
        gpu_active_ratio=masked(active_ratio(latency, think_ms)),
        turns_per_s=masked(turns_per_s),
        output_tokens_per_s_per_user=masked(MS_PER_S / turn.tpot_ms),
        output_tokens_per_s_per_gpu=masked(turns_per_s * workload.osl / replica_gpus),
        kv_per_session_gb=memory.kv_per_session_gb,
        concurrency_max=jnp.minimum(memory.concurrency_max * decode_workers, _INT32_MAX).astype(jnp.int32),
        concurrency_eff=jnp.minimum(jnp.round(memory.concurrency_eff * decode_workers), _INT32_MAX).astype(jnp.int32),
        prefill_tokens=tokens,
        t_weight_ms=masked(step.t_weight_ms),
        t_kv_ms=masked(step.t_kv_ms),
        t_compute_ms=masked(step.t_compute_ms),
        decode_bound=jnp.where(ok, jnp.where(step.compute_bound, DECODE_COMPUTE, DECODE_MEMORY), DECODE_NONE).astype(
            jnp.int8),
        operational_intensity=masked(operational_intensity(hw, model, tp, batch, step, tokens, context_tokens,
                                                           workload.osl)),
        prefill_share=masked(turn.ttft_ms / latency),
        hit_rate_eff=hit_rate + zero,
        tier_hit_rate=masked(zero),
        cache_lifetime_s=workload.cache_ttl_s + zero if options.cache_model == "ttl" else zero + jnp.inf,
        gpu_utilization=masked(utilization),
        memory_wait_ms=masked(zero),
        memory_wait_probability=masked(zero),
        request_throughput=masked(turns_per_s),
        **{name: nan for name in PERCENTILE_VARIABLES},
        feasible=ok,
        infeasible_reason=reason,
        converged=ok & converged,
        iterations=jnp.where(ok, BISECTIONS + NEWTON_STEPS, 0).astype(jnp.int32),
    )


__all__ = ["evaluate_disaggregated"]

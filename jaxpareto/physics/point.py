"""The whole model at one grid point: memory, prefill, decode and the closed loop together.

This is the scalar function the grid code vmaps (once). Infeasible points are evaluated at
safe stand-in values and then masked to NaN (the double-where pattern), so they neither crash
nor leak NaN into gradients of the feasible points.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.engine import EngineParams
from jaxpareto.physics.attention import causal_pairs, window_pairs
from jaxpareto.physics.cache import cache_survival, lru_survival
from jaxpareto.physics.communication import allreduce_time
from jaxpareto.physics.closed_loop import LoopInputs, active_ratio, solve_closed_loop
from jaxpareto.physics.decode import (DecodeCoefficients, DecodeStep, decode_coefficients, decode_step,
                                     experts_touched, tpot_lines)
from jaxpareto.physics.engine import shared_turn, step_ms, synchronised_turn
from jaxpareto.definitions.hardware import effective_tflops
from jaxpareto.physics.intensity import operational_intensity
from jaxpareto.physics.limits import LOAD_BEYOND_CAPACITY, context_fits, heads_split, infeasible_reason
from jaxpareto.physics.layout import rank_model
from jaxpareto.physics.memory import _INT32_MAX, memory_budget, session_gb
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.physics.prefill import PrefillWork, prefill_tokens, prefill_work, ttft_ms
from jaxpareto.physics.percentiles import PERCENTILES, TurnSpread, latency_percentiles
from jaxpareto.physics.queueing import PrefillMix, fcfs_wait_scale, mg1_wait_ms, paused_sessions, prefill_mix, \
    slot_wait_ms
from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.schema import PERCENTILE_VARIABLES
from jaxpareto.definitions.settings import SOLVERS, Efficiency, Solver, Workload
from jaxpareto.definitions.units import BYTES_PER_GB, FLOPS_PER_TFLOPS, MS_PER_S

DECODE_MEMORY, DECODE_COMPUTE, DECODE_NONE = 0, 1, -1
# The fixed point's tolerance floor, in units of the dtype's eps, with the shared engine or LRU.
_INNER_ROOT_EPS = 64


class TurnLatency(NamedTuple):
    """What a turn's latency R(B) depends on besides the batch (scalars).

    Attributes:
        ttft_ms: the turn's TTFT alone (seed eq. 2) when it does not depend on B (cache models
            "given" and "ttl"), else unused.
        osl: output tokens per turn [tokens].
        decode: the decode step's coefficients.
        prefill_ms_per_token: c_p, eq. 2's time for one prefill token [ms].
        context_tokens: L [tokens]. hit_tokens: min(ΔL, L) [tokens].
        hit_rate: h after a TTL (the warm-cache rate the LRU model scales).
        prefill_tokens: L_prefill when it does not depend on B [tokens].
        concurrency: C_eff [sessions]. slots: sessions the KV memory holds active [sessions].
        think_time_s: Z [s]. pause_sigma: lognormal σ.
        tier_slots: session caches the host tier holds. tier_load_ms: one context's KV from it [ms].
        chunk_tokens: prefill tokens per engine step (shared prefill).
        ttft_fixed_ms: the opt-in fixed TTFT terms (request overhead, all-reduce latency) [ms].
        ttft_overhead_ms: the request overhead alone (the engine times its steps itself) [ms].
        rate_per_ms: λ, requests arriving per ms (open loop; `jaxpareto.physics.queueing`).
        paused_sessions: P, sessions between turns (open loop).
        isl_cv: the prefill tokens' coefficient of variation (the M/G/1 wait's c_S²).
    """

    ttft_ms: jax.Array
    osl: jax.Array
    decode: DecodeCoefficients
    prefill_ms_per_token: jax.Array = 0.0
    context_tokens: jax.Array = 0.0
    hit_tokens: jax.Array = 0.0
    hit_rate: jax.Array = 0.0
    prefill_tokens: jax.Array = 0.0
    concurrency: jax.Array = 1.0
    slots: jax.Array = 1.0
    think_time_s: jax.Array = 0.0
    pause_sigma: jax.Array = 1.0
    tier_slots: jax.Array = 0.0
    tier_load_ms: jax.Array = 0.0
    chunk_tokens: jax.Array = Workload.prefill_chunk_tokens  # the field's default
    ttft_fixed_ms: jax.Array = 0.0
    ttft_overhead_ms: jax.Array = 0.0
    rate_per_ms: jax.Array = 0.0
    paused_sessions: jax.Array = 0.0
    isl_cv: jax.Array = 0.0


class TurnState(NamedTuple):
    """Everything about a turn at batch B (scalars; see `turn_state`).

    Besides the latencies: ``mix`` (the prefill hit/miss mix), ``queue_wait_ms`` and
    ``queue_busy`` (the open loop's mean wait for prefill and the prefill queue's ρ; 0 in the
    closed loop), ``decode_step_ms`` and ``mixed_step_ms`` (T_0 and T_f, steps without and with
    a prefill chunk) and ``mixed_share`` (the share of time in the latter), for the percentiles.
    """

    latency_ms: jax.Array
    memory_wait_ms: jax.Array
    ttft_ms: jax.Array
    tpot_ms: jax.Array
    step: DecodeStep
    batch_run: jax.Array
    prefill: PrefillWork
    cache_lifetime_s: jax.Array
    prefill_load: jax.Array
    mix: PrefillMix
    queue_wait_ms: jax.Array
    queue_busy: jax.Array
    decode_step_ms: jax.Array
    mixed_step_ms: jax.Array
    mixed_share: jax.Array


def turn_state(turn: TurnLatency, batch: jax.Array, options: ModelOptions = ModelOptions()) -> TurnState:
    """The turn at closed-loop batch B under the model ``options`` (static).

    Seed eq. 1, R(B) = TTFT + TPOT(B) x OSL, where

    - ``cache_model="lru"``: at most M = ``slots`` of the B active sessions run (hold their KV);
      the rest wait for memory, R = R_run(min(B, M)) x max(B / M, 1) (Little's law: X = M / R_run,
      so B - M sessions wait B / M - 1 turn times), a wait that delays the first token and is
      part of TTFT. The hit rate is h x the Che survival (`jaxpareto.physics.cache`) in the M - B_run slots
      the running sessions leave free, with every session not running (C - B_run: paused or
      waiting) competing for them; misses may hit the host tier, which they compete for too.
    - ``prefill_model="shared"``: TTFT and TPOT from the chunked-prefill engine (`jaxpareto.physics.engine`).
    - ``profile="measured"``: sessions beyond the ``slots`` wait as under the LRU model, and a
      prefill chunk also loads the routed experts its tokens touch.
    - ``arrivals="poisson"`` (`jaxpareto.physics.queueing`): the sessions are the B in their
      turn plus the P paused; prefills wait first-come first-served (M/G/1), in the shared
      engine at the load arrivals see (no arrival-theorem correction), else for the GPUs' full
      prefill speed, whose load λ S must stay below 1 (else TTFT is inf).
    """
    queue = options.cache_model == "lru" or options.profile == "measured"
    open_loop = options.open_loop
    concurrency = batch + turn.paused_sessions if open_loop else turn.concurrency
    if options.cache_model == "lru":
        batch_run = jnp.minimum(batch, turn.slots)
        idle = jnp.maximum(concurrency - batch_run, 0.0)
        free = turn.slots - batch_run
        gpu = lru_survival(free, idle, turn.think_time_s, options.pause_distribution, turn.pause_sigma)
        with_tier = lru_survival(free + turn.tier_slots, idle, turn.think_time_s, options.pause_distribution,
                                 turn.pause_sigma)
        work = prefill_work(turn.context_tokens, turn.hit_tokens, turn.hit_rate * gpu.survival,
                            turn.hit_rate * (with_tier.survival - gpu.survival), turn.tier_load_ms,
                            turn.prefill_ms_per_token)
        lifetime = gpu.lifetime_s
        isolated_ttft = work.tokens * turn.prefill_ms_per_token + turn.ttft_fixed_ms + work.delay_ms
    else:
        batch_run = jnp.minimum(batch, turn.slots) if queue else batch
        zero = 0.0 * turn.hit_rate
        work = PrefillWork(turn.prefill_tokens, turn.hit_rate, zero, zero)
        lifetime = zero + jnp.inf
        isolated_ttft = turn.ttft_ms
    step = decode_step(turn.decode, batch_run, options.expert_routing)
    mix = prefill_mix(work.tokens, turn.hit_tokens, work.hit_rate_eff, turn.isl_cv)
    zero = 0.0 * batch
    if options.prefill_model == "shared":
        extra = prefill_expert_ms(turn.decode, batch_run, options) if options.profile == "measured" else None
        if options.arrivals == "synchronised":
            half = decode_step(turn.decode, batch_run / 2.0, options.expert_routing)
            engine = synchronised_turn(step, half, batch_run, work.tokens, turn.osl, turn.chunk_tokens,
                                       turn.prefill_ms_per_token, turn.decode.eta_decode,
                                       turn.decode.elementwise_overhead, extra)
        else:
            engine = shared_turn(step, batch_run, zero + jnp.inf if open_loop else concurrency, work.tokens,
                                 turn.osl, turn.chunk_tokens, turn.prefill_ms_per_token, turn.decode.eta_decode,
                                 turn.decode.elementwise_overhead, extra,
                                 fcfs_wait_scale(mix.scv) if open_loop else None, decode_batch=open_loop)
        ttft = engine.ttft_ms + turn.ttft_overhead_ms + work.delay_ms
        tpot, load = engine.tpot_ms, engine.prefill_load
        steps = (engine.decode_step_ms, engine.mixed_step_ms, engine.seen_load)
        queue_wait, queue_busy = (engine.ttft_ms - engine.service_ms, engine.seen_load) if open_loop else (zero, zero)
    else:
        ttft, tpot, load = isolated_ttft, step.tpot_ms, zero
        steps = (tpot, tpot, zero)
        queue_wait, queue_busy = zero, zero
        if open_loop:  # one prefill at a time at the GPUs' full speed: an M/G/1 queue
            queue_wait, queue_busy = mg1_wait_ms(turn.rate_per_ms, isolated_ttft, mix.scv)
            ttft = ttft + queue_wait
    wait = zero
    if queue:
        wait = (ttft + tpot * turn.osl) * (jnp.maximum(batch / turn.slots, 1.0) - 1.0)
        ttft = ttft + wait
    return TurnState(ttft + tpot * turn.osl, wait, ttft, tpot, step, batch_run, work, lifetime, load, mix,
                     queue_wait, queue_busy, *steps)


def prefill_expert_ms(decode: DecodeCoefficients, batch: jax.Array, options: ModelOptions):
    """p -> the routed experts p prefill tokens load beyond those of a decode batch B [ms at peak
    bandwidth] (measured profile: prefill reads the weights once per chunk, and a MoE chunk the
    experts its tokens touch; dense models: 0)."""
    def extra(p):
        touched = experts_touched(batch + p, decode.experts, decode.experts_per_token, options.expert_routing)
        alone = experts_touched(batch, decode.experts, decode.experts_per_token, options.expert_routing)
        return (touched - alone) * decode.expert_ms
    return extra


def isolated_prefill_ms(decode: DecodeCoefficients, tokens: jax.Array, chunk_tokens: jax.Array,
                        prefill_ms_per_token: jax.Array, options: ModelOptions) -> jax.Array:
    """A prefill of ``tokens`` alone on the GPUs as a roofline (the measured profile's eq. 2):
    ceil-free max(tokens / P, 1) chunks of min(tokens, P) tokens, each step the larger of its
    compute and the weights (and experts) it reads, plus the step's fixed time [ms]."""
    idle = decode_step(decode, 0.0 * tokens, options.expert_routing)
    chunk = jnp.minimum(tokens, chunk_tokens)
    one = step_ms(idle, decode.eta_decode, decode.elementwise_overhead, chunk, prefill_ms_per_token,
                  prefill_expert_ms(decode, 0.0 * tokens, options)(chunk))
    return jnp.maximum(tokens / chunk_tokens, 1.0) * one


def _with_slot_wait(state: TurnState, slots: jax.Array, rate_per_ms: jax.Array, osl_cv: jax.Array) -> TurnState:
    """The open-loop turn with the wait for a KV slot added to TTFT (in ``memory_wait_ms``): a
    request holds its slot for its prefill and decode, whose spread is the output's."""
    hold = state.latency_ms - state.queue_wait_ms - state.memory_wait_ms
    decode = state.latency_ms - state.ttft_ms
    wait, waits = slot_wait_ms(slots, rate_per_ms, hold, (decode * osl_cv / hold) ** 2)
    busy = 1.0 - (1.0 - state.queue_busy) * (1.0 - waits)
    return state._replace(ttft_ms=state.ttft_ms + wait, latency_ms=state.latency_ms + wait,
                          memory_wait_ms=state.memory_wait_ms + wait, queue_wait_ms=state.queue_wait_ms + wait,
                          queue_busy=jnp.where(jnp.isfinite(wait), busy, 1.0))


def turn_latency_ms(turn: TurnLatency, batch: jax.Array, options: ModelOptions = ModelOptions()) -> jax.Array:
    """R(B) [ms] under ``options`` (`turn_state`; what it does not need is traced away)."""
    return turn_state(turn, batch, options).latency_ms


def turn_decode_ms(turn: TurnLatency, batch: jax.Array, options: ModelOptions = ModelOptions()) -> jax.Array:
    """OSL x TPOT(B) [ms]: a turn's time in the decode batch, whose Little's law B = λ OSL TPOT(B)
    sets the open loop's decode batch (`turn_state`)."""
    return turn_state(turn, batch, options).tpot_ms * turn.osl


@functools.lru_cache(maxsize=None)
def latency_function(options: ModelOptions):
    """One function per options, the same object every time (the solver keys on it): R(B) for
    the closed loop, OSL x TPOT(B) for the open loop."""
    return functools.partial(turn_decode_ms if options.open_loop else turn_latency_ms, options=options)


def turn_latency_lines(turn: TurnLatency) -> tuple[jax.Array, jax.Array]:
    """(intercepts, slopes) of R(B) on each linear piece of TPOT (for the exact solver); of
    OSL x TPOT(B) under the open loop (``rate_per_ms`` > 0)."""
    tpot = tpot_lines(turn.decode)
    ttft = turn.ttft_ms
    ttft = jnp.where(turn.rate_per_ms > 0, 0.0, ttft)  # the open loop solves OSL x TPOT(B) alone
    intercepts = jnp.stack([ttft + turn.osl * tpot.a_unsat, ttft + turn.osl * tpot.a_sat,
                            ttft + turn.osl * tpot.a_compute])
    slopes = jnp.stack([turn.osl * tpot.b_unsat, turn.osl * tpot.b_sat, turn.osl * tpot.b_compute])
    return intercepts, slopes


class PointOutputs(NamedTuple):
    """Every output of README, "The dataset" for one point (scalars; see `jaxpareto.definitions.schema`)."""

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
    tier_hit_rate: jax.Array
    cache_lifetime_s: jax.Array
    gpu_utilization: jax.Array
    memory_wait_ms: jax.Array
    request_throughput: jax.Array
    p50_ttft_ms: jax.Array
    p90_ttft_ms: jax.Array
    p99_ttft_ms: jax.Array
    p50_tpot_ms: jax.Array
    p90_tpot_ms: jax.Array
    p99_tpot_ms: jax.Array
    p50_itl_ms: jax.Array
    p90_itl_ms: jax.Array
    p99_itl_ms: jax.Array
    p50_e2el_ms: jax.Array
    p90_e2el_ms: jax.Array
    p99_e2el_ms: jax.Array
    request_goodput: jax.Array
    feasible: jax.Array
    infeasible_reason: jax.Array
    converged: jax.Array
    iterations: jax.Array


def engine_efficiency(efficiency: Efficiency, engine: EngineParams | None) -> Efficiency:
    """The factors at a point: the engine's own where it sets them, else the shared ones."""
    if engine is None:
        return efficiency
    return jax.tree_util.tree_map(lambda own, mask, shared: jnp.where(mask > 0, own, shared),
                                  engine.efficiency, engine.efficiency_mask, efficiency)


def evaluate_point(
    point: GridPoint,
    workload: Workload,
    efficiency: Efficiency,
    solver: Solver,
    options: ModelOptions = ModelOptions(),
    percentiles: bool = True,
) -> PointOutputs:
    """Evaluate seed eqs. 1-5 at one configuration (docs/model.md).

    Args:
        point: one configuration (`GridPoint`, scalars): ``gpu`` (`HardwareParams`), ``model``
            (`ModelParams`), ``tp`` G (tensor-parallel GPUs), ``concurrency`` C (sessions offered;
            the closed loop) or ``request_rate`` λ (requests per s; ``arrivals="poisson"``),
            ``think_time_s`` Z (pause between turns) [s], ``context_tokens`` L (context of the
            turn) [tokens], ``hit_rate`` h (prefix-cache hit rate in [0, 1]; of a warm cache
            under the TTL and LRU models).
        workload, efficiency: shared scalars.
        solver: the closed-loop solver and its controls; ``solver.name`` (static) is "damped"
            (the seed's iteration, the reference) or "exact" (closed form per linear piece of
            R(B), `solve_effective_batch_exact`; needs ``options.piecewise_linear``).
        options: which equations (`jaxpareto.definitions.options.ModelOptions`, static); the defaults are
            the seed's. With the shared engine or the LRU model the fixed point's tolerance is at
            least 64 eps of the dtype (7.6e-6 in float32): R(B) then contains inner roots.
        percentiles: compute the latency percentiles and the goodput (static; False leaves them
            NaN and skips their code: the validation and the calibration read means only).

    Returns:
        `PointOutputs`. Where ``feasible`` is False (no memory left for KV, not one session
        fits, or, in the open loop, the load beyond capacity) every performance output is NaN, ``decode_bound`` is -1,
        ``iterations`` 0 and ``converged`` False; the memory outputs and ``prefill_tokens``
        are still reported, as they explain the infeasibility.

    Raises:
        ValueError: an unknown solver or option, or "exact" with a non-linear R(B).
    """
    options.validate()
    measured = options.profile == "measured"
    engine = point.get("engine")
    efficiency = engine_efficiency(efficiency, engine)
    if solver.name not in SOLVERS or (solver.name == "exact" and not options.piecewise_linear):
        raise ValueError(f"solver {solver.name!r} not in {SOLVERS}, or 'exact' with {options} (not piecewise linear)")
    open_loop = options.open_loop
    hw, model, tp = point.gpu, point.model, point.tp
    # attention data parallelism: one of D alike ranks stands for the replica (physics/layout.py)
    ranks = point["dp_attention"] if "dp_attention" in point else None
    if ranks is not None:
        model = rank_model(model, ranks, options.expert_routing)
    # the open loop admits whatever arrives: memory then decides stability, not admission
    if open_loop:
        concurrency = point.request_rate * 0.0 + jnp.inf
    else:
        concurrency = point.concurrency if ranks is None else point.concurrency / ranks
    think_time_s, context_tokens, hit_rate = point.think_time_s, point.context_tokens, point.hit_rate
    lru = options.cache_model == "lru"
    # the measured profile: decode attends, and KV holds, the turn's mean context L + OSL / 2
    decode_context = context_tokens + workload.osl / 2.0 if measured else context_tokens
    kv_context = jnp.where(workload.kv_context_tokens > 0, workload.kv_context_tokens, decode_context)
    memory = memory_budget(hw, model, tp, concurrency, kv_context, engine)
    heads_ok, context_ok = heads_split(model, tp), context_fits(model, context_tokens + workload.osl)
    if not options.memory_caps_concurrency or open_loop:  # all admitted; memory bounds how many run
        session_fits = memory.concurrency_max >= 1
        admitted = concurrency
    else:
        session_fits = memory.concurrency_eff >= 1
        admitted = memory.concurrency_eff
    reason = infeasible_reason(heads_ok, context_ok, memory.available_gb > 0, session_fits)
    ok = reason == 0
    concurrency_eff = jnp.where(ok, admitted, 1.0)  # safe stand-in when infeasible
    rate_per_ms = point.request_rate / MS_PER_S if open_loop else 0.0 * memory.concurrency_max
    if open_loop and ranks is not None:
        rate_per_ms = rate_per_ms / ranks
    slots = jnp.where(ok, memory.concurrency_max, 1.0)

    tflops = effective_tflops(hw, model.compute_bits)
    if options.cache_model == "ttl":
        hit_rate = hit_rate * cache_survival(think_time_s, workload.cache_ttl_s, options.pause_distribution,
                                             workload.pause_sigma)
    hit_tokens = jnp.minimum(workload.delta_tokens, context_tokens)
    tokens = prefill_tokens(context_tokens, workload.delta_tokens, hit_rate)
    allreduce = allreduce_time(hw, model, tp, efficiency.allreduce_scale, efficiency.allreduce_latency_us,
                               latency_per_peer=measured)
    prefill_ms_per_token = ttft_ms(model.params_active_b, 1.0, tp, tflops, efficiency.eta_prefill) \
        + allreduce.per_token_ms
    attention_tflops = effective_tflops(hw, 16.0) if measured else None
    if measured:  # the turn's attention FLOPs, spread over its prefill tokens
        prefix = jnp.maximum(context_tokens - tokens, 0.0)
        flops = model.attention_pair_flops * causal_pairs(tokens, prefix) \
            + model.attention_window_pair_flops * window_pairs(tokens, prefix, model.kv_window_tokens)
        attention_ms = flops / (tp * attention_tflops * FLOPS_PER_TFLOPS) * MS_PER_S / efficiency.eta_prefill
        prefill_ms_per_token = prefill_ms_per_token + attention_ms / jnp.maximum(tokens, 1.0)
    step_fixed_ms = efficiency.decode_overhead_ms + model.layers * efficiency.layer_overhead_us / 1000.0 \
        + allreduce.fixed_ms
    ttft_fixed_ms = efficiency.ttft_overhead_ms + allreduce.fixed_ms
    think_ms = think_time_s * MS_PER_S
    paused = paused_sessions(rate_per_ms, think_ms, workload.turns_per_session)
    # host tier: per GPU, each rank loads its share of the context's KV over its own link
    load_gb = session_gb(model, context_tokens, tp) / tp
    link = workload.tier_bandwidth_gbs
    tier_load_ms = jnp.where(link > 0, load_gb / jnp.where(link > 0, link, 1.0) * MS_PER_S, jnp.inf)

    coefficients = decode_coefficients(
        hw, model, tp, decode_context, tflops, efficiency.eta_decode, efficiency.elementwise_overhead,
        attention_tflops)._replace(fixed_ms=step_fixed_ms, allreduce_ms=allreduce.per_token_ms)
    chunk_tokens = workload.prefill_chunk_tokens
    if engine is not None:
        chunk_tokens = jnp.where(engine.prefill_chunk_tokens > 0, engine.prefill_chunk_tokens, chunk_tokens)
    zero = 0.0 * tokens
    if measured:  # prefill as a roofline, chunk by chunk, with each step's fixed time
        isolated_ttft = isolated_prefill_ms(coefficients, tokens, chunk_tokens, prefill_ms_per_token, options) \
            + efficiency.ttft_overhead_ms
    else:
        isolated_ttft = tokens * prefill_ms_per_token + ttft_fixed_ms  # eq. 2 (+ the opt-in fixed terms)
    turn = TurnLatency(
        ttft_ms=isolated_ttft,
        ttft_fixed_ms=ttft_fixed_ms + zero, ttft_overhead_ms=efficiency.ttft_overhead_ms + zero,
        osl=workload.osl, decode=coefficients, prefill_ms_per_token=prefill_ms_per_token,
        context_tokens=context_tokens + zero, hit_tokens=hit_tokens + zero, hit_rate=hit_rate + zero,
        prefill_tokens=tokens, concurrency=concurrency_eff + zero, slots=slots + zero, think_time_s=think_time_s + zero,
        pause_sigma=workload.pause_sigma + zero, tier_slots=workload.tier_capacity_gb / memory.kv_per_session_gb + zero,
        tier_load_ms=tier_load_ms + zero, chunk_tokens=chunk_tokens + zero,
        rate_per_ms=rate_per_ms + zero, paused_sessions=paused + zero, isl_cv=workload.isl_cv + zero,
    )
    if options.prefill_model == "shared" or options.cache_model == "lru" or measured:
        # R(B) then holds inner roots solved to the dtype's rounding (about 1e-6 relative in
        # float32): a tighter tolerance than that would cycle to max_iter on rounding noise
        floor = _INNER_ROOT_EPS * jnp.finfo(think_ms.dtype).eps
        solver = dataclasses.replace(solver, tol=jnp.maximum(solver.tol, floor))
    # the open loop's batch cannot pass the KV slots: the seed's memory holds the paused sessions too
    batch_cap = slots - paused if options.memory_caps_concurrency else slots
    solution = solve_closed_loop(latency_function(options),
                                 LoopInputs(turn, concurrency_eff, think_ms, rate_per_ms, batch_cap),
                                 solver, turn_latency_lines, open_loop)
    state = turn_state(turn, solution.batch, options)
    if open_loop:  # a request waits for a KV slot before its prefill (Erlang C; `jaxpareto.physics.queueing`)
        state = _with_slot_wait(state, batch_cap, rate_per_ms, workload.osl_cv)
    step, latency = state.step, state.latency_ms
    if open_loop:  # beyond capacity: no fixed point below the cap, or a queue's ρ >= 1
        stable = solution.converged & jnp.isfinite(latency) & (state.queue_busy < 1.0)
        reason = jnp.where(ok & ~stable, LOAD_BEYOND_CAPACITY, reason).astype(jnp.int8)
        ok = reason == 0
        turns_per_s = rate_per_ms * MS_PER_S
        sessions = rate_per_ms * latency + paused  # Little's law: in their turn, and paused
        batch_variance = solution.batch  # M/G/inf: the requests decoding are Poisson
    else:
        turns_per_s = concurrency_eff / ((latency + think_ms) / MS_PER_S)
        sessions = admitted
        busy = active_ratio(latency, think_ms)
        batch_variance = concurrency_eff * busy * (1.0 - busy)  # binomial(C, rho)
    # share of the GPU's achievable compute (at η_d, η_p) that decode and prefill use
    utilization = turns_per_s / MS_PER_S * (workload.osl * coefficients.compute_ms / efficiency.eta_decode
                                            + state.prefill.tokens * prefill_ms_per_token)

    def masked(value):
        return jnp.where(ok, value, jnp.nan)

    if percentiles:
        one_more = decode_step(coefficients, state.batch_run + 1.0, options.expert_routing)
        spread = TurnSpread(state.ttft_ms, state.queue_wait_ms, state.queue_busy, state.mix, state.tpot_ms,
                            workload.osl, workload.osl_cv, state.decode_step_ms, state.mixed_step_ms,
                            state.mixed_share, batch_variance, one_more.tpot_ms - step.tpot_ms, turns_per_s / MS_PER_S)
        safe = jax.tree_util.tree_map(lambda v: jnp.where(ok, v, 1.0), spread)  # no NaN into the bisections
        found = latency_percentiles(safe, with_wait=open_loop)
        percentile_outputs = {f"p{p}_{name}": masked(values[i]) for name, values in found._asdict().items()
                              for i, p in enumerate(PERCENTILES)}
        # goodput (DistServe): the requests served while every latency target of the SLO holds
        achieved = {**percentile_outputs, "ttft_ms": state.ttft_ms, "tpot_ms": state.tpot_ms, "latency_ms": latency}
        meets = jnp.stack([achieved[name] <= limit for name, limit in workload.slo._asdict().items()]).all()
        goodput = masked(jnp.where(meets, turns_per_s, 0.0))
    else:
        percentile_outputs = {name: jnp.nan + 0.0 * latency for name in PERCENTILE_VARIABLES
                              if name != "request_goodput"}
        goodput = jnp.nan + 0.0 * latency

    outputs = PointOutputs(
        ttft_ms=masked(state.ttft_ms),
        tpot_ms=masked(state.tpot_ms),
        latency_ms=masked(latency),
        batch_eff=masked(state.batch_run),
        gpu_active_ratio=masked(active_ratio(latency, think_ms)),
        turns_per_s=masked(turns_per_s),
        output_tokens_per_s_per_user=masked(MS_PER_S / state.tpot_ms),
        output_tokens_per_s_per_gpu=masked(turns_per_s * workload.osl / tp),
        kv_per_session_gb=memory.kv_per_session_gb,
        concurrency_max=memory.concurrency_max.astype(jnp.int32),
        concurrency_eff=jnp.where(ok, jnp.round(sessions) if open_loop else admitted,
                                  memory.concurrency_eff).astype(jnp.int32),
        prefill_tokens=jnp.where(ok, state.prefill.tokens, tokens) if lru else tokens,
        t_weight_ms=masked(step.t_weight_ms),
        t_kv_ms=masked(step.t_kv_ms),
        t_compute_ms=masked(step.t_compute_ms),
        decode_bound=jnp.where(ok, jnp.where(step.compute_bound, DECODE_COMPUTE, DECODE_MEMORY), DECODE_NONE).astype(
            jnp.int8
        ),
        operational_intensity=masked(operational_intensity(
            hw, model, tp, state.batch_run, step, state.prefill.tokens, context_tokens, workload.osl)),
        prefill_share=masked(state.ttft_ms / latency),
        hit_rate_eff=masked(state.prefill.hit_rate_eff) if lru else hit_rate + zero,
        tier_hit_rate=masked(state.prefill.tier_hit_rate),
        cache_lifetime_s=masked(state.cache_lifetime_s) if lru else (
            workload.cache_ttl_s + zero if options.cache_model == "ttl" else zero + jnp.inf),
        gpu_utilization=masked(utilization),
        memory_wait_ms=masked(state.memory_wait_ms),
        request_throughput=masked(turns_per_s),
        **percentile_outputs,
        request_goodput=goodput,
        feasible=ok,
        infeasible_reason=reason,
        converged=ok & solution.converged,
        iterations=jnp.where(ok, solution.iterations, 0).astype(jnp.int32),
    )
    if ranks is None:
        return outputs
    # the replica has D times its rank's batch, throughput and sessions; per GPU, per session and
    # per request it is the rank
    concurrency_eff = jnp.where(ok, sessions * ranks if open_loop else admitted * ranks, memory.concurrency_eff * ranks)
    return outputs._replace(
        batch_eff=outputs.batch_eff * ranks, turns_per_s=outputs.turns_per_s * ranks,
        request_throughput=outputs.request_throughput * ranks, request_goodput=outputs.request_goodput * ranks,
        concurrency_max=jnp.minimum(memory.concurrency_max * ranks, _INT32_MAX).astype(jnp.int32),
        concurrency_eff=jnp.minimum(jnp.round(concurrency_eff), _INT32_MAX).astype(jnp.int32))

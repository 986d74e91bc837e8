"""The whole model at one grid point: memory, prefill, decode and the closed loop together.

This is the scalar function the grid code vmaps (once). Infeasible points are evaluated at
safe stand-in values and then masked to NaN (the double-where pattern), so they neither crash
nor leak NaN into gradients of the feasible points.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.hardware import engine_gpu, expert_tflops
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.schema import PERCENTILE_VARIABLES
from jaxpareto.definitions.settings import SOLVERS, Efficiency, Solver, Workload
from jaxpareto.definitions.units import MS_PER_S
from jaxpareto.physics.cache import LOG_BRACKET, lru_survival
from jaxpareto.physics.closed_loop import LoopInputs, active_ratio, solve_closed_loop
from jaxpareto.physics.costs import PrefillAttention, engine_efficiency, lone_prefill_ms, prefill_alone_ms, \
    prefill_expert_costs, prefill_rate_ms, tp_costs, turn_tokens
from jaxpareto.physics.decode import BatchLaw, DecodeCoefficients, DecodeStep, decode_step, seen_batch, tpot_lines
from jaxpareto.physics.disaggregated_point import evaluate_disaggregated
from jaxpareto.physics.engine import LOAD_BRACKET, fed_decode_batch, prefill_budget_tokens, shared_turn, \
    synchronised_turn, wave_turn
from jaxpareto.physics.intensity import operational_intensity
from jaxpareto.physics.joint import InnerUnknown, JointSystem
from jaxpareto.physics.layout import expert_exchange, fills_budget, layout_costs, layout_splits, pipeline_costs, \
    point_layout, rank_model
from jaxpareto.physics.limits import LAYOUT_DOES_NOT_SPLIT, LOAD_BEYOND_CAPACITY, REPLICA_DOES_NOT_DIVIDE_BUDGET, \
    context_fits, heads_split, infeasible_reason
from jaxpareto.physics.memory import _INT32_MAX, memory_budget, running_limit, scheduler_delay_steps, \
    session_contexts, session_gb
from jaxpareto.physics.open_engine import poisson_turn, saturated_tpot_ms
from jaxpareto.physics.numerics import sqrt_or_zero
from jaxpareto.physics.outputs import DECODE_COMPUTE, DECODE_MEMORY, DECODE_NONE, PointOutputs
from jaxpareto.physics.percentiles import PERCENTILES, TurnSpread, latency_percentiles, seen_batch_quantiles
from jaxpareto.physics.prefill import PrefillWork, prefill_work
from jaxpareto.physics.roots import INNER_ROOT_EPS
from jaxpareto.physics.queueing import PrefillMix, batch_fano_factor, closed_slot_wait_chance, closed_slot_wait_turns, \
    mg1_wait_ms, paused_sessions, prefill_mix, slot_wait_ms



class TurnLatency(NamedTuple):
    """What a turn's latency R(B) depends on besides the batch (scalars).

    Attributes:
        ttft_ms: the turn's TTFT alone (seed eq. 2) when it does not depend on B (cache models
            "given" and "ttl"), else unused.
        osl: output tokens per turn [tokens].
        decode: the decode step's coefficients.
        prefill_ms_per_token: c_p, eq. 2's time for one prefill token [ms].
        context_tokens: L [tokens]. hit_tokens: min(max(ΔL, 1), L) [tokens].
        hit_rate: h after a TTL (the warm-cache rate the LRU model scales).
        prefill_tokens: L_prefill when it does not depend on B [tokens].
        concurrency: C_eff [sessions]. slots: requests that run at once [sessions]: the sessions
            the KV memory holds active (``kv_slots``), at most the engine's
            ``max_running_requests``. kv_slots: the sessions the KV memory holds active (None:
            ``slots``); the LRU model's paused sessions compete for what the running ones leave.
        think_time_s: Z [s]. pause_sigma: lognormal σ.
        tier_slots: session caches the host tier holds; None (static): no tier (its terms, and
            under lognormal pauses its LRU root, left out of the program). tier_load_ms: one
            context's KV from it [ms].
        chunk_tokens: prefill tokens per engine step (shared prefill).
        ttft_fixed_ms: the opt-in fixed TTFT terms (request overhead, all-reduce latency) [ms].
        ttft_overhead_ms: the request overhead alone (the engine times its steps itself) [ms].
        rate_per_ms: λ, requests arriving per ms (open loop; `jaxpareto.physics.queueing`).
        paused_sessions: P, sessions between turns (open loop).
        isl_cv: the prefill tokens' coefficient of variation (the M/G/1 wait's c_S²).
        arrival_scv: c_a², the squared coefficient of variation of the gaps between arrivals
            (open loop; 1: Poisson): the prefill waits are a GI/G/1 queue's
            (`jaxpareto.physics.queueing.renewal_wait_factor`), the KV-slot wait's arriving work
            dispersed by c_a².
        lockstep_ranks: D, attention-DP ranks stepping together (`jaxpareto.physics.engine`);
            None: one TP group (static: the default path carries no lockstep term).
        expert_ranks: D, attention-DP ranks whose tokens share the replica's routed experts,
            for the batch's law (`jaxpareto.physics.decode.seen_batch`); None: one TP group.
        scheduler_delay_steps: d, engine steps the first token waits for the scheduler
            (`jaxpareto.definitions.engine.Engine`): TTFT gains d x TPOT (the mean step); None:
            no engine, no term (static).
        decode_in_budget: 1 where the engine's decode tokens take their share of
            ``chunk_tokens`` (`jaxpareto.physics.engine.prefill_budget_tokens`), 0 where not; None: no term
            (static).
        prefill_first: 1 where the engine runs waiting prefills before any decode step
            (`jaxpareto.definitions.engine.Engine`), 0 where not; None: no term (static).
        attention: ``prefill_ms_per_token``'s parts where attention's FLOPs are counted
            (`jaxpareto.physics.costs.PrefillAttention`: the LRU model's effective hit rate
            re-weights a hit's and a miss's attention), else None (static).
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
    kv_slots: jax.Array | None = None
    think_time_s: jax.Array = 0.0
    pause_sigma: jax.Array = 1.0
    tier_slots: jax.Array | None = None
    tier_load_ms: jax.Array = 0.0
    chunk_tokens: jax.Array = Workload.prefill_chunk_tokens  # the field's default
    ttft_fixed_ms: jax.Array = 0.0
    ttft_overhead_ms: jax.Array = 0.0
    rate_per_ms: jax.Array = 0.0
    paused_sessions: jax.Array = 0.0
    isl_cv: jax.Array = 0.0
    arrival_scv: jax.Array = 1.0
    lockstep_ranks: jax.Array | None = None
    expert_ranks: jax.Array | None = None
    scheduler_delay_steps: jax.Array | None = None
    decode_in_budget: jax.Array | None = None
    prefill_first: jax.Array | None = None
    attention: PrefillAttention | None = None


def prefill_rate(turn: TurnLatency, work: PrefillWork, options: ModelOptions) -> jax.Array:
    """c_p [ms per prefill token] of the turns' prefill mix ``work``: the nominal rate, but under
    the LRU model, whose effective hit rate differs from the nominal one, with attention's FLOPs
    (where counted) re-weighted over the hits (GPU and host tier) and misses that ``work``
    prefills (`jaxpareto.physics.costs.prefill_rate_ms`)."""
    if options.cache_model != "lru":
        return turn.prefill_ms_per_token
    return prefill_rate_ms(turn.prefill_ms_per_token, turn.attention, work.tokens,
                           work.hit_rate_eff + work.tier_hit_rate)


def prefix_saving_ms(turn: TurnLatency) -> jax.Array:
    """The prefill time a found prefix saves against a miss [ms]: its L - ΔL tokens, and where
    attention's FLOPs are counted, a miss's attention less a hit's."""
    recomputed = turn.context_tokens - turn.hit_tokens
    if turn.attention is None:
        return recomputed * turn.prefill_ms_per_token
    return recomputed * turn.attention.matmul_ms_per_token + (turn.attention.miss_ms - turn.attention.hit_ms)


class TurnState(NamedTuple):
    """Everything about a turn at batch B (scalars; see `turn_state`).

    Besides the latencies: ``mix`` (the prefill hit/miss mix), ``queue_wait_ms`` and
    ``queue_busy`` (the open loop's mean wait for prefill and the chance of one, the prefill
    queue's ρ for the seed's isolated prefill; 0 in the closed loop), ``decode_step_ms`` and
    ``mixed_step_ms`` (T_0 and T_f, steps without and with a prefill chunk), ``mixed_share``
    (the share of time in the latter) and ``prefill_dispersion`` (F_c, the index of dispersion
    of the prefills landing in a request's decode steps; 1 in the closed loop) and
    ``seen_batch`` (the batch of ``step``), for the percentiles and the open loop's batch
    swings; ``inner`` holds R(B)'s inner roots (`InnerRoot`s in the order of `inner_unknowns`);
    ``service_scv`` is the squared CV the open loop's steps give the prefill's service, prompt
    lengths included (0 elsewhere); ``prefill_service_ms`` the prefill's own time in its steps
    where TTFT holds more than that and a queueing wait (the closed loop's shared engine: S, of
    TTFT's S / (1 - ρ')), else None; ``step_wait_ms`` the part of the service that is the wait
    for the step in progress, alike for every prompt (the open loop's shared engine; 0 elsewhere);
    ``seen_law`` the law of the batch the routed experts of ``step`` are counted over
    (`jaxpareto.physics.decode.seen_batch`; None: at the mean, the seed's); ``arrival_split``
    the open loop's shared-engine waits by the kind of step a prompt arrives in
    (`jaxpareto.physics.open_engine.ArrivalSplit`; None elsewhere); ``slot_busy`` and
    ``slot_wait_ms`` the open loop's chance of waiting for a KV slot and that wait's mean over
    all requests (that mean in ``queue_wait_ms`` too, that chance not in ``queue_busy``, the
    engine's; None in the closed loop); ``memory_wait_chance`` the chance that a turn waits for
    KV memory at all, in either loop (``memory_wait_ms`` is the mean over every turn).
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
    prefill_dispersion: jax.Array
    seen_batch: jax.Array
    inner: tuple = ()
    service_scv: jax.Array = 0.0
    prefill_service_ms: jax.Array | None = None
    step_wait_ms: jax.Array = 0.0
    seen_law: BatchLaw | None = None
    arrival_split: NamedTuple | None = None
    slot_busy: jax.Array | None = None
    slot_wait_ms: jax.Array | None = None
    memory_wait_chance: jax.Array = 0.0


# s = -ln(1 - ρ) grows ever slower with B as the prefill steps fill (like ln B once they are
# full), so its tangent overshoots after a long step of B: from B = 1 to the undamped step's
# 106 sessions it put s at 25 where the root is 1.85. Following B by at most 1 (a factor e in
# 1 - ρ) took the joint solve's steps on the models benchmark grid from 7.06 to 6.08 per
# feasible point under the shared engine with the LRU model, 5.90 to 5.59 with the shared
# engine alone; the LRU lifetimes follow B unlimited (a limit cost them 1.4 % more steps).
PREFILL_LOAD_FOLLOW = 1.0


def inner_unknowns(options: ModelOptions, host_tier: bool = True) -> tuple[InnerUnknown, ...]:
    """The inner roots R(B) holds under ``options``, as `InnerUnknown`s, in the order
    `turn_state` takes and returns them: the LRU characteristic time of lognormal
    pauses, ln(T_c / Z), in the GPU's memory and, with a host tier (static ``host_tier``: the
    turn's ``tier_slots`` not None), in both (`jaxpareto.physics.cache`),
    and the shared engine's prefill load s = -ln(1 - ρ) (`jaxpareto.physics.engine`; closed
    loop, staggered turns). Exponential and deterministic pauses, the seed's prefill and the
    open loop have none."""
    names = ()
    if options.cache_model == "lru" and options.pause_distribution == "lognormal":
        names += (InnerUnknown("gpu_log_lifetime", -LOG_BRACKET, LOG_BRACKET),)
        if host_tier:
            names += (InnerUnknown("tier_log_lifetime", -LOG_BRACKET, LOG_BRACKET),)
    if options.prefill_model == "shared" and options.arrivals == "staggered":
        names += (InnerUnknown("prefill_load", 0.0, LOAD_BRACKET, PREFILL_LOAD_FOLLOW),)
    return names


def turn_state(turn: TurnLatency, batch: jax.Array, options: ModelOptions = ModelOptions(), inner=None,
               polish: bool = False) -> TurnState:
    """The turn at closed-loop batch B under the model ``options`` (static).

    Seed eq. 1, R(B) = TTFT + TPOT(B) x OSL, where

    - ``cache_model="lru"``: at most M = ``slots`` of the B active sessions run (hold their KV);
      the rest wait for memory, R = R_run(min(B, M)) x max(B / M, 1) (Little's law: X = M / R_run,
      so B - M sessions wait B / M - 1 turn times), a wait that delays the first token and is
      part of TTFT. The hit rate is h x the Che survival (`jaxpareto.physics.cache`) in the M - B_run slots
      the running sessions leave free, with every session not running (C - B_run: paused or
      waiting) competing for them; misses may hit the host tier, which they compete for too.
    - ``prefill_model="shared"``: TTFT and TPOT from the chunked-prefill engine (`jaxpareto.physics.engine`);
      in the closed loop of staggered turns a step decodes at most the D sessions its prefill budget keeps fed
      (`jaxpareto.physics.engine.fed_decode_batch`), the rest waiting for their prefill.
    - ``profile="measured"``: sessions beyond the ``slots`` wait as under the LRU model, and a
      prefill chunk also loads the routed experts its tokens touch.
    - ``arrivals="poisson"`` (`jaxpareto.physics.queueing`): the sessions are the B in their
      turn plus the P paused; prefills wait first-come first-served (M/G/1), in the shared
      engine at the load arrivals see (no arrival-theorem correction), else for the GPUs' full
      prefill speed, whose load λ S must stay below 1 (else TTFT is inf).

    ``inner``: None (R(B)'s inner roots, `inner_unknowns`, solved here), or their values (a
    sequence or an array of shape (k,)), from
    the joint solve (`jaxpareto.physics.joint`), taken as given (their residuals returned in
    ``inner``) or, with ``polish`` (static), as converged roots to differentiate.
    """
    given = iter(itertools.repeat(None) if inner is None else inner)
    own_service = None  # a prefill's own time in its steps, where TTFT holds more (below)
    split = None  # the open loop's waits by the step a prompt arrives in (the shared engine's)
    queue = options.cache_model == "lru" or options.profile == "measured"
    open_loop = options.open_loop
    concurrency = batch + turn.paused_sessions if open_loop else turn.concurrency
    if options.cache_model == "lru":
        batch_run = jnp.minimum(batch, turn.slots)
        idle = jnp.maximum(concurrency - batch_run, 0.0)
        kv_slots = turn.slots if turn.kv_slots is None else turn.kv_slots
        free = kv_slots - batch_run  # KV the running sessions leave to the paused ones
        solved = options.pause_distribution == "lognormal"  # T_c is an inner root (else closed form)
        gpu = lru_survival(free, idle, turn.think_time_s, options.pause_distribution, turn.pause_sigma,
                           next(given) if solved else None, polish)
        roots = () if gpu.root is None else (gpu.root,)
        with_tier = gpu  # no tier: it adds no hits (and no second root)
        if turn.tier_slots is not None:
            with_tier = lru_survival(free + turn.tier_slots, idle, turn.think_time_s, options.pause_distribution,
                                     turn.pause_sigma, next(given) if solved else None, polish)
            roots += () if with_tier.root is None else (with_tier.root,)
        work = prefill_work(turn.context_tokens, turn.hit_tokens, turn.hit_rate * gpu.survival,
                            turn.hit_rate * (with_tier.survival - gpu.survival), turn.tier_load_ms,
                            prefix_saving_ms(turn))
        lifetime = gpu.lifetime_s
        rate_ms = prefill_rate(turn, work, options)  # the effective hits' attention, not the nominal's
        isolated_ttft = lone_prefill_ms(turn.decode, work.tokens, turn.chunk_tokens, rate_ms, turn.ttft_overhead_ms,
                                        turn.ttft_fixed_ms, options) + work.delay_ms
    else:
        batch_run = jnp.minimum(batch, turn.slots) if queue else batch
        zero = 0.0 * turn.hit_rate
        work = PrefillWork(turn.prefill_tokens, turn.hit_rate, zero, zero)
        lifetime = zero + jnp.inf
        isolated_ttft = turn.ttft_ms
        rate_ms = turn.prefill_ms_per_token
        roots = ()
    # a session sees at most the others the slots let run beside it (the rest wait for memory)
    seen, law = seen_batch(batch_run, jnp.minimum(concurrency, turn.slots), options,
                           1.0 if turn.expert_ranks is None else turn.expert_ranks)
    if options.prefill_model == "shared" and options.arrivals == "staggered":
        # the closed loop's sessions beyond what the step budget keeps fed wait for their prefill
        fed = jnp.minimum(seen, fed_decode_batch(turn.chunk_tokens, work.tokens, turn.osl, turn.decode_in_budget))
        if law is not None:  # the law's others likewise (the fed decode; every rank is held alike)
            law = law.moved(fed - seen)
        seen = fed
    step = decode_step(turn.decode, seen, options.expert_routing, law)
    mix = prefill_mix(work.tokens, turn.hit_tokens, work.hit_rate_eff, turn.isl_cv)
    zero = 0.0 * batch
    if options.prefill_model == "shared":
        def experts_beyond(decoding):  # the experts a step's prefill touches beyond its decode batch's
            return prefill_expert_costs(turn.decode, decoding, options) if options.profile == "measured" else None

        budget = prefill_budget_tokens(turn.chunk_tokens, batch_run, work.tokens, turn.osl, turn.decode_in_budget)
        if options.arrivals == "synchronised":  # lockstep groups of a benchmark at fixed lengths
            engine = synchronised_turn(step, batch_run, work.tokens, turn.osl, turn.chunk_tokens,
                                       rate_ms, turn.decode.eta_decode,
                                       turn.decode.elementwise_overhead, experts_beyond(seen), turn.decode_in_budget)
            if turn.prefill_first is not None:  # an engine that prefills first keeps the burst one wave
                alone = decode_step(turn.decode, 0.0 * seen, options.expert_routing)
                wave = wave_turn(step, alone, batch_run, work.tokens, turn.osl, turn.chunk_tokens, rate_ms,
                                 turn.decode.eta_decode, turn.decode.elementwise_overhead,
                                 experts_beyond(0.0 * seen))
                engine = jax.tree_util.tree_map(lambda w, g: jnp.where(turn.prefill_first > 0, w, g), wave, engine)
        elif open_loop:  # requests arrive at λ: the bulk-service steps (`jaxpareto.physics.open_engine`)
            engine = poisson_turn(step, turn.rate_per_ms, work.tokens, turn.osl, budget,
                                  rate_ms, turn.decode.eta_decode, turn.decode.elementwise_overhead,
                                  mix.scv, mix.cv ** 2, experts_beyond(seen), turn.lockstep_ranks,
                                  arrival_scv=turn.arrival_scv, batch=batch_run)
        else:
            # the arrival theorem's others are the sessions the engine runs: those waiting for
            # KV memory (the measured profile, LRU) neither prefill nor decode
            engine = shared_turn(step, batch_run, jnp.minimum(concurrency, turn.slots), work.tokens, turn.osl, budget,
                                 rate_ms, turn.decode.eta_decode, turn.decode.elementwise_overhead,
                                 experts_beyond(seen), lockstep_ranks=turn.lockstep_ranks, load_given=next(given),
                                 polish=polish)
            roots += (engine.load_root,)
            own_service = engine.service_ms  # TTFT is S / (1 - ρ'): the percentiles spread S alone
        ttft = engine.ttft_ms + turn.ttft_overhead_ms + work.delay_ms
        tpot, load = engine.tpot_ms, engine.prefill_load
        steps = (engine.decode_step_ms, engine.mixed_step_ms, engine.mixed_share, engine.dispersion)
        queue_wait, queue_busy = (engine.ttft_ms - engine.service_ms, engine.seen_load) if open_loop else (zero, zero)
        service_scv = engine.service_scv + zero
        step_wait = engine.step_wait_ms + zero
        split = engine.arrival_split
    else:
        ttft, tpot, load = isolated_ttft, step.tpot_ms, zero
        steps = (tpot, tpot, zero, zero + 1.0)
        queue_wait, queue_busy, service_scv, step_wait = zero, zero, zero, zero
        if open_loop:  # one prefill at a time at the GPUs' full speed: an M/G/1 queue
            queue_wait, queue_busy = mg1_wait_ms(turn.rate_per_ms, isolated_ttft, mix.scv, turn.arrival_scv)
            ttft = ttft + queue_wait
    # the engine's scheduler holds the first token back d steps (an overlap scheduler: one)
    if turn.scheduler_delay_steps is not None:
        ttft = ttft + scheduler_wait_ms(turn.scheduler_delay_steps, tpot)
    wait, chance = zero, zero
    if queue:
        if options.seen_batch == "distribution" and options.arrivals == "staggered":
            # a turn finding M others in theirs waits, as the batch it sees spreads around B
            queued = closed_slot_wait_turns(batch, concurrency, turn.slots)
            chance = closed_slot_wait_chance(batch, concurrency, turn.slots)
        else:  # the fluid bound: no wait while the mean B is under M, and then every turn waits
            queued = jnp.maximum(batch / turn.slots, 1.0) - 1.0
            chance = jnp.where(queued > 0.0, 1.0, 0.0)
        wait = (ttft + tpot * turn.osl) * queued
        ttft = ttft + wait
    return TurnState(ttft + tpot * turn.osl, wait, ttft, tpot, step, batch_run, work, lifetime, load, mix,
                     queue_wait, queue_busy, *steps, seen, roots, service_scv, own_service, step_wait, law, split,
                     memory_wait_chance=chance)


def scheduler_wait_ms(delay_steps: jax.Array, tpot_ms: jax.Array) -> jax.Array:
    """d x TPOT [ms], the scheduler's delay of the first token (`TurnLatency`): 0 at d = 0
    whatever TPOT (no 0 x inf), inf for d > 0 where TPOT is, and differentiable in d at 0."""
    finite = jnp.isfinite(tpot_ms)
    wait = delay_steps * jnp.where(finite, tpot_ms, 0.0)
    return jnp.where(finite | (delay_steps <= 0), wait, jnp.inf)


def tpot_slope_ms(state: TurnState, step_slope_ms: jax.Array) -> jax.Array:
    """dTPOT / dB at a fixed arrival rate [ms per request]: the decode step's slope through the
    harmonic mix of `jaxpareto.physics.engine` (mixed steps and their share held), s (1 - m) (TPOT / T_0)²."""
    ratio = state.tpot_ms / state.decode_step_ms
    return step_slope_ms * (1.0 - state.mixed_share) * ratio * ratio


def _with_slot_wait(state: TurnState, full: TurnState, saturated_tpot_ms: jax.Array, slots: jax.Array,
                    rate_per_ms: jax.Array, osl: jax.Array, osl_cv: jax.Array, hold_slope_ms: jax.Array,
                    arrival_scv: jax.Array) -> TurnState:
    """The open-loop turn with the wait for a KV slot added to TTFT (in ``memory_wait_ms``): a
    request holds its slot for its prefill and decode, whose spread is the output's (`slot_wait_ms`);
    arrivals whose gaps have squared CV ``arrival_scv`` (c_a², 1: Poisson) scale the arriving
    work's dispersion by it.

    T_hold(M), the holding time with the M slots full, is the turn at the full batch with its
    prompts admitted at the rate the slots free up, min(λ, M / T_hold(M)). It is taken as the
    smaller of two turns at M, as the holding time grows with the admission rate: ``full``, at the
    arrival rate, and the turn whose OSL steps run at ``saturated_tpot_ms``, every leaver
    replaced at once (`jaxpareto.physics.open_engine.saturated_tpot_ms`; an approximation that
    keeps the operating point's prefill and its prefill clusters), and at least T_hold. The
    occupancy's over-dispersion (`batch_fano_factor`) takes T_hold's secant from B to M, the
    line whose negative binomial is the chain's law up to M, and ``hold_slope_ms``, the tangent
    at B [ms per request], where B is at M already. Both belong to the path to the full engine,
    not to the operating point: extrapolating the tangent at B overshot a mixture of experts'
    T_hold(M) (its step steep while experts wake at a small batch, flat once all run) and
    flagged a load beyond capacity that a higher load, at a larger B, passed.

    Returns the turn and that over-dispersion factor, which the percentiles' spread of the batch
    takes too (the tangent's, clipped where a MoE's step is steep, made P50 TPOT fall with the
    rate)."""
    hold = state.latency_ms - state.queue_wait_ms - state.memory_wait_ms
    # (beyond the prefill's capacity at M the full turn is inf, and so are its waits)
    at_arrivals = jnp.where(jnp.isfinite(full.latency_ms), full.latency_ms - full.queue_wait_ms - full.memory_wait_ms,
                            jnp.inf)
    replaced = hold + osl * jnp.maximum(saturated_tpot_ms - state.tpot_ms, 0.0)
    hold_full = jnp.maximum(jnp.minimum(at_arrivals, replaced), hold)
    decode = state.latency_ms - state.ttft_ms
    room = slots - state.seen_batch
    secant = jnp.where(room > 0, (hold_full - hold) / jnp.where(room > 0, room, 1.0), hold_slope_ms)
    fano = batch_fano_factor(state.prefill_dispersion, rate_per_ms, secant)
    # the work arriving: the prefill clusters' dispersion over gaps of squared CV c_a² (Whitt's
    # GI/G/m form takes the arrivals' c_a², here their index of dispersion)
    wait, waits = slot_wait_ms(slots, rate_per_ms, hold, (decode * osl_cv / hold) ** 2, hold_full, fano,
                               state.prefill_dispersion * arrival_scv)
    # the percentiles keep the slots' wait apart from the engine's (``queue_busy`` stays the engine's)
    return state._replace(ttft_ms=state.ttft_ms + wait, latency_ms=state.latency_ms + wait,
                          memory_wait_ms=state.memory_wait_ms + wait, queue_wait_ms=state.queue_wait_ms + wait,
                          slot_busy=waits, slot_wait_ms=wait,
                          memory_wait_chance=1.0 - (1.0 - state.memory_wait_chance) * (1.0 - waits)), fano


def turn_latency_ms(turn: TurnLatency, batch: jax.Array, options: ModelOptions = ModelOptions()) -> jax.Array:
    """R(B) [ms] under ``options`` (`turn_state`; what it does not need is traced away)."""
    return turn_state(turn, batch, options).latency_ms


def turn_decode_ms(turn: TurnLatency, batch: jax.Array, options: ModelOptions = ModelOptions()) -> jax.Array:
    """OSL x TPOT(B) [ms]: a turn's time in the decode batch, whose Little's law B = λ OSL TPOT(B)
    sets the open loop's decode batch (`turn_state`)."""
    return turn_state(turn, batch, options).tpot_ms * turn.osl


def _turn_with_inner(turn: TurnLatency, batch: jax.Array, inner: jax.Array, options: ModelOptions):
    """R(B) [ms] with its inner roots given (shape (k,)), and their residuals (k,)."""
    state = turn_state(turn, batch, options, inner=inner)
    return state.latency_ms, jnp.stack([root.residual for root in state.inner])


def _inner_at(turn: TurnLatency, batch: jax.Array, options: ModelOptions):
    """R(B) [ms] with its inner roots solved at B, their residuals (k,; 0) and the roots (k,)."""
    state = turn_state(turn, batch, options)
    return (state.latency_ms, jnp.stack([root.residual for root in state.inner]),
            jnp.stack([root.value for root in state.inner]))


@functools.lru_cache(maxsize=None)
def joint_system(options: ModelOptions, host_tier: bool = True) -> JointSystem | None:
    """R(B) with its inner roots as unknowns, for the closed loop's joint solve
    (`jaxpareto.physics.joint`); None where R(B) holds none (`inner_unknowns`; static
    ``host_tier``: the turn has a host tier, ``tier_slots`` not None). The same object every
    time (the solver keys on it)."""
    unknowns = inner_unknowns(options, host_tier)
    if not unknowns or options.open_loop:
        return None
    return JointSystem(functools.partial(_turn_with_inner, options=options), functools.partial(_inner_at, options=options),
                       unknowns)


@functools.lru_cache(maxsize=None)
def latency_function(options: ModelOptions):
    """One function per options, the same object every time (the solver keys on it): R(B) for
    the closed loop, OSL x TPOT(B) for the open loop."""
    return functools.partial(turn_decode_ms if options.open_loop else turn_latency_ms, options=options)


def turn_latency_lines(turn: TurnLatency, open_loop: bool = False, queue: bool = False,
                       expert_offsets: bool = True) -> tuple[jax.Array, jax.Array]:
    """(intercepts, slopes) of R(B) on each of its linear pieces (for the exact solver); of
    OSL x TPOT(B + 1) under the open loop (static ``open_loop``; `turn_state`).

    The pieces: TPOT's lines (`jaxpareto.physics.decode.tpot_lines`; the fourth, where the
    experts' GEMM offsets stop growing, only with static ``expert_offsets``: without an offset,
    at the peak rate, it is the third); flat at R(S) below the step's least batch S: a
    pipeline's ``batch_floor``, and in the closed loop at least 1 (the open loop's step, at
    B + 1, has none without a pipeline: a NaN piece that never holds); and with the sessions
    beyond the M ``slots`` waiting (static ``queue``: the measured profile) R_run(M) B / M
    beyond M, whose open-loop TPOT stays at TPOT(M + 1) there.
    """
    tpot = tpot_lines(turn.decode)
    ttft = 0.0 if open_loop else turn.ttft_ms  # the open loop solves OSL x TPOT alone
    # R = TTFT + d TPOT + OSL TPOT: the scheduler's d steps ride on TPOT's lines (closed loop)
    delay = turn.scheduler_delay_steps
    steps = turn.osl if open_loop or delay is None else turn.osl + delay
    lines = [(tpot.a_unsat, tpot.b_unsat), (tpot.a_sat, tpot.b_sat), (tpot.a_compute, tpot.b_compute)]
    if expert_offsets:
        lines.append((tpot.a_compute_sat, tpot.b_compute_sat))
    intercepts = [ttft + steps * a for a, _ in lines]
    slopes = [steps * b for _, b in lines]
    if open_loop:  # the step is at B + 1: each line moves up by its slope
        intercepts = [a + b for a, b in zip(intercepts, slopes)]
    # flat below the step's least batch: a pipeline's S stages, or in the closed loop one request
    floor = turn.decode.batch_floor if open_loop else jnp.maximum(turn.decode.batch_floor, 1.0)
    bubble = ttft + steps * decode_step(turn.decode, floor).tpot_ms
    intercepts.append(jnp.where(floor > 0, bubble, jnp.nan))
    slopes.append(0.0 * bubble)
    if queue:
        full = ttft + steps * decode_step(turn.decode, turn.slots + (1.0 if open_loop else 0.0)).tpot_ms
        intercepts.append(full if open_loop else 0.0 * full)
        slopes.append(0.0 * full if open_loop else full / turn.slots)
    return jnp.stack(intercepts), jnp.stack(slopes)


# one function per loop, queue and offsets, the same object every time (the solver keys on it)
_LATENCY_LINES = {(loop, queue, offsets): functools.partial(turn_latency_lines, open_loop=loop, queue=queue,
                                                            expert_offsets=offsets)
                  for loop in (False, True) for queue in (False, True) for offsets in (False, True)}


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
            R(B), `solve_effective_batch_exact`; needs ``options.piecewise_linear``; an engine
            that pads its decode steps to CUDA graphs, ``cuda_graph_batch_step``, runs the damped
            solver in its place: TPOT is then smooth, not piecewise linear, in B).
        options: which equations (`jaxpareto.definitions.options.ModelOptions`, static); the defaults are
            the seed's. With the shared engine or the LRU model the fixed point's tolerance is at
            least 64 eps of the dtype (7.6e-6 in float32): R(B) then contains inner roots; D - 1
            times that with D attention-DP ranks in lockstep.
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
    if options.disaggregated and point.get("engine") is not None and point["engine"].cuda_graph_batch_step is not None:
        raise ValueError("an engine's CUDA-graph padding (cuda_graph_batch_step) is not modelled for disaggregated "
                         "serving")
    if options.disaggregated:  # a prefill pool of its own: `jaxpareto.physics.disaggregated_point`
        return evaluate_disaggregated(point, workload, efficiency, solver, options)
    measured = options.profile == "measured"
    engine = point.get("engine")
    efficiency = engine_efficiency(efficiency, engine)
    if solver.name not in SOLVERS or (solver.name == "exact" and not options.piecewise_linear):
        raise ValueError(f"solver {solver.name!r} not in {SOLVERS}, or 'exact' with {options} (not piecewise linear)")
    graph_step = None if engine is None else engine.cuda_graph_batch_step  # None: no padding term
    if solver.name == "exact" and graph_step is not None:  # a CUDA graph's padding is not piecewise linear
        solver = dataclasses.replace(solver, name="damped")
    open_loop = options.open_loop
    hw, model, tp = engine_gpu(point.gpu, engine, options), point.model, point.tp
    # a parallel layout (physics/layout.py): one of D alike attention-DP ranks stands for the
    # replica, over its pipeline stages
    layout = point_layout(point)
    ranks = None if layout is None else layout.ranks
    whole_model = model
    if layout is not None:
        model = rank_model(model, ranks, options.expert_routing)
    # the open loop admits whatever arrives: memory then decides stability, not admission
    if open_loop:
        concurrency = point.request_rate * 0.0 + jnp.inf
    else:
        concurrency = point.concurrency if ranks is None else point.concurrency / ranks
    think_time_s, context_tokens, hit_rate = point.think_time_s, point.context_tokens, point.hit_rate
    lru = options.cache_model == "lru"
    # the measured profile: decode attends, and KV holds, the turn's mean in-flight context
    # L + OSL (1 + cv_OSL^2) / 2 (L + OSL / 2 with fixed lengths)
    decode_context, kv_context = session_contexts(context_tokens, workload, measured, engine)
    memory = memory_budget(hw, model, tp, concurrency, kv_context, engine, None if layout is None else layout.stages)
    heads_ok, context_ok = heads_split(model, tp), context_fits(model, context_tokens + workload.osl)
    if not options.memory_caps_concurrency or open_loop:  # all admitted; memory bounds how many run
        session_fits = memory.concurrency_max >= 1
        admitted = concurrency
    else:  # a replica of D ranks needs one session in all, not one per rank
        session_fits = memory.concurrency_eff >= 1 if ranks is None else \
            (memory.concurrency_max >= 1) & (memory.concurrency_eff * ranks >= 1)
        admitted = memory.concurrency_eff
    reason = infeasible_reason(heads_ok, context_ok, memory.available_gb > 0, session_fits)
    if layout is not None:  # after the heads, before the context and memory
        reason = jnp.where(heads_ok & ~fills_budget(tp, layout), REPLICA_DOES_NOT_DIVIDE_BUDGET, reason)
        reason = jnp.where(heads_ok & ~layout_splits(whole_model, tp, layout), LAYOUT_DOES_NOT_SPLIT,
                           reason).astype(jnp.int8)
    ok = reason == 0
    concurrency_eff = jnp.where(ok, admitted, 1.0)  # safe stand-in when infeasible
    rate_per_ms = point.request_rate / MS_PER_S if open_loop else 0.0 * memory.concurrency_max
    if open_loop and ranks is not None:
        rate_per_ms = rate_per_ms / ranks
    kv_slots = jnp.where(ok, memory.concurrency_max, 1.0)
    slots = jnp.minimum(kv_slots, running_limit(engine))  # the engine runs at most its limit

    turn = turn_tokens(workload, engine, options, think_time_s, context_tokens, hit_rate)
    hit_rate, hit_tokens, tokens, chunk_tokens = turn
    costs = tp_costs(hw, model, tp, turn, context_tokens, decode_context, efficiency, options)
    fill_ms = 0.0  # a prompt's fill of a pipeline delays its first token, in every prefill model
    if layout is not None:  # the ranks' token exchange, the busiest expert GPU, the pipeline's stages
        exchange = expert_exchange(hw, whole_model, tp, layout, workload.expert_imbalance,
                                   efficiency.allreduce_latency_us,
                                   expert_tflops(hw, model.compute_bits, options.gemm_rate),
                                   options.expert_routing)
        costs = layout_costs(costs, exchange, efficiency.eta_prefill, options.expert_routing)
        pipeline = pipeline_costs(costs, hw, model, tp, layout, efficiency.allreduce_latency_us,
                                  efficiency.decode_overhead_ms, chunk_tokens, tokens, options.expert_routing)
        costs, chunk_tokens, fill_ms = pipeline.costs, pipeline.chunk_tokens, pipeline.fill_ms
    prefill_ms_per_token, coefficients, ttft_fixed_ms = costs.prefill_ms_per_token, costs.decode, costs.ttft_fixed_ms
    if graph_step is not None:  # decode steps padded to the engine's CUDA graphs (physics/cuda_graphs.py)
        coefficients = coefficients._replace(
            graph_step=graph_step + 0.0 * tokens, graph_ranks=1.0 if ranks is None else ranks,
            graph_sessions=concurrency_eff + 0.0 * tokens,  # per rank; inf in the open loop (all admitted)
            graph_most=slots + 0.0 * tokens, graph_microbatches=1.0 if layout is None else layout.stages + 0.0 * tokens)
    think_ms = think_time_s * MS_PER_S
    paused = paused_sessions(rate_per_ms, think_ms, workload.turns_per_session)
    # host tier: per GPU, each rank loads its share of the context's KV over its own link
    load_gb = session_gb(model, context_tokens, tp) / (tp if layout is None else tp * layout.stages)
    link = workload.tier_bandwidth_gbs
    tier_load_ms = jnp.where(link > 0, load_gb / jnp.where(link > 0, link, 1.0) * MS_PER_S, jnp.inf)

    zero = 0.0 * tokens
    delay_steps = scheduler_delay_steps(engine)  # None: no engine of the table sets one, no term
    in_budget = None if engine is None else engine.decode_tokens_in_budget  # None likewise
    first = None if engine is None else engine.prefill_first  # None likewise
    isolated_ttft = prefill_alone_ms(costs, tokens, chunk_tokens, efficiency, options) + fill_ms
    turn = TurnLatency(
        ttft_ms=isolated_ttft,
        ttft_fixed_ms=ttft_fixed_ms + fill_ms + zero, ttft_overhead_ms=efficiency.ttft_overhead_ms + fill_ms + zero,
        osl=workload.osl, decode=coefficients, prefill_ms_per_token=prefill_ms_per_token,
        context_tokens=context_tokens + zero, hit_tokens=hit_tokens + zero, hit_rate=hit_rate + zero,
        prefill_tokens=tokens, concurrency=concurrency_eff + zero, slots=slots + zero, kv_slots=kv_slots + zero,
        think_time_s=think_time_s + zero,
        pause_sigma=workload.pause_sigma + zero,
        tier_slots=None if workload.tier_capacity_gb is None else workload.tier_capacity_gb / memory.kv_per_session_gb + zero,
        tier_load_ms=tier_load_ms + zero, chunk_tokens=chunk_tokens + zero,
        rate_per_ms=rate_per_ms + zero, paused_sessions=paused + zero, isl_cv=workload.isl_cv + zero,
        arrival_scv=workload.arrival_cv ** 2 + zero,
        lockstep_ranks=None if ranks is None or options.dp_prefill == "aligned" else ranks + zero,
        expert_ranks=None if ranks is None else ranks + zero,
        scheduler_delay_steps=None if delay_steps is None else delay_steps + zero,
        decode_in_budget=None if in_budget is None else in_budget + zero,
        prefill_first=None if first is None else first + zero,
        attention=costs.attention,
    )
    if options.prefill_model == "shared" or options.cache_model == "lru" or measured:
        # R(B) then holds inner roots solved to the dtype's rounding (about 1e-6 relative in
        # float32): a tighter tolerance than that would cycle to max_iter on rounding noise
        floor = INNER_ROOT_EPS * jnp.finfo(think_ms.dtype).eps
        if turn.lockstep_ranks is not None:  # (1 - ρ)^(D - 1) of the other ranks: D - 1 times the noise
            floor = floor * jnp.maximum(turn.lockstep_ranks - 1.0, 1.0)
        solver = dataclasses.replace(solver, tol=jnp.maximum(solver.tol, floor))
    # the open loop's batch cannot pass the KV slots (the seed's memory holds the paused sessions
    # too) nor the engine's limit
    batch_cap = jnp.minimum(kv_slots - paused if options.memory_caps_concurrency else kv_slots, slots)
    joint = joint_system(options, turn.tier_slots is not None)
    solution, inner = solve_closed_loop(latency_function(options),
                                        LoopInputs(turn, concurrency_eff, think_ms, rate_per_ms, batch_cap, ok),
                                        solver, _LATENCY_LINES[open_loop, measured, options.gemm_rate == "measured"],
                                        open_loop, joint)
    if open_loop:  # the turn at B and with the M slots full (seen: M), whose holding time drains the slot queue
        # (one vmapped evaluation of both: a second copy of the prefill chain would double its compilation)
        batches = jnp.stack([solution.batch, jnp.maximum(batch_cap - 1.0, solution.batch)])
        both = jax.vmap(lambda b: turn_state(turn, b, options, polish=True))(batches)
        state, full = (jax.tree_util.tree_map(lambda v, i=i: v[i], both) for i in (0, 1))
    else:  # the inner roots the joint solve found (none from the other solvers), polished
        state = turn_state(turn, solution.batch, options, inner if inner.shape[0] else None, polish=True)
    if open_loop:  # a step's added time per request more in the batch
        step_slope = decode_step(coefficients, state.seen_batch + 1.0, options.expert_routing,
                                 None if state.seen_law is None else state.seen_law.moved(state.seen_law.own)).tpot_ms \
            - state.step.tpot_ms
    saturated_tpot = jnp.inf  # the open loop's TPOT with every KV slot busy (the slot wait's)
    tpot_cap = jnp.inf  # the longest TPOT the quantiles reach
    rate_ms = prefill_rate(turn, state.prefill, options)  # c_p of the solved turn's prefill mix
    if open_loop:  # a request waits for a KV slot before its prefill (`jaxpareto.physics.queueing`)
        hold_slope = workload.osl * tpot_slope_ms(state, step_slope)  # T_hold's tangent at B
        saturated_tpot = full.step.tpot_ms
        if options.prefill_model == "shared":  # the slots' replacements prefill in the decode steps
            saturated_tpot = saturated_tpot_ms(
                full.step, batch_cap, state.prefill.tokens, workload.osl,
                prefill_budget_tokens(turn.chunk_tokens, batch_cap, state.prefill.tokens, workload.osl,
                                      turn.decode_in_budget), rate_ms,
                coefficients.eta_decode, coefficients.elementwise_overhead,
                prefill_expert_costs(coefficients, batch_cap, options) if measured else None)
        # the quantiles stop there, but not below the mean the engine itself gives the full slots
        # (its prefills landing in clusters, which the replacements' count leaves out)
        tpot_cap = jnp.maximum(saturated_tpot, full.tpot_ms)
        # the occupancy's over-dispersion, for the slot queue and the percentiles' batch spread alike
        state, fano = _with_slot_wait(state, full, saturated_tpot, batch_cap, rate_per_ms, workload.osl,
                                      workload.osl_cv, hold_slope, turn.arrival_scv)
    step, latency = state.step, state.latency_ms
    if open_loop:  # beyond capacity: no fixed point below the cap, or a queue's ρ >= 1
        # an iteration that ran out of updates below the cap, at a finite target, is unconverged
        # (flagged so, as in the closed loop), not beyond capacity
        exhausted = (~solution.converged & (solution.iterations >= solver.max_iter)
                     & (solution.batch <= batch_cap) & jnp.isfinite(solution.residual))
        stable = (solution.converged | exhausted) & jnp.isfinite(latency) & (state.queue_busy < 1.0)
        reason = jnp.where(ok & ~stable, LOAD_BEYOND_CAPACITY, reason).astype(jnp.int8)
        ok = reason == 0
        turns_per_s = rate_per_ms * MS_PER_S
        sessions = rate_per_ms * latency + paused  # Little's law: in their turn, and paused
        batch_variance = solution.batch * fano
    else:
        turns_per_s = concurrency_eff / ((latency + think_ms) / MS_PER_S)
        sessions = admitted
        busy = active_ratio(latency, think_ms)
        # a session in its turn sees itself and binomial(C - 1, ρ) others (the arrival theorem of
        # closed networks, Lavenberg and Reiser 1980): one session alone decodes alone
        batch_variance = jnp.maximum(concurrency_eff - 1.0, 0.0) * busy * (1.0 - busy)
    # share of the GPU's achievable compute (at η_d, η_p) that decode and prefill use
    utilization = turns_per_s / MS_PER_S * (workload.osl * coefficients.compute_ms / efficiency.eta_decode
                                            + state.prefill.tokens * rate_ms)

    def masked(value):
        return jnp.where(ok, value, jnp.nan)

    if percentiles:
        # the batch a request sees moves its steps along T(B) over the batch's own spread: the
        # secant to two standard deviations above B (one request at least), not the tangent at
        # B + 1, which a MoE step makes steep while experts wake and flat once all run (the
        # tangent's spread collapsed there and P99 TPOT fell as the rate rose)
        reach = jnp.maximum(2.0 * sqrt_or_zero(batch_variance), 1.0)
        # no step decodes more than the slots hold, nor, in the closed loop, more than its C
        # sessions, nor, in its shared engine, more than the decoders its prefill budget keeps fed
        # (one session more waits for its prefill): the batch's spread stops there, and vanishes
        # once the batch is there
        most = batch_cap if open_loop else jnp.minimum(turn.slots, concurrency_eff)
        if options.prefill_model == "shared" and options.arrivals == "staggered":
            most = jnp.minimum(most, fed_decode_batch(turn.chunk_tokens, state.prefill.tokens, turn.osl,
                                                      turn.decode_in_budget))
        most = jnp.maximum(most, state.seen_batch)

        def at_batch(batch):  # a step at a given batch; under seen_batch="distribution" its experts
            # as the law counts them, shifted to that batch without spread (the request itself 1 / D)
            law = None if state.seen_law is None else state.seen_law.shifted(batch - state.seen_batch)
            return decode_step(coefficients, batch, options.expert_routing, law).tpot_ms

        def step_rise(batch):  # T(B') - T(B), B' at most the most a step decodes
            return at_batch(jnp.minimum(batch, most)) - state.step.tpot_ms

        spread_slope = step_rise(state.seen_batch + reach) / reach
        # the tail's bound: the step at the batch's own upper quantiles (T(B) increases, so its
        # quantile is the step at the batch's; `TurnSpread.batch_rise_ms`)
        rise = jnp.stack([step_rise(quantile) for quantile in seen_batch_quantiles(state.seen_batch, batch_variance)])
        # the prefills landing in a request's decode steps are the others': in the closed loop
        # (C - 1) / C of the turns (the arrival theorem, as above), in the open loop all of them
        others_per_s = turns_per_s if open_loop else turns_per_s * (1.0 - 1.0 / jnp.maximum(concurrency_eff, 1.0))
        # nor does a step take less than one request's alone: the quantiles' floor
        fastest = decode_step(coefficients, 1.0 + 0.0 * state.seen_batch, options.expert_routing,
                              None if state.seen_law is None else BatchLaw(state.seen_law.own, 0.0 * state.seen_batch,
                                                                           0.0 * state.seen_batch)).tpot_ms
        spread = TurnSpread(state.ttft_ms, state.queue_wait_ms, state.queue_busy, state.mix, state.tpot_ms,
                            workload.osl, workload.osl_cv, state.decode_step_ms, state.mixed_step_ms,
                            state.mixed_share, batch_variance, spread_slope, others_per_s / MS_PER_S,
                            state.prefill_dispersion, tpot_cap,
                            0.0 if turn.scheduler_delay_steps is None
                            else scheduler_wait_ms(turn.scheduler_delay_steps, state.tpot_ms), state.service_scv,
                            state.prefill_service_ms, rise, state.step_wait_ms, fastest, step_rise(most),
                            state.arrival_split, state.slot_busy, state.slot_wait_ms)
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
            hw, model, tp, jnp.minimum(state.batch_run, state.seen_batch), step, state.prefill.tokens,
            context_tokens, workload.osl)),
        prefill_share=masked(state.ttft_ms / latency),
        hit_rate_eff=masked(state.prefill.hit_rate_eff) if lru else hit_rate + zero,
        tier_hit_rate=masked(state.prefill.tier_hit_rate),
        cache_lifetime_s=masked(state.cache_lifetime_s) if lru else (
            workload.cache_ttl_s + zero if options.cache_model == "ttl" else zero + jnp.inf),
        gpu_utilization=masked(utilization),
        memory_wait_ms=masked(state.memory_wait_ms),
        memory_wait_probability=masked(state.memory_wait_chance + zero),
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
    # the replica has D times its rank's batch, throughput and sessions; per session and per
    # request it is the rank, per GPU the rank over its S stages
    concurrency_eff = jnp.where(ok, sessions * ranks if open_loop else admitted * ranks, memory.concurrency_eff * ranks)
    return outputs._replace(
        output_tokens_per_s_per_gpu=outputs.output_tokens_per_s_per_gpu / layout.stages,
        batch_eff=outputs.batch_eff * ranks, turns_per_s=outputs.turns_per_s * ranks,
        request_throughput=outputs.request_throughput * ranks, request_goodput=outputs.request_goodput * ranks,
        concurrency_max=jnp.minimum(memory.concurrency_max * ranks, _INT32_MAX).astype(jnp.int32),
        concurrency_eff=jnp.minimum(jnp.round(concurrency_eff), _INT32_MAX).astype(jnp.int32))

"""A model's costs on a TP group of GPUs: the per-token prefill time, the decode step's
coefficients and a prefill alone (seed eqs. 2-3, the opt-in all-reduce and fixed terms,
attention's FLOPs where counted, and the measured profile's roofline; docs/model.md). Shared by
the aggregated model (`jaxpareto.physics.point`) and the disaggregated one, whose two pools each
have their own TP (`jaxpareto.physics.disaggregated_point`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.engine import EngineParams
from jaxpareto.definitions.hardware import effective_tflops, expert_offset_tokens, expert_tflops, gemm_offset_tokens
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency, Workload
from jaxpareto.definitions.units import FLOPS_PER_TFLOPS, MS_PER_S
from jaxpareto.physics.attention import causal_pairs, window_pairs
from jaxpareto.physics.cache import cache_survival
from jaxpareto.physics.communication import allreduce_time
from jaxpareto.physics.decode import DecodeCoefficients, decode_coefficients, decode_step, expert_slowdown, \
    experts_touched, offset_shares, routed_at_expert_rate
from jaxpareto.physics.engine import PrefillExperts, step_ms
from jaxpareto.physics.prefill import hit_prefill_tokens, prefill_tokens, ttft_ms


class TurnTokens(NamedTuple):
    """What a turn prefills (scalars; `turn_tokens`).

    Attributes:
        hit_rate: h, after the TTL model's survival where it applies.
        hit_tokens: what a hit prefills, min(max(ΔL, 1), L) [tokens].
        tokens: L_prefill, the mean over hits and misses (eq. 2) [tokens].
        chunk_tokens: prefill tokens per engine step at most: the engine's, else the workload's.
    """

    hit_rate: jax.Array
    hit_tokens: jax.Array
    tokens: jax.Array
    chunk_tokens: jax.Array


def turn_tokens(workload: Workload, engine: EngineParams | None, options: ModelOptions, think_time_s: jax.Array,
                context_tokens: jax.Array, hit_rate: jax.Array) -> TurnTokens:
    """The tokens a turn of ``context_tokens`` prefills at hit rate ``hit_rate`` (docs/model.md,
    eq. 2; under ``cache_model="ttl"`` h x P(Z < TTL), `jaxpareto.physics.cache`)."""
    if options.cache_model == "ttl":
        hit_rate = hit_rate * cache_survival(think_time_s, workload.cache_ttl_s, options.pause_distribution,
                                             workload.pause_sigma)
    hit_tokens = hit_prefill_tokens(context_tokens, workload.delta_tokens)
    tokens = prefill_tokens(context_tokens, workload.delta_tokens, hit_rate)
    chunk_tokens = workload.prefill_chunk_tokens
    if engine is not None:
        chunk_tokens = jnp.where(engine.prefill_chunk_tokens > 0, engine.prefill_chunk_tokens, chunk_tokens)
    return TurnTokens(hit_rate, hit_tokens, tokens, chunk_tokens)


def engine_efficiency(efficiency: Efficiency, engine: EngineParams | None) -> Efficiency:
    """The factors at a point: the engine's own where it sets them, else the shared ones."""
    if engine is None:
        return efficiency
    return jax.tree_util.tree_map(lambda own, mask, shared: jnp.where(mask > 0, own, shared),
                                  engine.efficiency, engine.efficiency_mask, efficiency)


def prefill_expert_costs(decode: DecodeCoefficients, batch: jax.Array, options: ModelOptions):
    """p -> the routed experts p prefill tokens touch beyond those of a decode batch B, as
    `PrefillExperts`: their weights [ms at peak bandwidth] and their GEMMs' offsets [ms before
    η_d] (measured profile: prefill reads the weights once per chunk, and a MoE chunk the experts
    its tokens touch, each a GEMM of its own; dense models: 0)."""
    def extra(p):
        touched = experts_touched(batch + p, decode.experts, decode.experts_per_token, options.expert_routing)
        alone = experts_touched(batch, decode.experts, decode.experts_per_token, options.expert_routing)
        return PrefillExperts((touched - alone) * decode.expert_ms, (touched - alone) * decode.expert_floor_ms)
    return extra


def isolated_prefill_ms(decode: DecodeCoefficients, tokens: jax.Array, chunk_tokens: jax.Array,
                        prefill_ms_per_token: jax.Array, options: ModelOptions) -> jax.Array:
    """A prefill of ``tokens`` alone on the GPUs as a roofline (the measured profile's eq. 2):
    ceil-free max(tokens / P, 1) chunks of min(tokens, P) tokens, each step the larger of its
    compute and the weights (and experts) it reads, plus the step's fixed time [ms]."""
    idle = decode_step(decode, 0.0 * tokens, options.expert_routing)
    chunk = jnp.minimum(tokens, chunk_tokens)
    one = step_ms(idle, decode.eta_decode, decode.elementwise_overhead, chunk, prefill_ms_per_token,
                  prefill_expert_costs(decode, 0.0 * tokens, options)(chunk))
    return jnp.maximum(tokens / chunk_tokens, 1.0) * one


class PrefillAttention(NamedTuple):
    """A turn's prefill attention kept apart from the per-token rate, where its FLOPs are counted
    (scalars; `tp_costs`): its cost is not linear in the tokens prefilled (a hit attends to the
    cached context, a miss to itself), so a hit rate other than the turn's nominal one (the LRU
    model's effective rate) re-weights the two (`prefill_rate_ms`).

    Attributes:
        matmul_ms_per_token: c_p without attention: the weights' matmuls and the all-reduce [ms].
        hit_ms, miss_ms: the attention of one hit and of one miss [ms].
    """

    matmul_ms_per_token: jax.Array
    hit_ms: jax.Array
    miss_ms: jax.Array


class TpCosts(NamedTuple):
    """A model's per-token and per-step costs on a TP group (scalars; `tp_costs`).

    Attributes:
        prefill_ms_per_token: c_p, eq. 2's time for one prefill token, with its share of the
            turn's attention at its nominal hit rate where its FLOPs are counted
            (`hit_and_miss_attention_flops`) [ms].
        decode: the decode step's coefficients, with the step's fixed time and all-reduce.
        ttft_fixed_ms: the opt-in fixed TTFT terms (request overhead, all-reduce latency) [ms].
        attention: c_p's parts where attention's FLOPs are counted (`PrefillAttention`), else None.
    """

    prefill_ms_per_token: jax.Array
    decode: DecodeCoefficients
    ttft_fixed_ms: jax.Array
    attention: PrefillAttention | None = None


def prefill_rate_ms(prefill_ms_per_token: jax.Array, attention: PrefillAttention | None, tokens: jax.Array,
                    hit_share: jax.Array) -> jax.Array:
    """c_p [ms per prefill token] for a turn mix whose prefixes are found (GPU or host-tier hits)
    in a share ``hit_share`` of turns and which prefills ``tokens`` on average: the nominal
    ``prefill_ms_per_token`` where attention is not counted apart (None), else the matmuls' rate
    plus the mix's attention spread over its tokens (docs/model.md, "Attention FLOPs")."""
    if attention is None:
        return prefill_ms_per_token
    mean_ms = hit_share * attention.hit_ms + (1.0 - hit_share) * attention.miss_ms
    return attention.matmul_ms_per_token + mean_ms / jnp.maximum(tokens, 1.0)


def hit_and_miss_attention_flops(model, turn: TurnTokens, context_tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The attention FLOPs of one hit and of one miss (docs/model.md, "Attention FLOPs"): a hit
    prefills its ΔL tokens after the L - ΔL cached, a miss the whole L after none; causal pairs
    (`jaxpareto.physics.attention`) x FLOPs per pair, full and sliding-window layers. Scalars [FLOP]."""
    def flops(new, prefix):
        return model.attention_pair_flops * causal_pairs(new, prefix) \
            + model.attention_window_pair_flops * window_pairs(new, prefix, model.kv_window_tokens)
    return flops(turn.hit_tokens, jnp.maximum(context_tokens - turn.hit_tokens, 0.0)), \
        flops(context_tokens, 0.0 * context_tokens)


def tp_costs(hw, model, tp, turn: TurnTokens, context_tokens, decode_context, efficiency: Efficiency,
             options: ModelOptions) -> TpCosts:
    """The costs of serving ``model`` on ``tp`` GPUs of ``hw`` for ``turn`` (`TurnTokens`) of a
    ``context_tokens`` context, decoding at ``decode_context`` (seed eqs. 2-3, the opt-in
    all-reduce and fixed terms, and attention's FLOPs where counted; docs/model.md)."""
    measured = options.profile == "measured"
    tflops = effective_tflops(hw, model.compute_bits, options.gemm_rate)
    allreduce = allreduce_time(hw, model, tp, efficiency.allreduce_scale, efficiency.allreduce_latency_us,
                               latency_per_peer=measured)
    matmul_ms_per_token = ttft_ms(model.params_active_b, 1.0, tp, tflops, efficiency.eta_prefill)
    # the routed experts' tokens run as a grouped GEMM at its own measured rate and offset
    routed_tflops = expert_tflops(hw, model.compute_bits, options.gemm_rate)
    slowdown = expert_slowdown(tflops, routed_tflops)
    prefill_ms_per_token = routed_at_expert_rate(matmul_ms_per_token, model, slowdown) + allreduce.per_token_ms
    # a GEMM of m tokens takes as long as m + m_0 at the measured rate: once per engine step
    # (in the decode step's compute floor) and once per isolated prefill (seed eq. 2), for each
    # routed expert the tokens touch as well (each expert's tokens are a GEMM of their own)
    offset = gemm_offset_tokens(hw, model.compute_bits, options.gemm_rate)
    expert_offset = expert_offset_tokens(hw, model.compute_bits, options.gemm_rate)
    prompt_experts = experts_touched(jnp.minimum(turn.tokens, turn.chunk_tokens), model.experts,
                                     model.experts_per_token, options.expert_routing)
    nonmoe_share, expert_share = offset_shares(model)
    prefill_offset_ms = matmul_ms_per_token * (offset * nonmoe_share
                                               + expert_offset * slowdown * prompt_experts * expert_share)
    attention_tflops = effective_tflops(hw, 16.0) if options.attention_flops else None
    attention = None
    if options.attention_flops:  # the turn's attention FLOPs, spread over its prefill tokens
        def as_ms(flops):
            return flops / (tp * attention_tflops * FLOPS_PER_TFLOPS) * MS_PER_S / efficiency.eta_prefill
        hit, miss = hit_and_miss_attention_flops(model, turn, context_tokens)
        attention = PrefillAttention(prefill_ms_per_token, as_ms(hit), as_ms(miss))
        prefill_ms_per_token = prefill_rate_ms(prefill_ms_per_token, attention, turn.tokens, turn.hit_rate)  # nominal h
    step_fixed_ms = efficiency.decode_overhead_ms + model.layers * efficiency.layer_overhead_us / 1000.0 \
        + allreduce.fixed_ms
    coefficients = decode_coefficients(
        hw, model, tp, decode_context, tflops, efficiency.eta_decode, efficiency.elementwise_overhead,
        attention_tflops, offset, routed_tflops, expert_offset, options.roofline,
    )._replace(fixed_ms=step_fixed_ms, allreduce_ms=allreduce.per_token_ms)
    return TpCosts(prefill_ms_per_token, coefficients,
                   efficiency.ttft_overhead_ms + allreduce.fixed_ms + prefill_offset_ms, attention)


def prefill_alone_ms(costs: TpCosts, tokens: jax.Array, chunk_tokens: jax.Array, efficiency: Efficiency,
                     options: ModelOptions) -> jax.Array:
    """A turn's prefill of ``tokens`` alone on the GPUs [ms]: seed eq. 2 (+ the opt-in fixed
    terms), or under the measured profile a roofline chunk by chunk (`isolated_prefill_ms`)."""
    return lone_prefill_ms(costs.decode, tokens, chunk_tokens, costs.prefill_ms_per_token,
                           efficiency.ttft_overhead_ms, costs.ttft_fixed_ms, options)


def lone_prefill_ms(decode: DecodeCoefficients, tokens: jax.Array, chunk_tokens: jax.Array, rate_ms: jax.Array,
                    overhead_ms: jax.Array, fixed_ms: jax.Array, options: ModelOptions) -> jax.Array:
    """`prefill_alone_ms` from its parts, at ``rate_ms`` per token (the LRU model's effective mix
    prefills at its own rate): ``tokens`` x ``rate_ms`` + ``fixed_ms`` (eq. 2 and the fixed TTFT
    terms), or under the measured profile the roofline chunk by chunk + ``overhead_ms`` (the
    request overhead; its steps are prefill steps, with no decode batch to pad to a CUDA graph)."""
    if options.profile == "measured":
        return isolated_prefill_ms(decode._replace(graph_step=None), tokens, chunk_tokens, rate_ms, options) \
            + overhead_ms
    return tokens * rate_ms + fixed_ms


__all__ = ["PrefillAttention", "TpCosts", "TurnTokens", "prefill_rate_ms", "turn_tokens", "engine_efficiency", "isolated_prefill_ms", "lone_prefill_ms", "prefill_alone_ms", "prefill_expert_costs", "tp_costs"]

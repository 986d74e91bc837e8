"""Prefill: tokens computed before the first output token, and TTFT (seed eq. 2)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.units import FLOPS_PER_PARAM_PER_TOKEN, FLOPS_PER_TFLOPS, MS_PER_S, PARAMS_PER_B


def hit_prefill_tokens(context_tokens: jax.Array, delta_tokens: jax.Array) -> jax.Array:
    """What a prefix-cache hit prefills [tokens]: the turn's new tokens ΔL, never more than the
    context L, and at least one: the first output token needs a forward pass over the prompt's
    last token, so an engine's hit stops one token short of a fully cached prompt (vLLM's v1
    KV-cache manager caps the hit at the prompt's length less one token)."""
    return jnp.minimum(jnp.maximum(delta_tokens, 1.0), context_tokens)


def prefill_tokens(context_tokens: jax.Array, delta_tokens: jax.Array, hit_rate: jax.Array) -> jax.Array:
    """L_prefill = h x min(max(ΔL, 1), L) + (1 - h) x L [tokens] (docs/model.md, eq. 2).

    A hit prefills only the turn's new tokens ΔL (never more than the context, at least one:
    `hit_prefill_tokens`); a miss prefills the whole context L.
    """
    return hit_rate * hit_prefill_tokens(context_tokens, delta_tokens) + (1.0 - hit_rate) * context_tokens


def ttft_ms(
    params_active_b: jax.Array,
    tokens: jax.Array,
    tp: jax.Array,
    tflops: jax.Array,
    eta_prefill: jax.Array,
) -> jax.Array:
    """TTFT = 2 x P_active x L_prefill / (G x F) / η_p [ms] (seed eq. 2; compute-bound).

    Args:
        params_active_b: P_active [billions].
        tokens: L_prefill [tokens].
        tp: G [GPUs].
        tflops: F per GPU [TFLOPS] (`jaxpareto.definitions.hardware.effective_tflops`).
        eta_prefill: η_p.
    """
    flops = FLOPS_PER_PARAM_PER_TOKEN * params_active_b * PARAMS_PER_B * tokens
    return flops / (tp * tflops * FLOPS_PER_TFLOPS) * MS_PER_S / eta_prefill


class PrefillWork(NamedTuple):
    """What a turn prefills, on average over hits, tier hits and misses (scalars).

    Attributes:
        tokens: L_prefill, prefill tokens per turn [tokens].
        hit_rate_eff: share of turns whose prefix is in GPU memory.
        tier_hit_rate: share of turns whose prefix is loaded from the host tier instead of
            being prefilled again.
        delay_ms: mean wait for host-tier transfers per turn [ms] (PCIe / C2C, not GPU compute).
    """

    tokens: jax.Array
    hit_rate_eff: jax.Array
    tier_hit_rate: jax.Array
    delay_ms: jax.Array


def prefill_work(context_tokens: jax.Array, hit_tokens: jax.Array, hit_rate_gpu: jax.Array,
                 hit_rate_tier: jax.Array, tier_load_ms: jax.Array, saved_ms: jax.Array) -> PrefillWork:
    """Eq. 2's L_prefill with a host-memory KV tier (vLLM with LMCache / Mooncake; DualPath).

    A GPU hit prefills ``hit_tokens`` (min(max(ΔL, 1), L)); a miss the whole context L. A prefix found in
    the host tier is loaded (``tier_load_ms``, the context's KV over the link) and only the new
    tokens prefilled, when that is faster than prefilling the context at the GPU's full speed;
    otherwise the tier is not used (so a tier of zero bandwidth changes nothing).

    Args:
        context_tokens: L [tokens]. hit_tokens: min(max(ΔL, 1), L) [tokens].
        hit_rate_gpu, hit_rate_tier: shares of turns finding their prefix in GPU memory / the tier.
        tier_load_ms: one context's KV from the tier [ms] (inf without a link).
        saved_ms: the prefill time a found prefix saves against a miss [ms] (the L - ΔL tokens
            at eq. 2's c_p, and attention's share where counted; `jaxpareto.physics.point.prefix_saving_ms`).
    """
    use_tier = tier_load_ms < saved_ms
    tier_tokens = jnp.where(use_tier, hit_tokens, context_tokens)
    miss = 1.0 - hit_rate_gpu - hit_rate_tier
    tokens = hit_rate_gpu * hit_tokens + hit_rate_tier * tier_tokens + miss * context_tokens
    used = jnp.where(use_tier, hit_rate_tier, 0.0)
    delay = used * jnp.where(use_tier, tier_load_ms, 0.0)  # double where: no inf x 0
    return PrefillWork(tokens, hit_rate_gpu, used, delay)

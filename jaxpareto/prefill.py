"""Prefill: tokens computed before the first output token, and TTFT (seed eq. 2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpareto.units import FLOPS_PER_PARAM_PER_TOKEN, FLOPS_PER_TFLOPS, MS_PER_S, PARAMS_PER_B


def prefill_tokens(context_tokens: jax.Array, delta_tokens: jax.Array, hit_rate: jax.Array) -> jax.Array:
    """L_prefill = h x min(ΔL, L) + (1 - h) x L [tokens] (SPEC.md section 3, eq. 2).

    A hit prefills only the turn's new tokens ΔL (never more than the context); a miss
    prefills the whole context L.
    """
    return hit_rate * jnp.minimum(delta_tokens, context_tokens) + (1.0 - hit_rate) * context_tokens


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
        tflops: F per GPU [TFLOPS] (`jaxpareto.hardware.effective_tflops`).
        eta_prefill: η_p.
    """
    flops = FLOPS_PER_PARAM_PER_TOKEN * params_active_b * PARAMS_PER_B * tokens
    return flops / (tp * tflops * FLOPS_PER_TFLOPS) * MS_PER_S / eta_prefill

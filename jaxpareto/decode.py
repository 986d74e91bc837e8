"""Decode step time and TPOT for an effective batch (seed eq. 3, 3a-3c; SPEC.md section 3)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.hardware import HardwareParams
from jaxpareto.model import ModelParams
from jaxpareto.units import BYTES_PER_GB, FLOPS_PER_PARAM_PER_TOKEN, FLOPS_PER_TFLOPS, MS_PER_S, PARAMS_PER_B


class DecodeStep(NamedTuple):
    """One decode step (all scalars, ms).

    Attributes:
        t_weight_ms: weight loading (dense: all active weights; MoE: non-expert part plus the
            distinct routed experts the batch touches).
        t_kv_ms: KV-cache reads of the whole batch.
        t_compute_ms: matmul time at the tensor-core peak.
        tpot_ms: max((t_weight + t_kv) x overhead, t_compute) / η_d.
        compute_bound: t_compute exceeds the memory time.
    """

    t_weight_ms: jax.Array
    t_kv_ms: jax.Array
    t_compute_ms: jax.Array
    tpot_ms: jax.Array
    compute_bound: jax.Array


def decode_step(
    hw: HardwareParams,
    model: ModelParams,
    tp: jax.Array,
    batch: jax.Array,
    context_tokens: jax.Array,
    tflops: jax.Array,
    eta_decode: jax.Array,
    elementwise_overhead: jax.Array,
) -> DecodeStep:
    """Seed eq. 3 for one point at effective batch B.

    - t_weight = P_nonmoe x d / (G x BW) + (min(B x K, E) / G) x P_expert x d / BW
      (a dense model has E = K = 0 and P_nonmoe = P_active: eq. 3a's dense form);
    - t_kv = B x L x κ / (min(G, n_kv) x BW) (eq. 3b: KV splits over at most n_kv GPUs);
    - t_compute = 2 x P_active x B / (G x F) (eq. 3c);
    - TPOT = max((t_weight + t_kv) x overhead, t_compute) / η_d.

    Args:
        hw: one GPU; bandwidth_gbs [GB/s].
        model: one model.
        tp: G [GPUs].
        batch: B, sessions decoding together (continuous, >= 0).
        context_tokens: L, context each decoding session attends to [tokens].
        tflops: F per GPU [TFLOPS].
        eta_decode: η_d.
        elementwise_overhead: memory-time multiplier (1.10).
    """
    bw = hw.bandwidth_gbs
    nonmoe_ms = model.nonmoe_params_b * model.weight_bytes / (tp * bw) * MS_PER_S
    experts_touched = jnp.minimum(batch * model.experts_per_token, model.experts)
    expert_ms = experts_touched / tp * model.expert_params_b * model.weight_bytes / bw * MS_PER_S
    t_weight_ms = nonmoe_ms + expert_ms
    kv_gb = batch * context_tokens * model.kv_bytes_per_token / BYTES_PER_GB
    t_kv_ms = kv_gb / (jnp.minimum(tp, model.kv_heads) * bw) * MS_PER_S
    flops = FLOPS_PER_PARAM_PER_TOKEN * model.params_active_b * PARAMS_PER_B * batch
    t_compute_ms = flops / (tp * tflops * FLOPS_PER_TFLOPS) * MS_PER_S
    t_memory_ms = (t_weight_ms + t_kv_ms) * elementwise_overhead
    tpot_ms = jnp.maximum(t_memory_ms, t_compute_ms) / eta_decode
    return DecodeStep(t_weight_ms, t_kv_ms, t_compute_ms, tpot_ms, t_compute_ms > t_memory_ms)

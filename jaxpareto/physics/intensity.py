"""Operational intensity of a turn and the GPU's ridge point (roofline analysis; seed 004).

A turn does 2 P_active FLOPs per token, for its prefill tokens and its OSL output tokens, and
moves: for the prefill, the active weights once (all experts a prefill of that many tokens
touches) and the KV it writes; for every decode step, its share (1/B) of the weights the step
loads and its own KV cache read. Intensity = FLOPs / bytes [FLOP/byte]; where it is below the
GPU's ridge point (peak FLOPS / bandwidth) the turn is bandwidth-bound. Seed 004 reports 2,409
FLOP/byte for a coding agent and 181 for chat, with the H100's ridge at 295.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpareto.physics.decode import DecodeStep, experts_touched
from jaxpareto.definitions.hardware import Hardware, HardwareParams, effective_tflops
from jaxpareto.physics.memory import kv_bytes
from jaxpareto.definitions.model import Model, ModelParams
from jaxpareto.definitions.units import (
    BYTES_PER_GB,
    COMPUTE_BITS,
    FLOPS_PER_PARAM_PER_TOKEN,
    FLOPS_PER_TFLOPS,
    MS_PER_S,
    PARAMS_PER_B,
)


def operational_intensity(
    hw: HardwareParams,
    model: ModelParams,
    tp: jax.Array,
    batch: jax.Array,
    step: DecodeStep,
    prefill_tokens: jax.Array,
    context_tokens: jax.Array,
    osl: jax.Array,
) -> jax.Array:
    """FLOPs per byte moved over one turn of one session (prefill and decode together).

    Args:
        hw, model: one GPU and model.
        tp: G. batch: B, the effective decode batch. step: the decode step at B.
        prefill_tokens, context_tokens, osl: the turn [tokens].
    """
    flops = FLOPS_PER_PARAM_PER_TOKEN * model.params_active_b * PARAMS_PER_B * (prefill_tokens + osl)
    prefill_experts = experts_touched(prefill_tokens, model.experts, model.experts_per_token)
    prefill_weights = (model.nonmoe_params_b * model.nonmoe_weight_bytes
                       + prefill_experts * model.expert_params_b * model.expert_weight_bytes) * BYTES_PER_GB
    prefill_bytes = prefill_weights + kv_bytes(model, prefill_tokens) + model.fixed_state_bytes
    step_weights = step.t_weight_ms / MS_PER_S * tp * hw.bandwidth_gbs * BYTES_PER_GB  # all G GPUs' loads
    decode_bytes = osl * (step_weights / jnp.maximum(batch, 1e-9) + kv_bytes(model, context_tokens) + model.fixed_state_bytes)
    return flops / (prefill_bytes + decode_bytes)


def ridge_point(gpu: Hardware, model: Model, gemm_rate: str = "peak") -> float:
    """FLOPS / bandwidth [FLOP/byte] at the model's compute precision: the datasheet peak's (H100
    FP16: 295), or with ``gemm_rate="measured"`` the rate the model's matmuls run at
    (`effective_tflops`)."""
    tflops = float(effective_tflops(gpu.to_params(), COMPUTE_BITS[model.compute_dtype], gemm_rate))
    return tflops * FLOPS_PER_TFLOPS / (gpu.bandwidth_gbs * BYTES_PER_GB)

"""What the model gives at one point: `PointOutputs`, every output of README, "The dataset"
(`jaxpareto.definitions.schema`), whichever serving model computed it."""

from __future__ import annotations

from typing import NamedTuple

import jax

DECODE_MEMORY, DECODE_COMPUTE, DECODE_NONE = 0, 1, -1


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
    memory_wait_probability: jax.Array
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


__all__ = ["DECODE_COMPUTE", "DECODE_MEMORY", "DECODE_NONE", "PointOutputs"]

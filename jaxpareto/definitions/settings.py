"""Scalar inputs shared by every grid point: workload, efficiency factors, solver controls.

Each is a frozen pytree dataclass whose fields are all leaves, so changing a value re-uses the
compiled sweep instead of recompiling it.
"""

from __future__ import annotations

import dataclasses
import jax

from jaxpareto.definitions.checks import check_number


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Workload:
    """Per-turn workload scalars (SPEC.md section 2).

    Attributes:
        osl: output tokens per turn (OSL) [tokens], > 0.
        delta_tokens: tokens prefilled on a prefix-cache hit ΔL [tokens], >= 0: the previous
            turn's output plus the new tool result (seed code agent: 128 + 2000 = 2128).
        kv_context_tokens: context L̄ held in KV memory per session [tokens]; 0 means "the
            point's own context_tokens" (SPEC.md default).
        cache_ttl_s: prefix-cache retention [s] for ``cache_model="ttl"``.
        pause_sigma: log-spread σ of lognormal pauses (TTL and LRU cache models).
        prefill_chunk_tokens: prefill tokens per engine step at most, for
            ``prefill_model="shared"`` (vLLM's max_num_batched_tokens) [tokens], > 0.
        tier_capacity_gb: host-memory KV tier per TP group, for ``cache_model="lru"`` [GB]; 0 none.
        tier_bandwidth_gbs: the tier's transfer bandwidth per GPU, one way (PCIe 5.0 x16 about
            64, NVLink-C2C 450) [GB/s]; 0 means no link (the tier is never used).
    """

    osl: float = 128.0
    delta_tokens: float = 2128.0
    kv_context_tokens: float = 0.0
    cache_ttl_s: float = 0.0
    pause_sigma: float = 1.0
    prefill_chunk_tokens: float = 8192.0
    tier_capacity_gb: float = 0.0
    tier_bandwidth_gbs: float = 0.0

    def validate(self) -> "Workload":
        """A copy with Python floats; raises JaxparetoError naming a bad field."""
        return Workload(
            osl=check_number("osl", self.osl, low=0, low_inclusive=False),
            delta_tokens=check_number("delta_tokens", self.delta_tokens, low=0),
            kv_context_tokens=check_number("kv_context_tokens", self.kv_context_tokens, low=0),
            cache_ttl_s=check_number("cache_ttl_s", self.cache_ttl_s, low=0),
            pause_sigma=check_number("pause_sigma", self.pause_sigma, low=0, low_inclusive=False),
            prefill_chunk_tokens=check_number("prefill_chunk_tokens", self.prefill_chunk_tokens, low=1),
            tier_capacity_gb=check_number("tier_capacity_gb", self.tier_capacity_gb, low=0),
            tier_bandwidth_gbs=check_number("tier_bandwidth_gbs", self.tier_bandwidth_gbs, low=0),
        )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of the roofline (seed section 3, steps 6-7).

    Attributes:
        eta_prefill: prefill efficiency η_p in (0, 1] (seed 0.65).
        eta_decode: decode efficiency η_d in (0, 1] (seed 0.40).
        elementwise_overhead: multiplier >= 1 on decode memory time for LayerNorm, RoPE,
            activations and residual adds (seed 1.10).
        decode_overhead_ms: fixed time every decode step adds (scheduling, kernel launches,
            sampling) [ms], >= 0; 0 in the seed. The vLLM FP8-KV blog's fit for Llama-3.1-8B on
            one H100, ITL = 6.44 ms + 4.37e-5 ms x context, has about 5 ms of it.
        ttft_overhead_ms: fixed time every request adds to TTFT (tokenisation, scheduling,
            the first sampling step) [ms], >= 0; 0 in the seed.
        allreduce_scale: multiplier >= 0 on the tensor-parallel all-reduce transfer time at the
            GPU's interconnect bandwidth (`jaxpareto.physics.communication`); 0 (off) in the seed.
        allreduce_latency_us: fixed latency of one all-reduce [µs], >= 0; 0 in the seed.
    """

    eta_prefill: float = 0.65
    eta_decode: float = 0.40
    elementwise_overhead: float = 1.10
    decode_overhead_ms: float = 0.0
    ttft_overhead_ms: float = 0.0
    allreduce_scale: float = 0.0
    allreduce_latency_us: float = 0.0

    def validate(self) -> "Efficiency":
        """A copy with Python floats; raises JaxparetoError naming a bad field."""
        return Efficiency(
            eta_prefill=check_number("eta_prefill", self.eta_prefill, low=0, low_inclusive=False, high=1),
            eta_decode=check_number("eta_decode", self.eta_decode, low=0, low_inclusive=False, high=1),
            elementwise_overhead=check_number("elementwise_overhead", self.elementwise_overhead, low=1),
            decode_overhead_ms=check_number("decode_overhead_ms", self.decode_overhead_ms, low=0),
            ttft_overhead_ms=check_number("ttft_overhead_ms", self.ttft_overhead_ms, low=0),
            allreduce_scale=check_number("allreduce_scale", self.allreduce_scale, low=0),
            allreduce_latency_us=check_number("allreduce_latency_us", self.allreduce_latency_us, low=0),
        )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Solver:
    """Controls of the damped fixed-point iteration (SPEC.md section 3, eq. 4).

    Attributes:
        damping: weight of the new iterate in (0, 1] (seed 0.4).
        tol: relative residual |B_target - B| <= tol x B that stops the iteration.
        max_iter: damped updates before giving up (point flagged unconverged).
    """

    damping: float = 0.4
    tol: float = 1e-6
    max_iter: int = 10_000

    def validate(self) -> "Solver":
        """A copy with Python numbers; raises JaxparetoError naming a bad field."""
        return Solver(
            damping=check_number("damping", self.damping, low=0, low_inclusive=False, high=1),
            tol=check_number("tol", self.tol, low=0, low_inclusive=False, high=1, high_inclusive=False),
            max_iter=check_number("max_iter", self.max_iter, low=1, high=2**31 - 1, integer=True),
        )

"""Scalar inputs shared by every grid point: workload, efficiency factors, solver controls.

Each is a frozen pytree dataclass whose fields are all leaves, so changing a value re-uses the
compiled sweep instead of recompiling it.
"""

from __future__ import annotations

import dataclasses
import jax

from jaxpareto.validation import check_number


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
        cache_ttl_s: prefix-cache retention [s]; 0 means no expiry (the seed's model, default).
        pause_distribution: pause distribution code for the TTL model
            (`jaxpareto.cache.PAUSE_DISTRIBUTIONS`).
        pause_sigma: log-spread σ of lognormal pauses.
    """

    osl: float = 128.0
    delta_tokens: float = 2128.0
    kv_context_tokens: float = 0.0
    cache_ttl_s: float = 0.0
    pause_distribution: float = 1.0
    pause_sigma: float = 1.0

    def validate(self) -> "Workload":
        """A copy with Python floats; raises JaxparetoError naming a bad field."""
        return Workload(
            osl=check_number("osl", self.osl, low=0, low_inclusive=False),
            delta_tokens=check_number("delta_tokens", self.delta_tokens, low=0),
            kv_context_tokens=check_number("kv_context_tokens", self.kv_context_tokens, low=0),
            cache_ttl_s=check_number("cache_ttl_s", self.cache_ttl_s, low=0),
            pause_distribution=check_number("pause_distribution", self.pause_distribution, low=0, high=2),
            pause_sigma=check_number("pause_sigma", self.pause_sigma, low=0, low_inclusive=False),
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
    """

    eta_prefill: float = 0.65
    eta_decode: float = 0.40
    elementwise_overhead: float = 1.10

    def validate(self) -> "Efficiency":
        """A copy with Python floats; raises JaxparetoError naming a bad field."""
        return Efficiency(
            eta_prefill=check_number("eta_prefill", self.eta_prefill, low=0, low_inclusive=False, high=1),
            eta_decode=check_number("eta_decode", self.eta_decode, low=0, low_inclusive=False, high=1),
            elementwise_overhead=check_number("elementwise_overhead", self.elementwise_overhead, low=1),
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

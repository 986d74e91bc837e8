"""Static model options: the choices that change the model's equations, not its numbers.

Each choice selects different code (so a change recompiles), which is why they are grouped in
one hashable `ModelOptions` passed as a static argument through the grid code, while every
number lives in the traced `Workload` / `Efficiency` / `Solver` pytrees.
"""

from __future__ import annotations

from typing import NamedTuple

from jaxpareto.definitions.errors import JaxparetoError

EXPERT_ROUTINGS = ("seed", "uniform")
PREFILL_MODELS = ("isolated", "shared")
CACHE_MODELS = ("given", "ttl", "lru")
PAUSE_DISTRIBUTIONS = ("deterministic", "exponential", "lognormal")
# How the optimiser searches (`jaxpareto.optimize`'s ``method``), and how sessions hold KV.
SEARCH_METHODS = ("auto", "exhaustive", "gradient")
KV_DEMANDS = ("staggered", "synchronised", "synchronized")


class ModelOptions(NamedTuple):
    """Which equations the model uses (hashable, static under `jax.jit`).

    Attributes:
        expert_routing: distinct routed experts per decode step (`jaxpareto.physics.decode.experts_touched`):
            "seed" (min(B K, E)) or "uniform".
        prefill_model: "isolated" (seed eq. 2: every turn prefills alone at the GPU's full speed)
            or "shared" (chunked prefill shares engine steps with decode; `jaxpareto.physics.engine`).
        cache_model: where the prefix-cache hit rate comes from (`jaxpareto.physics.cache`): "given" (the
            grid's h, the seed's model), "ttl" (h x P(Z < TTL)) or "lru" (h x the Che
            approximation's survival in the KV memory left by active sessions, solved jointly
            with the batch).
        pause_distribution: pauses around their mean Z, for the "ttl" and "lru" models:
            "deterministic", "exponential" or "lognormal".
    """

    expert_routing: str = "seed"
    prefill_model: str = "isolated"
    cache_model: str = "given"
    pause_distribution: str = "exponential"

    def validate(self) -> "ModelOptions":
        """Self, checked; raises JaxparetoError naming the bad field and the allowed values."""
        for field, allowed in (("expert_routing", EXPERT_ROUTINGS), ("prefill_model", PREFILL_MODELS),
                               ("cache_model", CACHE_MODELS), ("pause_distribution", PAUSE_DISTRIBUTIONS)):
            value = getattr(self, field)
            if value not in allowed:
                raise JaxparetoError(field, f"unknown {value!r}", allowed)
        return self

    @property
    def piecewise_linear(self) -> bool:
        """R(B) is piecewise linear in B (what the exact solver needs)."""
        return self.expert_routing == "seed" and self.prefill_model == "isolated" and self.cache_model != "lru"

    @property
    def differentiable_solver(self) -> str:
        """The fixed-point solver the gradient searches and the validation use: the exact closed
        form where R(B) is piecewise linear, the damped iteration otherwise (both are
        differentiated implicitly)."""
        return "exact" if self.piecewise_linear else "damped"

    @property
    def memory_caps_concurrency(self) -> bool:
        """Sessions beyond what KV memory holds are not admitted (all but the LRU model)."""
        return self.cache_model != "lru"

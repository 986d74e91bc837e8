"""Static model options: the choices that change the model's equations, not its numbers.

Each choice selects different code (so a change recompiles), which is why they are grouped in
one hashable `ModelOptions` passed as a static argument through the grid code, while every
number lives in the traced `Workload` / `Efficiency` / `Solver` pytrees.
"""

from __future__ import annotations

from typing import NamedTuple

from jaxpareto.definitions.errors import JaxparetoError

EXPERT_ROUTINGS = ("seed", "uniform")
SEEN_BATCHES = ("mean", "distribution")
PREFILL_MODELS = ("isolated", "shared")
CACHE_MODELS = ("given", "ttl", "lru")
PAUSE_DISTRIBUTIONS = ("deterministic", "exponential", "lognormal")
PROFILES = ("seed", "measured")
ARRIVALS = ("staggered", "synchronised", "poisson")
SERVING_MODES = ("aggregated", "disaggregated", "conditional")
DP_PREFILLS = ("independent", "aligned")
GEMM_RATES = ("peak", "measured")
ATTENTION = ("profile", "flops")
ROOFLINES = ("step", "operator")
# How the optimiser searches (`jaxpareto.optimize`'s ``method``), and how sessions hold KV.
SEARCH_METHODS = ("auto", "exhaustive", "bracket", "gradient")
KV_DEMANDS = ("staggered", "synchronised", "synchronized")


def refuse_open_loop(settings, what: str) -> None:
    """Raise a named error when ``settings`` (keywords, or `ModelOptions`) ask for the open loop
    in a search or sweep built on the closed loop's concurrency.

    Raises:
        JaxparetoError: naming ``arrivals``.
    """
    options = settings.get("options") if hasattr(settings, "get") else settings
    arrivals = settings.get("arrivals") if hasattr(settings, "get") else None
    arrivals = arrivals or getattr(options, "arrivals", None)
    if arrivals == "poisson":
        raise JaxparetoError("arrivals", f"{what} works on the closed loop's concurrency; 'poisson' (request_rate "
                                         "as the load) is for sweeps: jaxpareto.sweep / pareto_sweep / sweep_to_zarr")


class ModelOptions(NamedTuple):
    """Which equations the model uses (hashable, static under `jax.jit`).

    Attributes:
        expert_routing: distinct routed experts per decode step (`jaxpareto.physics.decode.experts_touched`):
            "seed" (min(B K, E)) or "uniform".
        seen_batch: the batch a request's decode steps run at (`jaxpareto.physics.decode.seen_batch`):
            "mean" (the seed's: the mean batch B in the closed loop, B + 1 under Poisson
            arrivals) or "distribution" (the batch a request sees, which varies from step to
            step: itself and binomial(C - 1, ρ) others in the closed loop of staggered turns,
            mean 1 + (C - 1) ρ, a Poisson count of others under Poisson arrivals, with the routed
            experts a step loads averaged over that law, counted over the replica's
            attention-DP ranks, `jaxpareto.physics.decode.expected_experts_touched`;
            docs/model.md, "The batch a request sees"). A MoE step's experts level off once all
            are awake, so near that batch the mean step lies below the step at the mean batch.
            Where sessions wait for KV memory (the LRU model, the measured profile) the closed
            loop's staggered turns also wait whenever a turn finds M others in theirs
            (`jaxpareto.physics.queueing.closed_slot_wait_turns`), not only once the mean B
            passes M (the fluid bound "mean" keeps). R(B) is then no longer the exact solver's pieces.
        prefill_model: "isolated" (seed eq. 2: every turn prefills alone at the GPU's full speed)
            or "shared" (chunked prefill shares engine steps with decode; `jaxpareto.physics.engine`).
        cache_model: where the prefix-cache hit rate comes from (`jaxpareto.physics.cache`): "given" (the
            grid's h, the seed's model), "ttl" (h x P(Z < TTL)) or "lru" (h x the Che
            approximation's survival in the KV memory left by active sessions, solved jointly
            with the batch).
        pause_distribution: pauses around their mean Z, for the "ttl" and "lru" models:
            "deterministic", "exponential" or "lognormal".
        profile: "seed" (the seed's equations) or "measured", which adds what measured servers
            show and the seed leaves out (docs/model.md, "Measured profile"): attention FLOPs in
            prefill and decode (`jaxpareto.physics.attention`), prefill as a roofline of compute
            and the weights (and experts) each chunk reads, fixed time per step and per layer
            with an all-reduce latency growing with TP, and sessions beyond what KV memory holds
            waiting for it (their wait is part of TTFT) instead of being turned away.
        arrivals: the load and how the turns fall in time. The closed loop (the seed's; the
            load is ``concurrency``): "staggered" (turns spread out, the seed's steady state) or
            "synchronised" (the turns start together and stay in the lockstep groups of their
            first burst, each filling a prefill step, as in a benchmark at fixed concurrency with
            fixed prompt and output lengths and no pause, or pauses all alike; spread lengths or
            pauses break the groups up into the staggered state; for the shared engine;
            `jaxpareto.physics.engine.synchronised_turn`; an engine that prefills first,
            ``Engine.prefill_first`` as SGLang's, keeps the burst one wave instead:
            `jaxpareto.physics.engine.wave_turn`). The open loop: "poisson" (requests
            arrive at ``request_rate`` per second whatever the server does, as in ``vllm bench
            serve --request-rate`` and MLPerf's server scenario; `jaxpareto.physics.queueing`).
        serving: where prefill runs (`jaxpareto.physics.disaggregation`): "aggregated" (the
            seed's: prefill and decode on the same GPUs), "disaggregated" (a pool of prefill
            workers prefills every turn and sends its KV to a pool of decode workers; the axes
            ``prefill_tp``, ``prefill_workers`` and ``decode_workers`` join the grid) or
            "conditional" (as "disaggregated", but a turn with at most
            ``Workload.local_prefill_tokens`` to prefill prefills on its decode worker; Dynamo's
            conditional disaggregation). Closed loop only, without the LRU model.
        dp_prefill: when the attention data-parallel ranks of a replica (``dp_attention`` > 1)
            prefill, under the shared engine (`jaxpareto.physics.layout`): "independent" (each
            rank schedules its own turns, as SGLang and vLLM do; the ranks step in lockstep, so
            a rank decodes at a prefill step's length whenever any rank prefills) or "aligned"
            (the ranks prefill in the same steps: TensorRT-LLM's attention-DP balancing,
            ``attention_dp_config.enable_balance``, or a benchmark at fixed concurrency and
            lengths, whose waves the lockstep keeps in step; a rank then sees its own prefills
            only).
        gemm_rate: the rate the weights' matmuls run at (`jaxpareto.definitions.hardware.effective_tflops`):
            "peak" (the datasheet's dense peak of the model's precision, the seed's) or
            "measured" (that peak times the share large GEMMs measurably reach on that GPU in that
            precision, the catalog's ``gemm_fraction_*``; docs/model.md, "Measured matmul rate").
        attention: what attention costs (docs/model.md, "Attention FLOPs"): "profile" (as the
            profile counts it: under the seed's equations its KV reads alone, eq. 3b; the
            measured profile adds its FLOPs) or "flops" (its FLOPs under either profile: the
            causal pairs of each prefill and every decode step's reads of its context, at the
            BF16 rate; `jaxpareto.physics.attention`).
        roofline: how a decode step's kernels share the GPU (docs/model.md, "Per-operator
            roofline"): "step" (the seed's eq. 3: one roofline for the whole step, max(weights +
            KV reads, matmuls), as if attention's KV reads ran under the projections' matmuls)
            or "operator" (each layer's projections and attention are kernels of their own,
            run one after the other: max(weights, projections' matmuls) + max(KV reads,
            attention's FLOPs); `jaxpareto.physics.decode.decode_step`). R(B) is then no longer
            the exact solver's pieces: the damped solver runs.
    """

    expert_routing: str = "seed"
    prefill_model: str = "isolated"
    cache_model: str = "given"
    pause_distribution: str = "exponential"
    profile: str = "seed"
    arrivals: str = "staggered"
    serving: str = "aggregated"
    dp_prefill: str = "independent"
    gemm_rate: str = "peak"
    attention: str = "profile"
    roofline: str = "step"
    seen_batch: str = "mean"

    def validate(self) -> "ModelOptions":
        """Self, checked; raises JaxparetoError naming the bad field and the allowed values."""
        for field, allowed in (("expert_routing", EXPERT_ROUTINGS), ("seen_batch", SEEN_BATCHES),
                               ("prefill_model", PREFILL_MODELS),
                               ("cache_model", CACHE_MODELS), ("pause_distribution", PAUSE_DISTRIBUTIONS),
                               ("profile", PROFILES), ("arrivals", ARRIVALS), ("serving", SERVING_MODES),
                               ("dp_prefill", DP_PREFILLS), ("gemm_rate", GEMM_RATES), ("attention", ATTENTION),
                               ("roofline", ROOFLINES)):
            value = getattr(self, field)
            if value not in allowed:
                raise JaxparetoError(field, f"unknown {value!r}", allowed)
        if self.arrivals == "synchronised" and self.prefill_model != "shared":
            raise JaxparetoError("arrivals", "'synchronised' needs prefill_model='shared' (the engine that shares "
                                             "steps between prefill and decode)", ARRIVALS)
        if self.disaggregated:
            for field, refused in (("arrivals", ("poisson", "synchronised")), ("cache_model", ("lru",))):
                if getattr(self, field) in refused:
                    raise JaxparetoError("serving", f"{self.serving!r} is modelled for the closed loop's staggered "
                                                    f"turns without the LRU cache model, not {field}="
                                                    f"{getattr(self, field)!r}", ("aggregated",))
        return self

    @property
    def disaggregated(self) -> bool:
        """Prefill runs (at least in part) on a pool of its own (``serving`` not "aggregated")."""
        return self.serving != "aggregated"

    @property
    def attention_flops(self) -> bool:
        """Attention's FLOPs are counted (the measured profile, or ``attention="flops"``)."""
        return self.profile == "measured" or self.attention == "flops"

    @property
    def open_loop(self) -> bool:
        """Requests arrive at a given rate (``request_rate``) instead of from C sessions."""
        return self.arrivals == "poisson"

    @property
    def piecewise_linear(self) -> bool:
        """R(B) is piecewise linear in B (what the exact solver needs)."""
        return not self.nonlinear_choices

    @property
    def nonlinear_choices(self) -> tuple[str, ...]:
        """The options that make R(B) other than piecewise linear, as ``field='value'`` (empty: it
        is piecewise linear, what the exact solver needs)."""
        linear = {"expert_routing": self.expert_routing == "seed", "seen_batch": self.seen_batch == "mean",
                  "prefill_model": self.prefill_model == "isolated",
                  "cache_model": self.cache_model != "lru", "arrivals": self.arrivals != "synchronised",
                  "serving": not self.disaggregated, "roofline": self.roofline == "step"}
        return tuple(f"{field}={getattr(self, field)!r}" for field, ok in linear.items() if not ok)

    @property
    def differentiable_solver(self) -> str:
        """The fixed-point solver the gradient searches and the validation use: the exact closed
        form where R(B) is piecewise linear, the damped iteration otherwise (both are
        differentiated implicitly)."""
        return "exact" if self.piecewise_linear else "damped"

    @property
    def memory_caps_concurrency(self) -> bool:
        """Sessions beyond what KV memory holds are not admitted (the seed); under the LRU model
        and the measured profile they wait for memory instead."""
        return self.cache_model != "lru" and self.profile == "seed"

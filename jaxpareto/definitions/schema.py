"""Names, units and descriptions of the dataset's output variables (README, "The dataset"); the axes
are in `jaxpareto.definitions.axes`."""

from __future__ import annotations

from typing import NamedTuple


class VariableInfo(NamedTuple):
    units: str
    long_name: str


#: Outputs in seconds that are latencies (a session's task time), best low; the others in seconds
#: (a cache's lifetime) are best high
LATENCIES_IN_S = ("task_time_s",)


def lower_is_better(name: str) -> bool:
    """Whether an output is best low: a time in ms (latencies, waits and their percentiles), a
    session's task time or a cost in USD. The Pareto fronts and the optimiser minimise such an
    objective unless told otherwise, and maximise every other one (throughputs, rates, hit
    rates, a cache's lifetime)."""
    return name.endswith(("_ms", "_usd")) or name in LATENCIES_IN_S


def default_maximize(*names: str) -> tuple[bool, ...]:
    """Per objective, whether it is maximised unless told: not where `lower_is_better`."""
    return tuple(not lower_is_better(name) for name in names)


def best_sense(name: str) -> str:
    """The direction an objective is optimised in unless given: "min" where `lower_is_better`,
    else "max"."""
    return "min" if lower_is_better(name) else "max"


# The Pareto front's default objectives (both maximised) and the dimensions it is taken over.
DEFAULT_X = "output_tokens_per_s_per_user"
DEFAULT_Y = "output_tokens_per_s_per_gpu"
DEFAULT_DIMS = ("tp", "concurrency")

OUTPUTS: dict[str, VariableInfo] = {
    "ttft_ms": VariableInfo("ms", "time to first token: prefill, seed eq. 2 (plus its waits under the shared "
                                  "engine and the LRU model)"),
    "tpot_ms": VariableInfo("ms", "time per output token at the effective batch, seed eq. 3"),
    "latency_ms": VariableInfo("ms", "turn latency R = TTFT + TPOT x OSL, seed eq. 1"),
    "batch_eff": VariableInfo("sessions", "effective decode batch B = C_eff x rho, seed eq. 4 (LRU: the running "
                                          "sessions, at most concurrency_max; shared prefill, closed loop: a step "
                                          "decodes at most the P OSL / (L + c OSL) its prefill budget keeps fed)"),
    "gpu_active_ratio": VariableInfo("1", "active ratio rho = R / (R + Z)"),
    "turns_per_s": VariableInfo("turns/s", "turn throughput X = C_eff / (R + Z)"),
    "output_tokens_per_s_per_user": VariableInfo("tokens/s", "interactivity 1000 / TPOT"),
    "output_tokens_per_s_per_gpu": VariableInfo("tokens/s/GPU", "output throughput per GPU X x OSL / G (disaggregated: "
                                                                "over the replica's P G_p + D G GPUs)"),
    "kv_per_session_gb": VariableInfo("GB", "KV cache held per session, seed eq. 5"),
    "concurrency_max": VariableInfo("sessions", "sessions that fit in KV memory, seed eq. 5"),
    "concurrency_eff": VariableInfo("sessions", "sessions admitted min(C, concurrency_max) (LRU: all C); "
                                                "open loop: requests in their turn plus paused sessions, "
                                                "lambda R + P, rounded"),
    "prefill_tokens": VariableInfo("tokens", "tokens prefilled per turn h min(dL, L) + (1 - h) L"),
    "t_weight_ms": VariableInfo("ms", "weight loading per decode step, seed eq. 3a"),
    "t_kv_ms": VariableInfo("ms", "KV-cache loading per decode step, seed eq. 3b"),
    "t_compute_ms": VariableInfo("ms", "matmul time per decode step, seed eq. 3c"),
    "decode_bound": VariableInfo("1", "what bounds a decode step (flag: 0 memory, 1 compute, -1 infeasible)"),
    "operational_intensity": VariableInfo("FLOP/byte", "FLOPs per byte moved over a turn, prefill and decode"),
    "prefill_share": VariableInfo("1", "share of the turn latency spent in prefill TTFT / R"),
    "hit_rate_eff": VariableInfo("1", "prefix-cache hit rate in GPU memory after the cache model (h x survival)"),
    "tier_hit_rate": VariableInfo("1", "share of turns loading their prefix from the host KV tier"),
    "cache_lifetime_s": VariableInfo("s", "how long a paused session's cache survives (TTL, LRU T_c; inf: no eviction)"),
    "gpu_utilization": VariableInfo("1", "share of the GPU's achievable compute used by prefill and decode"),
    "memory_wait_ms": VariableInfo("ms", "wait per turn for KV memory or the engine's running limit, part of TTFT (LRU cache model, measured profile, Poisson arrivals)"),
    "memory_wait_probability": VariableInfo("1", "chance that a turn waits for KV memory or the engine's running "
                                                 "limit (memory_wait_ms is the mean wait over every turn)"),
    "request_throughput": VariableInfo("requests/s", "requests (turns) served per second: X, or the arrival "
                                                     "rate under Poisson arrivals"),
    **{f"p{p}_{metric}_ms": VariableInfo("ms", f"P{p} of {label} (length spread, batch seen and, under Poisson "
                                                f"arrivals, queueing; docs/model.md)")
       for metric, label in (("ttft", "the time to first token"), ("tpot", "a request's time per output token"),
                             ("itl", "the inter-token latency"), ("e2el", "the end-to-end request latency"))
       for p in (50, 90, 99)},
    "request_goodput": VariableInfo("requests/s", "requests served per second while every target of the "
                                                  "sweep's SLO holds (0 where one fails; DistServe)"),
    "feasible": VariableInfo("1", "the layout is valid, the context fits the model, KV memory admits at "
                                  "least one session and an open-loop load is sustained"),
    "infeasible_reason": VariableInfo("1", "why a point is infeasible (flag: 0 feasible, 1 TP does not split the "
                                           "heads, 2 context + OSL beyond the model's maximum, 3 weights exceed "
                                           "GPU memory, 4 no session fits in KV memory, 5 "
                                           "open-loop load beyond capacity, 6 a prefill worker cannot hold a turn, "
                                           "7 the layout does not split the model: ep over the experts or the GPUs, pp over the layers, "
                                           "8 a replica's GPUs do not divide the GPU budget)"),
    "converged": VariableInfo("1", "closed-loop fixed point converged to tol"),
    "iterations": VariableInfo("1", "damped fixed-point updates performed"),
}

#: The outputs a sweep keeps by default only when they say something beyond the means
#: (`jaxpareto.dataset.plan.plan_sweep`'s ``percentiles``).
PERCENTILE_VARIABLES = tuple(name for name in OUTPUTS if name.startswith(("p50_", "p90_", "p99_"))) + \
    ("request_goodput",)

# CF-style flag encoding of the categorical decode_bound.
DECODE_BOUND_FLAGS = {"flag_values": [-1, 0, 1], "flag_meanings": "infeasible memory compute"}
DECODE_BOUND_LABELS = {-1: "infeasible", 0: "memory", 1: "compute"}
# ... and of infeasible_reason (-1: a block of a store not computed yet).
INFEASIBLE_REASON_FLAGS = {"flag_values": [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8],
                           "flag_meanings": "not_computed feasible tp_does_not_split_heads context_beyond_model_maximum "
                                            "weights_exceed_memory no_session_fits_kv_memory load_beyond_capacity "
                                            "prefill_worker_cannot_hold_a_turn layout_does_not_split_model "
                                            "replica_does_not_divide_budget"}
INFEASIBLE_REASON_LABELS = dict(zip(INFEASIBLE_REASON_FLAGS["flag_values"],
                                    INFEASIBLE_REASON_FLAGS["flag_meanings"].split()))
#: Categorical outputs: their CF flag attributes, labels and the fill of a store's uncomputed cells.
FLAG_VARIABLES = {"decode_bound": (DECODE_BOUND_FLAGS, DECODE_BOUND_LABELS, -1),
                  "infeasible_reason": (INFEASIBLE_REASON_FLAGS, INFEASIBLE_REASON_LABELS, -1)}

#: Outputs that are not quantities of the served system (status flags, coded categories, the
#: solver's count): never an objective or a constraint.
NOT_OBJECTIVES = ("feasible", "converged", "iterations", *FLAG_VARIABLES)
#: The outputs an objective or a constraint may name (a front's, `jaxpareto.optimize`'s).
QUANTITIES = tuple(name for name in OUTPUTS if name not in NOT_OBJECTIVES)

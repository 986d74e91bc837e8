"""Scalar inputs shared by every grid point: workload, efficiency factors, solver controls.

Each is a frozen pytree dataclass. Every number is a leaf, so changing a value re-uses the
compiled sweep instead of recompiling it; only `Solver.name`, which selects code, is static.
Each field declares its default, bounds and unit once, as field metadata (`setting`); one
generic `validated` checks any of them, and the spec reader and `jaxpareto.sweep`'s flat
keywords are derived from the same fields.
"""

from __future__ import annotations

import dataclasses
import math

import jax

from typing import NamedTuple

from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.errors import JaxparetoError

SOLVERS = ("damped", "exact", "newton")
DTYPES = ("float32", "float64")
DEFAULT_CHUNK_POINTS = 1 << 18  # points per compute block and zarr chunk (1 MB per float32 output)


def setting(default, *, low: float = -math.inf, high: float = math.inf, low_inclusive: bool = True,
            high_inclusive: bool = True, integer: bool = False, units: str = "1", unset: bool = False):
    """A dataclass field with its bounds and unit as metadata.

    Args:
        default: the default value (the seed's, where the seed has one).
        low, high, low_inclusive, high_inclusive, integer: the allowed values (`check_number`).
        units: the unit of the value.
        unset: the flat keyword of `jaxpareto.sweep` defaults to None ("not set"), which the
            pytree carries as ``default``.
    """
    bounds = dict(low=low, high=high, low_inclusive=low_inclusive, high_inclusive=high_inclusive, integer=integer)
    return dataclasses.field(default=default, metadata={"bounds": bounds, "units": units, "unset": unset})


def numeric_fields(cls) -> tuple[dataclasses.Field, ...]:
    """The fields of a settings class that carry bounds."""
    return tuple(f for f in dataclasses.fields(cls) if "bounds" in f.metadata)


def flat_default(field: dataclasses.Field):
    """The default of a field's flat keyword (None for the fields marked ``unset``)."""
    return None if field.metadata.get("unset") else field.default


def validated(settings):
    """A copy of a settings object with Python numbers, every bounded field checked.

    Raises:
        JaxparetoError: naming the first bad field and its allowed range.
    """
    values = {f.name: check_number(f.name, getattr(settings, f.name), **f.metadata["bounds"])
              for f in numeric_fields(type(settings))}
    return dataclasses.replace(settings, **values)


class _Validated:
    def validate(self):
        """A copy with Python numbers; raises JaxparetoError naming a bad field."""
        return validated(self)


_INF = float("inf")


class LatencySlo(NamedTuple):
    """Latency targets [ms] a request must meet for ``request_goodput`` (inf: no target).

    The fields are the dataset's mean and percentile latencies of the same names (vLLM's names:
    ``p99_ttft_ms`` is the 99th percentile of TTFT). Build one with `latency_slo`.
    """

    ttft_ms: float = _INF
    tpot_ms: float = _INF
    latency_ms: float = _INF
    p50_ttft_ms: float = _INF
    p90_ttft_ms: float = _INF
    p99_ttft_ms: float = _INF
    p50_tpot_ms: float = _INF
    p90_tpot_ms: float = _INF
    p99_tpot_ms: float = _INF
    p50_itl_ms: float = _INF
    p90_itl_ms: float = _INF
    p99_itl_ms: float = _INF
    p50_e2el_ms: float = _INF
    p90_e2el_ms: float = _INF
    p99_e2el_ms: float = _INF


def latency_slo(slo) -> LatencySlo:
    """A `LatencySlo` from a mapping {metric: limit in ms} (or a `LatencySlo`, or None: none).

    Raises:
        JaxparetoError: an unknown metric (listing the allowed ones) or a limit that is not a
            positive number, naming ``slo.<metric>``.
    """
    if slo is None or isinstance(slo, LatencySlo):
        return slo or LatencySlo()
    if not hasattr(slo, "items"):
        raise JaxparetoError("slo", f"expected a mapping of metric names to limits in ms, got {type(slo).__name__}",
                             LatencySlo._fields)
    for name, limit in slo.items():
        if name not in LatencySlo._fields:
            raise JaxparetoError("slo", f"unknown metric {name!r}", LatencySlo._fields)
        check_number(f"slo.{name}", limit, low=0, low_inclusive=False)
    return LatencySlo(**{name: float(limit) for name, limit in slo.items()})


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Workload(_Validated):
    """Per-turn workload scalars (docs/model.md).

    Attributes:
        osl: output tokens per turn (OSL) [tokens], > 0.
        delta_tokens: tokens prefilled on a prefix-cache hit ΔL [tokens], >= 0: the previous
            turn's output plus the new tool result (seed code agent: 128 + 2000 = 2128).
        kv_context_tokens: context L̄ held in KV memory per session [tokens]; 0 means "the
            point's own context_tokens" (the default).
        decode_context_tokens: the context each decode step attends to (its KV reads, and its
            attention FLOPs where counted) [tokens]; 0 (default): the point's L under the seed's
            equations, the turn's in-flight context under the measured profile. Standard serving
            sets it to the prompt plus the outputs in flight, a context the prompt's prefill does
            not attend to (the validation set's rows, `jaxpareto.measure.row_inputs`).
        cache_ttl_s: prefix-cache retention [s] for ``cache_model="ttl"``.
        pause_sigma: log-spread σ of lognormal pauses (TTL and LRU cache models).
        prefill_chunk_tokens: prefill tokens per engine step at most, for
            ``prefill_model="shared"`` (vLLM's max_num_batched_tokens) [tokens], > 0.
        tier_capacity_gb: host-memory KV tier per TP group, for ``cache_model="lru"`` [GB]; 0 none.
        tier_bandwidth_gbs: the tier's transfer bandwidth per GPU, one way (PCIe 5.0 x16 about
            64, NVLink-C2C 450) [GB/s]; 0 means no link (the tier is never used).
        isl_cv, osl_cv: coefficient of variation (standard deviation / mean) of the tokens a
            turn prefills and of its output tokens, each lognormal around its mean; 0 (the
            seed) is fixed lengths. They spread the latency percentiles and, under Poisson
            arrivals, set the prefill queue's wait (`jaxpareto.physics.queueing`); under the
            measured profile ``osl_cv`` lengthens the context decode sees and KV holds to
            L + OSL (1 + osl_cv²) / 2 (`jaxpareto.physics.memory.in_flight_context`).
        arrival_cv: under ``arrivals="poisson"``, the coefficient of variation of the gaps
            between requests arriving at one replica (standard deviation / mean), in [0, 1]: 1
            (default) is Poisson, below 1 more regular (a front end that deals a Poisson stream
            over k replicas in turn: 1 / sqrt(k)). The waits for prefill capacity are a GI/G/1
            queue's over the M/G/1 one (`jaxpareto.physics.queueing.renewal_wait_factor`), and
            the KV-slot wait's arriving work is dispersed by arrival_cv² (`slot_wait_ms`). Bursts
            (above 1) are not modelled: two moments of the gaps do not set their waits (off by
            up to 3x).
        turns_per_session: N, turns of a session under ``arrivals="poisson"`` (sessions arrive,
            run N turns with a pause Z between consecutive ones, and leave); 1: every request
            is its own session, as in ``vllm bench serve``.
        kv_link_gbs: bandwidth per GPU, one way, of the link that carries a prefilled turn's KV
            from its prefill worker to its decode worker under disaggregated serving [GB/s]; 0
            (default): the catalog's, the scale-up link (``interconnect_gbs``) when the
            replica's GPUs fit in one scale-up domain, else the scale-out NIC (``scaleout_gbs``).
        kv_link_latency_us: fixed time of one such transfer [µs] (0: the catalog gives none).
        local_prefill_tokens: under ``serving="conditional"``, a turn with at most this many
            tokens to prefill prefills on its decode worker [tokens] (Dynamo's
            ``max_local_prefill_length``).
        expert_imbalance: with expert parallelism (``ep`` > 1), the routed tokens the busiest
            expert-parallel GPU receives over the mean, >= 1 (1: perfectly balanced); it sets
            that GPU's expert compute and token exchange, which every MoE layer waits for
            (`jaxpareto.physics.layout`).
        slo: the latency targets of ``request_goodput`` (`LatencySlo`; default none).
    """

    osl: float = setting(128.0, low=0, low_inclusive=False, units="tokens")
    delta_tokens: float = setting(2128.0, low=0, units="tokens")
    kv_context_tokens: float = setting(0.0, low=0, units="tokens", unset=True)
    decode_context_tokens: float = setting(0.0, low=0, units="tokens", unset=True)
    cache_ttl_s: float = setting(0.0, low=0, units="s", unset=True)
    pause_sigma: float = setting(1.0, low=0, low_inclusive=False)
    prefill_chunk_tokens: float = setting(8192.0, low=1, units="tokens")
    tier_capacity_gb: float = setting(0.0, low=0, units="GB")
    tier_bandwidth_gbs: float = setting(0.0, low=0, units="GB/s")
    isl_cv: float = setting(0.0, low=0, high=10)
    osl_cv: float = setting(0.0, low=0, high=10)
    turns_per_session: float = setting(1.0, low=1, units="turns")
    arrival_cv: float = setting(1.0, low=0, high=1)
    kv_link_gbs: float = setting(0.0, low=0, units="GB/s")
    kv_link_latency_us: float = setting(0.0, low=0, units="us")
    local_prefill_tokens: float = setting(1000.0, low=0, units="tokens")
    expert_imbalance: float = setting(1.0, low=1, high=100)
    slo: LatencySlo = LatencySlo()


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Efficiency(_Validated):
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
        allreduce_latency_us: fixed latency of one all-reduce [µs], >= 0; 0 in the seed. Under
            the measured profile it is per peer GPU: one all-reduce over G GPUs takes
            (G - 1) x this (`jaxpareto.physics.communication`).
        layer_overhead_us: fixed time per layer and engine step (kernel launches, norms,
            RoPE and the other small kernels of a layer) [µs], >= 0; 0 in the seed.
    """

    eta_prefill: float = setting(0.65, low=0, low_inclusive=False, high=1)
    eta_decode: float = setting(0.40, low=0, low_inclusive=False, high=1)
    elementwise_overhead: float = setting(1.10, low=1)
    decode_overhead_ms: float = setting(0.0, low=0, units="ms")
    ttft_overhead_ms: float = setting(0.0, low=0, units="ms")
    allreduce_scale: float = setting(0.0, low=0)
    allreduce_latency_us: float = setting(0.0, low=0, units="us")
    layer_overhead_us: float = setting(0.0, low=0, units="us")


@dataclasses.dataclass(frozen=True)
class Solver(_Validated):
    """The closed-loop fixed-point solver (docs/model.md, eq. 4): which one and its controls.

    Attributes:
        damping: weight of the new iterate in (0, 1] (seed 0.4). The open loop
            (``arrivals="poisson"``) iterates undamped while its map climbs from B = 0, and
            damped once it turns back (`jaxpareto.physics.closed_loop.climbing_loop`).
        tol: relative residual |B_target - B| <= tol x B that stops the iteration.
        max_iter: updates before giving up (point flagged unconverged; the open loop's undamped
            steps count too).
        name: "damped" (the seed's iteration, the reference; where R(B) holds inner roots, the
            shared engine's load or the LRU time of lognormal pauses, they are solved afresh at
            every step), "newton" (where R(B) holds inner roots, Newton's method on B and them
            together, `jaxpareto.physics.joint`: 3-10x faster, the damped iteration's fixed
            point at nearly every point, but it may settle on another where several lie close
            together; elsewhere the damped iteration) or "exact" (closed form per linear piece
            of R(B); needs a piecewise-linear R(B)). Static: it selects code.
    """

    damping: float = setting(0.4, low=0, low_inclusive=False, high=1)
    tol: float = setting(1e-6, low=0, low_inclusive=False, high=1, high_inclusive=False)
    max_iter: int = setting(10_000, low=1, high=2**31 - 1, integer=True)
    name: str = "damped"

    def validate(self) -> "Solver":
        """A copy with Python numbers; raises JaxparetoError naming a bad field or solver."""
        if self.name not in SOLVERS:
            raise JaxparetoError("solver", f"unknown solver {self.name!r}", SOLVERS)
        return validated(self)


jax.tree_util.register_dataclass(Solver, data_fields=["damping", "tol", "max_iter"], meta_fields=["name"])


def solver_of(value) -> Solver:
    """A `Solver` from a name or a `Solver`.

    Raises:
        JaxparetoError: an unknown name or another type, naming ``solver``.
    """
    if isinstance(value, Solver):
        return value
    if isinstance(value, str):
        return Solver(name=value).validate()
    raise JaxparetoError("solver", f"expected a solver name or a jaxpareto Solver, got {type(value).__name__}",
                         SOLVERS)

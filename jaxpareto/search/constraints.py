"""What every search shares: SLO constraints, the result of an optimisation, the concurrency range
and the solver of the continuous searches.

A constraint is an SLO on one numeric output, ``{"ttft_ms": ("<=", 2000)}``; memory (no more
sessions than the KV cache holds) always applies on top (`jaxpareto.search.penalty` has its
continuous form).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from jaxpareto.definitions.axes import AXIS_BY_NAME
from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.definitions.schema import QUANTITIES
from jaxpareto.definitions.settings import LatencySlo, Workload, latency_slo

OPERATORS = ("<=", ">=")
# the outputs an `OptimizeResult` reports besides the objective and the constrained ones
REPORTED = ("ttft_ms", "tpot_ms", "latency_ms", "output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu",
            "turns_per_s", "batch_eff", "gpu_active_ratio", "gpu_utilization", "kv_per_session_gb", "concurrency_max")
HARDWARE_VARIABLES = ("bandwidth_gbs", "memory_gb", "tflops_fp16", "tflops_fp8", "tflops_fp4")
NUMERIC_OUTPUTS = QUANTITIES  # what an objective or a constraint may name


@dataclasses.dataclass(frozen=True)
class Constraint:
    """An SLO on one output: ``name op limit`` with op "<=" or ">="."""

    name: str
    op: str
    limit: float

    def met(self, values: np.ndarray) -> np.ndarray:
        return values <= self.limit if self.op == "<=" else values >= self.limit

    def describe(self) -> str:
        return f"{self.name} {self.op} {self.limit:g}"


def parse_constraints(constraints: Mapping | None) -> tuple[Constraint, ...]:
    """Validate ``{name: (op, limit)}``.

    Raises:
        JaxparetoError: not a mapping, unknown output, operator or a non-finite limit.
    """
    if constraints is not None and not isinstance(constraints, Mapping):
        raise JaxparetoError("constraints",
                             f"expected a mapping {{output: (op, limit)}}, got {type(constraints).__name__}")
    out = []
    for name, spec in (constraints or {}).items():
        if name not in NUMERIC_OUTPUTS:
            raise JaxparetoError(f"constraints.{name}", "unknown output", NUMERIC_OUTPUTS)
        if not isinstance(spec, (tuple, list)) or len(spec) != 2 or spec[0] not in OPERATORS:
            raise JaxparetoError(f"constraints.{name}", f"expected (op, limit) with op in {OPERATORS}, got {spec!r}")
        limit = check_number(f"constraints.{name}", spec[1])
        if limit <= 0:
            raise JaxparetoError(f"constraints.{name}", f"limits are positive quantities, got {limit!r}")
        out.append(Constraint(name, spec[0], limit))
    return tuple(out)


def with_slo_targets(constraints: Mapping | None, settings: dict) -> Mapping | None:
    """``constraints`` with the latency targets of a search's ``slo=`` keyword, or of its
    ``workload=``'s own ``slo``, as "<=" constraints: a search has no goodput to apply them to,
    and its answer must meet each of them (``settings``' ``slo`` is taken out, and the workload's
    cleared, so that the sweeps behind the search do not compute a goodput nobody reads).

    Raises:
        JaxparetoError: an invalid ``slo`` (`jaxpareto.definitions.settings.latency_slo`), or a
            target given both there and in ``constraints``, named.
    """
    slo = settings.pop("slo", None)
    workload = settings.get("workload")
    if slo is None and isinstance(workload, Workload) and workload.slo != LatencySlo():
        slo = workload.slo
    if isinstance(workload, Workload) and workload.slo != LatencySlo():
        settings["workload"] = dataclasses.replace(workload, slo=LatencySlo())
    if slo is None:
        return constraints
    parse_constraints(constraints)  # a malformed mapping is named as such first
    merged = dict(constraints or {})
    for name, limit in latency_slo(slo)._asdict().items():
        if not math.isfinite(limit):
            continue
        if name in merged:
            raise JaxparetoError(f"slo.{name}", "is also given in constraints: give each target once")
        merged[name] = ("<=", limit)
    return merged


def concurrency_range(concurrency) -> tuple[int, int]:
    """The inclusive integer range ``(lo, hi)`` of a search's concurrency (one integer: lo = hi).

    Raises:
        JaxparetoError: not an integer or a pair of them, out of [1, 2**24], or lo > hi.
    """
    axis = AXIS_BY_NAME["concurrency"]
    if isinstance(concurrency, (int, np.integer)) and not isinstance(concurrency, bool):
        lo = hi = check_number("concurrency", concurrency, low=axis.low, high=axis.high, integer=True)
    elif isinstance(concurrency, (tuple, list)) and len(concurrency) == 2:
        lo, hi = (check_number("concurrency", v, low=axis.low, high=axis.high, integer=True) for v in concurrency)
    else:
        raise JaxparetoError("concurrency", f"expected an inclusive range (lo, hi) or one integer, got {concurrency!r}")
    if lo > hi:
        raise JaxparetoError("concurrency", f"lo {lo} > hi {hi}")
    return lo, hi


@dataclasses.dataclass(frozen=True)
class OptimizeResult:
    """The best configuration of one scenario.

    Attributes:
        feasible: a configuration meets every constraint.
        tp, concurrency: the configuration (None when infeasible).
        objective: the objective's name; ``value`` its value at the configuration.
        metrics: outputs at the configuration (the objective, constrained outputs, and the
            usual latency and throughput figures).
        binding: the constraints that stop a better configuration: an SLO that the next
            concurrency would violate, "memory" when the next session does not fit,
            "concurrency <= hi" at the range's end.
        reason: why nothing is feasible ("" when feasible).
        method: "exhaustive", "bracket" or "gradient" (the search that found it).
        hardware: for a hardware what-if (``variables``), the GPU with the values found.
        serving: "aggregated" (prefill and decode on the same GPUs), or with a GPU budget
            "disaggregated" or "conditional" (`jaxpareto.physics.disaggregation`).
        replicas, gpus_used: with a GPU budget, the replicas filling it and their GPUs (None
            without a budget, or when infeasible).
        prefill_tp, prefill_workers, decode_workers: a disaggregated replica's prefill pool and
            its decode workers (of ``tp`` GPUs each); None for an aggregated one.
        pp, dp_attention, ep: a pipeline or attention-DP replica's stages, ranks (of ``tp``
            GPUs each) and expert parallelism (`jaxpareto.search.parallel`); None for a replica of
            one TP group.
        layouts: with a GPU budget, every layout's best as a DataFrame, best first
            (`jaxpareto.search.budget.best_layout`).
    """

    feasible: bool
    tp: int | None
    concurrency: int | None
    objective: str
    value: float
    metrics: dict
    binding: tuple[str, ...]
    reason: str
    method: str
    hardware: Hardware | None = None
    serving: str = "aggregated"
    replicas: int | None = None
    gpus_used: int | None = None
    prefill_tp: int | None = None
    prefill_workers: int | None = None
    decode_workers: int | None = None
    pp: int | None = None
    dp_attention: int | None = None
    ep: int | None = None
    layouts: object = dataclasses.field(default=None, compare=False, repr=False)


__all__ = ["HARDWARE_VARIABLES", "NUMERIC_OUTPUTS", "OPERATORS", "REPORTED", "Constraint", "OptimizeResult",
           "concurrency_range", "parse_constraints", "with_slo_targets"]

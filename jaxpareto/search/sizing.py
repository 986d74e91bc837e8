"""Deployment sizing: the fewest GPUs (replicas x TP) that serve a target load under SLOs.

For each TP choice, one replica's capacity is the most sessions it admits while meeting every
SLO and the KV-memory limit (for a target of concurrent sessions), or the most turns/s it
delivers so (for a target rate); replicas = ceil(target / capacity), GPUs = replicas x TP, and
the TP with the fewest GPUs wins (ties: the smaller TP). Sessions are assumed spread evenly over
replicas, each an independent copy of the closed loop of docs/model.md.
"""

from __future__ import annotations

from jaxpareto.definitions.options import refuse_open_loop

import dataclasses
import math

import numpy as np
import pandas as pd

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.search.constraints import concurrency_range, parse_constraints, with_slo_targets
from jaxpareto.dataset.plan import plan_sweep
from jaxpareto.dataset.sweep import sweep
from jaxpareto.definitions.axes import AXIS_BY_NAME, CONCURRENCY_RANGE, SCENARIO_AXES, TP_CHOICES
from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.schema import INFEASIBLE_REASON_LABELS, PERCENTILE_VARIABLES
from jaxpareto.search.servable import require_servable


def _why_not(ds) -> str:
    """Why no concurrency works at one TP: its points' infeasibility reason, else the SLOs."""
    codes = np.asarray(ds.infeasible_reason.values)
    if (codes > 0).all():
        return INFEASIBLE_REASON_LABELS[int(np.bincount(codes).argmax())].replace("_", " ")
    return "SLO"


def _more_gpus(plan) -> str:
    """Where the weights alone outgrow the largest TP choice: the GPUs they need at the least."""
    weights_gb = float(plan.definitions["model"][0].to_params().weights_gb)
    memory_gb = float(plan.definitions["gpu"][0].memory_gb)
    largest = int(max(plan.axes["tp"]))
    if weights_gb < largest * memory_gb:
        return ""
    need = 1 << math.ceil(math.log2(weights_gb / memory_gb))
    return (f" ({weights_gb:,.0f} GB of weights, more than {largest} GPUs of {memory_gb:g} GB hold: "
            f"give larger TP choices, e.g. {need} and {2 * need})")


@dataclasses.dataclass(frozen=True)
class SizingResult:
    """The smallest deployment, and every TP option considered.

    Attributes:
        feasible: some TP choice meets the SLOs with at least one session per replica.
        tp, replicas, gpus: the deployment (None when infeasible).
        sessions_per_replica: concurrency each replica runs.
        turns_per_s_per_replica: its turn throughput at that concurrency.
        options: one row per TP choice (capacity, replicas, GPUs, metrics at capacity).
        reason: why nothing is feasible ("" when feasible).
        note: what the answer rests on where a user would not expect it ("" otherwise): without
            an SLO, a replica whose sessions may all wait for KV memory (the LRU cache model, the
            measured profile) is as large as the search's upper limit, its TTFT the wait.
    """

    feasible: bool
    tp: int | None
    replicas: int | None
    gpus: int | None
    sessions_per_replica: int | None
    turns_per_s_per_replica: float
    options: pd.DataFrame
    reason: str
    note: str = ""


def size_deployment(
    gpu,
    model,
    think_time_s: float = AXIS_BY_NAME["think_time_s"].default,
    context_tokens: int = AXIS_BY_NAME["context_tokens"].default,
    hit_rate: float = AXIS_BY_NAME["hit_rate"].default,
    *,
    sessions: int | None = None,
    turns_per_s: float | None = None,
    constraints=None,
    tp=TP_CHOICES,
    concurrency=(CONCURRENCY_RANGE[0], 4 * CONCURRENCY_RANGE[1]),
    **settings,
) -> SizingResult:
    """The fewest GPUs that serve ``sessions`` concurrent sessions or ``turns_per_s`` turns/s.

    Args:
        gpu, model: one GPU and one model (names or definitions).
        think_time_s, context_tokens, hit_rate: the workload (one value each).
        sessions: target concurrent agent sessions (give this or ``turns_per_s``).
        turns_per_s: target turn rate [turns/s].
        constraints: SLOs ``{output: ("<=" | ">=", limit)}``; ``slo=`` (keyword, ``{metric: ms}``
            as `jaxpareto.sweep` takes it) adds its targets as "<=" constraints. A percentile
            among them switches the sweep's percentiles on.
        tp: TP choices per replica. concurrency: sessions per replica searched, (lo, hi).
        **settings: the other keywords of `jaxpareto.dataset.plan.plan_sweep` (``workload=``,
            ``efficiency=``, ``options=``, flat scalars, ``dtype``, and ``solver``, the closed-loop
            solver: "damped" (default), "exact" or a `Solver`).

    Raises:
        JaxparetoError: invalid inputs, named; ``method`` (the solver's old name) names ``solver``.
    """
    if (sessions is None) == (turns_per_s is None):
        raise JaxparetoError("sessions/turns_per_s", "give exactly one target")
    target_sessions = None if sessions is None else check_number("sessions", sessions, low=1, integer=True)
    target_rate = None if turns_per_s is None else check_number("turns_per_s", turns_per_s, low=0, low_inclusive=False)
    refuse_open_loop(settings, "size")
    constraints = with_slo_targets(constraints, settings)
    cons = parse_constraints(constraints)
    lo, hi = concurrency_range(concurrency)
    kwargs = dict(gpu=gpu, model=model, tp=tp, concurrency=list(range(lo, hi + 1)), think_time_s=think_time_s,
                  context_tokens=context_tokens, hit_rate=hit_rate, **settings)
    tails = sorted({c.name for c in cons} & set(PERCENTILE_VARIABLES))
    if tails:  # the sweep keeps them only where asked
        if kwargs.get("percentiles") is False:
            raise JaxparetoError("percentiles", f"False, but the constraints read {', '.join(tails)}", (True, None))
        kwargs["percentiles"] = True
    plan = plan_sweep(**kwargs)
    if any(len(plan.coords[a]) != 1 for a in SCENARIO_AXES):
        raise JaxparetoError("scenario", f"sizing takes one value of each of {', '.join(SCENARIO_AXES)}")
    require_servable(plan, plan.axes["tp"])
    ds = sweep(plan).squeeze(list(SCENARIO_AXES))
    ok = ds.feasible & ds.converged
    if plan.options.memory_caps_concurrency:  # the LRU cache model admits every session
        ok = ok & (ds.concurrency <= ds.concurrency_max)
    for c in cons:
        ok = ok & c.met(ds[c.name])
    rows = []
    for t in ds.tp.values:
        good = ok.sel(tp=t).values
        if not good.any():
            rows.append({"tp": int(t), "capacity": 0, "replicas": None, "gpus": None, "why_not": _why_not(ds.sel(tp=t))})
            continue
        if target_sessions is not None:
            idx = int(np.flatnonzero(good)[-1])  # the most sessions that meet everything
            capacity = int(ds.concurrency.values[idx])
            # Spread evenly, the per-replica count must itself meet every SLO (a lower bound,
            # e.g. on tokens/s per GPU, can fail below the capacity): add replicas until it does.
            concurrency = ds.concurrency.values
            replicas = None
            for count in range(math.ceil(target_sessions / capacity), target_sessions + 1):
                per_replica = math.ceil(target_sessions / count)
                hit = np.flatnonzero(concurrency == per_replica)
                if len(hit) and good[hit[0]]:
                    replicas, idx = count, int(hit[0])
                    break
            if replicas is None:
                rows.append({"tp": int(t), "capacity": capacity, "replicas": None, "gpus": None})
                continue
        else:
            rates = np.where(good, ds.turns_per_s.sel(tp=t).values, -np.inf)
            idx = int(np.argmax(rates))
            capacity = float(rates[idx])
            replicas = math.ceil(target_rate / capacity)
        point = ds.sel(tp=t).isel(concurrency=idx)
        rows.append({"tp": int(t), "capacity": capacity, "replicas": replicas, "gpus": replicas * int(t),
                     "sessions_per_replica": int(point.concurrency), "turns_per_s_per_replica": float(point.turns_per_s),
                     **{name: float(point[name]) for name in ("ttft_ms", "tpot_ms", "output_tokens_per_s_per_user",
                                                               "output_tokens_per_s_per_gpu", "gpu_utilization")}})
    options = pd.DataFrame(rows)
    usable = options.dropna(subset=["gpus"])
    if usable.empty:
        slos = ", ".join(c.describe() for c in cons)
        if not bool(ds.feasible.any()):
            reason = "memory: the model does not fit one session on any TP choice" + _more_gpus(plan)
        elif bool(ok.any()):
            reason = f"SLO: no even split of {target_sessions} sessions over replicas meets {slos}"
        else:
            reason = "SLO: no (TP, concurrency) meets " + slos
        return SizingResult(False, None, None, None, None, math.nan, options, reason)
    best = usable.sort_values(["gpus", "tp"], kind="stable").iloc[0]
    note = ""
    if not cons and target_sessions is not None and float(best.capacity) >= hi:
        note = (f"note: no SLO was given, and a replica admits every session up to the search's limit of {hi:,} "
                f"(its sessions wait for KV memory rather than being turned away), so its capacity is that limit; "
                f"at the {int(best.sessions_per_replica):,} sessions a replica runs here TTFT is "
                f"{float(best.ttft_ms):,.0f} ms. Give SLOs (--slo ttft_ms<=2000, or constraints=) to size for a "
                "latency")
    return SizingResult(True, int(best.tp), int(best.replicas), int(best.gpus), int(best.sessions_per_replica),
                        float(best.turns_per_s_per_replica), options, "", note)

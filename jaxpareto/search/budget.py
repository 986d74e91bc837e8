"""A GPU budget: the best layout of replicas filling it (AIConfigurator's question: aggregated
against disaggregated serving).

Given B GPUs, every TP choice G that divides B is an aggregated layout of B / G replicas, each
serving its own sessions on its own GPUs (the replicas do not interact: a router spreads sessions
evenly). Each layout's best concurrency per replica comes from the one-scenario search
(`jaxpareto.search.optimize.optimize`). Disaggregated layouts (prefill and decode pools,
`jaxpareto.search.disaggregated`) join the same table, and the layouts are ranked by the
objective. Per GPU and per request figures are those of one replica; a replica's counts
(`PER_REPLICA`: requests/s, sessions, batch) are reported, and ranked, over the budget: the
replicas times a replica's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.search.constraints import OptimizeResult

#: Outputs a replica has of its own; the budget has replicas x them.
PER_REPLICA = ("turns_per_s", "request_throughput", "request_goodput", "batch_eff", "concurrency_eff",
               "concurrency_max")
# A layout row's columns beyond ``tp``: a disaggregated replica's pools, an attention-DP one's ranks
POOL_COLUMNS = ("prefill_tp", "prefill_workers", "decode_workers")
RANK_COLUMNS = ("pp", "ep", "dp_attention")


def _ranked(row) -> bool:
    """The row is a pipeline or attention-DP layout (`jaxpareto.search.parallel`)."""
    return pd.notna(row.get("dp_attention", np.nan))


def layout_name(row) -> str:
    """One replica of a layout row in words: "TP 4" (aggregated), "TP 4 x PP 2" (2 pipeline
    stages of TP 4), "DP 8 x TP 1, EP 8" (8 attention-DP ranks of TP 1, the experts over 8 GPUs;
    "EP 1": each expert split over them) or "2xTP2 P + 1xTP4 D" (2 prefill workers of TP 2 and 1
    decode worker of TP 4); the row's ``replicas`` repeat it."""
    if _ranked(row):
        stages = f" x PP {int(row['pp'])}" if int(row["pp"]) > 1 else ""
        if int(row["dp_attention"]) == 1:
            return f"TP {int(row['tp'])}{stages}"
        return f"DP {int(row['dp_attention'])} x TP {int(row['tp'])}{stages}, EP {int(row['ep'])}"
    if row["serving"] == "aggregated":
        return f"TP {int(row['tp'])}"
    return (f"{int(row['prefill_workers'])}xTP{int(row['prefill_tp'])} P + "
            f"{int(row['decode_workers'])}xTP{int(row['tp'])} D")


def budget_layouts(budget: int, tp_choices: np.ndarray) -> list[int]:
    """The TP choices that fill ``budget`` GPUs with whole replicas.

    Raises:
        JaxparetoError: a budget that is not a whole number >= 1, or no TP choice dividing it.
    """
    budget = int(check_number("gpu_budget", budget, low=1, high=2**20, integer=True))
    fitting = [int(t) for t in tp_choices if budget % int(t) == 0]
    if not fitting:
        raise JaxparetoError("gpu_budget", f"no TP choice in {[int(t) for t in tp_choices]} divides {budget} GPUs "
                                           "into whole replicas")
    return fitting


def best_layout(budget: int, layouts: list[int], search: Callable[[int], OptimizeResult], sense: str,
                objective: str, other_rows: Sequence[dict] = (), method: str = "exhaustive") -> OptimizeResult:
    """The best layout under ``budget`` GPUs (module docstring).

    Args:
        budget: B, GPUs to fill (checked by `budget_layouts`).
        layouts: the TP choices dividing B (`budget_layouts`) for aggregated replicas.
        search: G -> the one-scenario optimum at TP G alone.
        sense: "max" or "min" of the objective. objective: its name.
        other_rows: rows of other serving modes' layouts, in this table's columns
            (`jaxpareto.search.layouts.search_layouts`).
        method: the search that found ``other_rows``.

    Returns:
        The best layout's `OptimizeResult` with ``serving``, ``replicas``, ``gpus_used`` (and
        a disaggregated replica's pools) and ``layouts``: one row per layout (best first;
        infeasible ones last with their reason): ``serving``, ``layout`` (one replica in words,
        `layout_name`), ``tp``, ``replicas``,
        ``gpus_used``, ``concurrency`` per replica, ``sessions`` over the budget, the objective
        and the metrics (`PER_REPLICA` ones over the budget; so are the result's ``value`` and
        ``metrics``), ``binding`` and ``reason``, and for disaggregated layouts
        ``prefill_tp``, ``prefill_workers`` and ``decode_workers``, for pipeline and attention-DP
        ones ``pp``, ``ep`` and ``dp_attention``.
    """
    rows, results = [], {}
    for tp in layouts:
        replicas = budget // tp
        found = _over_budget(search(tp), replicas)
        results[tp] = found
        row = {"serving": "aggregated", "tp": tp, "replicas": replicas, "gpus_used": replicas * tp,
               "concurrency": found.concurrency, "sessions": None if found.concurrency is None
               else replicas * found.concurrency, found.objective: found.value}
        row.update({k: v for k, v in found.metrics.items() if k != found.objective})
        if found.feasible and "output_tokens_per_s_per_gpu" in found.metrics:
            row["output_tokens_per_s_total"] = found.metrics["output_tokens_per_s_per_gpu"] * replicas * tp
        row.update(binding=", ".join(found.binding), reason=found.reason, feasible=found.feasible)
        rows.append(row)
    table = pd.DataFrame([*rows, *other_rows])
    table.insert(1, "layout", [layout_name(row) for _, row in table.iterrows()])
    order = table[table["feasible"]].sort_values(objective, ascending=(sense == "min"), kind="stable")
    table = pd.concat([order, table[~table["feasible"]]]).reset_index(drop=True)
    integers = [c for c in ("concurrency", "sessions", *POOL_COLUMNS, *RANK_COLUMNS) if c in table]
    table[integers] = table[integers].astype("Int64")
    top = table.iloc[0]
    if top["serving"] == "aggregated" and not _ranked(top):
        best = results[int(top["tp"])]
        replicas = budget // int(top["tp"])
        return dataclasses.replace(best, serving="aggregated", replicas=replicas if best.feasible else None,
                                   gpus_used=replicas * best.tp if best.feasible else None, layouts=table)
    if not top["feasible"]:
        return OptimizeResult(False, None, None, objective, float("nan"), {}, (), f"{top['layout']}: {top['reason']}",
                              method, serving=str(top["serving"]), layouts=table)
    skip = {"serving", "layout", "tp", "replicas", "gpus_used", "concurrency", "sessions", "binding", "reason", "feasible",
            *POOL_COLUMNS, *RANK_COLUMNS, "output_tokens_per_s_total"}
    metrics = {k: float(v) for k, v in top.items() if k not in skip and pd.notna(v)}
    layout = {k: int(top[k]) for k in (*POOL_COLUMNS, *RANK_COLUMNS) if k in top and pd.notna(top[k])}
    return OptimizeResult(True, int(top["tp"]), int(top["concurrency"]), objective, float(top[objective]), metrics,
                          tuple(b for b in str(top["binding"]).split(", ") if b), "", method,
                          serving=str(top["serving"]), replicas=int(top["replicas"]), gpus_used=int(top["gpus_used"]),
                          **layout, layouts=table)


def _over_budget(found: OptimizeResult, replicas: int) -> OptimizeResult:
    """A replica's optimum with its `PER_REPLICA` figures (objective and metrics) over the budget."""
    metrics = {k: v * replicas if k in PER_REPLICA else v for k, v in found.metrics.items()}
    value = found.value * replicas if found.objective in PER_REPLICA else found.value
    return dataclasses.replace(found, value=value, metrics=metrics)


__all__ = ["PER_REPLICA", "best_layout", "budget_layouts", "layout_name"]

"""The best concurrency of each layout of a GPU budget, by walking every concurrency in the range
(exhaustive: a layout's points are one vmapped batch), under the SLOs and memory (C <=
concurrency_max), with a replica's counts (`jaxpareto.search.budget.PER_REPLICA`) over the budget
as in the aggregated search. The layouts are disaggregated replicas
(`jaxpareto.search.disaggregated`) or attention-DP replicas with expert parallelism
(`jaxpareto.search.parallel`).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from jaxpareto.dataset.plan import SweepPlan
from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.program_memory import release_programs_near_map_limit
from jaxpareto.definitions.schema import INFEASIBLE_REASON_LABELS, OUTPUTS
from jaxpareto.mapper import evaluate_points, shared_scalars, stack_params
from jaxpareto.search.budget import PER_REPLICA
from jaxpareto.search.constraints import REPORTED, Constraint


def search_layouts(plan: SweepPlan, layouts: Sequence, constraints: tuple[Constraint, ...], objective: str,
                   sense: str, budget: int, lo: int, hi: int) -> list[dict]:
    """Each layout's best concurrency per replica (module docstring), as rows of the budget's
    table: ``serving``, the layout's fields (``tp`` and its other axes), ``replicas``,
    ``gpus_used``, ``concurrency`` (per replica), ``sessions`` (over the budget), the objective
    and the reported metrics (`PER_REPLICA` ones over the budget), ``binding``, ``reason`` and
    ``feasible``.

    Args:
        plan: one scenario whose table has the layouts' axes (its ``tp`` and those axes are
            replaced by the layouts').
        layouts: NamedTuples whose fields are axes of the plan's table and whose ``gpus`` is a
            replica's GPUs (`jaxpareto.search.disaggregated.Layout`,
            `jaxpareto.search.parallel.ParallelLayout`). constraints, objective, sense: as
            `optimize`'s.
        budget: B GPUs. lo, hi: the concurrency range per replica.
    """
    if not layouts:  # e.g. no disaggregated replica fits a budget of one GPU
        return []
    outputs = tuple(sorted({objective, *(c.name for c in constraints), *REPORTED, "feasible", "infeasible_reason",
                            "converged"} & set(OUTPUTS)))
    concurrency = np.arange(lo, hi + 1)
    n_c = len(concurrency)
    fields = type(layouts[0])._fields
    columns = {name: np.repeat(np.asarray([getattr(layout, name) for layout in layouts]), n_c) for name in fields}
    columns["concurrency"] = np.tile(concurrency, len(layouts))
    dtype = plan.dtype
    release_programs_near_map_limit()  # a long-lived process's programs, before it aborts
    n = len(columns["concurrency"])
    values = {a: stack_params([plan.definitions[a][0].to_params()] * n, dtype) for a in ("gpu", "model", "engine")}
    values.update({a.name: np.full(n, plan.axes[a.name][0], dtype) for a in plan.table  # the scenario's, and
                   if not a.categorical and a.name not in columns})                     # a layout axis' first
    values.update({a: np.asarray(v, dtype) for a, v in columns.items()})
    order = [a.name for a in plan.table]
    scalars = shared_scalars(plan.workload, plan.efficiency, plan.solver, dtype)
    with jax.enable_x64(dtype == "float64"):
        out = evaluate_points(GridPoint(**{a: values[a] for a in order}), *scalars, outputs=outputs,
                              options=plan.options)
        rows = {k: np.asarray(v).reshape(len(layouts), n_c) for k, v in out.items()}
    sign = 1.0 if sense == "max" else -1.0
    table = []
    for i, layout in enumerate(layouts):
        replicas = budget // layout.gpus
        over = {k: v[i] * replicas if k in PER_REPLICA else v[i] for k, v in rows.items()}
        ok = over["feasible"] & over["converged"] & (concurrency <= rows["concurrency_max"][i])
        for c in constraints:
            ok &= c.met(over[c.name])
        score = np.where(ok, sign * over[objective].astype(np.float64), -np.inf)
        row = {"serving": plan.options.serving, **layout._asdict(), "replicas": replicas,
               "gpus_used": replicas * layout.gpus}
        if not ok.any():
            table.append({**row, "concurrency": None, "sessions": None, objective: np.nan, "binding": "",
                          "reason": _reason(over, constraints), "feasible": False})
            continue
        best = int(np.argmax(score))
        metrics = {k: float(over[k][best]) for k in outputs if k not in ("feasible", "infeasible_reason", "converged")}
        binding = [f"concurrency <= {hi}"] if best == n_c - 1 else \
            (["memory"] if concurrency[best] + 1 > rows["concurrency_max"][i][best + 1] else []) + \
            [c.describe() for c in constraints if not c.met(over[c.name][best + 1])]
        table.append({**row, "concurrency": int(concurrency[best]), "sessions": replicas * int(concurrency[best]),
                      objective: metrics[objective], **{k: v for k, v in metrics.items() if k != objective},
                      "output_tokens_per_s_total": metrics.get("output_tokens_per_s_per_gpu", np.nan) * budget,
                      "binding": ", ".join(binding), "reason": "", "feasible": True})
    return table


def _reason(rows: dict, constraints: tuple[Constraint, ...]) -> str:
    """Why a layout has no feasible concurrency (its row names the layout)."""
    if not rows["feasible"].any():
        return INFEASIBLE_REASON_LABELS[int(rows["infeasible_reason"][0])].replace("_", " ")
    usable = rows["feasible"] & rows["converged"]
    never = [c.describe() for c in constraints if not (usable & c.met(rows[c.name])).any()]
    return "SLO: no concurrency reaches " + ", ".join(never) if never else \
        "SLO: each constraint can be met, but not all at once"


__all__ = ["search_layouts"]

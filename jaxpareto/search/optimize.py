"""Optimal configurations under SLOs: the best TP and concurrency for a scenario (and the least
hardware a workload needs), by exhaustive search, a bracketing search
or gradients through the closed loop.

A scenario is one GPU, model, think time, context and hit rate. The decision is a TP from a set
of choices and an integer concurrency in ``[lo, hi]``; the objective is one output, maximised or
minimised; constraints are SLOs on outputs (``{"ttft_ms": ("<=", 2000)}``) plus memory: no more
sessions than the KV cache holds (C <= concurrency_max), except under ``cache_model="lru"``,
which admits every session (memory then acts through the hit rate and ``memory_wait_ms``).

- ``method="exhaustive"`` evaluates every (TP, C) and takes the best point that meets every
  constraint: exact, the reference of the other two.
- ``method="bracket"`` searches each TP choice's concurrency range instead of walking it: a
  coarse geometric grid of 32 concurrencies, then bisection toward the best one's side, since
  the SLOs and the memory cap are monotone in C (`jaxpareto.search.bracket`): about 60
  evaluations per TP choice for C in [1, 1,024], every scenario and TP of a batch in one
  compiled program. It finds the exhaustive optimum unless the objective has two peaks within
  one grid step or the feasible concurrencies form several pieces.
- ``method="gradient"`` relaxes C to a continuous log C for every TP choice (the relaxation over
  TP is exhaustive: a handful of choices, searched in parallel), maximises log(objective) minus a
  quadratic penalty on the relative SLO and memory violations whose weight grows along the run
  (optax Adam, several starts spread over [log lo, log hi]; `jaxpareto.search.penalty`), with
  derivatives through the closed-loop fixed point by implicit differentiation; then the integer
  neighbours of every continuous optimum (and the bounds) are evaluated exactly and the best one
  that meets every constraint is returned.
- ``method="auto"`` (default) is the bracketing search: faster than both others at every range
  (benchmarks/bench_optimize.py) and equal to the exhaustive one on the tests' random grids.

``method=`` names the search; the closed-loop solver of the exact evaluations is ``solver=``
("damped" or "exact", or a `Solver`), as in `jaxpareto.sweep`.

A configuration that violates a constraint is never returned: when none meets them all,
``feasible`` is False and ``reason`` says why (memory, or which SLO no configuration reaches).
"""

from __future__ import annotations

from jaxpareto.definitions.options import refuse_open_loop

from collections.abc import Mapping, Sequence

import numpy as np

from jaxpareto.dataset.plan import plan_sweep
from jaxpareto.definitions.axes import AXIS_BY_NAME, CONCURRENCY_RANGE, LAYOUT_AXES, SCENARIO_AXES, TP_CHOICES
from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.engine import Engine, resolve_engine
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.definitions.options import SEARCH_METHODS, SERVING_MODES, ModelOptions
from jaxpareto.definitions.schema import PERCENTILE_VARIABLES, best_sense
from jaxpareto.definitions.settings import SOLVERS, Workload
from jaxpareto.search.constraints import (HARDWARE_VARIABLES, NUMERIC_OUTPUTS, Constraint,  # noqa: F401
                                          OptimizeResult, concurrency_range, parse_constraints,
                                          with_slo_targets)
from jaxpareto.search.budget import PER_REPLICA, best_layout, budget_layouts
from jaxpareto.search.disaggregated import disaggregated_layouts
from jaxpareto.search.layouts import search_layouts
from jaxpareto.search.parallel import data_parallel_layouts, pipeline_layouts
from jaxpareto.search.problem import Problem
from jaxpareto.search.servable import require_servable
from jaxpareto.search.whatif import least_hardware

METHODS = SEARCH_METHODS
# `Workload` settings of a prefill pool: only the disaggregated serving modes take them
POOL_SETTINGS = ("kv_link_gbs", "kv_link_latency_us", "local_prefill_tokens")
# ... and of the attention-DP layouts: only they take these (`jaxpareto.search.parallel`)
LAYOUT_SETTINGS = ("expert_imbalance", "dp_prefill")


def _is_batch(value) -> bool:
    return isinstance(value, (list, tuple, np.ndarray)) and not isinstance(value, (str, Hardware))


def check_method(method: str) -> str:
    """The search method, checked.

    Raises:
        JaxparetoError: an unknown method; a solver's name says that the solver is ``solver=``.
    """
    if method in SOLVERS:
        raise JaxparetoError("method", f"method= is the search {METHODS}; the closed-loop solver is "
                                       f"solver={method!r}")
    if method not in METHODS:
        raise JaxparetoError("method", f"unknown method {method!r}", METHODS)
    return method


def optimize(
    gpu,
    model,
    think_time_s=AXIS_BY_NAME["think_time_s"].default,
    context_tokens=AXIS_BY_NAME["context_tokens"].default,
    hit_rate=AXIS_BY_NAME["hit_rate"].default,
    *,
    objective: str = "output_tokens_per_s_per_gpu",
    sense: str | None = None,
    constraints: Mapping | None = None,
    tp: Sequence[int] = TP_CHOICES,
    concurrency: tuple[int, int] | int = CONCURRENCY_RANGE,
    method: str = "auto",
    variables: Sequence[str] | None = None,
    starts: int = 6,
    steps: int = 250,
    gpu_budget: int | None = None,
    **settings,
):
    """The best TP and concurrency for a scenario under SLOs (or for many scenarios at once).

    Args:
        gpu, model: names or definitions; a list of them (or a list for any of
            ``think_time_s``, ``context_tokens``, ``hit_rate`` or another scenario axis given
            by keyword, e.g. ``engine``) searches every combination and returns a Dataset.
        think_time_s, context_tokens, hit_rate: the workload (as in `jaxpareto.sweep`).
        objective: output to optimise; ``sense`` "max" or "min" (None, the default: "min" for a
            latency ``*_ms`` or a cost ``*_usd``, else "max":
            `jaxpareto.definitions.schema.best_sense`).
        constraints: SLOs ``{output: ("<=" | ">=", limit)}``; memory (C <= concurrency_max)
            always applies. ``slo=`` (keyword, as `jaxpareto.sweep` takes it: ``{metric: ms}``)
            adds its targets as "<=" constraints.
        tp: TP choices. concurrency: inclusive integer range ``(lo, hi)``.
        method: the search: "auto" (the bracketing search), "exhaustive", "bracket" or
            "gradient" (module docstring).
        variables: hardware what-if: names of GPU numbers (`HARDWARE_VARIABLES`) to minimise
            while meeting the constraints at the given (single) TP and concurrency; the
            result's ``hardware`` holds the values found (see
            `jaxpareto.search.whatif.least_hardware`).
        starts, steps: gradient search: starting points per TP choice and optax steps.
        gpu_budget: GPUs to fill with replicas (one scenario): each TP choice dividing it is a
            layout of gpu_budget / TP replicas, searched for its best concurrency per replica;
            the result is the best layout, with ``replicas``, ``gpus_used`` and every layout's
            best in ``layouts`` (`jaxpareto.search.budget`). ``concurrency`` is per replica;
            a replica's counts (`jaxpareto.search.budget.PER_REPLICA`: requests/s, sessions,
            batch) are over the budget, in the objective, the metrics and the constraints alike.
        serving (keyword): with ``gpu_budget``, the serving modes whose layouts compete: a mode
            or a list of "aggregated", "disaggregated" and "conditional" (default aggregated
            and disaggregated). A disaggregated layout is P prefill workers of G_p GPUs and D
            decode workers of G whose P G_p + D G divides the budget, G_p and G among ``tp``
            (`jaxpareto.search.disaggregated`); the result then carries ``prefill_tp``,
            ``prefill_workers`` and ``decode_workers``. Under aggregated serving a MoE model
            also competes in attention-DP layouts: D >= 2 ranks of TP G with the experts over
            all G D GPUs (``ep`` = G D) or split over them (``ep`` = 1), G D dividing the
            budget, and every model in pipelines of ``pp`` >= 2 stages of TP G, G pp dividing
            the budget (`jaxpareto.search.parallel`); the result then carries ``pp``,
            ``dp_attention`` and ``ep``, and ``expert_imbalance`` and ``dp_prefill`` apply to the
            attention-DP layouts.
        **settings: the keywords of `jaxpareto.dataset.plan.plan_sweep` (``workload=``,
            ``efficiency=``, ``options=``, flat scalars such as osl or eta_prefill, ``dtype``,
            and ``solver``, the closed-loop solver of the exact evaluations: "damped" (default),
            "exact" or a `Solver`).

    Returns:
        `OptimizeResult` for one scenario; an `xarray.Dataset` over the scenario axes
        (``tp``, ``concurrency``, ``value``, ``feasible``, the metrics, ``binding`` and
        ``reason``) when any scenario argument is a list.

    Raises:
        JaxparetoError: any invalid input, named, before anything is computed; a solver's name
            given as ``method`` says that the solver is ``solver=``; for one scenario, a context
            beyond the model's maximum or TP choices none of which shards the model (a batch
            flags those scenarios infeasible instead).
    """
    if objective not in NUMERIC_OUTPUTS:
        raise JaxparetoError("objective", f"unknown output {objective!r}", NUMERIC_OUTPUTS)
    sense = best_sense(objective) if sense is None else sense
    if sense not in ("max", "min"):
        raise JaxparetoError("sense", f"unknown sense {sense!r}", ("max", "min"))
    check_method(method)
    refuse_open_loop(settings, "optimize")
    for axis in LAYOUT_AXES:  # searched, not given: under a budget the layouts are the search's
        if settings.get(axis.name) is not None:
            raise JaxparetoError(axis.name, "is a layout axis of sweeps; optimize compares the pipeline and "
                                            "attention-DP layouts of a GPU budget: give gpu_budget= instead")
    constraints = with_slo_targets(constraints, settings)
    cons = parse_constraints(constraints)
    serving = serving_modes(settings.pop("serving", None), gpu_budget, settings,
                            {objective, *(c.name for c in cons)})
    # the prefill pool's settings go to the serving modes that have one
    pools = {k: settings.pop(k) for k in POOL_SETTINGS if k in settings}
    pools = {k: v for k, v in pools.items() if v is not None and v != getattr(Workload(), k)}  # a spec gives all
    for name, needs in (("local_prefill_tokens", ("conditional",)), *((k, SERVING_MODES[1:]) for k in POOL_SETTINGS)):
        if name in pools and not set(needs) & set(serving):
            raise JaxparetoError(name, f"is a setting of serving {' or '.join(map(repr, needs))}, which this search "
                                       f"does not compare (serving {list(serving)})")
    layout_settings = {k: settings.pop(k) for k in LAYOUT_SETTINGS if settings.get(k) is not None}
    layout_settings = {k: v for k, v in layout_settings.items() if v != _LAYOUT_DEFAULTS[k]}
    if layout_settings and (gpu_budget is None or "aggregated" not in serving):
        raise JaxparetoError(next(iter(layout_settings)), "is a setting of the attention-DP layouts, which are "
                                                          "searched under a GPU budget with aggregated serving")
    tp_choices = AXIS_BY_NAME["tp"].numbers(tp)
    lo, hi = concurrency_range(concurrency)
    starts = check_number("starts", starts, low=1, high=256, integer=True)
    steps = check_number("steps", steps, low=1, high=100_000, integer=True)
    if gpu_budget is not None:
        if variables is not None:
            raise JaxparetoError("gpu_budget", "a hardware what-if (variables=) takes one TP, not a budget")
        # checks the budget first; aggregated layouts need a TP choice dividing it
        fitting = budget_layouts(gpu_budget, tp_choices) if "aggregated" in serving else \
            [int(t) for t in tp_choices if int(check_number("gpu_budget", gpu_budget, low=1, high=2**20,
                                                            integer=True)) % int(t) == 0]
        gpu_budget = int(gpu_budget)
        one = dict(objective=objective, sense=sense, constraints=constraints, concurrency=concurrency, method=method,
                   starts=starts, steps=steps)
        scenario_args = (gpu, model, think_time_s, context_tokens, hit_rate)
        if any(_is_batch(v) for v in (*scenario_args, *(settings.get(a) for a in SCENARIO_AXES))):
            raise JaxparetoError("gpu_budget", "takes one scenario (no lists of GPUs, models or workloads)")
        servable = fitting or tp_choices.tolist()
        require_servable(plan_sweep(gpu=gpu, model=model, think_time_s=think_time_s, context_tokens=context_tokens,
                                    hit_rate=hit_rate, tp=servable, concurrency=[lo], **settings),
                         np.asarray(servable))

        other_rows = []
        for mode in serving[1:] if serving[0] == "aggregated" else serving:
            plan = plan_sweep(gpu=gpu, model=model, think_time_s=think_time_s, context_tokens=context_tokens,
                              hit_rate=hit_rate, tp=tp_choices.tolist(), concurrency=[lo], serving=mode, **settings,
                              **{k: v for k, v in pools.items() if mode == "conditional" or k != "local_prefill_tokens"})
            other_rows += search_layouts(plan, disaggregated_layouts(gpu_budget, tp_choices), cons, objective, sense,
                                         gpu_budget, lo, hi)
        ranked = data_parallel_layouts(gpu_budget, tp_choices) if "aggregated" in serving else []
        staged = pipeline_layouts(gpu_budget, tp_choices) if "aggregated" in serving else []
        moe = False
        if ranked or staged:  # the grid validates the layouts' values; a dense model has no ranked ones
            plan = plan_sweep(gpu=gpu, model=model, think_time_s=think_time_s, context_tokens=context_tokens,
                              hit_rate=hit_rate, tp=tp_choices.tolist(), concurrency=[lo],
                              **{a: sorted({getattr(x, a) for x in ranked + staged}) for a in ("pp", "ep",
                                                                                                "dp_attention")},
                              **settings, **layout_settings)
            moe = plan.models[0].is_moe
            other_rows += search_layouts(plan, (ranked if moe else []) + staged, cons, objective, sense, gpu_budget,
                                         lo, hi)
        if layout_settings and not (ranked and moe):
            raise JaxparetoError(next(iter(layout_settings)), "is a setting of the attention-DP layouts: a MoE model "
                                                              "with a budget of at least two TP groups has them")

        def at(tp: int) -> OptimizeResult:
            # a replica's counts are limited over the budget, as they are reported: each of the
            # B / G replicas needs its share of the limit
            replicas = gpu_budget // tp
            limits = {c.name: (c.op, c.limit / replicas if c.name in PER_REPLICA else c.limit) for c in cons}
            try:
                return optimize(*scenario_args, tp=(tp,), **{**one, "constraints": limits}, **settings)
            except JaxparetoError as error:  # a TP that does not shard the model: a layout no server runs
                if error.field != "tp":
                    raise
                return OptimizeResult(False, None, None, objective, float("nan"), {}, (),
                                      f"TP {tp} does not shard {model_name(model)}", method)

        return best_layout(gpu_budget, fitting if "aggregated" in serving else [], at, sense, objective, other_rows)
    if variables is not None:
        return least_hardware(gpu, model, think_time_s, context_tokens, hit_rate, variables=variables,
                              constraints=constraints, tp=tp, concurrency=concurrency, **settings)
    scenario = dict(gpu=gpu, model=model, think_time_s=think_time_s, context_tokens=context_tokens, hit_rate=hit_rate)
    # any other scenario axis given by keyword (e.g. engine) is a scenario argument too: a list batches
    scenario.update({a: settings.pop(a) for a in SCENARIO_AXES if a in settings})
    batched = any(_is_batch(v) for v in scenario.values())
    chosen = method if method != "auto" else "bracket"
    # only the exhaustive search walks every concurrency; the others need the bounds
    searched = list(range(lo, hi + 1)) if chosen == "exhaustive" else sorted({lo, hi})
    plan = plan_sweep(tp=tp_choices.tolist(), concurrency=searched, **scenario, **settings)
    if not batched:
        require_servable(plan, tp_choices)
    problem = Problem(plan, cons, objective, 1.0 if sense == "max" else -1.0, tp_choices, lo, hi)
    found = {"exhaustive": problem.exhaustive, "bracket": problem.bracket,
             "gradient": lambda: problem.gradient(starts, steps)}[chosen]()
    return problem.to_dataset(found, chosen) if batched else problem.to_result(found, chosen)


_LAYOUT_DEFAULTS = {"expert_imbalance": Workload().expert_imbalance, "dp_prefill": ModelOptions().dp_prefill}


def _padding_engines(engine) -> list[str]:
    """The engines of an ``engine`` keyword (a name, an `Engine` or a list) that pad their decode
    steps to CUDA graphs (`Engine.cuda_graph_batch_step`); unknown names are the plan's to refuse."""
    items = [] if engine is None else [engine] if isinstance(engine, (str, Engine)) else list(engine)
    found = []
    for item in items:
        try:
            resolved = resolve_engine(item)
        except JaxparetoError:
            continue
        if resolved.cuda_graph_batch_step > 0:
            found.append(resolved.name)
    return found


def serving_modes(serving, gpu_budget, settings, outputs) -> tuple[str, ...]:
    """The serving modes a search compares: with a GPU budget, ``serving`` (a mode or a list;
    default aggregated and disaggregated where the disaggregated model covers the search, else
    aggregated), aggregated first; without one, aggregated only.

    Args:
        serving: None, a mode or a list. gpu_budget: None or the budget. settings: the
            search's other keywords (``options`` and flat options among them). outputs: the
            objective's and the constraints' names.

    Raises:
        JaxparetoError: an unknown mode; a disaggregated one without a budget, or asked for what
            its model does not have (the latency percentiles and goodput, Poisson arrivals, the
            LRU cache model).
    """
    options = settings.get("options")
    if options is not None and getattr(options, "serving", "aggregated") != "aggregated":
        raise JaxparetoError("serving", "pass serving= to optimize, not in options (it searches the layouts of each)")
    base = (options or ModelOptions())._replace(**{k: v for k, v in settings.items()
                                                   if k in ModelOptions._fields and v is not None})
    try:
        base._replace(serving="disaggregated").validate()
        why = "" if not set(outputs) & set(PERCENTILE_VARIABLES) else \
            f"the latency percentiles and goodput ({', '.join(sorted(set(outputs) & set(PERCENTILE_VARIABLES)))}) " \
            "are not modelled for it yet"
    except JaxparetoError as error:
        why = error.problem
    padding = _padding_engines(settings.get("engine"))
    if not why and padding:
        why = f"engines {padding} pad their decode steps to CUDA graphs, which it does not model"
    if serving is None:
        return ("aggregated", "disaggregated") if gpu_budget is not None and not why else ("aggregated",)
    modes = [serving] if isinstance(serving, str) else list(serving)
    for mode in modes:
        if mode not in SERVING_MODES:
            raise JaxparetoError("serving", f"unknown {mode!r}", SERVING_MODES)
    if not modes:
        raise JaxparetoError("serving", "must not be empty", SERVING_MODES)
    if gpu_budget is None and modes != ["aggregated"]:
        raise JaxparetoError("serving", "disaggregated layouts (prefill and decode pools) are searched under a GPU "
                                        "budget: give gpu_budget= (jaxpareto optimize --gpu-budget)")
    if why and modes != ["aggregated"]:
        raise JaxparetoError("serving", f"disaggregated serving: {why}", ("aggregated",))
    return tuple(sorted(set(modes), key=SERVING_MODES.index))


def model_name(model) -> str:
    return model if isinstance(model, str) else getattr(model, "name", str(model))


__all__ = ["HARDWARE_VARIABLES", "METHODS", "Constraint", "OptimizeResult",
           "check_method", "least_hardware", "optimize", "parse_constraints"]

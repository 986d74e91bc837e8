"""Whole agent sessions (seed 000 sections 2-3, eq. 6): context that grows turn by turn, and
task-level metrics.

Turn j of a session prefills its new tokens on a cache hit and sees a context of
``L(j) = L0 + (j - 1) (osl + tool_tokens)``: the previous turns' outputs and tool results on top
of the initial prompt. docs/seed.md explains why this, not the seed's section 2.2 formula
(which adds the current turn's tool tokens, putting turn 1 at L0 + tool_tokens), is the one the
seed's own numbers follow. A hit prefills ``delta_tokens = osl + tool_tokens``.

KV demand: every admitted session holds its KV cache whether it is computing or paused, and the
sessions of a steady-state population are at different turns.

- ``kv_demand="staggered"`` (default): sessions are spread evenly over the turns, so the KV held
  per session is that of the average context, L0 + (N - 1)(osl + tool_tokens) / 2 (the seed's
  eq. 5 uses "the session-average context length").
- ``kv_demand="synchronised"`` (or "synchronized"): all sessions are at turn j together, so the
  KV per session is that of L(j): the memory wall of the seed's step 4, where the sessions that
  fit fall turn after turn.

Either way the KV a session holds is that context, under every profile and engine: the measured
profile's in-flight output (L + OSL (1 + cv²) / 2) and TensorRT-LLM's output reservation
(``Engine.reserve_output_kv``, L + OSL) that a plain sweep's sessions hold are not added to it, so a
session sweep under the measured profile admits more sessions than a sweep of the same turn.

Task level: ``task_time_s = sum_j (R(j) + Z)`` and ``tasks_per_s = C_eff / task_time_s`` (Little's
law on tasks; equal to the session-average turn throughput over N), with C_eff the sessions the
KV memory holds through the whole task. Under "staggered" the per-turn variables and the task
variables describe the same population. Under "synchronised" they answer two questions: the
per-turn variables are snapshots of all C sessions at turn j with that turn's own C_eff (the
memory wall), while the task variables admit only the sessions the last turn can hold
(``task_concurrency_eff``) and sum the R(j) of that many sessions, so ``task_time_s`` is then not
the sum of the per-turn ``latency_ms``.
"""

from __future__ import annotations

from jaxpareto.definitions.options import refuse_open_loop

import dataclasses

import numpy as np
import xarray as xr

from jaxpareto.dataset.costs import PRICE_KEYWORDS, add_costs
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.dataset.plan import plan_sweep
from jaxpareto.dataset.sweep import sweep_plan
from jaxpareto.definitions.axes import AXIS_BY_NAME
from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.options import KV_DEMANDS
from jaxpareto.definitions.settings import Workload

TASK_VARIABLES = ("task_time_s", "tasks_per_s", "task_concurrency_eff", "output_tokens_per_task",
                  "prefill_tokens_per_task")


def context_per_turn(initial_context_tokens: float, turns: int, osl: float, tool_tokens: float) -> np.ndarray:
    """L(j) = L0 + (j - 1)(osl + tool_tokens) for j = 1..N [tokens]."""
    return initial_context_tokens + np.arange(turns) * (osl + tool_tokens)


def _per_turn(ds: xr.Dataset, contexts: np.ndarray) -> xr.Dataset:
    """A sweep over the turns' contexts with ``turn`` as its dimension (``context_tokens`` along it)."""
    return ds.rename({"context_tokens": "turn"}).assign_coords(
        turn=("turn", np.arange(1, len(contexts) + 1), {"units": "1", "long_name": "turn of the session j"}),
        context_tokens=("turn", contexts.astype(np.int64), {"units": "tokens", "long_name": "context of turn j, L(j)"}),
    )


def session_sweep(
    gpu=None,
    model=None,
    tp=None,
    concurrency=None,
    think_time_s=AXIS_BY_NAME["think_time_s"].default,
    hit_rate=AXIS_BY_NAME["hit_rate"].default,
    *,
    initial_context_tokens: int = AXIS_BY_NAME["context_tokens"].default,
    turns: int = 20,
    osl: float = Workload.osl,
    tool_tokens: float = Workload.delta_tokens - Workload.osl,
    kv_demand: str = "staggered",
    prices: dict | None = None,
    **kwargs,
) -> xr.Dataset:
    """Sweep whole sessions: the core grid with ``turn`` (1..N) in place of ``context_tokens``.

    Args:
        gpu, model, tp, concurrency, think_time_s, hit_rate: as in `jaxpareto.sweep`.
        initial_context_tokens: L0, the first turn's prompt (system prompt, tools) [tokens].
        turns: N, turns per session (task).
        osl: output tokens per turn (default the `Workload`'s).
        tool_tokens: tool-result tokens added per turn (default: the seed's code agent, the
            `Workload`'s delta_tokens less its osl).
        kv_demand: "staggered" (default) or "synchronised" (see the module docstring).
        prices: keyword arguments of `jaxpareto.add_costs` (input_per_mtok,
            cached_input_per_mtok, output_per_mtok, gpu_hour): adds cost per turn and per task.
        **kwargs: other arguments of `jaxpareto.sweep` (``workload=``, ``efficiency=``,
            ``solver=``, ``options=``, ``dtype``, ...); ``context_tokens``, ``delta_tokens`` and
            ``kv_context_tokens`` (flat or in a ``workload``) and ``osl`` in a ``workload`` are
            set here, from the session.

    Returns:
        Dataset over (gpu, model, engine, tp, concurrency, think_time_s, turn, hit_rate) with the core
        variables per turn (``context_tokens`` a coordinate along ``turn``), and per task
        (no ``turn`` dimension): ``task_time_s``, ``tasks_per_s``, ``output_tokens_per_task``,
        ``prefill_tokens_per_task``, ``task_concurrency_eff``, and ``task_feasible``, False where
        a turn is infeasible (a context beyond the model's maximum, no session in KV memory...) or
        memory holds no session for the whole task: there the task's time and rate are NaN.

    Raises:
        JaxparetoError: invalid inputs, named.
    """
    derived = "is derived from the session (initial_context_tokens, turns, osl, tool_tokens, kv_demand)"
    for key in ("context_tokens", "delta_tokens", "kv_context_tokens"):
        if key in kwargs:
            raise JaxparetoError(key, derived)
    workload = kwargs.get("workload")
    if isinstance(workload, Workload):
        for key in ("osl", "delta_tokens", "kv_context_tokens"):
            if getattr(workload, key) != getattr(Workload, key):
                raise JaxparetoError(f"workload.{key}", f"{derived}; pass osl= to session_sweep")
    refuse_open_loop(kwargs, "session_sweep")
    if prices is not None:  # named before the sweep runs, not after
        if not isinstance(prices, dict):
            raise JaxparetoError("prices", f"expected a mapping of add_costs keywords, got {type(prices).__name__}",
                                 PRICE_KEYWORDS)
        for key in prices:
            if key not in PRICE_KEYWORDS:
                raise JaxparetoError("prices", f"unknown price {key!r}", PRICE_KEYWORDS)
    if kv_demand not in KV_DEMANDS:
        raise JaxparetoError("kv_demand", f"unknown {kv_demand!r}", KV_DEMANDS)
    l0 = check_number("initial_context_tokens", initial_context_tokens, low=1, integer=True)
    n = check_number("turns", turns, low=1, high=100_000, integer=True)
    osl = check_number("osl", osl, low=0, low_inclusive=False)
    tool = check_number("tool_tokens", tool_tokens, low=0)
    contexts = context_per_turn(l0, n, osl, tool)
    if not np.all(contexts == np.round(contexts)):
        raise JaxparetoError("osl/tool_tokens", "must be whole numbers of tokens")
    staggered = kv_demand == "staggered"
    plan = plan_sweep(gpu, model, tp, concurrency, think_time_s, contexts.astype(np.int64).tolist(), hit_rate,
                      osl=osl, delta_tokens=osl + tool, kv_context_tokens=float(contexts.mean()) if staggered else None,
                      **kwargs)
    ds = _per_turn(sweep_plan(plan), contexts)
    # Task level (seed eq. 6). Under "synchronised" a task keeps its sessions only if the KV
    # memory holds them at its longest context, so every turn of a task runs with the last
    # turn's C_eff: evaluate the turns again with that KV demand.
    tasks = ds if staggered else _per_turn(sweep_plan(plan.replace(
        workload=dataclasses.replace(plan.workload, kv_context_tokens=float(contexts[-1])))), contexts)
    c_task = tasks.concurrency_eff.min("turn")
    task_time = ((tasks.latency_ms / 1e3) + tasks.think_time_s).sum("turn", skipna=False)
    feasible = tasks.feasible.all("turn") & (c_task >= 1)
    ds["task_time_s"] = task_time.where(feasible).assign_attrs(
        units="s", long_name="task time sum_j (R(j) + Z), seed eq. 6")
    ds["tasks_per_s"] = (c_task / task_time).where(feasible).assign_attrs(
        units="tasks/s", long_name="task throughput C_eff / task time = X_turn / N, seed eq. 6")
    ds["task_feasible"] = feasible.assign_attrs(
        units="1", long_name="the task completes: every turn feasible and a whole task's session held in KV memory "
                             "(else its task variables are NaN)")
    ds["task_concurrency_eff"] = c_task.assign_attrs(units="sessions",
                                                     long_name="sessions the KV memory holds for a whole task")
    ds["output_tokens_per_task"] = xr.full_like(c_task, n * osl, dtype=float).assign_attrs(
        units="tokens", long_name="output tokens per task N x OSL")
    ds["prefill_tokens_per_task"] = tasks.prefill_tokens.sum("turn").assign_attrs(
        units="tokens", long_name="tokens prefilled per task")
    ds.attrs.update(session_initial_context_tokens=l0, session_turns=n, session_tool_tokens=tool,
                    kv_demand="synchronised" if not staggered else "staggered")
    return add_costs(ds, **prices) if prices else ds

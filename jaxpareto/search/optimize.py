"""Optimal configurations under SLOs: the best TP and concurrency for a scenario (and the least
hardware a workload needs), by exhaustive search or by gradients through the closed loop.

A scenario is one GPU, model, think time, context and hit rate. The decision is a TP from a set
of choices and an integer concurrency in ``[lo, hi]``; the objective is one output, maximised or
minimised; constraints are SLOs on outputs (``{"ttft_ms": ("<=", 2000)}``) plus memory: no more
sessions than the KV cache holds (C <= concurrency_max), except under ``cache_model="lru"``,
which admits every session (memory then acts through the hit rate and ``memory_wait_ms``).

- ``method="exhaustive"`` evaluates every (TP, C) and takes the best point that meets every
  constraint: exact, and for a few thousand choices the fastest.
- ``method="gradient"`` relaxes C to a continuous log C for every TP choice (the relaxation over
  TP is exhaustive: a handful of choices, searched in parallel), maximises log(objective) minus a
  quadratic penalty on the relative SLO and memory violations whose weight grows along the run
  (optax Adam, several starts spread over [log lo, log hi]), with derivatives through the
  closed-loop fixed point by implicit differentiation; then the integer neighbours of every
  continuous optimum (and the bounds) are evaluated exactly and the best one that meets every
  constraint is returned.
- ``method="auto"`` takes the exhaustive search while the integer grid is small enough for it
  to be the faster of the two (see `AUTO_EXHAUSTIVE_MAX_POINTS`, measured in benchmarks/).

A configuration that violates a constraint is never returned: when none meets them all,
``feasible`` is False and ``reason`` says why (memory, or which SLO no configuration reaches).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from jaxpareto.definitions.axes import numeric_axis
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.mapper import evaluate_points, shared_scalars, stack_params
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.physics.memory import memory_budget
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.physics.point import evaluate_point
from jaxpareto.definitions.schema import AXIS_INFO, OUTPUTS
from jaxpareto.dataset.sweep import plan_sweep
from jaxpareto.definitions.checks import check_number

METHODS = ("auto", "exhaustive", "gradient")
OPERATORS = ("<=", ">=")
# Up to this many (TP, C) points per scenario the exhaustive search, exact, is also the faster:
# benchmarks/bench_optimize.py measured the two equal at 16,384 points (4 TPs x 4,096
# concurrencies, about 300 scenarios/s each on 2 CPU cores); at 65,536 the gradient search is
# 3x faster, at 262,144 7x.
AUTO_EXHAUSTIVE_MAX_POINTS = 16_384
REPORTED = ("ttft_ms", "tpot_ms", "latency_ms", "output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu",
            "turns_per_s", "batch_eff", "gpu_active_ratio", "kv_per_session_gb", "concurrency_max")
HARDWARE_VARIABLES = ("bandwidth_gbs", "memory_gb", "tflops_fp16", "tflops_fp8", "tflops_fp4")
NUMERIC_OUTPUTS = tuple(n for n, info in OUTPUTS.items() if info.units != "1" or n == "gpu_active_ratio")
SCENARIO_AXES = ("gpu", "model", "think_time_s", "context_tokens", "hit_rate")


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
        JaxparetoError: unknown output, operator or a non-finite limit.
    """
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
        method: "exhaustive" or "gradient".
        hardware: for a hardware what-if (``variables``), the GPU with the values found.
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


def _concurrency_range(concurrency) -> tuple[int, int]:
    if isinstance(concurrency, (int, np.integer)) and not isinstance(concurrency, bool):
        lo = hi = check_number("concurrency", concurrency, low=1, integer=True)
    elif isinstance(concurrency, (tuple, list)) and len(concurrency) == 2:
        lo = check_number("concurrency", concurrency[0], low=1, high=2**24, integer=True)
        hi = check_number("concurrency", concurrency[1], low=1, high=2**24, integer=True)
    else:
        raise JaxparetoError("concurrency", f"expected an inclusive range (lo, hi) or one integer, got {concurrency!r}")
    if lo > hi:
        raise JaxparetoError("concurrency", f"lo {lo} > hi {hi}")
    return lo, hi


def _is_batch(value) -> bool:
    return isinstance(value, (list, tuple, np.ndarray)) and not isinstance(value, (str, Hardware))


def optimize(
    gpu,
    model,
    think_time_s=0.0,
    context_tokens=16384,
    hit_rate=0.0,
    *,
    objective: str = "output_tokens_per_s_per_gpu",
    sense: str = "max",
    constraints: Mapping | None = None,
    tp: Sequence[int] = (1, 2, 4, 8),
    concurrency: tuple[int, int] | int = (1, 1024),
    method: str = "auto",
    variables: Sequence[str] | None = None,
    starts: int = 6,
    steps: int = 250,
    **settings,
):
    """The best TP and concurrency for a scenario under SLOs (or for many scenarios at once).

    Args:
        gpu, model: names or definitions; a list of them (or a list for any of
            ``think_time_s``, ``context_tokens``, ``hit_rate``) searches every combination and
            returns a Dataset.
        think_time_s, context_tokens, hit_rate: the workload (as in `jaxpareto.dataset.sweep`).
        objective: output to optimise; ``sense`` "max" (default) or "min".
        constraints: SLOs ``{output: ("<=" | ">=", limit)}``; memory (C <= concurrency_max)
            always applies.
        tp: TP choices. concurrency: inclusive integer range ``(lo, hi)``.
        method: "auto", "exhaustive" or "gradient" (module docstring).
        variables: hardware what-if: names of GPU numbers (`HARDWARE_VARIABLES`) to minimise
            while meeting the constraints at the given (single) TP and concurrency; the
            result's ``hardware`` holds the values found (see `least_hardware`).
        starts, steps: gradient search: starting points per TP choice and optax steps.
        **settings: scalars of `jaxpareto.dataset.sweep` (osl, delta_tokens, eta_prefill, ...,
            dtype, and ``solver`` for the exact evaluation: "damped" or "exact").

    Returns:
        `OptimizeResult` for one scenario; an `xarray.Dataset` over the scenario axes
        (``tp``, ``concurrency``, ``value``, ``feasible``, the metrics, ``binding`` and
        ``reason``) when any scenario argument is a list.

    Raises:
        JaxparetoError: any invalid input, named, before anything is computed.
    """
    if objective not in NUMERIC_OUTPUTS:
        raise JaxparetoError("objective", f"unknown output {objective!r}", NUMERIC_OUTPUTS)
    if sense not in ("max", "min"):
        raise JaxparetoError("sense", f"unknown sense {sense!r}", ("max", "min"))
    if method not in METHODS:
        raise JaxparetoError("method", f"unknown method {method!r}", METHODS)
    cons = parse_constraints(constraints)
    tp_choices = numeric_axis("tp", tp, integer=True, low=1, high=2**24)
    lo, hi = _concurrency_range(concurrency)
    starts = check_number("starts", starts, low=1, high=256, integer=True)
    steps = check_number("steps", steps, low=1, high=100_000, integer=True)
    settings = dict(settings)
    solve_method = settings.pop("solver", "damped")
    if variables is not None:
        return least_hardware(gpu, model, think_time_s, context_tokens, hit_rate, variables=variables,
                              constraints=constraints, tp=tp, concurrency=concurrency, **settings)
    scenario = dict(gpu=gpu, model=model, think_time_s=think_time_s, context_tokens=context_tokens, hit_rate=hit_rate)
    batched = any(_is_batch(v) for v in scenario.values())
    n_points = len(tp_choices) * (hi - lo + 1)
    chosen = method if method != "auto" else ("exhaustive" if n_points <= AUTO_EXHAUSTIVE_MAX_POINTS else "gradient")
    # only the exhaustive search walks every concurrency; the gradient search needs the bounds
    searched = list(range(lo, hi + 1)) if chosen == "exhaustive" else sorted({lo, hi})
    plan = plan_sweep(tp=tp_choices.tolist(), concurrency=searched, method=solve_method, **scenario, **settings)
    problem = Problem(plan, cons, objective, 1.0 if sense == "max" else -1.0, tp_choices, lo, hi)
    found = problem.exhaustive() if chosen == "exhaustive" else problem.gradient(starts, steps)
    return problem.to_dataset(found, chosen) if batched else problem.to_result(found, chosen)


class Problem:
    """One optimisation over the scenario cells of a plan (internal)."""

    def __init__(self, plan, constraints, objective, sign, tp_choices, lo, hi):
        self.plan, self.constraints, self.objective, self.sign = plan, constraints, objective, sign
        self.tp_choices, self.lo, self.hi = tp_choices, lo, hi
        self.needed = tuple(sorted({objective, *(c.name for c in constraints), *REPORTED, "feasible", "converged"}))
        self.cell_shape = (len(plan.gpus), len(plan.models), *(len(plan.axes[a]) for a in SCENARIO_AXES[2:]))

    # -- candidate selection, shared by both methods ---------------------------------------
    def _score(self, rows: dict) -> tuple[np.ndarray, np.ndarray]:
        """(meets everything, objective score to maximise) for rows of candidates."""
        ok = rows["feasible"] & rows["converged"]
        if self.plan.options.memory_caps_concurrency:
            ok &= rows["concurrency"] <= rows["concurrency_max"]
        for c in self.constraints:
            ok &= c.met(rows[c.name])
        value = self.sign * rows[self.objective].astype(np.float64)
        ok &= np.isfinite(value)
        return ok, np.where(ok, value, -np.inf)

    def _select(self, rows: dict) -> dict:
        """Best candidate per row (ties: the first, i.e. the smaller TP, then the smaller C)."""
        ok, score = self._score(rows)
        best = np.argmax(score, axis=1)
        take = lambda a: np.take_along_axis(a, best[:, None], axis=1)[:, 0]  # noqa: E731
        chosen = {name: take(values) for name, values in rows.items()}
        chosen["found"] = ok.any(axis=1)
        # why not: memory for any TP, else the constraints no candidate meets
        chosen["memory_ok"] = rows["feasible"].any(axis=1)
        violated = []
        for c in self.constraints:
            usable = rows["feasible"] & rows["converged"]
            violated.append(~(usable & c.met(rows[c.name])).any(axis=1))
        chosen["never_met"] = np.stack(violated, axis=1) if violated else np.zeros((len(best), 0), bool)
        return chosen

    # -- methods ---------------------------------------------------------------------------
    def exhaustive(self) -> dict:
        """Every (TP, C) of every cell, block by block (blocks hold whole cells)."""
        problem = self.plan.problem(outputs=[n for n in self.needed if n in OUTPUTS], whole_axes=(2, 3))
        n_c = self.hi - self.lo + 1
        tp_col = np.repeat(self.tp_choices, n_c)
        c_col = np.tile(np.arange(self.lo, self.hi + 1), len(self.tp_choices))
        parts: dict[str, np.ndarray] = {}
        for cells, rows in problem.iter_cells((2, 3)):
            n_rows = next(iter(rows.values())).shape[0]
            rows = {**rows, "tp": np.broadcast_to(tp_col, (n_rows, len(tp_col))),
                    "concurrency": np.broadcast_to(c_col, (n_rows, len(c_col)))}
            chosen = self._select(rows)
            block_cells = tuple(s.stop - s.start for s in cells)
            for name, values in chosen.items():
                if name not in parts:
                    parts[name] = np.zeros((*self.cell_shape, *values.shape[1:]), values.dtype)
                parts[name][cells] = values.reshape(*block_cells, *values.shape[1:])
        n_cells = math.prod(self.cell_shape)
        return {k: v.reshape(n_cells, *v.shape[len(self.cell_shape):]) for k, v in parts.items()}

    def _cell_inputs(self) -> dict:
        """Per-cell arrays (flattened cell order) of the scenario inputs."""
        grids = np.meshgrid(*(np.arange(n) for n in self.cell_shape), indexing="ij")
        g, m, z, l, h = (a.reshape(-1) for a in grids)
        axes = self.plan.axes
        return dict(gpu=g, model=m, think_time_s=axes["think_time_s"][z], context_tokens=axes["context_tokens"][l],
                    hit_rate=axes["hit_rate"][h])

    def _evaluate(self, cells: dict, index: np.ndarray, tp: np.ndarray, concurrency: np.ndarray) -> dict:
        """Exact evaluation of flat candidate points (cell index, tp, concurrency)."""
        dtype = self.plan.dtype
        hw = stack_params([self.plan.gpus[i].to_params() for i in cells["gpu"][index]], dtype)
        model = stack_params([self.plan.models[i].to_params() for i in cells["model"][index]], dtype)
        scalars = shared_scalars(self.plan.workload, self.plan.efficiency, self.plan.solver, dtype)
        outputs = tuple(n for n in self.needed if n in OUTPUTS)
        with jax.enable_x64(dtype == "float64"):
            out = evaluate_points(hw, model, np.asarray(tp, dtype), np.asarray(concurrency, dtype),
                                  np.asarray(cells["think_time_s"][index], dtype),
                                  np.asarray(cells["context_tokens"][index], dtype),
                                  np.asarray(cells["hit_rate"][index], dtype), *scalars,
                                  method=self.plan.method, outputs=outputs, options=self.plan.options)
            out = {k: np.asarray(v) for k, v in out.items()}
        return {**out, "tp": np.asarray(tp), "concurrency": np.asarray(concurrency)}

    def gradient(self, starts: int, steps: int) -> dict:
        """Continuous search per cell, TP choice and start; then exact integer neighbours."""
        cells = self._cell_inputs()
        n_cells = len(cells["gpu"])
        dtype = self.plan.dtype
        hw = stack_params([self.plan.gpus[i].to_params() for i in cells["gpu"]], dtype)
        model = stack_params([self.plan.models[i].to_params() for i in cells["model"]], dtype)
        scalars = shared_scalars(self.plan.workload, self.plan.efficiency, self.plan.solver, dtype)
        with jax.enable_x64(dtype == "float64"):
            u = _continuous_search(hw, model, np.asarray(cells["think_time_s"], dtype),
                                   np.asarray(cells["context_tokens"], dtype), np.asarray(cells["hit_rate"], dtype),
                                   *scalars, np.asarray(self.tp_choices, dtype), np.log(self.lo), np.log(self.hi),
                                   np.asarray([c.limit for c in self.constraints], dtype),
                                   objective=self.objective, sign=self.sign,
                                   constraints=tuple((c.name, c.op, 1.0) for c in self.constraints),
                                   starts=starts, steps=steps, options=self.plan.options)
            c_star = np.exp(np.asarray(u, np.float64))  # (cells, tp, starts)
        offsets = np.arange(-3, 4)
        base = np.floor(c_star)[..., None] + offsets  # (cells, tp, starts, 7)
        n_tp = len(self.tp_choices)
        base = base.reshape(n_cells, n_tp, -1)
        bounds = np.broadcast_to(np.asarray([self.lo, self.hi], float), (n_cells, n_tp, 2))
        cand_c = np.clip(np.concatenate([base, bounds], axis=2), self.lo, self.hi)
        cand_c = np.where(np.isfinite(cand_c), cand_c, self.lo)
        cand_tp = np.broadcast_to(self.tp_choices[None, :, None], cand_c.shape)
        cand_cell = np.broadcast_to(np.arange(n_cells)[:, None, None], cand_c.shape)
        flat = self._evaluate(cells, cand_cell.reshape(-1), cand_tp.reshape(-1), cand_c.reshape(-1))
        rows = {k: v.reshape(n_cells, -1) for k, v in flat.items()}
        return self._select(rows)

    # -- results ---------------------------------------------------------------------------
    def _binding(self, found: dict) -> list[tuple[str, ...]]:
        """Which constraints stop the next concurrency (evaluated exactly)."""
        cells = self._cell_inputs()
        n_cells = len(cells["gpu"])
        ok = found["found"]
        nxt = np.where(ok, found["concurrency"] + 1, self.lo).astype(np.int64)
        tp = np.where(ok, found["tp"], self.tp_choices[0])
        after = self._evaluate(cells, np.arange(n_cells), tp, np.minimum(nxt, self.hi))
        out = []
        for i in range(n_cells):
            if not ok[i]:
                out.append(())
                continue
            names = []
            if found["concurrency"][i] >= self.hi:
                names.append(f"concurrency <= {self.hi}")
            else:
                if self.plan.options.memory_caps_concurrency and nxt[i] > after["concurrency_max"][i]:
                    names.append("memory")
                names += [c.describe() for c in self.constraints if not c.met(after[c.name][i])]
            out.append(tuple(names))
        return out

    def _reason(self, found: dict, i: int) -> str:
        if found["found"][i]:
            return ""
        if not found["memory_ok"][i]:
            return (f"memory: the weights plus one session's KV cache fit on none of the TP choices "
                    f"{self.tp_choices.tolist()}")
        never = [c.describe() for c, bad in zip(self.constraints, found["never_met"][i]) if bad]
        if never:
            return "SLO: no configuration reaches " + ", ".join(never)
        return "SLO: each constraint can be met, but no configuration meets them all at once"

    def to_result(self, found: dict, method: str) -> OptimizeResult:
        binding = self._binding(found)[0]
        if not found["found"][0]:
            return OptimizeResult(False, None, None, self.objective, math.nan, {}, (), self._reason(found, 0), method)
        metrics = {n: float(found[n][0]) for n in self.needed if n in OUTPUTS and n not in ("feasible", "converged")}
        return OptimizeResult(True, int(found["tp"][0]), int(found["concurrency"][0]), self.objective,
                              float(found[self.objective][0]), metrics, binding, "", method)

    def to_dataset(self, found: dict, method: str) -> xr.Dataset:
        shape = self.cell_shape
        ok = found["found"]
        coords = {}
        for name in SCENARIO_AXES:
            values = [d.name for d in (self.plan.gpus if name == "gpu" else self.plan.models)] \
                if name in ("gpu", "model") else self.plan.axes[name]
            coords[name] = xr.Variable(name, np.asarray(values, dtype=str) if name in ("gpu", "model") else values,
                                       {"units": AXIS_INFO[name].units, "long_name": AXIS_INFO[name].long_name})
        data = {
            "feasible": (ok.reshape(shape), {"units": "1", "long_name": "a configuration meets every constraint"}),
            "tp": (np.where(ok, found["tp"], -1).reshape(shape).astype(np.int64), {"units": "GPUs", "long_name": "best TP"}),
            "concurrency": (np.where(ok, found["concurrency"], -1).reshape(shape).astype(np.int64),
                            {"units": "sessions", "long_name": "best concurrency"}),
            "value": (np.where(ok, found[self.objective], np.nan).reshape(shape),
                      {"units": OUTPUTS[self.objective].units, "long_name": f"optimal {self.objective}"}),
        }
        for name in self.needed:
            if name in OUTPUTS and name not in ("feasible", "converged"):
                values = found[name].astype(np.float64)
                data[name] = (np.where(ok, values, np.nan).reshape(shape),
                              {"units": OUTPUTS[name].units, "long_name": f"{OUTPUTS[name].long_name} at the optimum"})
        binding = self._binding(found)
        data["binding"] = (np.asarray([", ".join(b) for b in binding], dtype=str).reshape(shape),
                           {"units": "1", "long_name": "constraints that stop a better configuration"})
        data["reason"] = (np.asarray([self._reason(found, i) for i in range(len(ok))], dtype=str).reshape(shape),
                          {"units": "1", "long_name": "why no configuration is feasible"})
        dataset = xr.Dataset({k: (SCENARIO_AXES, v, a) for k, (v, a) in data.items()}, coords=coords)
        dataset.attrs = {**self.plan.attrs(), "objective": self.objective, "sense": "max" if self.sign > 0 else "min",
                         "constraints": "; ".join(c.describe() for c in self.constraints), "method": method,
                         "tp_choices": self.tp_choices.tolist(), "concurrency_range": [self.lo, self.hi]}
        return dataset


def solver_for(options: ModelOptions) -> str:
    """The closed-loop solver of the continuous searches: the exact closed form where R(B) is
    piecewise linear, the damped iteration otherwise (both differentiate implicitly)."""
    return "exact" if options.piecewise_linear else "damped"


def _penalties(out, memory, concurrency, constraints, limits=None, capped=True):
    """Relative violations (> 0 when violated) of the SLOs and of memory, log-scaled.

    ``constraints`` are (name, op, limit) triples; ``limits`` (traced) overrides the limits so
    that new SLO values do not recompile. ``capped`` (static): memory holds all C sessions'
    KV; else (the LRU cache model, which admits every session) only one session's.
    """
    terms = []
    for k, (name, op, limit) in enumerate(constraints):
        limit = limit if limits is None else limits[k]
        value = jnp.maximum(getattr(out, name), 1e-30)
        terms.append(jnp.log(value / limit) if op == "<=" else jnp.log(limit / value))
    # memory: C x KV per session <= memory left for KV (continuous: no floor)
    room = jnp.maximum(memory.available_gb, 1e-30)
    held = concurrency if capped else 1.0
    terms.append(jnp.log(held * memory.kv_per_session_gb / room))
    return jnp.stack(terms)


@functools.partial(jax.jit, static_argnames=("objective", "sign", "constraints", "starts", "steps",
                                             "options"))
def _continuous_search(hw, model, think_time_s, context_tokens, hit_rate, workload, efficiency, solver, tp_choices,
                       log_lo, log_hi, limits, *, objective, sign, constraints, starts, steps, options=ModelOptions()):
    """log C* for every cell x TP choice x start: Adam on a penalised log-objective."""
    # Large steps to cross the range, small ones to settle on a constraint's boundary; the
    # clip keeps a hardened penalty's huge gradients from swamping Adam's second moment.
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(optax.cosine_decay_schedule(0.2, steps, alpha=0.002)))

    def one(hw, model, z, ctx, h, tp, u0):
        kv_context = jnp.where(workload.kv_context_tokens > 0, workload.kv_context_tokens, ctx)

        def loss(u, weight):
            c = jnp.exp(u)
            out = evaluate_point(hw, model, tp, c, z, ctx, h, workload, efficiency, solver,
                                 method=solver_for(options), options=options)
            memory = memory_budget(hw, model, tp, c, kv_context)
            ok = out.feasible
            value = jnp.where(ok, getattr(out, objective), 1.0)  # double where: no NaN in gradients
            violations = _penalties(out, memory, c, constraints, limits, options.memory_caps_concurrency)
            penalty = jnp.where(ok, jnp.sum(jnp.maximum(violations, 0.0) ** 2), 0.0)
            return -sign * jnp.log(jnp.maximum(value, 1e-30)) + weight * penalty

        def step(k, state):
            u, opt = state
            weight = 10.0 * (1e4 ** (k / steps))  # the penalty hardens along the run
            g = jax.grad(loss)(u, weight)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            updates, opt = optimizer.update(g, opt, u)
            return jnp.clip(optax.apply_updates(u, updates), log_lo, log_hi), opt

        u, _ = jax.lax.fori_loop(0, steps, step, (u0, optimizer.init(u0)))
        return u

    u0 = jnp.linspace(log_lo, log_hi, starts + 2)[1:-1] if starts > 1 else jnp.asarray([(log_lo + log_hi) / 2])
    u0 = u0.astype(think_time_s.dtype)
    per_start = jax.vmap(one, in_axes=(None, None, None, None, None, None, 0))
    per_tp = jax.vmap(per_start, in_axes=(None, None, None, None, None, 0, None))
    per_cell = jax.vmap(per_tp, in_axes=(0, 0, 0, 0, 0, None, None))
    return per_cell(hw, model, think_time_s, context_tokens, hit_rate, tp_choices, u0)


def least_hardware(*args, **kwargs):
    """See `jaxpareto.search.whatif.least_hardware` (imported lazily: it builds on this module)."""
    from jaxpareto.search.whatif import least_hardware as search

    return search(*args, **kwargs)

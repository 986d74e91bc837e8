"""One optimisation over the scenario cells of a plan: the exhaustive and the gradient search of
`jaxpareto.optimize`, the choice of the best candidate, and the results.

A scenario cell is one GPU, model, think time, context and hit rate; its candidates are
(TP, C) pairs. Both searches end the same way: candidates evaluated exactly (with the plan's
solver), and the best one that meets every constraint taken (`Problem.select`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from jaxpareto.dataset.plan import SweepPlan
from jaxpareto.definitions.axes import AXES, AXIS_BY_NAME, DECIDED_AXES, SCENARIO_AXES, GridPoint, coordinate_attrs
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.program_memory import release_programs_near_map_limit
from jaxpareto.definitions.schema import INFEASIBLE_REASON_LABELS, OUTPUTS, PERCENTILE_VARIABLES
from jaxpareto.physics.limits import (CONTEXT_TOO_LONG, HEADS_DO_NOT_SPLIT, NO_SESSION_FITS, PREFILL_WORKER_TOO_SMALL,
                                      WEIGHTS_EXCEED_MEMORY)

# The kind of each infeasible reason (the prefix of a scenario's reason).
_KIND = {HEADS_DO_NOT_SPLIT: "layout", CONTEXT_TOO_LONG: "context", WEIGHTS_EXCEED_MEMORY: "memory",
         NO_SESSION_FITS: "memory", PREFILL_WORKER_TOO_SMALL: "memory"}
from jaxpareto.mapper import evaluate_points, map_points, shared_scalars, stack_params
from jaxpareto.search.bracket import bracket_search
from jaxpareto.search.constraints import REPORTED, Constraint, OptimizeResult
from jaxpareto.search.penalty import evaluate_with_memory, penalised_descent, relative_violations, squared_excess

# the title of an optimisation's dataset (`jaxpareto optimize --out`): the optimum per scenario, not a sweep
OPTIMUM_TITLE = "jaxpareto optimum per scenario"

# the gradient search's exact candidates: the integer neighbours floor(C*) + these, and the bounds
NEIGHBOURS = np.arange(-3, 4)


class Problem:
    """One optimisation over the scenario cells of a plan.

    Args:
        plan: the scenarios (``tp`` and ``concurrency`` axes: what the exhaustive search walks).
        constraints: the SLOs. objective: the output to optimise; ``sign`` +1 to maximise it,
            -1 to minimise it.
        tp_choices: the TP choices; ``lo``, ``hi`` the inclusive concurrency range.
    """

    def __init__(self, plan: SweepPlan, constraints: tuple[Constraint, ...], objective: str, sign: float,
                 tp_choices: np.ndarray, lo: int, hi: int):
        release_programs_near_map_limit()  # a long-lived process's programs, before it aborts
        self.plan, self.constraints, self.objective, self.sign = plan, constraints, objective, sign
        self.tp_choices, self.lo, self.hi = tp_choices, lo, hi
        self.needed = tuple(sorted({objective, *(c.name for c in constraints), *REPORTED, "feasible",
                                    "infeasible_reason", "converged"}))
        self.outputs = tuple(n for n in self.needed if n in OUTPUTS)
        self.cell_shape = tuple(len(plan.coords[a]) for a in SCENARIO_AXES)
        grids = np.meshgrid(*(np.arange(n) for n in self.cell_shape), indexing="ij")
        self.cells = dict(zip(SCENARIO_AXES, (a.reshape(-1) for a in grids)))  # axis -> index, flat cell order
        self.n_cells = math.prod(self.cell_shape)

    # -- candidate selection, shared by both methods ---------------------------------------
    def score(self, rows: dict) -> tuple[np.ndarray, np.ndarray]:
        """(meets everything, objective score to maximise) for rows of candidates."""
        ok = rows["feasible"] & rows["converged"]
        if self.plan.options.memory_caps_concurrency:
            ok &= rows["concurrency"] <= rows["concurrency_max"]
        for c in self.constraints:
            ok &= c.met(rows[c.name])
        value = self.sign * rows[self.objective].astype(np.float64)
        ok &= np.isfinite(value)
        return ok, np.where(ok, value, -np.inf)

    def select(self, rows: dict) -> dict:
        """Best candidate per row (ties: the first, i.e. the smaller TP, then the smaller C)."""
        ok, score = self.score(rows)
        best = np.argmax(score, axis=1)
        take = lambda a: np.take_along_axis(a, best.reshape(-1, *[1] * (a.ndim - 1)), axis=1)[:, 0]  # noqa: E731
        chosen = {name: take(values) for name, values in rows.items() if name != "met_any"}
        chosen["found"] = ok.any(axis=1)
        # why not: no TP is feasible (by reason, the TPs it holds for), else the constraints no
        # candidate meets
        chosen["memory_ok"] = rows["feasible"].any(axis=1)
        codes, tps = rows["infeasible_reason"], rows["tp"]
        chosen["infeasible_tps"] = np.empty(len(best), dtype=object)
        for i in np.flatnonzero(~chosen["memory_ok"]):
            chosen["infeasible_tps"][i] = {int(code): sorted({int(t) for t in tps[i][codes[i] == code]})
                                           for code in np.unique(codes[i]) if code > 0}
        violated = []
        for k, c in enumerate(self.constraints):
            usable = rows["feasible"] & rows["converged"]
            met = (usable & c.met(rows[c.name])).any(axis=1)
            if "met_any" in rows:  # the bracketing search: met by some point it evaluated
                met |= rows["met_any"][..., k].any(axis=1)
            violated.append(~met)
        chosen["never_met"] = np.stack(violated, axis=1) if violated else np.zeros((len(best), 0), bool)
        return chosen

    # -- methods ---------------------------------------------------------------------------
    def exhaustive(self) -> dict:
        """Every (TP, C) of every cell, block by block (blocks hold whole cells)."""
        decided = tuple(AXES.index(a) for a in DECIDED_AXES)
        problem = self.plan.problem(outputs=self.outputs, whole_axes=decided)
        n_c = self.hi - self.lo + 1
        tp_col = np.repeat(self.tp_choices, n_c)
        c_col = np.tile(np.arange(self.lo, self.hi + 1), len(self.tp_choices))
        parts: dict[str, np.ndarray] = {}
        for cells, rows in problem.iter_cells(decided):
            n_rows = next(iter(rows.values())).shape[0]
            rows = {**rows, "tp": np.broadcast_to(tp_col, (n_rows, len(tp_col))),
                    "concurrency": np.broadcast_to(c_col, (n_rows, len(c_col)))}
            chosen = self.select(rows)
            block_cells = tuple(s.stop - s.start for s in cells)
            for name, values in chosen.items():
                if name not in parts:
                    parts[name] = np.zeros((*self.cell_shape, *values.shape[1:]), values.dtype)
                parts[name][cells] = values.reshape(*block_cells, *values.shape[1:])
        return {k: v.reshape(self.n_cells, *v.shape[len(self.cell_shape):]) for k, v in parts.items()}

    def bracket(self) -> dict:
        """Per cell and TP choice the bracketing search's concurrency (`jaxpareto.search.bracket`),
        one compiled program for every cell; then the best TP per cell."""
        dtype = self.plan.dtype
        scalars = shared_scalars(self.plan.workload, self.plan.efficiency, self.plan.solver, dtype)
        n_cells, n_tp = self.n_cells, len(self.tp_choices)
        cell = np.repeat(np.arange(n_cells), n_tp)
        tp = np.tile(self.tp_choices, n_cells)
        lanes = self.points(cell, tp=tp, concurrency=np.full(cell.shape, self.lo))
        limits = np.asarray([c.limit for c in self.constraints], dtype)
        with jax.enable_x64(dtype == "float64"):
            out = bracket_search(lanes, *scalars, limits, lo=self.lo, hi=self.hi, objective=self.objective,
                                 sign=self.sign, constraints=tuple((c.name, c.op) for c in self.constraints),
                                 capped=self.plan.options.memory_caps_concurrency, options=self.plan.options,
                                 percentiles=bool(set(self.needed) & set(PERCENTILE_VARIABLES)),
                                 outputs=self.outputs)
            out = {k: np.asarray(v) for k, v in out.items()}
        rows = {**out, "tp": tp, "concurrency": np.rint(out["concurrency"]).astype(np.int64)}
        return self.select({k: v.reshape(n_cells, n_tp, *v.shape[1:]) for k, v in rows.items()})

    @functools.cached_property
    def tables(self) -> dict:
        """Categorical scenario axis -> its definitions' parameters stacked (one row per value)."""
        return {a: stack_params([d.to_params() for d in self.plan.definitions[a]], self.plan.dtype)
                for a in SCENARIO_AXES if AXIS_BY_NAME[a].categorical}

    def points(self, index: np.ndarray, **axes) -> GridPoint:
        """The cells ``index`` (flat cell order) as points of the compute dtype, plus ``axes``."""
        plan, dtype = self.plan, self.plan.dtype
        values = {a: jax.tree_util.tree_map(lambda column: column[self.cells[a][index]], self.tables[a])
                  if AXIS_BY_NAME[a].categorical else np.asarray(plan.axes[a][self.cells[a][index]], dtype)
                  for a in SCENARIO_AXES}
        values.update({a: np.asarray(v, dtype) for a, v in axes.items()})
        return GridPoint(**{a: values[a] for a in AXES if a in values})

    def evaluate(self, index: np.ndarray, tp: np.ndarray, concurrency: np.ndarray) -> dict:
        """Exact evaluation of flat candidate points (cell index, tp, concurrency)."""
        dtype = self.plan.dtype
        scalars = shared_scalars(self.plan.workload, self.plan.efficiency, self.plan.solver, dtype)
        points = self.points(index, tp=tp, concurrency=concurrency)
        with jax.enable_x64(dtype == "float64"):
            out = evaluate_points(points, *scalars, outputs=self.outputs, options=self.plan.options)
            out = {k: np.asarray(v) for k, v in out.items()}
        return {**out, "tp": np.asarray(tp), "concurrency": np.asarray(concurrency)}

    def gradient(self, starts: int, steps: int) -> dict:
        """Continuous search per cell, TP choice and start; then exact integer neighbours."""
        dtype = self.plan.dtype
        scalars = shared_scalars(self.plan.workload, self.plan.efficiency, self.plan.solver, dtype)
        with jax.enable_x64(dtype == "float64"):
            u = continuous_search(self.points(np.arange(self.n_cells)), *scalars, np.asarray(self.tp_choices, dtype),
                                  np.log(self.lo), np.log(self.hi),
                                  np.asarray([c.limit for c in self.constraints], dtype),
                                  objective=self.objective, sign=self.sign,
                                  constraints=tuple((c.name, c.op, 1.0) for c in self.constraints),
                                  starts=starts, steps=steps, options=self.plan.options)
            c_star = np.exp(np.asarray(u, np.float64))  # (cells, tp, starts)
        n_cells, n_tp = self.n_cells, len(self.tp_choices)
        base = (np.floor(c_star)[..., None] + NEIGHBOURS).reshape(n_cells, n_tp, -1)  # (cells, tp, starts x 7)
        bounds = np.broadcast_to(np.asarray([self.lo, self.hi], float), (n_cells, n_tp, 2))
        cand_c = np.clip(np.concatenate([base, bounds], axis=2), self.lo, self.hi)
        cand_c = np.where(np.isfinite(cand_c), cand_c, self.lo)
        cand_tp = np.broadcast_to(self.tp_choices[None, :, None], cand_c.shape)
        cand_cell = np.broadcast_to(np.arange(n_cells)[:, None, None], cand_c.shape)
        flat = self.evaluate(cand_cell.reshape(-1), cand_tp.reshape(-1), cand_c.reshape(-1))
        return self.select({k: v.reshape(n_cells, -1) for k, v in flat.items()})

    # -- results ---------------------------------------------------------------------------
    def binding(self, found: dict) -> list[tuple[str, ...]]:
        """Which constraints stop the next concurrency, per cell: from the conditions the
        bracketing search judged there (``next_conditions``: usable, within memory, each SLO),
        else evaluated exactly here."""
        ok = found["found"]
        nxt = np.where(ok, found["concurrency"] + 1, self.lo).astype(np.int64)
        if "next_conditions" in found:
            within, met = found["next_conditions"][:, 1], found["next_conditions"][:, 2:]
        else:
            tp = np.where(ok, found["tp"], self.tp_choices[0])
            after = self.evaluate(np.arange(self.n_cells), tp, np.minimum(nxt, self.hi))
            within = ~(self.plan.options.memory_caps_concurrency & (nxt > after["concurrency_max"]))
            met = np.stack([c.met(after[c.name]) for c in self.constraints], axis=-1) if self.constraints else \
                np.ones((self.n_cells, 0), bool)
        out = []
        for i in range(self.n_cells):
            if not ok[i]:
                out.append(())
                continue
            names = []
            if found["concurrency"][i] >= self.hi:
                names.append(f"concurrency <= {self.hi}")
            else:
                if not within[i]:
                    names.append("memory")
                names += [c.describe() for k, c in enumerate(self.constraints) if not met[i, k]]
            out.append(tuple(names))
        return out

    def reason(self, found: dict, i: int) -> str:
        """Why cell ``i`` has no feasible configuration ("" when it has one)."""
        if found["found"][i]:
            return ""
        if not found["memory_ok"][i]:
            labels, reasons = INFEASIBLE_REASON_LABELS, found["infeasible_tps"][i]
            kinds = "/".join(dict.fromkeys(_KIND[code] for code in reasons))
            why = "; ".join(f"{labels[code].replace('_', ' ')} (TP {', '.join(map(str, tps))})"
                            for code, tps in reasons.items())
            return f"{kinds}: infeasible on every TP choice {self.tp_choices.tolist()}: {why}"
        never = [c.describe() for c, bad in zip(self.constraints, found["never_met"][i]) if bad]
        if never:
            return "SLO: no configuration reaches " + ", ".join(never)
        return "SLO: each constraint can be met, but no configuration meets them all at once"

    def metric_names(self) -> list[str]:
        return [n for n in self.outputs if n not in ("feasible", "infeasible_reason", "converged")]

    def to_result(self, found: dict, method: str) -> OptimizeResult:
        binding = self.binding(found)[0]
        if not found["found"][0]:
            return OptimizeResult(False, None, None, self.objective, math.nan, {}, (), self.reason(found, 0), method)
        metrics = {n: float(found[n][0]) for n in self.metric_names()}
        return OptimizeResult(True, int(found["tp"][0]), int(found["concurrency"][0]), self.objective,
                              float(found[self.objective][0]), metrics, binding, "", method)

    def to_dataset(self, found: dict, method: str) -> xr.Dataset:
        shape = self.cell_shape
        ok = found["found"]
        coords = {}
        for name in SCENARIO_AXES:
            categorical = AXIS_BY_NAME[name].categorical
            values = [d.name for d in self.plan.definitions[name]] if categorical else self.plan.axes[name]
            coords[name] = xr.Variable(name, np.asarray(values, dtype=str) if categorical else values,
                                       coordinate_attrs(name))
        data = {
            "feasible": (ok.reshape(shape), {"units": "1", "long_name": "a configuration meets every constraint"}),
            "tp": (np.where(ok, found["tp"], -1).reshape(shape).astype(np.int64),
                   {"units": "GPUs", "long_name": "best TP"}),
            "concurrency": (np.where(ok, found["concurrency"], -1).reshape(shape).astype(np.int64),
                            {"units": "sessions", "long_name": "best concurrency"}),
            "value": (np.where(ok, found[self.objective], np.nan).reshape(shape),
                      {"units": OUTPUTS[self.objective].units, "long_name": f"optimal {self.objective}"}),
        }
        for name in self.metric_names():
            values = found[name].astype(np.float64)
            data[name] = (np.where(ok, values, np.nan).reshape(shape),
                          {"units": OUTPUTS[name].units, "long_name": f"{OUTPUTS[name].long_name} at the optimum"})
        data["binding"] = (np.asarray([", ".join(b) for b in self.binding(found)], dtype=str).reshape(shape),
                           {"units": "1", "long_name": "constraints that stop a better configuration"})
        data["reason"] = (np.asarray([self.reason(found, i) for i in range(len(ok))], dtype=str).reshape(shape),
                          {"units": "1", "long_name": "why no configuration is feasible"})
        dataset = xr.Dataset({k: (SCENARIO_AXES, v, a) for k, (v, a) in data.items()}, coords=coords)
        dataset.attrs = {**self.plan.attrs(), "title": OPTIMUM_TITLE, "objective": self.objective,
                         "sense": "max" if self.sign > 0 else "min",
                         "constraints": "; ".join(c.describe() for c in self.constraints), "method": method,
                         "tp_choices": self.tp_choices.tolist(), "concurrency_range": [self.lo, self.hi]}
        return dataset


def _descend(start, workload, efficiency, solver, log_lo, log_hi, limits, *, objective, sign, constraints, steps,
             options):
    """log C* of one point from one start: the penalised descent on -sign x log(objective)."""
    point, u0 = start
    solver = dataclasses.replace(solver, name=options.differentiable_solver)

    def terms(u):
        c = jnp.exp(u)
        out, memory = evaluate_with_memory(point.replace(concurrency=c), workload, efficiency, solver, options,
                                           (objective, *(name for name, _, _ in constraints)))
        ok = out.feasible
        value = jnp.where(ok, getattr(out, objective), 1.0)  # double where: no NaN in gradients
        violations = relative_violations(out, memory, c, constraints, limits, options.memory_caps_concurrency)
        return -sign * jnp.log(jnp.maximum(value, 1e-30)), jnp.where(ok, squared_excess(violations), 0.0)

    return penalised_descent(terms, u0, steps, learning_rate=0.2, final_fraction=0.002, bounds=(log_lo, log_hi))


@functools.partial(jax.jit, static_argnames=("objective", "sign", "constraints", "starts", "steps", "options"))
def continuous_search(cells: GridPoint, workload, efficiency, solver, tp_choices, log_lo, log_hi, limits, *, objective,
                      sign, constraints, starts, steps, options=ModelOptions()):
    """log C* for every cell x TP choice x start, shape (cells, TP choices, starts).

    Args:
        cells: the scenario cells (`GridPoint` without ``tp`` and ``concurrency``, leading axis
            the cells).
        workload, efficiency, solver: shared scalars (the solver's name is the options' `differentiable_solver`).
        tp_choices: the TP choices. log_lo, log_hi: log of the concurrency range.
        limits: the constraints' limits (traced); ``constraints`` their (name, op, 1.0).
        objective, sign: the output and +1 (maximise) or -1 (minimise).
        starts, steps: starts spread over (log_lo, log_hi) per cell and TP choice; optax steps.
        options: which equations.
    """
    u0 = jnp.linspace(log_lo, log_hi, starts + 2)[1:-1] if starts > 1 else jnp.asarray([(log_lo + log_hi) / 2])
    u0 = u0.astype(cells.think_time_s.dtype)
    shape = (cells.think_time_s.shape[0], tp_choices.shape[0], starts)
    # cells x TP x starts on one axis; a leaf's own trailing axes (a GPU's per-engine GEMM table) kept
    flat = lambda a: jnp.broadcast_to(a, shape + a.shape[3:]).reshape((-1,) + a.shape[3:])  # noqa: E731
    points = jax.tree_util.tree_map(lambda a: flat(a[:, None, None]), cells).replace(tp=flat(tp_choices[None, :, None]))
    descend = functools.partial(_descend, objective=objective, sign=sign, constraints=constraints, steps=steps,
                                options=options)
    u = map_points(descend, (points, flat(u0)), (workload, efficiency, solver, log_lo, log_hi, limits))
    return u.reshape(shape)

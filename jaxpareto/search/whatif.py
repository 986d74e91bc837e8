"""Hardware what-if: the least bandwidth, memory or FLOPS a GPU needs for a workload to meet its
SLOs, found with gradients through the closed loop and certified by bisection.

The GPU numbers named in ``variables`` become free (in log space); the search minimises the sum
of their logs plus a hardening quadratic penalty on the relative SLO and memory violations (the
penalised descent of `jaxpareto.search.penalty`, shared with the optimiser), over
every scenario at once (a joint search: one GPU for all of them), at a fixed TP and concurrency.
Gradients are what make several variables tractable: they find the mix. The mix found is then
scaled up or down by bisection to the least multiple that still meets every constraint, which
certifies the answer with the exact model (and, for one variable, is the answer).
"""

from __future__ import annotations

from jaxpareto.definitions.options import refuse_open_loop

import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxpareto.dataset.plan import plan_sweep
from jaxpareto.definitions.axes import AXIS_BY_NAME, SCENARIO_AXES, GridPoint
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.settings import Solver
from jaxpareto.mapper import stack_params
from jaxpareto.search.constraints import HARDWARE_VARIABLES, REPORTED, OptimizeResult, parse_constraints, \
    with_slo_targets
from jaxpareto.search.penalty import evaluate_with_memory, penalised_descent, relative_violations, squared_excess

_BISECTION_STEPS = 60  # relative precision 2**-60 of the scale's log bracket
_MAX_DOUBLINGS = 40


def least_hardware(
    gpu,
    model,
    think_time_s=AXIS_BY_NAME["think_time_s"].default,
    context_tokens=AXIS_BY_NAME["context_tokens"].default,
    hit_rate=AXIS_BY_NAME["hit_rate"].default,
    *,
    variables: Sequence[str],
    constraints,
    tp=8,
    concurrency=64,
    steps: int = 300,
    solver: str | Solver | None = None,
    **settings,
) -> OptimizeResult:
    """The least values of ``variables`` for which every scenario meets the SLOs.

    Args:
        gpu: the GPU whose other numbers stay fixed (name or `Hardware`).
        model: name or `Model`.
        think_time_s, context_tokens, hit_rate: a value or a list each; every combination is a
            scenario and all must meet the constraints with the same hardware.
        variables: GPU fields to minimise, from `HARDWARE_VARIABLES`.
        constraints: SLOs ``{output: ("<=" | ">=", limit)}``; memory always applies (under
            ``cache_model="lru"``: one session's KV must fit). ``slo=`` (keyword, ``{metric: ms}``)
            adds its targets as "<=" constraints.
        tp, concurrency: the fixed configuration (one TP, one integer concurrency).
        steps: optax steps of the gradient search.
        solver: the closed-loop solver that certifies the answer (the bisection and the
            metrics): "damped", "exact" or a `Solver`. Default (None): the gradient search's own,
            the options' `differentiable_solver` (exact where R(B) is piecewise linear, else damped). The
            gradient search always uses the options' `differentiable_solver`, with this solver's damping, tol and
            max_iter.
        **settings: the other keywords of `jaxpareto.dataset.plan.plan_sweep`.

    Returns:
        `OptimizeResult` whose ``hardware`` is the GPU with the values found and whose
        ``metrics`` are those of the first scenario; ``feasible`` is False (with the reason)
        when no amount of these variables meets the SLOs.

    Raises:
        JaxparetoError: invalid inputs, named.
    """
    variables = tuple([variables] if isinstance(variables, str) else variables)
    if not variables or len(set(variables)) != len(variables):
        raise JaxparetoError("variables", f"need distinct GPU fields, got {list(variables)}", HARDWARE_VARIABLES)
    refuse_open_loop(settings, "the hardware what-if")
    constraints = with_slo_targets(constraints, settings)
    cons = parse_constraints(constraints)
    if not cons:
        raise JaxparetoError("constraints", "a hardware what-if needs at least one SLO to meet")
    plan = plan_sweep(gpu=gpu, model=model, tp=tp, concurrency=concurrency, think_time_s=think_time_s,
                      context_tokens=context_tokens, hit_rate=hit_rate,
                      solver="damped" if solver is None else solver, **settings)
    if len(plan.gpus) != 1 or len(plan.axes["tp"]) != 1 or len(plan.axes["concurrency"]) != 1:
        raise JaxparetoError("gpu/tp/concurrency", "a hardware what-if takes one GPU, one TP and one concurrency")
    base = plan.gpus[0]
    for name in variables:
        if name not in HARDWARE_VARIABLES:
            raise JaxparetoError("variables", f"unknown GPU field {name!r}", HARDWARE_VARIABLES)
        if getattr(base, name) is None:
            raise JaxparetoError("variables", f"{base.name} has no {name} to scale")
    search = _Search(plan, variables, cons, certify=solver is not None)
    u0 = np.log([getattr(base, v) for v in variables])
    u = search.descend(u0, steps)
    shift = search.least_shift(u, np.ones(len(variables), bool))
    if shift is not None:
        # then each variable alone down to its least: no variable keeps slack it does not need
        u = u + shift
        for _ in range(2):
            for k in range(len(variables)):
                alone = search.least_shift(u, np.arange(len(variables)) == k)
                u = u + (0.0 if alone is None else alone)
    if shift is None:
        return OptimizeResult(False, None, None, "least " + ", ".join(variables), math.nan, {}, (),
                              f"no amount of {', '.join(variables)} meets "
                              + ", ".join(search.unmet(u + np.log(2.0) * _MAX_DOUBLINGS)),
                              "gradient")
    values = np.exp(u)
    found = dict(zip(variables, map(float, values)))
    if "memory_gb" in found and base.memory_reported_gb is not None:  # the reported total scales with it
        found["memory_reported_gb"] = base.memory_reported_gb * found["memory_gb"] / base.memory_gb
    hardware = base.model_copy(update={"name": f"{base.name}-what-if", **found})
    out = search.outputs(u)
    metrics = {n: float(np.asarray(getattr(out, n))[0]) for n in REPORTED}
    tight = search.violations(u).max(axis=0) > -1e-3  # within 0.1 % of a limit
    binding = tuple([c.describe() for c, t in zip(cons, tight) if t] + (["memory"] if tight[-1] else []))
    return OptimizeResult(True, int(plan.axes["tp"][0]), int(plan.axes["concurrency"][0]),
                          "least " + ", ".join(variables), float(values[0]), metrics, binding, "", "gradient", hardware)


class _Search:
    """The scenarios of a plan, evaluated at candidate hardware numbers (internal).

    ``certify``: the plan's solver certifies (else the search's own, the options' `differentiable_solver`).
    """

    def __init__(self, plan, variables, constraints, certify: bool):
        self.variables, self.constraints = variables, constraints
        self.hw = plan.gpus[0].to_params()
        # the scenarios (every combination of the scenario axes but the GPU: models, engines,
        # workloads), stacked once, in the axis table's order (the first model's first workload first)
        axes = [a for a in SCENARIO_AXES if a != "gpu"]
        grids = np.meshgrid(*(np.arange(len(plan.coords[a])) for a in axes), indexing="ij")
        index = {a: g.reshape(-1) for a, g in zip(axes, grids)}
        self.scenarios = GridPoint(**{
            a: stack_params([plan.definitions[a][i].to_params() for i in index[a]], np.float64)
            if AXIS_BY_NAME[a].categorical else np.asarray(plan.axes[a])[index[a]] for a in axes})
        self.tp = float(plan.axes["tp"][0])
        self.c = float(plan.axes["concurrency"][0])
        self.workload, self.efficiency, self.options = plan.workload, plan.efficiency, plan.options
        self.search_solver = dataclasses.replace(plan.solver, name=plan.options.differentiable_solver)
        self.solver = plan.solver if certify else self.search_solver
        self.spec = tuple((c.name, c.op, c.limit) for c in constraints)
        self._violations = jax.jit(self._certified_violations)

    def _point(self, scenario, hw, solver):
        """One scenario's outputs and relative violations on the GPU ``hw``."""
        point = scenario.replace(gpu=hw, tp=self.tp, concurrency=self.c)
        out, memory = evaluate_with_memory(point, self.workload, self.efficiency, solver, self.options,
                                           [name for name, _, _ in self.spec])
        return out, relative_violations(out, memory, self.c, self.spec, capped=self.options.memory_caps_concurrency)

    def _evaluate(self, u, solver):
        """(outputs, violations) of every scenario at the GPU numbers exp(u).

        Batched with `jax.vmap`, not `jaxpareto.mapper.map_points`: the mapper pads the points
        to whole vector lanes, and that width changes the float rounding of these float64
        searches (measured: a two-variable LRU what-if's answer moved by 3e-4), so the
        what-if keeps the batching its results were recorded with.
        """
        hw = dataclasses.replace(self.hw, **dict(zip(self.variables, jnp.exp(u))))
        hw = jax.tree_util.tree_map(jnp.asarray, hw)  # jnp, not NumPy, constants under tracing
        scenarios = jax.tree_util.tree_map(jnp.asarray, self.scenarios)
        return jax.vmap(functools.partial(self._point, hw=hw, solver=solver))(scenarios)

    def _certified_violations(self, u):
        out, found = self._evaluate(u, self.solver)
        return found, out.feasible & out.converged

    def outputs(self, u):
        """The scenarios' outputs at exp(u) (evaluated op by op, as recorded)."""
        with jax.enable_x64(True):
            return self._evaluate(jnp.asarray(u), self.solver)[0]

    def violations(self, u) -> np.ndarray:
        """(scenarios, constraints + memory) relative violations, > 0 when violated."""
        with jax.enable_x64(True):
            found, ok = self._violations(jnp.asarray(u, jnp.float64))
            return np.where(np.asarray(ok)[:, None], np.asarray(found), np.inf)

    def meets(self, u) -> bool:
        return bool((self.violations(u) <= 0).all())

    def unmet(self, u) -> list[str]:
        """The constraints (and "memory") violated at exp(u), as text."""
        bad = (self.violations(u) > 0).any(axis=0)
        names = [c.describe() for c, b in zip(self.constraints, bad[: len(self.constraints)]) if b]
        return names + (["memory"] if bad[-1] or not names else [])

    def descend(self, u0, steps):
        """Gradient search: minimise sum(log v) + w x penalties (w hardening)."""

        def terms(u):
            out, violations = self._evaluate(u, self.search_solver)
            violations = jnp.where(out.feasible[:, None], violations, 1.0)  # double where: no NaN in gradients
            return jnp.sum(u), squared_excess(violations)

        run = jax.jit(lambda u: penalised_descent(terms, u, steps, learning_rate=0.1, final_fraction=0.01))
        with jax.enable_x64(True):
            return np.asarray(run(jnp.asarray(u0, jnp.float64)))

    def least_shift(self, u, which: np.ndarray) -> np.ndarray | None:
        """The log-space shift, along the ``which`` variables, to the least values that meet
        every constraint (bisection in log2 units; the shift returned was itself checked), or
        None when no scale up to 2**40 meets them."""
        step = math.log(2) * which
        lo = hi = 0.0
        if self.meets(u):
            while self.meets(u + (lo - 1) * step) and lo > -_MAX_DOUBLINGS:
                lo -= 1
            lo -= 1
            if lo < -_MAX_DOUBLINGS:
                return lo * step  # met all the way down: any amount works
        else:
            while not self.meets(u + hi * step):
                hi += 1
                if hi > _MAX_DOUBLINGS:
                    return None
            lo = hi - 1
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if self.meets(u + mid * step) else (mid, hi)
        return hi * step

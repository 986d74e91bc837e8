"""Hardware what-if: the least bandwidth, memory or FLOPS a GPU needs for a workload to meet its
SLOs, found with gradients through the closed loop and certified by bisection.

The GPU numbers named in ``variables`` become free (in log space); the search minimises the sum
of their logs plus a hardening quadratic penalty on the relative SLO and memory violations, over
every scenario at once (a joint search: one GPU for all of them), at a fixed TP and concurrency.
Gradients are what make several variables tractable: they find the mix. The mix found is then
scaled up or down by bisection to the least multiple that still meets every constraint, which
certifies the answer with the exact model (and, for one variable, is the answer).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.mapper import stack_params
from jaxpareto.physics.memory import memory_budget
from jaxpareto.search.optimize import HARDWARE_VARIABLES, REPORTED, OptimizeResult, _penalties, parse_constraints, solver_for
from jaxpareto.physics.point import evaluate_point
from jaxpareto.dataset.sweep import plan_sweep

_BISECTION_STEPS = 60  # relative precision 2**-60 of the scale's log bracket
_MAX_DOUBLINGS = 40


def least_hardware(
    gpu,
    model,
    think_time_s=0.0,
    context_tokens=16384,
    hit_rate=0.0,
    *,
    variables: Sequence[str],
    constraints,
    tp=8,
    concurrency=64,
    steps: int = 300,
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
            ``cache_model="lru"``: one session's KV must fit).
        tp, concurrency: the fixed configuration (one TP, one integer concurrency).
        steps: optax steps of the gradient search.
        **settings: scalars of `jaxpareto.dataset.sweep`.

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
    cons = parse_constraints(constraints)
    if not cons:
        raise JaxparetoError("constraints", "a hardware what-if needs at least one SLO to meet")
    settings.pop("solver", None)
    plan = plan_sweep(gpu=gpu, model=model, tp=tp, concurrency=concurrency, think_time_s=think_time_s,
                      context_tokens=context_tokens, hit_rate=hit_rate, **settings)
    if len(plan.gpus) != 1 or len(plan.axes["tp"]) != 1 or len(plan.axes["concurrency"]) != 1:
        raise JaxparetoError("gpu/tp/concurrency", "a hardware what-if takes one GPU, one TP and one concurrency")
    base = plan.gpus[0]
    for name in variables:
        if name not in HARDWARE_VARIABLES:
            raise JaxparetoError("variables", f"unknown GPU field {name!r}", HARDWARE_VARIABLES)
        if getattr(base, name) is None:
            raise JaxparetoError("variables", f"{base.name} has no {name} to scale")
    search = _Search(plan, variables, cons)
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
    hardware = base.model_copy(update={"name": f"{base.name}-what-if", **dict(zip(variables, map(float, values)))})
    out = search.outputs(u)
    metrics = {n: float(np.asarray(getattr(out, n))[0]) for n in REPORTED}
    tight = search.violations(u).max(axis=0) > -1e-3  # within 0.1 % of a limit
    binding = tuple([c.describe() for c, t in zip(cons, tight) if t] + (["memory"] if tight[-1] else []))
    return OptimizeResult(True, int(plan.axes["tp"][0]), int(plan.axes["concurrency"][0]),
                          "least " + ", ".join(variables), float(values[0]), metrics, binding, "", "gradient", hardware)


class _Search:
    """The scenarios of a plan as arrays, evaluated at candidate hardware numbers (internal)."""

    def __init__(self, plan, variables, constraints):
        self.variables, self.constraints = variables, constraints
        self.dtype = np.float64
        self.hw = plan.gpus[0].to_params()
        z, ctx, h = np.meshgrid(plan.axes["think_time_s"], plan.axes["context_tokens"], plan.axes["hit_rate"],
                                indexing="ij")
        n_models = len(plan.models)
        # the scenarios' model rows, stacked once
        self.model = stack_params([plan.models[i].to_params() for i in np.repeat(np.arange(n_models), z.size)],
                                  self.dtype)
        self.z = np.tile(z.reshape(-1), n_models)
        self.ctx = np.tile(ctx.reshape(-1), n_models)
        self.h = np.tile(h.reshape(-1), n_models)
        self.tp = float(plan.axes["tp"][0])
        self.c = float(plan.axes["concurrency"][0])
        self.workload, self.efficiency, self.solver = plan.workload, plan.efficiency, plan.solver
        self.method, self.options = solver_for(plan.options), plan.options
        self.spec = tuple((c.name, c.op, c.limit) for c in constraints)

    def _penalty_terms(self, out, memory):
        return _penalties(out, memory, self.c, self.spec, capped=self.options.memory_caps_concurrency)

    def _hw(self, u):
        values = dict(zip(self.variables, jnp.exp(u)))
        return dataclasses.replace(self.hw, **values)

    def _evaluate(self, u):
        hw = jax.tree_util.tree_map(jnp.asarray, self._hw(u))  # jnp, not NumPy, constants under tracing
        model = jax.tree_util.tree_map(jnp.asarray, self.model)

        def point(m, z, ctx, h):
            out = evaluate_point(hw, m, self.tp, self.c, z, ctx, h, self.workload, self.efficiency, self.solver,
                                 method=self.method, options=self.options)
            kv_context = jnp.where(self.workload.kv_context_tokens > 0, self.workload.kv_context_tokens, ctx)
            return out, memory_budget(hw, m, self.tp, self.c, kv_context)

        return jax.vmap(point)(model, jnp.asarray(self.z), jnp.asarray(self.ctx), jnp.asarray(self.h))

    def outputs(self, u):
        with jax.enable_x64(True):
            return self._evaluate(jnp.asarray(u))[0]

    def violations(self, u) -> np.ndarray:
        """(scenarios, constraints + memory) relative violations, > 0 when violated."""
        if not hasattr(self, "_violations"):
            def terms(u):
                out, memory = self._evaluate(u)
                found = jax.vmap(self._penalty_terms)(out, memory)
                return found, out.feasible & out.converged

            self._violations = jax.jit(terms)
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
        optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(optax.cosine_decay_schedule(0.1, steps, alpha=0.01)))

        def loss(u, weight):
            out, memory = self._evaluate(u)
            terms = jax.vmap(self._penalty_terms)(out, memory)
            terms = jnp.where(out.feasible[:, None], terms, 1.0)  # double where: no NaN in gradients
            return jnp.sum(u) + weight * jnp.sum(jnp.maximum(terms, 0.0) ** 2)

        @jax.jit
        def run(u):
            def step(k, state):
                u, opt = state
                g = jax.grad(loss)(u, 10.0 * (1e4 ** (k / steps)))
                g = jnp.where(jnp.isfinite(g), g, 0.0)
                updates, opt = optimizer.update(g, opt, u)
                return optax.apply_updates(u, updates), opt

            return jax.lax.fori_loop(0, steps, step, (u, optimizer.init(u)))[0]

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

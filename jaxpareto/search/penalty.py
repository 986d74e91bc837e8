"""The one penalised gradient search: relative SLO and memory violations, and an optax descent on
an objective plus a quadratic penalty whose weight hardens along the run.

Both continuous searches use it: the optimiser's relaxation of log C
(`jaxpareto.search.problem`) and the hardware what-if's search over log GPU numbers
(`jaxpareto.search.whatif`). Each supplies its own objective and the violations it penalises;
the step, its clipping, the hardening and the learning-rate schedule are shared.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency, Solver, Workload
from jaxpareto.physics.memory import MemoryBudget, memory_budget, session_contexts
from jaxpareto.definitions.schema import PERCENTILE_VARIABLES
from jaxpareto.physics.point import PointOutputs, evaluate_point

# the penalty's weight grows from FIRST_WEIGHT to FIRST_WEIGHT x HARDENING over the run
FIRST_WEIGHT = 10.0
HARDENING = 1e4


def evaluate_with_memory(point: GridPoint, workload: Workload, efficiency: Efficiency, solver: Solver,
                         options: ModelOptions, names=None) -> tuple[PointOutputs, MemoryBudget]:
    """`evaluate_point` and the point's memory budget (whose KV room the memory term needs),
    with the point's serving engine's share of memory (the seed's without an engine); the
    latency percentiles are computed only when ``names`` (the outputs read; None: all) need them."""
    needed = names is None or bool({*PERCENTILE_VARIABLES} & {*names})
    out = evaluate_point(point, workload, efficiency, solver, options=options, percentiles=needed)
    # the context each session holds, as `evaluate_point` sizes it
    _, kv_context = session_contexts(point.context_tokens, workload, options.profile == "measured",
                                    point.get("engine"))
    return out, memory_budget(point.gpu, point.model, point.tp, point.concurrency, kv_context, point.get("engine"))


def relative_violations(out: PointOutputs, memory: MemoryBudget, concurrency, constraints, limits=None,
                        capped: bool = True) -> jax.Array:
    """Relative violations (> 0 when violated) of the SLOs and of memory, log-scaled.

    Args:
        out, memory: one point's outputs and memory budget.
        concurrency: its (continuous) concurrency C.
        constraints: (name, op, limit) triples (static).
        limits: traced limits that replace the triples' (new SLO values do not recompile).
        capped: (static) memory holds all C sessions' KV; else (the LRU cache model, which
            admits every session) only one session's.

    Returns:
        One term per constraint, then the memory term.
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


def squared_excess(violations: jax.Array) -> jax.Array:
    """The quadratic penalty: the sum of the squared positive violations."""
    return jnp.sum(jnp.maximum(violations, 0.0) ** 2)


def penalised_descent(terms: Callable, u0: jax.Array, steps: int, *, learning_rate: float, final_fraction: float,
                      bounds: tuple | None = None) -> jax.Array:
    """Minimise ``objective(u) + w x penalty(u)`` with optax Adam, the weight w hardening along
    the run (call it inside a jitted function).

    The learning rate follows a cosine decay, large steps to cross the range and small ones to
    settle on a constraint's boundary; the gradient is clipped to norm 1 so that a hardened
    penalty's huge gradients do not swamp Adam's second moment, and non-finite gradient entries
    count as 0.

    Args:
        terms: ``u -> (objective, penalty)``, both scalars.
        u0: the start.
        steps: optax steps (static).
        learning_rate: the first step's rate; ``final_fraction`` the last one's, relative to it.
        bounds: (lo, hi) that every iterate is clipped to (None: unbounded).

    Returns:
        The last iterate.
    """
    optimizer = optax.chain(optax.clip_by_global_norm(1.0),
                            optax.adam(optax.cosine_decay_schedule(learning_rate, steps, alpha=final_fraction)))

    def loss(u, weight):
        objective, penalty = terms(u)
        return objective + weight * penalty

    def step(k, state):
        u, opt = state
        g = jax.grad(loss)(u, FIRST_WEIGHT * (HARDENING ** (k / steps)))
        g = jnp.where(jnp.isfinite(g), g, 0.0)
        updates, opt = optimizer.update(g, opt, u)
        u = optax.apply_updates(u, updates)
        return (u if bounds is None else jnp.clip(u, *bounds)), opt

    return jax.lax.fori_loop(0, steps, step, (u0, optimizer.init(u0)))[0]


__all__ = ["FIRST_WEIGHT", "HARDENING", "evaluate_with_memory", "penalised_descent", "relative_violations",
           "squared_excess"]

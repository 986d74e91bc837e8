"""Refuse a single configuration no server runs, before computing it.

A sweep flags such points infeasible with a reason (`jaxpareto.physics.limits`); where one
configuration is asked for (``optimize`` of one scenario, ``size``), an impossible request is a
named error instead of an answer of "infeasible".
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxpareto.dataset.plan import SweepPlan
from jaxpareto.definitions.errors import JaxparetoError


def require_servable(plan: SweepPlan, tp_choices: Sequence[int]) -> None:
    """Check the plan's one model against its context limit and the TP choices.

    Raises:
        JaxparetoError: ``context_tokens`` when context + OSL exceeds the model's maximum;
            ``tp`` when no TP choice shards the model, listing the valid ones.
    """
    (model,) = plan.models
    osl = float(plan.workload.osl)
    longest = max(float(c) for c in plan.axes["context_tokens"])
    if model.max_context_tokens is not None and longest + osl > model.max_context_tokens:
        raise JaxparetoError("context_tokens", f"{longest:.0f} + osl {osl:.0f} tokens exceeds {model.name}'s maximum "
                             f"context of {model.max_context_tokens:,} tokens (max_context_tokens)")
    errors = {int(tp): model.tp_error(int(tp)) for tp in tp_choices}
    if all(errors.values()):
        detail = "; ".join(f"TP {tp}: {why}" for tp, why in errors.items())
        raise JaxparetoError("tp", f"no TP choice shards {model.name} ({detail})", model.valid_tps())

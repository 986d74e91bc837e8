"""KV-cache memory and the sessions it admits (seed eq. 5; docs/model.md)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.engine import EngineParams
from jaxpareto.definitions.hardware import HardwareParams
from jaxpareto.definitions.model import ModelParams
from jaxpareto.definitions.units import BYTES_PER_GB

# concurrency_max is reported as int32; clip so a tiny context cannot overflow it.
_INT32_MAX = 2.0**31 - 1


class MemoryBudget(NamedTuple):
    """Memory outcome of one grid point (all scalars).

    Attributes:
        weights_gb: M_model = P_total x d [GB].
        available_gb: M_avail = G x M_gpu - M_model [GB] (may be <= 0); with an engine, what it
            leaves for KV (`jaxpareto.definitions.engine`).
        kv_per_session_gb: (KV(L̄) x r_kv + fixed state x r_state) / 1e9 [GB]; the seed's
            L̄ x κ x r_kv / 1e9 for a model without windows or recurrent layers.
        concurrency_max: floor(M_avail / kv_per_session_gb), >= 0 [sessions].
        concurrency_eff: min(C, concurrency_max) [sessions].
        feasible: M_avail > 0 and concurrency_eff >= 1.
    """

    weights_gb: jax.Array
    available_gb: jax.Array
    kv_per_session_gb: jax.Array
    concurrency_max: jax.Array
    concurrency_eff: jax.Array
    feasible: jax.Array


def in_flight_context(prompt_tokens: jax.Array, osl: jax.Array, osl_cv: jax.Array) -> jax.Array:
    """Mean context of the requests decoding at a random instant [tokens] (scalars in, scalar out;
    plain arithmetic, so NumPy arrays work too).

    A request of O output tokens after a P-token prompt stays O decode steps, its context growing
    from P to P + O: the batch holds each request in proportion to its O. Averaged over the steps
    (renewal-reward: sum of sum_{t<O} (P + t) over the sum of O) the context is
    E[P O] / E[O] + E[O^2] / (2 E[O]); with P and O independent, P + E[O] (1 + cv_O^2) / 2. With
    fixed lengths (cv_O = 0) that is the seed's mean P + OSL / 2; a spread of output lengths
    lengthens it, since long answers are the ones a decode step mostly sees.

    Args:
        prompt_tokens: the mean prompt (context before decoding) P [tokens].
        osl: mean output tokens E[O] [tokens].
        osl_cv: coefficient of variation of the output tokens (``Workload.osl_cv``).
    """
    return prompt_tokens + 0.5 * osl * (1.0 + osl_cv * osl_cv)


def session_contexts(context_tokens: jax.Array, workload, measured: bool,
                     engine=None) -> tuple[jax.Array, jax.Array]:
    """(the context decode attends to, the context KV memory holds) per session [tokens]: the
    point's L under the seed, the in-flight context under the measured profile (static
    ``measured``), or ``workload.decode_context_tokens`` where that is set (> 0); KV holds
    ``workload.kv_context_tokens`` instead where that is set (> 0).

    Under the measured profile an ``engine`` (`jaxpareto.definitions.engine.EngineParams`) that
    reserves a request's output KV when it starts (``reserve_output_kv``: TensorRT-LLM's
    GUARANTEED_NO_EVICT capacity scheduler, its default) holds the turn's final context,
    L + OSL, for each running session: the mean output, where the engine reserves the
    request's ``max_tokens`` (the same with fixed lengths, a lower bound where clients ask for
    more than they get)."""
    decode = in_flight_context(context_tokens, workload.osl, workload.osl_cv) if measured else context_tokens
    decode = jnp.where(workload.decode_context_tokens > 0, workload.decode_context_tokens, decode)
    held = decode
    reserve = None if engine is None else engine.reserve_output_kv  # None: no engine reserves, no term
    if measured and reserve is not None:
        held = jnp.where(reserve > 0, context_tokens + workload.osl, decode)
    return decode, jnp.where(workload.kv_context_tokens > 0, workload.kv_context_tokens, held)


def running_limit(engine) -> jax.Array:
    """Requests an engine instance runs at once at most [requests]: its ``max_running_requests``
    (`jaxpareto.definitions.engine.Engine`), inf where it sets none (0) or the point has no
    engine (the seed)."""
    if engine is None:
        return jnp.inf
    limit = engine.max_running_requests
    return jnp.where(limit > 0, limit, jnp.inf)


def scheduler_delay_steps(engine) -> jax.Array | None:
    """Engine steps a request's first token waits for the scheduler beyond the model's own
    prefill and queueing: the engine's ``scheduler_delay_steps``
    (`jaxpareto.definitions.engine.Engine`); None where the point has no engine or no engine of
    its table sets one (no term in the program)."""
    return None if engine is None else engine.scheduler_delay_steps


def kv_replication(tp: jax.Array, kv_heads: jax.Array) -> jax.Array:
    """r_kv = G / min(G, n_kv): copies of each KV head once TP exceeds the KV heads."""
    return tp / jnp.minimum(tp, kv_heads)


def state_replication(tp: jax.Array, state_heads: jax.Array) -> jax.Array:
    """Copies of the fixed recurrent state once TP exceeds the heads it splits over."""
    return tp / jnp.minimum(tp, state_heads)


def session_gb(model: ModelParams, tokens: jax.Array, tp: jax.Array) -> jax.Array:
    """Memory one session of ``tokens`` takes over the TP group [GB]: the full-attention layers' KV
    with their KV heads' replication r_kv, the sliding and chunked layers' with theirs, and the
    fixed recurrent state of linear and Mamba layers with its own."""
    return (tokens * model.kv_bytes_per_token * kv_replication(tp, model.kv_heads)
            + window_bytes(model, tokens) * kv_replication(tp, model.kv_window_heads)
            + model.fixed_state_bytes * state_replication(tp, model.state_heads)) / BYTES_PER_GB


def window_bytes(model: ModelParams, tokens: jax.Array) -> jax.Array:
    """KV bytes of the sliding and chunked layers for one sequence of ``tokens``: κ_window x
    min(T, window)."""
    return jnp.minimum(tokens, model.kv_window_tokens) * model.kv_window_bytes_per_token


def kv_bytes(model: ModelParams, tokens: jax.Array) -> jax.Array:
    """KV bytes of one sequence of ``tokens`` over the whole model [B]: κ x T for the
    full-attention layers plus κ_window x min(T, window) for sliding-window layers."""
    return tokens * model.kv_bytes_per_token + jnp.minimum(tokens, model.kv_window_tokens) * \
        model.kv_window_bytes_per_token


def memory_budget(
    hw: HardwareParams,
    model: ModelParams,
    tp: jax.Array,
    concurrency: jax.Array,
    kv_context_tokens: jax.Array,
    engine: EngineParams | None = None,
    stages: jax.Array | None = None,
) -> MemoryBudget:
    """Seed eq. 5 for one point.

    Args:
        hw: one GPU; memory_gb [GB] (the seed's budget), and with an engine its driver-reported
            total memory_gb x memory_reported_ratio [GB].
        model: one model; weights_gb [GB] and its KV widths [B].
        tp: G, GPUs in the tensor-parallel group (scalar).
        concurrency: C, sessions offered (scalar).
        kv_context_tokens: L̄, context held in KV per session [tokens] (scalar).
        engine: the serving engine's memory settings; None: the seed's (all of HBM).
        stages: pipeline stages (`jaxpareto.physics.layout`): the weights and the KV spread
            over G x stages GPUs, each stage holding its layers' share; the KV heads' copies
            are the TP group's. None: one stage.

    Returns:
        `MemoryBudget` of scalars.
    """
    weights_gb = model.weights_gb
    gpus = tp if stages is None else tp * stages
    available_gb = gpus * hw.memory_gb - weights_gb
    if engine is not None:  # u x G M' - W - G r, or u x (G M' - W - G r) for TensorRT-LLM
        # real engines take their share of the total the driver reports, M' (not the datasheet's)
        reported_gb = gpus * hw.memory_gb * jnp.where(engine.reported_total > 0, hw.memory_reported_ratio, 1.0)
        u, reserve = engine.gpu_memory_utilization, gpus * engine.activation_reserve_gb
        available_gb = jnp.where(engine.after_weights > 0, u * (reported_gb - weights_gb - reserve),
                                 u * reported_gb - weights_gb - reserve)
    kv_per_session_gb = session_gb(model, kv_context_tokens, tp)
    sessions = jnp.floor(jnp.maximum(available_gb, 0.0) / kv_per_session_gb)
    concurrency_max = jnp.minimum(sessions, _INT32_MAX)
    concurrency_eff = jnp.minimum(concurrency, concurrency_max)
    feasible = (available_gb > 0) & (concurrency_eff >= 1)
    return MemoryBudget(weights_gb, available_gb, kv_per_session_gb, concurrency_max, concurrency_eff, feasible)
